// DataParallelEngine's group hooks: stage-3 weight gathers with one-group-ahead prefetch, and
// the per-micro-step gradient reductions of every stage. Every rank makes the same calls in
// the same order (the model's hook sequence is fixed), so collectives match across ranks;
// chained steps of a reduction start in FIFO order for the same reason.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/trace.h"
#include "model/llama_parameters.h"
#include "parallel/engine.h"

namespace anvil {

void DataParallelEngine::begin_pass(Pass pass) {
  pass_ = pass;
  use_position_ = 0;
  weight_uses_ = stage3_weight_uses(model_->config(), pass == Pass::train);
}

void DataParallelEngine::end_pass() {
  // The tied embedding stays pinned for a whole pass (the head reads it after the layers).
  for (SlotPool& pool : weight_pools_)
    for (int s = 0; s < pool.count(); ++s) pool.set_in_use(s, false);
  pass_ = Pass::idle;
}

void DataParallelEngine::before_forward(int group) {
  if (inference_ && group == kEmbeddingGroup) begin_pass(Pass::eval);
  poll_reductions(false);
  if (stage_ == 3) acquire_weights(group);
  if (pass_ == Pass::train && group == head_ && stage_ >= 2) {
    // The head runs forward and backward in one go; with tied embeddings it also adds to the
    // embedding's gradient, which is complete only at the very end of the pass.
    if (tied_) bind_gradient_slot(kEmbeddingGroup);
    bind_gradient_slot(head_);
    start_running_sum_gather(head_);
  }
  open_group_span(group, true);
}

void DataParallelEngine::after_forward(int group) {
  close_group_span(group);
  if (stage_ == 3) release_weights(group);
  poll_reductions(false);
  if (inference_ && group == head_) end_pass();
}

void DataParallelEngine::before_backward(int group) {
  poll_reductions(false);
  // An untied embedding's backward reads no weight (stage3_weight_uses).
  if (stage_ == 3 && (tied_ || group != kEmbeddingGroup)) acquire_weights(group);
  if (pass_ == Pass::train && stage_ >= 2) {
    if (!(tied_ && group == kEmbeddingGroup)) bind_gradient_slot(group);
    start_running_sum_gather(group);
  }
  open_group_span(group, false);
}

void DataParallelEngine::after_backward(int group) {
  close_group_span(group);
  if (stage_ == 3) release_weights(group);
  if (pass_ == Pass::train) reduce_gradient(group);
  poll_reductions(false);
}

void DataParallelEngine::open_group_span(int group, bool forward) {
  group_span_.session = TraceRecorder::instance().session();
  if (group_span_.session == 0) return;
  group_span_.begin_ns = TraceRecorder::now_ns();
  group_span_.group = group;
  // The head of a training pass runs its forward and backward fused.
  const char* kind = !forward ? "backward" : group == head_ && pass_ == Pass::train
                                                 ? "forward+backward"
                                                 : "forward";
  const std::string label = group == kEmbeddingGroup ? std::string("embedding")
                            : group == head_         ? std::string("head")
                                                     : fmt::format("layer {}", group - 1);
  group_span_.name = fmt::format("{} {}", kind, label);
  // The same span in device time: when the device ran the group's work, not when it was queued.
  group_span_.device = std::make_unique<DeviceSpan>(model_->backend(), group_span_.name);
}

void DataParallelEngine::close_group_span(int group) {
  if (group_span_.session == 0 || group_span_.group != group) return;
  group_span_.device->end();
  TraceEvent event;
  event.name = std::move(group_span_.name);
  event.category = kTraceCompute;
  event.begin_ns = group_span_.begin_ns;
  event.duration_ns = TraceRecorder::now_ns() - group_span_.begin_ns;
  event.thread = TraceRecorder::thread_id();
  event.args.push_back(TraceArg{"group", int64_t{group}});
  event.args.push_back(TraceArg{"pass", std::string(pass_ == Pass::train ? "train" : "eval")});
  if (pass_ == Pass::train) event.args.push_back(TraceArg{"micro_step", int64_t{micro_step_}});
  TraceRecorder::instance().add(group_span_.session, std::move(event));
  group_span_.session = 0;
}

void DataParallelEngine::start_weight_gather(int group, int slot, bool with_frozen) {
  SlotPool& pool = weight_pool(group);
  pool.set_pending(slot, gather_group_into(group, pool.buffer(slot), with_frozen));
}

std::vector<std::unique_ptr<CommHandle>> DataParallelEngine::gather_group_into(
    int group, const Buffer& target, bool with_frozen) {
  std::vector<std::unique_ptr<CommHandle>> gathers;
  const GroupShard& s = plan_.group(group);
  const SlotLayout& layout = slot_plan_.groups[static_cast<size_t>(group)];
  Communicator& fsdp = mesh_->fsdp();
  if (s.numel > 0) {
    if (shards_offloaded()) upload_stale_shard(group);
    const Tensor shard = device_shard(group, DType::f32, 0, s.shard);
    if (params_offloaded()) {
      // The shard is in host memory: this rank's parts go up into their places in the target
      // and are gathered in place.
      const int f = static_cast<int>(s.shard_begin / s.shard);
      auto gather_own = [&](const Tensor& host_part, const Tensor& all, int64_t part) {
        const Tensor own = all.flat(int64_t{f} * part, part);
        model_->backend().copy_from_host(own, host_part.data);
        gathers.push_back(fsdp.all_gather_async(own, all));
      };
      if (layout.compute) {
        gather_own(device_shard(group, gather_dtype_, 0, s.shard),
                   buffer_view(target, gather_dtype_, layout.compute_offset, s.padded), s.shard);
        if (layout.packed > 0) {
          gather_own(device_shard(group, DType::f32, offloaded_packed_offset(s, gather_dtype_),
                                  layout.packed),
                     buffer_view(target, DType::f32, layout.packed_offset,
                                 int64_t{fsdp.size()} * layout.packed),
                     layout.packed);
        }
      } else {
        gather_own(shard, buffer_view(target, DType::f32, 0, s.padded), s.shard);
      }
    } else if (layout.compute && shards_offloaded()) {
      // The device shard is already in the compute dtype, its f32 parts packed behind it.
      gathers.push_back(fsdp.all_gather_async(
          device_shard(group, gather_dtype_, 0, s.shard),
          buffer_view(target, gather_dtype_, layout.compute_offset, s.padded)));
      if (layout.packed > 0) {
        gathers.push_back(fsdp.all_gather_async(
            device_shard(group, DType::f32, offloaded_packed_offset(s, gather_dtype_),
                         layout.packed),
            buffer_view(target, DType::f32, layout.packed_offset,
                        int64_t{fsdp.size()} * layout.packed)));
      }
    } else if (layout.compute) {
      // Each rank casts its shard into its place in the target (element-wise, so the gathered
      // values are the cast of the gathered masters) and packs its f32 parts beside it.
      const Tensor all = buffer_view(target, gather_dtype_, layout.compute_offset, s.padded);
      const Tensor mine = all.flat(s.shard_begin, s.shard);
      model_->backend().cast(shard, mine);
      gathers.push_back(fsdp.all_gather_async(mine, all));
      if (layout.packed > 0) {
        const Tensor packed = buffer_view(target, DType::f32, layout.packed_offset,
                                          int64_t{fsdp.size()} * layout.packed);
        const int f = static_cast<int>(s.shard_begin / s.shard);  // this rank's fsdp index
        const Tensor own = packed.flat(int64_t{f} * layout.packed, layout.packed);
        int64_t at = 0;
        for (const PackedPiece& piece : packed_pieces(layout.parts, s.shard, f)) {
          model_->backend().copy(own.flat(at, piece.length),
                                 shard.flat(piece.group_offset - s.shard_begin, piece.length));
          at += piece.length;
        }
        gathers.push_back(fsdp.all_gather_async(own, packed));
      }
    } else {
      gathers.push_back(
          fsdp.all_gather_async(shard, buffer_view(target, DType::f32, 0, s.padded)));
    }
  }
  if (with_frozen && lora_ && frozen_plan_.group(group).numel > 0) {
    gathers.push_back(fsdp.all_gather_async(
        frozen_shard(group),
        buffer_view(target, model_->parameters().dtype(), layout.frozen_offset,
                    frozen_plan_.group(group).padded)));
  }
  return gathers;
}

void DataParallelEngine::bind_gathered(int group, int slot) {
  const GroupShard& s = plan_.group(group);
  SlotPool& pool = weight_pool(group);
  if (gather_dtype_ == DType::f32) {
    if (s.numel > 0) model_->bind_trainable_weights(group, pool.tensor(slot, s.padded));
    if (lora_) model_->bind_weights(group, frozen_slot_view(slot, group));
    return;
  }
  if (!pool.prepared(slot)) prepare_gathered(group, pool.buffer(slot));
  pool.set_prepared(slot);
  bind_group_views(group, pool.buffer(slot));
}

void DataParallelEngine::prepare_gathered(int group, const Buffer& target) {
  const GroupShard& s = plan_.group(group);
  const SlotLayout& layout = slot_plan_.groups[static_cast<size_t>(group)];
  Backend& backend = model_->backend();
  if (layout.compute && layout.packed > 0) {
    const Tensor f32 = buffer_view(target, DType::f32, layout.f32_offset, layout.parts.f32_numel);
    const Tensor packed = buffer_view(target, DType::f32, layout.packed_offset,
                                      int64_t{mesh_->fsdp().size()} * layout.packed);
    for (int f = 0; f < mesh_->fsdp().size(); ++f) {
      int64_t at = int64_t{f} * layout.packed;
      for (const PackedPiece& piece : packed_pieces(layout.parts, s.shard, f)) {
        backend.copy(f32.flat(piece.unpacked_offset, piece.length), packed.flat(at, piece.length));
        at += piece.length;
      }
    }
  } else if (layout.cast_locally) {
    backend.cast(buffer_view(target, DType::f32, 0, s.padded),
                 buffer_view(target, gather_dtype_, layout.compute_offset, s.padded));
  }
}

void DataParallelEngine::bind_group_views(int group, const Buffer& target) {
  const GroupShard& s = plan_.group(group);
  const SlotLayout& layout = slot_plan_.groups[static_cast<size_t>(group)];
  const Tensor compute =
      layout.parts.reads_compute
          ? buffer_view(target, gather_dtype_, layout.compute_offset, s.padded)
          : Tensor();
  Tensor f32;
  if (layout.compute) {
    f32 = buffer_view(target, DType::f32, layout.f32_offset, layout.parts.f32_numel);
  } else {
    // One f32 part: the group's only parameter (the embedding table, a tied head's norm).
    const ComputeParts::Range& range = layout.parts.f32.front();
    f32 = buffer_view(target, DType::f32, 0, s.padded).flat(range.offset, range.length);
  }
  model_->bind_compute_weights(group, compute, f32);
}

bool DataParallelEngine::in_prefetch_window(int group) const {
  const size_t end = std::min(weight_uses_.size(),
                              use_position_ + static_cast<size_t>(mesh_->prefetch()));
  for (size_t i = use_position_; i < end; ++i)
    if (weight_uses_[i] == group) return true;
  return false;
}

void DataParallelEngine::acquire_weights(int group) {
  // Follow the pass's use order; a call out of order (never made by the model) only costs
  // the prefetch.
  while (use_position_ < weight_uses_.size() && weight_uses_[use_position_] != group) {
    ++use_position_;
  }
  if (use_position_ < weight_uses_.size()) ++use_position_;
  SlotPool& pool = weight_pool(group);
  int slot = pool.find(group);
  if (slot < 0) {
    slot = pool.take_unclaimed(group, [&](int g) { return in_prefetch_window(g); });
    ANVIL_CHECK(slot >= 0, "[parallel] no weight slot is free for group {}", group);
    start_weight_gather(group, slot);
  }
  pool.wait(slot);
  pool.set_in_use(slot, true);
  bind_gathered(group, slot);
  prefetch_next_weights();
}

void DataParallelEngine::prefetch_next_weights() {
  const size_t end = std::min(weight_uses_.size(),
                              use_position_ + static_cast<size_t>(mesh_->prefetch()));
  for (size_t i = use_position_; i < end; ++i) {
    const int next = weight_uses_[i];
    SlotPool& pool = weight_pool(next);
    if (pool.find(next) >= 0) continue;
    const int slot = pool.take_unclaimed(next, [&](int g) { return in_prefetch_window(g); });
    if (slot < 0) break;
    start_weight_gather(next, slot);
  }
}

void DataParallelEngine::release_weights(int group) {
  if (tied_ && group == kEmbeddingGroup) return;  // pinned until end_pass
  SlotPool& pool = weight_pool(group);
  const int slot = pool.find(group);
  if (slot >= 0) pool.set_in_use(slot, false);
}

void DataParallelEngine::bind_gradient_slot(int group) {
  if (plan_.group(group).numel == 0) return;  // nothing trains here
  SlotPool& pool = gradient_pool(group);
  int slot = pool.take_without_waiting(group);
  while (slot < 0) {
    ANVIL_CHECK(scatter_pending(), "[parallel] every gradient slot is in use");
    poll_reductions(true);
    slot = pool.take_without_waiting(group);
  }
  pool.set_in_use(slot, true);
  const Tensor full = pool.tensor(slot, plan_.group(group).padded);
  model_->backend().fill_zero(full);
  model_->bind_trainable_gradients(group, full);
  gradient_slot_of_[static_cast<size_t>(group)] = slot;
}

void DataParallelEngine::start_running_sum_gather(int group) {
  // Fast reductions add later micro-steps into the shard instead (scatter_route).
  if (fast_ || micro_step_ == 0 || plan_.group(group).numel == 0) return;
  // World rank 0 adds the running sum (the serial sum of every earlier micro-batch) to its
  // own term, so it needs the whole group: each rank sends its reduced slice.
  const GroupShard& s = plan_.group(group);
  const int64_t begin = static_cast<int64_t>(mesh_->dp_index()) * s.slice;
  Tensor my_slice;
  if (shards_offloaded()) {
    // The running sum is on the host: this rank's slice of it goes back up for the gather.
    my_slice = running_sum_source_.tensor(0, s.slice);
    upload_host_gradient_slice(group, my_slice);
  } else {
    my_slice = storage_[static_cast<size_t>(group)]
                   .grad_shard.as(DType::f32, Shape{s.shard})
                   .flat(begin, s.slice);
  }
  running_sum_gather_ =
      mesh_->data().all_gather_async(my_slice, running_sum_slot_.tensor(0, s.padded));
}

void DataParallelEngine::reduce_gradient(int group) {
  Backend& backend = model_->backend();
  Communicator& data = mesh_->data();
  const GroupStorage& st = storage_[static_cast<size_t>(group)];
  if (plan_.group(group).numel == 0) return;  // nothing trains here (LoRA's outer groups)
  if (stage_ <= 1) {
    const Tensor grad = model_->trainable_gradients().group(group);
    if (micro_step_ > 0 && st.grad_sum.data() != nullptr) {
      backend.add(st.grad_sum.as(DType::f32, grad.shape), grad, grad);
    }
    // Fast: the gradients of every micro-step add up in place (DDP's no_sync) and are
    // reduced once, in the last.
    const bool reduce_now = !fast_ || micro_step_ + 1 == options_.micro_batches;
    if (data.size() > 1 && reduce_now) {
      ReductionRoute route = all_reduce_route(group, grad);
      std::unique_ptr<CommHandle> handle = data.all_reduce_async(route.sent, reduce_op());
      all_reduces_.push_back({std::move(handle), std::move(route)});
    }
    return;
  }
  const GroupShard& s = plan_.group(group);
  const int slot = gradient_slot_of_[static_cast<size_t>(group)];
  ANVIL_CHECK(slot >= 0, "[parallel] group {} finished backward without a gradient slot", group);
  const Tensor full = gradient_pool(group).tensor(slot, s.padded);
  if (running_sum_gather_) {  // exact, after micro-step 0
    running_sum_gather_->wait();
    running_sum_gather_.reset();
    if (data.rank() == 0) backend.add(running_sum_slot_.tensor(0, s.padded), full, full);
  }
  PendingReduction pending;
  pending.group = group;
  pending.slot = slot;
  if (shards_offloaded()) pending.staging = take_shard_staging(group);
  pending.route = scatter_route(pending, full);
  pending.scatter =
      data.reduce_scatter_async(pending.route.sent, pending.route.received, reduce_op());
  reductions_.push_back(std::move(pending));
  gradient_slot_of_[static_cast<size_t>(group)] = -1;
}

DataParallelEngine::ReductionRoute DataParallelEngine::all_reduce_route(int group,
                                                                       const Tensor& grad) {
  ReductionRoute route{grad, grad, grad, Tensor(), false};
  if (reduce_dtype_ == DType::f32) return route;
  route.sent = route.received = storage_[static_cast<size_t>(group)].reduce_cast.as(
      reduce_dtype_, grad.shape);
  model_->backend().cast(grad, route.sent);
  return route;
}

void DataParallelEngine::upload_host_gradient_slice(int group, const Tensor& slice) {
  const GroupShard& s = plan_.group(group);
  const int64_t begin = static_cast<int64_t>(mesh_->dp_index()) * s.slice;
  model_->backend().fill_zero(slice);
  const int64_t real = std::clamp<int64_t>(s.shard_length - begin, 0, s.slice);
  if (real > 0)
    model_->backend().copy_from_host(slice.flat(0, real), host_gradient(group).f32() + begin);
}

DataParallelEngine::ReductionRoute DataParallelEngine::scatter_route(const PendingReduction& p,
                                                                     const Tensor& full) {
  const GroupShard& s = plan_.group(p.group);
  const Tensor slice =
      reduced_shard(p).flat(static_cast<int64_t>(mesh_->dp_index()) * s.slice, s.slice);
  ReductionRoute route{full, slice, slice, Tensor(), false};
  if (!fast_) return route;
  // The scratch beside gradient slot p.slot (plan_scatter_scratch).
  const size_t pool = gradient_pool_of(p.group);
  const SlotPool& scratch = scatter_scratch_[pool];
  const ScatterScratch& layout = scatter_scratch_plan_[pool];
  const int slot = p.slot;
  route.accumulate = micro_step_ > 0;
  // Offloaded, the total of the earlier micro-steps is on the host: the slice it lands in
  // starts from it.
  if (route.accumulate && p.staging >= 0) upload_host_gradient_slice(p.group, slice);
  if (route.accumulate)
    route.partial = scratch.view(slot, DType::f32, layout.partial_offset, s.slice);
  if (reduce_dtype_ != DType::f32) {
    route.sent = scratch.view(slot, reduce_dtype_, 0, s.padded);
    route.received = scratch.view(slot, reduce_dtype_, layout.received_offset, s.slice);
    model_->backend().cast(full, route.sent);
  } else if (route.accumulate) {
    route.received = route.partial;
  }
  return route;
}

void DataParallelEngine::land_reduction(const ReductionRoute& route) {
  Backend& backend = model_->backend();
  Tensor values = route.received;
  if (values.dtype != DType::f32) {
    const Tensor into = route.accumulate ? route.partial : route.result;
    backend.cast(values, into);
    values = into;
  }
  if (route.accumulate) backend.add(route.result, values, route.result);
}

bool DataParallelEngine::scatter_pending() const {
  for (const PendingReduction& p : reductions_)
    if (p.scatter) return true;
  return false;
}

void DataParallelEngine::poll_reductions(bool wait_for_one) {
  for (SlotPool& pool : weight_pools_) pool.poll();
  for (PendingAllReduce& reduce : all_reduces_) reduce.handle->test();
  // Scatters complete (as far as this rank knows) in FIFO order, and each starts its
  // assembling gather in that order, so every dp peer starts those gathers identically.
  bool waited = !wait_for_one;
  for (PendingReduction& p : reductions_) {
    if (p.scatter) {
      if (!waited) {
        p.scatter->wait();
        waited = true;
      } else if (!p.scatter->test()) {
        break;
      }
      p.scatter.reset();
      land_reduction(p.route);
      gradient_pool(p.group).set_in_use(p.slot, false);
      if (mesh_->dp().size() > 1) {
        const GroupShard& s = plan_.group(p.group);
        const Tensor shard = reduced_shard(p);
        p.assemble = mesh_->dp().all_gather_async(
            shard.flat(static_cast<int64_t>(mesh_->dp_index()) * s.slice, s.slice), shard);
      } else {
        finish_reduction(p);
      }
    }
    if (p.assemble && p.assemble->test()) {
      p.assemble.reset();
      finish_reduction(p);
    }
  }
  while (!reductions_.empty() && !reductions_.front().scatter && !reductions_.front().assemble) {
    reductions_.pop_front();
  }
}

Tensor DataParallelEngine::reduced_shard(const PendingReduction& p) const {
  const int64_t shard = plan_.group(p.group).shard;
  if (p.staging >= 0) {
    return shard_staging_[gradient_pool_of(p.group)].tensor(
        p.staging, shard);
  }
  return storage_[static_cast<size_t>(p.group)].grad_shard.as(DType::f32, Shape{shard});
}

void DataParallelEngine::finish_reduction(const PendingReduction& p) {
  if (p.staging < 0) return;
  const size_t pool = gradient_pool_of(p.group);
  const int64_t length = plan_.group(p.group).shard_length;
  if (length == 0) {  // all padding: nothing to copy
    shard_staging_[pool].set_in_use(p.staging, false);
    return;
  }
  // The copy waits for what the compute stream has queued (a fast reduction lands there), and
  // runs beside the backward of the next groups; the slot stays taken until it has completed.
  Backend& backend = model_->backend();
  offload_stream_->wait_event(*backend.record_event());
  offload_stream_->copy_to_host(host_gradient(p.group).f32(), reduced_shard(p).flat(0, length));
  staging_downloads_[pool][static_cast<size_t>(p.staging)] = offload_stream_->record_event();
}

int DataParallelEngine::release_downloaded_staging(bool wait) {
  if (wait) offload_stream_->synchronize();
  int released = 0;
  for (size_t pool = 0; pool < staging_downloads_.size(); ++pool) {
    std::vector<std::unique_ptr<Event>>& downloads = staging_downloads_[pool];
    for (size_t slot = 0; slot < downloads.size(); ++slot) {
      if (downloads[slot] && (wait || downloads[slot]->done())) {
        downloads[slot].reset();
        shard_staging_[pool].set_in_use(static_cast<int>(slot), false);
        ++released;
      }
    }
  }
  return released;
}

int DataParallelEngine::take_shard_staging(int group) {
  SlotPool& pool = shard_staging_[gradient_pool_of(group)];
  int slot = pool.take_without_waiting(group);
  while (slot < 0) {
    // Every staging slot of this kind holds a shard still on its way: free those whose copy
    // has completed, else finish the oldest reductions (testing, not blocking, on the
    // assemblies so every handle keeps moving), else wait for the copies.
    release_downloaded_staging(false);
    slot = pool.take_without_waiting(group);
    if (slot >= 0) break;
    if (!reductions_.empty()) {
      poll_reductions(scatter_pending());
    } else {
      ANVIL_CHECK(release_downloaded_staging(true) > 0,
                  "[parallel] every gradient staging slot is in use");
    }
    slot = pool.take_without_waiting(group);
  }
  pool.set_in_use(slot, true);
  return slot;
}

void DataParallelEngine::finish_micro_step(bool last) {
  for (PendingAllReduce& reduce : all_reduces_) {
    reduce.handle->wait();
    land_reduction(reduce.route);
  }
  all_reduces_.clear();
  while (scatter_pending()) poll_reductions(true);
  for (PendingReduction& p : reductions_) {
    if (p.assemble) {
      p.assemble->wait();
      p.assemble.reset();
      finish_reduction(p);
    }
  }
  reductions_.clear();
  // Offloaded shards: the next micro-step reads the host gradients (a running sum goes back
  // up) and the step reads them all, so their copies complete here.
  if (offload_stream_) release_downloaded_staging(true);
  if (stage_ >= 2 || last || fast_) return;
  // Stages 0-1, exact: rank 0 keeps the running sum; every rank starts the next micro-batch
  // from zeroed gradients.
  Backend& backend = model_->backend();
  for (int g = 0; g < plan_.group_count(); ++g) {
    const Buffer& sum = storage_[static_cast<size_t>(g)].grad_sum;
    if (sum.data() == nullptr) continue;
    const Tensor grad = model_->trainable_gradients().group(g);
    backend.copy(sum.as(DType::f32, grad.shape), grad);
  }
  model_->trainable_gradients().zero();
}

void DataParallelEngine::run_gather_only_pass() {
  begin_pass(Pass::eval);
  for (const int group : std::vector<int>(weight_uses_)) {
    before_forward(group);
    after_forward(group);
  }
  end_pass();
}

}  // namespace anvil
