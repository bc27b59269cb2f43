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
  host_masters_stale_ = true;
}

void DataParallelEngine::copy_gradients_to_host() {
  TraceSpan span("offload gradients", kTraceCompute);
  Backend& device = model_->backend();
  host_optimizer_->wait_all();  // the host buffers are free (the last step has finished)
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
      device.copy_from_host(optimizer_weights(g), host_optimizer_->master(index).f32());
    }
    // Every rank starts every group's gather in the same order (an empty shard included).
    gathers.push_back(start_publish(g));
  }
  for (auto& gather : gathers)
    if (gather) gather->wait();
  if (stage_ == 3) forget_weight_slots();
}

MemorySnapshot DataParallelEngine::host_memory() const {
  return offloaded() ? host_optimizer_->backend().memory_snapshot() : MemorySnapshot{};
}

}  // namespace anvil
