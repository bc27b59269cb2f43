// The engine's reducing part (see gradient_reducer.h).
#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace anvil {

GradientReducer::GradientReducer(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan,
                                 RankState& state, int micro_batches)
    : model_(&model),
      mesh_(&mesh),
      plan_(&plan),
      state_(&state),
      stage_(mesh.zero_stage()),
      micro_batches_(micro_batches),
      fast_(mesh.reduce_mode() == ReduceMode::fast),
      reduce_dtype_(state.sizing().reduce_dtype),
      shards_offloaded_(mesh.zero_stage() == 3 && mesh.offload()),
      slot_of_(static_cast<size_t>(plan.group_count()), -1) {
  if (shards_offloaded_) {
    for (size_t k = 0; k < staging_downloads_.size(); ++k)
      staging_downloads_[k].resize(static_cast<size_t>(state.shard_staging(k).count()));
    offload_stream_ = model.backend().create_stream();
  }
}

GradientReducer::~GradientReducer() = default;

size_t GradientReducer::pool_of(int group) const {
  return static_cast<size_t>(state_->sizing().gradient_slots.pool[static_cast<size_t>(group)]);
}

void GradientReducer::bind_slot(int group) {
  if (plan_->group(group).numel == 0) return;  // nothing trains here
  SlotPool& pool = state_->gradient_pool(pool_of(group));
  int slot = pool.take_without_waiting(group);
  while (slot < 0) {
    ANVIL_CHECK(scatter_pending(), "[parallel] every gradient slot is in use");
    poll(true);
    slot = pool.take_without_waiting(group);
  }
  pool.set_in_use(slot, true);
  const Tensor full = pool.tensor(slot, plan_->group(group).padded);
  model_->backend().fill_zero(full);
  model_->bind_trainable_gradients(group, full);
  slot_of_[static_cast<size_t>(group)] = slot;
}

void GradientReducer::start_running_sum_gather(int group) {
  // Fast reductions add later micro-steps into the shard instead (scatter_route).
  if (fast_ || micro_step_ == 0 || plan_->group(group).numel == 0) return;
  // World rank 0 adds the running sum (the serial sum of every earlier micro-batch) to its
  // own term, so it needs the whole group: each rank sends its reduced slice.
  const GroupShard& s = plan_->group(group);
  const int64_t begin = static_cast<int64_t>(mesh_->dp_index()) * s.slice;
  Tensor my_slice;
  if (shards_offloaded_) {
    // The running sum is on the host: this rank's slice of it goes back up for the gather.
    my_slice = state_->running_sum_source().tensor(0, s.slice);
    upload_host_gradient_slice(group, my_slice);
  } else {
    my_slice = state_->group(group).grad_shard.as(DType::f32, Shape{s.shard}).flat(begin, s.slice);
  }
  running_sum_gather_ =
      mesh_->data().all_gather_async(my_slice, state_->running_sum_slot().tensor(0, s.padded));
}

void GradientReducer::reduce(int group) {
  Backend& backend = model_->backend();
  Communicator& data = mesh_->data();
  const GroupStorage& st = state_->group(group);
  if (plan_->group(group).numel == 0) return;  // nothing trains here (LoRA's outer groups)
  if (stage_ <= 1) {
    const Tensor grad = model_->trainable_gradients().group(group);
    if (micro_step_ > 0 && st.grad_sum.data() != nullptr) {
      backend.add(st.grad_sum.as(DType::f32, grad.shape), grad, grad);
    }
    // Fast: the gradients of every micro-step add up in place (DDP's no_sync) and are
    // reduced once, in the last.
    const bool reduce_now = !fast_ || micro_step_ + 1 == micro_batches_;
    if (data.size() > 1 && reduce_now) {
      ReductionRoute route = all_reduce_route(group, grad);
      std::unique_ptr<CommHandle> handle = data.all_reduce_async(route.sent, reduce_op());
      all_reduces_.push_back({std::move(handle), std::move(route)});
    }
    return;
  }
  const GroupShard& s = plan_->group(group);
  const int slot = slot_of_[static_cast<size_t>(group)];
  ANVIL_CHECK(slot >= 0, "[parallel] group {} finished backward without a gradient slot", group);
  const Tensor full = state_->gradient_pool(pool_of(group)).tensor(slot, s.padded);
  if (running_sum_gather_) {  // exact, after micro-step 0
    running_sum_gather_->wait();
    running_sum_gather_.reset();
    if (data.rank() == 0) backend.add(state_->running_sum_slot().tensor(0, s.padded), full, full);
  }
  PendingReduction pending;
  pending.group = group;
  pending.slot = slot;
  if (shards_offloaded_) pending.staging = take_shard_staging(group);
  pending.route = scatter_route(pending, full);
  pending.scatter =
      data.reduce_scatter_async(pending.route.sent, pending.route.received, reduce_op());
  reductions_.push_back(std::move(pending));
  slot_of_[static_cast<size_t>(group)] = -1;
}

GradientReducer::ReductionRoute GradientReducer::all_reduce_route(int group, const Tensor& grad) {
  ReductionRoute route{grad, grad, grad, Tensor(), false};
  if (reduce_dtype_ == DType::f32) return route;
  route.sent = route.received = state_->group(group).reduce_cast.as(reduce_dtype_, grad.shape);
  model_->backend().cast(grad, route.sent);
  return route;
}

void GradientReducer::upload_host_gradient_slice(int group, const Tensor& slice) {
  const GroupShard& s = plan_->group(group);
  const int64_t begin = static_cast<int64_t>(mesh_->dp_index()) * s.slice;
  model_->backend().fill_zero(slice);
  const int64_t real = std::clamp<int64_t>(s.shard_length - begin, 0, s.slice);
  if (real > 0)
    model_->backend().copy_from_host(slice.flat(0, real), host_gradient_(group).f32() + begin);
}

GradientReducer::ReductionRoute GradientReducer::scatter_route(const PendingReduction& p,
                                                               const Tensor& full) {
  const GroupShard& s = plan_->group(p.group);
  const Tensor slice =
      reduced_shard(p).flat(static_cast<int64_t>(mesh_->dp_index()) * s.slice, s.slice);
  ReductionRoute route{full, slice, slice, Tensor(), false};
  if (!fast_) return route;
  // The scratch beside gradient slot p.slot (plan_scatter_scratch).
  const size_t pool = pool_of(p.group);
  const SlotPool& scratch = state_->scatter_scratch(pool);
  const ScatterScratch& layout = state_->sizing().scatter_scratch[pool];
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

void GradientReducer::land_reduction(const ReductionRoute& route) {
  Backend& backend = model_->backend();
  Tensor values = route.received;
  if (values.dtype != DType::f32) {
    const Tensor into = route.accumulate ? route.partial : route.result;
    backend.cast(values, into);
    values = into;
  }
  if (route.accumulate) backend.add(route.result, values, route.result);
}

bool GradientReducer::scatter_pending() const {
  for (const PendingReduction& p : reductions_)
    if (p.scatter) return true;
  return false;
}

void GradientReducer::poll(bool wait_for_one) {
  if (progress_) progress_();
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
      state_->gradient_pool(pool_of(p.group)).set_in_use(p.slot, false);
      if (mesh_->dp().size() > 1) {
        const GroupShard& s = plan_->group(p.group);
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

Tensor GradientReducer::reduced_shard(const PendingReduction& p) const {
  const int64_t shard = plan_->group(p.group).shard;
  if (p.staging >= 0) {
    return state_->shard_staging(pool_of(p.group)).tensor(p.staging, shard);
  }
  return state_->group(p.group).grad_shard.as(DType::f32, Shape{shard});
}

void GradientReducer::finish_reduction(const PendingReduction& p) {
  if (p.staging < 0) return;
  const size_t pool = pool_of(p.group);
  const int64_t length = plan_->group(p.group).shard_length;
  if (length == 0) {  // all padding: nothing to copy
    state_->shard_staging(pool).set_in_use(p.staging, false);
    return;
  }
  // The copy waits for what the compute stream has queued (a fast reduction lands there), and
  // runs beside the backward of the next groups; the slot stays taken until it has completed.
  Backend& backend = model_->backend();
  offload_stream_->wait_event(*backend.record_event());
  offload_stream_->copy_to_host(host_gradient_(p.group).f32(), reduced_shard(p).flat(0, length));
  staging_downloads_[pool][static_cast<size_t>(p.staging)] = offload_stream_->record_event();
}

int GradientReducer::release_downloaded_staging(bool wait) {
  if (wait) offload_stream_->synchronize();
  int released = 0;
  for (size_t pool = 0; pool < staging_downloads_.size(); ++pool) {
    std::vector<std::unique_ptr<Event>>& downloads = staging_downloads_[pool];
    for (size_t slot = 0; slot < downloads.size(); ++slot) {
      if (downloads[slot] && (wait || downloads[slot]->done())) {
        downloads[slot].reset();
        state_->shard_staging(pool).set_in_use(static_cast<int>(slot), false);
        ++released;
      }
    }
  }
  return released;
}

int GradientReducer::take_shard_staging(int group) {
  SlotPool& pool = state_->shard_staging(pool_of(group));
  int slot = pool.take_without_waiting(group);
  while (slot < 0) {
    // Every staging slot of this kind holds a shard still on its way: free those whose copy
    // has completed, else finish the oldest reductions (testing, not blocking, on the
    // assemblies so every handle keeps moving), else wait for the copies.
    release_downloaded_staging(false);
    slot = pool.take_without_waiting(group);
    if (slot >= 0) break;
    if (!reductions_.empty()) {
      poll(scatter_pending());
    } else {
      ANVIL_CHECK(release_downloaded_staging(true) > 0,
                  "[parallel] every gradient staging slot is in use");
    }
    slot = pool.take_without_waiting(group);
  }
  pool.set_in_use(slot, true);
  return slot;
}

void GradientReducer::finish_micro_step(bool last) {
  for (PendingAllReduce& reduce : all_reduces_) {
    reduce.handle->wait();
    land_reduction(reduce.route);
  }
  all_reduces_.clear();
  while (scatter_pending()) poll(true);
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
  for (int g = 0; g < plan_->group_count(); ++g) {
    const Buffer& sum = state_->group(g).grad_sum;
    if (sum.data() == nullptr) continue;
    const Tensor grad = model_->trainable_gradients().group(g);
    backend.copy(sum.as(DType::f32, grad.shape), grad);
  }
  model_->trainable_gradients().zero();
}

}  // namespace anvil
