// Mesh resolution and communicator construction (see mesh.h).
#include "parallel/mesh.h"

#include <fmt/format.h>

#include <vector>

#include "comm/counting_communicator.h"
#include "core/error.h"

namespace anvil {
namespace {

// The model's tp collectives over the tp communicator. ordered_sum makes the sums bitwise
// identical on every tp rank, which keeps replicated weights (norms, LoRA factors) identical
// without ever exchanging them.
class CommunicatorTensorParallel final : public TensorParallelOps {
 public:
  explicit CommunicatorTensorParallel(Communicator& comm) : comm_(&comm) {}
  void all_reduce(const Tensor& t) override { comm_->all_reduce(t, ReduceOp::ordered_sum); }
  void all_gather(const Tensor& in, const Tensor& out) override { comm_->all_gather(in, out); }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    comm_->reduce_scatter(in, out, ReduceOp::ordered_sum);
  }

 private:
  Communicator* comm_;
};

// The ring exchange over the cp communicator: one non-blocking send to the next rank and one
// receive from the previous rank per tensor.
class CommunicatorRingExchange final : public RingExchange {
 public:
  void add(std::unique_ptr<CommHandle> handle) { handles_.push_back(std::move(handle)); }
  void wait() override {
    for (auto& handle : handles_) handle->wait();
    handles_.clear();
  }
  void progress() override {
    for (auto& handle : handles_) handle->test();
  }

 private:
  std::vector<std::unique_ptr<CommHandle>> handles_;
};

class CommunicatorContextParallel final : public ContextParallelOps {
 public:
  explicit CommunicatorContextParallel(Communicator& comm) : comm_(&comm) {}
  std::unique_ptr<RingExchange> ring_shift(std::span<const Tensor> send,
                                           std::span<const Tensor> recv) override {
    ANVIL_CHECK(send.size() == recv.size(),
                "[parallel] a ring exchange sends {} tensors but receives {}", send.size(),
                recv.size());
    const int size = comm_->size(), rank = comm_->rank();
    auto exchange = std::make_unique<CommunicatorRingExchange>();
    // Receives are posted first so that the messages land in place as soon as they arrive.
    for (const Tensor& t : recv) exchange->add(comm_->recv_async(t, (rank + size - 1) % size));
    for (const Tensor& t : send) exchange->add(comm_->send_async(t, (rank + 1) % size));
    return exchange;
  }

 private:
  Communicator* comm_;
};

}  // namespace

MeshShape resolve_mesh_shape(const ParallelSettings& settings, int world_size) {
  validate_parallel_settings(settings);
  MeshShape shape;
  shape.tp = static_cast<int>(settings.tp);
  shape.cp = static_cast<int>(settings.cp);
  const int dp = static_cast<int>(settings.dp), fsdp = static_cast<int>(settings.fsdp);
  // Messages name cp only when it is in use.
  const bool with_cp = settings.cp > 1;
  ANVIL_CHECK(world_size % (int64_t{shape.tp} * shape.cp) == 0,
              "[parallel] {} = {} does not divide the {} ranks of the world",
              with_cp ? "tp x cp" : "tp",
              with_cp ? fmt::format("{} x {}", shape.tp, shape.cp) : std::to_string(shape.tp),
              world_size);
  const int rest = world_size / (shape.tp * shape.cp);
  if (dp == 0 && fsdp == 0) {
    shape.dp = settings.zero_stage == 0 ? rest : 1;
    shape.fsdp = settings.zero_stage == 0 ? 1 : rest;
  } else if (dp == 0) {
    ANVIL_CHECK(rest % fsdp == 0,
                "[parallel] fsdp = {} does not divide the {} ranks of the world (tp = {}{})",
                fsdp, world_size, shape.tp,
                with_cp ? fmt::format(", cp = {}", shape.cp) : std::string());
    shape.fsdp = fsdp;
    shape.dp = rest / fsdp;
  } else if (fsdp == 0) {
    ANVIL_CHECK(rest % dp == 0,
                "[parallel] dp = {} does not divide the {} ranks of the world (tp = {}{})",
                dp, world_size, shape.tp,
                with_cp ? fmt::format(", cp = {}", shape.cp) : std::string());
    shape.dp = dp;
    shape.fsdp = rest / dp;
  } else {
    shape.dp = dp;
    shape.fsdp = fsdp;
  }
  const int64_t product = int64_t{shape.dp} * shape.fsdp * shape.tp * shape.cp;
  ANVIL_CHECK(product == world_size,
              "[parallel] dp x fsdp x tp{} = {} x {} x {}{} = {} but the job has {} ranks; set "
              "parallel.dp and parallel.fsdp so that their product is {} (or 0 to derive one)",
              with_cp ? " x cp" : "", shape.dp, shape.fsdp, shape.tp,
              with_cp ? fmt::format(" x {}", shape.cp) : std::string(), product, world_size,
              rest);
  ANVIL_CHECK(settings.zero_stage > 0 || shape.fsdp == 1,
              "[parallel] fsdp = {} shards state over {} ranks but zero_stage is 0 (nothing is "
              "sharded); set parallel.zero_stage to 1, 2 or 3, or parallel.fsdp = 1",
              shape.fsdp, shape.fsdp);
  return shape;
}

DeviceMesh::DeviceMesh(Communicator& world, const ParallelSettings& settings)
    : world_(std::make_unique<CountingCommunicator>(world, "world")),
      settings_(settings),
      shape_(resolve_mesh_shape(settings, world.size())) {
  const int rank = world.rank();
  const int tp_index = rank % shape_.tp;
  const int data_rank = rank / shape_.tp;  // sample rank * cp + cp index
  const int cp_index = data_rank % shape_.cp;
  const int sample_rank = data_rank / shape_.cp;
  const int replicas = settings.zero_stage == 0 ? shape_.dp * shape_.cp : shape_.dp;
  const int shard_index = data_rank / replicas;
  const int replica_index = data_rank % replicas;
  auto counted = [](std::unique_ptr<Communicator> comm, const char* axis) {
    return std::make_unique<CountingCommunicator>(std::move(comm), axis);
  };
  tp_ = counted(world.split(data_rank, tp_index), "tp");
  tp_ops_ = std::make_unique<CommunicatorTensorParallel>(*tp_);
  cp_ = counted(world.split(sample_rank * shape_.tp + tp_index, cp_index), "cp");
  cp_ops_ = std::make_unique<CommunicatorContextParallel>(*cp_);
  data_ = counted(world.split(tp_index, data_rank), "data");
  dp_ = counted(world.split(shard_index * shape_.tp + tp_index, replica_index), "dp");
  fsdp_ = counted(world.split(replica_index * shape_.tp + tp_index, shard_index), "fsdp");
}

MeshTraffic DeviceMesh::traffic() const {
  MeshTraffic traffic;
  traffic.tp = tp_->bytes();
  traffic.cp = cp_->bytes();
  traffic.data = data_->bytes();
  traffic.dp = dp_->bytes();
  traffic.fsdp = fsdp_->bytes();
  return traffic;
}

void DeviceMesh::set_staging_allocator(Allocator* allocator) {
  for (CountingCommunicator* axis : {tp_.get(), cp_.get(), data_.get(), dp_.get(), fsdp_.get()})
    axis->set_staging_allocator(allocator);
}

TensorParallel DeviceMesh::tensor_parallel() const {
  TensorParallel tp;
  tp.size = shape_.tp;
  tp.rank = tp_->rank();
  tp.ops = tp_ops_.get();
  tp.sequence_parallel = settings_.sequence_parallel;
  return tp;
}

ContextParallel DeviceMesh::context_parallel() const {
  ContextParallel cp;
  cp.size = shape_.cp;
  cp.rank = cp_->rank();
  cp.ops = cp_ops_.get();
  return cp;
}

std::string DeviceMesh::describe() const {
  const std::string cp = shape_.cp > 1 ? fmt::format(" x cp {}", shape_.cp) : std::string();
  const std::string shards =
      shape_.cp > 1 && settings_.zero_stage > 0
          ? fmt::format(" (sharded over fsdp x cp = {})", shard_count())
          : std::string();
  const std::string reduce =
      settings_.reduce_mode() == ReduceMode::fast
          ? fmt::format(", fast {} reduce", settings_.reduce_dtype)
          : std::string();
  return fmt::format("world {} = dp {} x fsdp {} x tp {}{}, ZeRO stage {}{}{}{}", world_->size(),
                     shape_.dp, shape_.fsdp, shape_.tp, cp, settings_.zero_stage, shards,
                     settings_.offload_params ? ", optimizer and parameter offload"
                     : settings_.offload    ? ", optimizer offload"
                                            : "", reduce);
}

}  // namespace anvil
