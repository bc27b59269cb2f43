// DataParallelEngine's optimizer offload (parallel.offload, the ZeRO-Offload design): the
// AdamW moments and the f32 master of this rank's shard of every group live in host memory
// (HostAdamW, its own CPU backend), so the device holds no optimizer state. The device keeps
// the f32 weights it computes with (stages 0-2: the whole group, stage 3: the shard).
// A step, after the last micro-step's reductions:
//   1. each group's reduced gradient shard is copied device -> host (the norm and the
//      non-finite check then read the host copies, so no gradient crosses twice);
//   2. with the global norm known (clipping needs it before any update, and a non-finite
//      step must change nothing), every group is handed to the host worker in order;
//   3. as each group's update finishes, its master is copied host -> device and, under
//      stages 1-2, its fsdp all-gather starts, while the worker steps the next group.
// So the host AdamW of group g overlaps the device copy and all-gather of the groups before
// it. The update is the same kernel on the same f32 values as without offload, so the
// weights, moments and losses are bit for bit those of a run without it.
// Stage 3 goes further (shards_offloaded(), DeepSpeed's offload_optimizer): the host master is
// the only f32 copy of the weights. The device shard holds what the gathers read (the shard
// cast to the compute dtype plus its packed f32 norm parts, or the f32 shard where the group
// travels in f32), rewritten from the master after each update (cast on the host: the cast is
// element-wise, so the gathered values are those a device-side cast would give). Gradients
// never rest on the device: each group's reduce-scatter lands in a staging slot, and as soon as
// it has arrived its copy into the host optimizer's gradient is queued on a copy stream
// (offload_stream_) while backward goes on; each micro-step ends when those copies have
// completed (step 1 above has nothing left to copy). With offload_params (params_offloaded()) the shard itself is host memory: the host
// casts into it directly, and each gather uploads this rank's part into the slot
// (gather_group_into).
#include <algorithm>

#include "core/error.h"
#include "core/trace.h"
#include "parallel/engine.h"

namespace anvil {

void DataParallelEngine::build_host_optimizer() {
  std::vector<HostGroupSpec> groups;
  for (int g = 0; g < plan_.group_count(); ++g) {
    const GroupShard& s = plan_.group(g);
    if (s.shard_length == 0) continue;
    HostGroupSpec spec;
    spec.numel = s.shard_length;
    spec.spans = spans_in_range(spans_[static_cast<size_t>(g)], s.shard_begin, s.shard_length);
    storage_[static_cast<size_t>(g)].optimizer_index = static_cast<int>(groups.size());
    groups.push_back(std::move(spec));
  }
  host_optimizer_ = std::make_unique<HostAdamW>(groups, options_.hyper);
  host_masters_stale_ = !shards_offloaded();
  if (params_offloaded()) {
    // The shard the gathers read, in host memory: cast into from the master after each update.
    for (int g = 0; g < plan_.group_count(); ++g) {
      const GroupShard& s = plan_.group(g);
      if (s.numel == 0) continue;
      const size_t bytes =
          offloaded_shard_bytes(slot_plan_.groups[static_cast<size_t>(g)], s, gather_dtype_);
      Buffer& shard = storage_[static_cast<size_t>(g)].weight_shard;
      shard = Buffer(host_optimizer_->backend(), bytes, MemoryCategory::trainable_weights);
      std::fill_n(static_cast<char*>(shard.data()), bytes, 0);
    }
  } else if (shards_offloaded() && gather_dtype_ != DType::f32) {
    int64_t longest = 0;
    for (int g = 0; g < plan_.group_count(); ++g)
      longest = std::max(longest, plan_.group(g).shard_length);
    host_cast_staging_ = Buffer(host_optimizer_->backend(),
                                static_cast<size_t>(longest) * dtype_size(gather_dtype_),
                                MemoryCategory::workspace);
  }
}

size_t DataParallelEngine::offloaded_packed_offset(const GroupShard& shard, DType gather_dtype) {
  return static_cast<size_t>(shard.shard) * dtype_size(gather_dtype);  // 64-byte multiple
}

size_t DataParallelEngine::offloaded_shard_bytes(const SlotLayout& layout,
                                                 const GroupShard& shard, DType gather_dtype) {
  if (!layout.compute) return static_cast<size_t>(shard.shard) * sizeof(float);
  return offloaded_packed_offset(shard, gather_dtype) +
         static_cast<size_t>(layout.packed) * sizeof(float);
}

Tensor DataParallelEngine::device_shard(int group, DType dtype, size_t byte_offset,
                                        int64_t elements) const {
  const Buffer& buffer = storage_[static_cast<size_t>(group)].weight_shard;
  return Tensor(static_cast<char*>(buffer.data()) + byte_offset, dtype, Shape{elements},
                buffer.device());
}

void DataParallelEngine::upload_stale_shard(int group) {
  if (device_shard_stale_[static_cast<size_t>(group)]) upload_shard(group);
}

void DataParallelEngine::upload_shard(int group) {
  device_shard_stale_[static_cast<size_t>(group)] = false;
  const GroupShard& s = plan_.group(group);
  if (s.shard_length == 0) return;  // all padding: zeros since allocation
  // With offload_params the shard is host memory: written in place, no staging, no upload.
  Backend& host = host_optimizer_->backend();
  const bool on_host = params_offloaded();
  auto write = [&](const Tensor& dst, const void* src) {
    if (on_host) {
      std::copy_n(static_cast<const char*>(src), dst.nbytes(), static_cast<char*>(dst.data));
    } else {
      model_->backend().copy_from_host(dst, src);
    }
  };
  const float* master = host_master(group).f32();
  const SlotLayout& layout = slot_plan_.groups[static_cast<size_t>(group)];
  if (!layout.compute) {
    write(device_shard(group, DType::f32, 0, s.shard_length), master);
    return;
  }
  if (on_host) {
    host.cast(host_master(group), device_shard(group, gather_dtype_, 0, s.shard_length));
  } else {
    const Tensor cast = host_cast_staging_.as(gather_dtype_, Shape{s.shard_length});
    host.cast(host_master(group), cast);
    write(device_shard(group, gather_dtype_, 0, s.shard_length), cast.data);
  }
  // This rank's norm parts, packed as start_weight_gather gathers them.
  const int f = static_cast<int>(s.shard_begin / s.shard);
  const size_t packed = offloaded_packed_offset(s, gather_dtype_);
  int64_t at = 0;
  for (const PackedPiece& piece : packed_pieces(layout.parts, s.shard, f)) {
    write(device_shard(group, DType::f32, packed + static_cast<size_t>(at) * sizeof(float),
                       piece.length),
          master + (piece.group_offset - s.shard_begin));
    at += piece.length;
  }
}

void DataParallelEngine::copy_gradients_to_host() {
  TraceSpan span("offload gradients", kTraceCompute);
  Backend& device = model_->backend();
  host_optimizer_->wait_all();  // the host buffers are free (the last step has finished)
  if (shards_offloaded()) return;  // the gradients arrived as their reductions finished
  for (int g = 0; g < plan_.group_count(); ++g) {
    const int index = storage_[static_cast<size_t>(g)].optimizer_index;
    if (index < 0) continue;
    device.copy_to_host(host_optimizer_->gradient(index).f32(), optimizer_gradients(g));
    // Weights written since the last step (initialisation, a checkpoint) become the masters.
    if (host_masters_stale_)
      device.copy_to_host(host_optimizer_->master(index).f32(), optimizer_weights(g));
  }
  host_masters_stale_ = false;
}

void DataParallelEngine::offloaded_step(double lr, double grad_scale) {
  TraceSpan span("optimizer step (offloaded)", kTraceCompute);
  span.arg("lr", lr).arg("grad_scale", grad_scale);
  host_optimizer_->begin_step(lr, grad_scale);
  for (int g = 0; g < plan_.group_count(); ++g) {
    const int index = storage_[static_cast<size_t>(g)].optimizer_index;
    if (index >= 0) host_optimizer_->submit(index);
  }
  Backend& device = model_->backend();
  std::vector<std::unique_ptr<CommHandle>> gathers;
  for (int g = 0; g < plan_.group_count(); ++g) {
    const int index = storage_[static_cast<size_t>(g)].optimizer_index;
    if (index >= 0) {
      host_optimizer_->wait(index);
      if (shards_offloaded()) {
        upload_shard(g);
      } else {
        device.copy_from_host(optimizer_weights(g), host_optimizer_->master(index).f32());
      }
    }
    // Every rank starts every group's gather in the same order (an empty shard included).
    for (auto& gather : start_publish(g)) gathers.push_back(std::move(gather));
  }
  for (auto& gather : gathers) gather->wait();
  for (int g = 0; g < plan_.group_count(); ++g) finish_publish(g);
  if (stage_ == 3) forget_weight_slots();
}

MemorySnapshot DataParallelEngine::host_memory() const {
  return offloaded() ? host_optimizer_->backend().memory_snapshot() : MemorySnapshot{};
}

}  // namespace anvil
