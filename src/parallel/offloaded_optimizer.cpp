// The engine's offloaded stepping part (parallel.offload, the ZeRO-Offload design): the
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
// Stage 3 goes further (shards_offloaded_, DeepSpeed's offload_optimizer): the host master is
// the only f32 copy of the weights. The device shard holds what the gathers read (the shard
// cast to the compute dtype plus its packed f32 norm parts, or the f32 shard where the group
// travels in f32), rewritten from the master after each update (cast on the host: the cast is
// element-wise, so the gathered values are those a device-side cast would give). Gradients
// never rest on the device: each group's reduce-scatter lands in a staging slot, and as soon as
// it has arrived its copy into the host optimizer's gradient is queued on a copy stream
// (GradientReducer) while backward goes on; each micro-step ends when those copies have
// completed (step 1 above has nothing left to copy). With offload_params the shard itself is
// host memory: the host casts into it directly, and each gather uploads this rank's part into the
// slot (WeightGatherer::gather_into).
#include "parallel/offloaded_optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/trace.h"

namespace anvil {

OffloadedOptimizer::OffloadedOptimizer(const OffloadedGroups& groups, const AdamWHyperParams& hyper)
    : device_(groups.device),
      plan_(groups.plan),
      state_(groups.state),
      device_weights_(groups.device_weights),
      device_gradients_(groups.device_gradients),
      shards_offloaded_(groups.shards_offloaded),
      params_offloaded_(groups.params_offloaded),
      masters_stale_(!groups.shards_offloaded),
      shard_stale_(static_cast<size_t>(groups.plan->group_count()), false) {
  std::vector<HostGroupSpec> specs;
  for (int g = 0; g < plan_->group_count(); ++g) {
    const GroupShard& s = plan_->group(g);
    if (s.shard_length == 0) continue;
    HostGroupSpec spec;
    spec.numel = s.shard_length;
    spec.spans =
        spans_in_range((*groups.spans)[static_cast<size_t>(g)], s.shard_begin, s.shard_length);
    state_->group(g).optimizer_index = static_cast<int>(specs.size());
    specs.push_back(std::move(spec));
  }
  host_ = std::make_unique<HostAdamW>(specs, hyper);
  state_->allocate_host(host_->backend());
}

OffloadedOptimizer::~OffloadedOptimizer() {
  // The host entries of the rank's state are this optimizer's backend's memory.
  state_->release_host();
}

Tensor OffloadedOptimizer::master(int group) const {
  const int index = state_->group(group).optimizer_index;
  return index < 0 ? Tensor() : host_->master(index);
}

Tensor OffloadedOptimizer::gradient(int group) const {
  const int index = state_->group(group).optimizer_index;
  return index < 0 ? Tensor() : host_->gradient(index);
}

void OffloadedOptimizer::upload_stale_shard(int group) {
  if (shard_stale_[static_cast<size_t>(group)]) upload_shard(group);
}

void OffloadedOptimizer::upload_shard(int group) {
  shard_stale_[static_cast<size_t>(group)] = false;
  const GroupShard& s = plan_->group(group);
  if (s.shard_length == 0) return;  // all padding: zeros since allocation
  // With offload_params the shard is host memory: written in place, no staging, no upload.
  Backend& host = host_->backend();
  const bool on_host = params_offloaded_;
  auto write = [&](const Tensor& dst, const void* src) {
    if (on_host) {
      std::copy_n(static_cast<const char*>(src), dst.nbytes(), static_cast<char*>(dst.data));
    } else {
      device_->copy_from_host(dst, src);
    }
  };
  const Tensor master_shard = master(group);
  const float* values = master_shard.f32();
  const SlotLayout& layout = state_->sizing().weight_slots.groups[static_cast<size_t>(group)];
  const DType gather_dtype = state_->sizing().gather_dtype;
  if (!layout.compute) {
    write(state_->weight_shard_view(group, DType::f32, 0, s.shard_length), values);
    return;
  }
  if (on_host) {
    host.cast(master_shard, state_->weight_shard_view(group, gather_dtype, 0, s.shard_length));
  } else {
    const Tensor cast = state_->host_cast_staging().as(gather_dtype, Shape{s.shard_length});
    host.cast(master_shard, cast);
    write(state_->weight_shard_view(group, gather_dtype, 0, s.shard_length), cast.data);
  }
  // This rank's norm parts, packed as WeightGatherer::gather_into gathers them.
  const int f = static_cast<int>(s.shard_begin / s.shard);
  const size_t packed = offloaded_packed_offset(s, gather_dtype);
  int64_t at = 0;
  for (const PackedPiece& piece : packed_pieces(layout.parts, s.shard, f)) {
    write(state_->weight_shard_view(group, DType::f32,
                                    packed + static_cast<size_t>(at) * sizeof(float), piece.length),
          values + (piece.group_offset - s.shard_begin));
    at += piece.length;
  }
}

void OffloadedOptimizer::copy_gradients_to_host() {
  TraceSpan span("offload gradients", kTraceCompute);
  Backend& device = *device_;
  host_->wait_all();              // the host buffers are free (the last step has finished)
  if (shards_offloaded_) return;  // the gradients arrived as their reductions finished
  for (int g = 0; g < plan_->group_count(); ++g) {
    const int index = state_->group(g).optimizer_index;
    if (index < 0) continue;
    device.copy_to_host(host_->gradient(index).f32(), device_gradients_(g));
    // Weights written since the last step (initialisation, a checkpoint) become the masters.
    if (masters_stale_) device.copy_to_host(host_->master(index).f32(), device_weights_(g));
  }
  masters_stale_ = false;
}

void OffloadedOptimizer::step(double lr, double grad_scale,
                              const std::function<void(int)>& updated) {
  TraceSpan span("optimizer step (offloaded)", kTraceCompute);
  span.arg("lr", lr).arg("grad_scale", grad_scale);
  host_->begin_step(lr, grad_scale);
  for (int g = 0; g < plan_->group_count(); ++g) {
    const int index = state_->group(g).optimizer_index;
    if (index >= 0) host_->submit(index);
  }
  Backend& device = *device_;
  std::vector<std::unique_ptr<CommHandle>> gathers;
  for (int g = 0; g < plan_->group_count(); ++g) {
    const int index = state_->group(g).optimizer_index;
    if (index >= 0) {
      host_->wait(index);
      if (shards_offloaded_) {
        upload_shard(g);
      } else {
        device.copy_from_host(device_weights_(g), host_->master(index).f32());
      }
    }
    // Every rank hands every group on in the same order (an empty shard included).
    updated(g);
  }
}

void OffloadedOptimizer::write_master(int group, int64_t first, int64_t count,
                                      const float* values) {
  host_->wait_all();
  std::copy_n(values, count, master(group).f32() + first);
  shard_stale_[static_cast<size_t>(group)] = true;
}

}  // namespace anvil
