// The engine's sizing list (see rank_buffers.h): every branch on stage, offload, precision,
// reduce mode and LoRA that decides what a rank holds is taken here, once.
#include "parallel/rank_buffers.h"

#include <algorithm>

namespace anvil {
namespace {

constexpr size_t kF32 = sizeof(float);

size_t f32_bytes(int64_t elements) { return static_cast<size_t>(elements) * kF32; }

}  // namespace

MemoryByCategory RankBuffers::bytes(bool host) const {
  MemoryByCategory out{};
  for (const RankBuffer& buffer : buffers) {
    if (buffer.host == host) out[static_cast<size_t>(buffer.category)] += buffer.total();
  }
  return out;
}

const RankBuffer* RankBuffers::find(RankBufferKind kind, int index) const {
  for (const RankBuffer& buffer : buffers) {
    if (buffer.kind == kind && buffer.index == index) return &buffer;
  }
  return nullptr;
}

bool binds_compute_weights(const ModelOptions& model, int zero_stage) {
  return zero_stage > 0 && !model.lora.enabled() && model.compute_dtype != DType::f32;
}

int64_t step_result_bytes(int micro_batches, bool offload) {
  return int64_t{micro_batches} * static_cast<int64_t>(sizeof(double)) +
         (offload ? 0 : kNormCounterBytes);
}

RankBuffers plan_rank_buffers(const RankBufferInputs& in) {
  using Kind = RankBufferKind;
  using Category = MemoryCategory;
  const ShardPlan& plan = *in.plan;
  const ParallelSettings& parallel = in.parallel;
  const int stage = static_cast<int>(parallel.zero_stage);
  const bool fast = parallel.reduce_mode() == ReduceMode::fast;
  const bool offload = parallel.offload;
  const bool shards_offloaded = offload && stage == 3;
  const bool params_offloaded = shards_offloaded && parallel.offload_params;
  // Exact sums keep a running sum of earlier micro-steps; fast ones accumulate in place.
  const bool running_sum = !fast && in.micro_batches > 1;
  const bool mixed = binds_compute_weights(in.model, stage);

  RankBuffers out;
  out.compute_replica = (stage == 1 || stage == 2) && mixed;
  out.reduce_dtype = reduction_dtype(parallel, in.data_world);
  const size_t reduced_size = dtype_size(out.reduce_dtype);
  const bool sharded_masters = stage == 3 || out.compute_replica;
  if (sharded_masters) {
    out.gather_dtype = mixed ? in.model.compute_dtype : DType::f32;
    out.weight_slots = plan_weight_slots(in.shard_config, *in.trainable, plan, in.frozen_plan,
                                         LlamaModel::frozen_base_dtype(in.model), out.gather_dtype,
                                         parallel.prefetch, parallel.reshard_after_forward);
  }
  auto add = [&](Kind kind, int index, Category category, size_t bytes, bool host = false,
                 int count = 1) {
    out.buffers.push_back({kind, index, category, host, count, bytes});
  };

  int64_t longest_shard = 0;
  for (int g = 0; g < plan.group_count(); ++g) {
    const GroupShard& s = plan.group(g);
    if (s.numel == 0) continue;  // nothing trains here (LoRA's embedding and head groups)
    if (out.compute_replica) {
      // The weights once in the compute dtype (the model's compute copies, so workspace)
      // beside this rank's f32 master shard.
      add(Kind::replica, g, Category::workspace,
          out.weight_slots.groups[static_cast<size_t>(g)].bytes);
      add(Kind::master_shard, g, Category::trainable_weights, f32_bytes(s.shard));
    } else if (stage == 1 || stage == 2) {
      add(Kind::replica, g, Category::trainable_weights, f32_bytes(s.padded));
    }
    if (shards_offloaded) {
      // What the gathers read (the shard in the gather dtype with its packed f32 parts),
      // refreshed from the host master; with offload_params in host memory itself.
      add(Kind::master_shard, g, Category::trainable_weights,
          offloaded_shard_bytes(out.weight_slots.groups[static_cast<size_t>(g)], s,
                                out.gather_dtype),
          params_offloaded);
    } else if (stage == 3) {
      add(Kind::master_shard, g, Category::trainable_weights, f32_bytes(s.shard));
    }
    if (stage >= 2 && !shards_offloaded)
      add(Kind::gradient_shard, g, Category::gradients, f32_bytes(s.shard));
    if (stage <= 1 && running_sum && in.data_rank == 0)
      add(Kind::gradient_sum, g, Category::gradients, f32_bytes(s.numel));
    if (stage <= 1 && out.reduce_dtype != DType::f32)
      add(Kind::reduce_cast, g, Category::communication,
          static_cast<size_t>(s.numel) * reduced_size);
    if (s.shard_length == 0) continue;
    longest_shard = std::max(longest_shard, s.shard_length);
    // AdamW m and v; offloaded, the host optimizer's f32 master and gradient copy beside them.
    add(Kind::optimizer_moments, g, Category::optimizer_state, 2 * f32_bytes(s.shard_length),
        offload);
    if (offload) {
      add(Kind::host_master, g, Category::trainable_weights, f32_bytes(s.shard_length), true);
      add(Kind::host_gradient, g, Category::gradients, f32_bytes(s.shard_length), true);
    }
  }
  if (shards_offloaded) {
    if (out.gather_dtype != DType::f32 && !params_offloaded) {
      add(Kind::host_cast_staging, -1, Category::workspace,
          static_cast<size_t>(longest_shard) * dtype_size(out.gather_dtype), true);
    }
    out.shard_staging = plan_shard_staging(in.shard_config, plan);
    for (int k = 0; k < 2; ++k) {
      add(Kind::shard_staging, k, Category::communication, f32_bytes(out.shard_staging.elements[k]),
          false, out.shard_staging.count[k]);
    }
    if (running_sum) {  // exact: the running sum's slice goes back up
      add(Kind::running_sum_source, -1, Category::communication,
          f32_bytes(plan.max_padded() / in.data_world));
    }
  }
  add(Kind::step_results, -1, Category::workspace,
      static_cast<size_t>(step_result_bytes(in.micro_batches, offload)));
  if (stage == 3) {
    if (in.frozen_plan != nullptr) {
      const size_t frozen_size = dtype_size(LlamaModel::frozen_base_dtype(in.model));
      for (int g = 0; g < in.frozen_plan->group_count(); ++g) {
        add(Kind::frozen_shard, g, Category::frozen_weights,
            static_cast<size_t>(in.frozen_plan->group(g).shard) * frozen_size);
      }
    }
    for (int k = 0; k < 2; ++k) {
      add(Kind::weight_slots, k, Category::communication, out.weight_slots.bytes[k], false,
          out.weight_slots.count[k]);
    }
  }
  if (stage >= 2) {
    out.gradient_slots = plan_gradient_slots(in.shard_config, plan);
    for (int k = 0; k < 2; ++k) {
      add(Kind::gradient_slots, k, Category::communication,
          f32_bytes(out.gradient_slots.elements[k]), false, out.gradient_slots.count[k]);
    }
    if (running_sum)
      add(Kind::running_sum_slot, -1, Category::communication, f32_bytes(plan.max_padded()));
    for (int k = 0; fast && k < 2; ++k) {
      out.scatter_scratch[k] = plan_scatter_scratch(out.gradient_slots.elements[k], in.data_world,
                                                    out.reduce_dtype, in.micro_batches);
      if (out.scatter_scratch[k].bytes > 0) {
        add(Kind::scatter_scratch, k, Category::communication, out.scatter_scratch[k].bytes, false,
            out.gradient_slots.count[k]);
      }
    }
  }
  return out;
}

}  // namespace anvil
