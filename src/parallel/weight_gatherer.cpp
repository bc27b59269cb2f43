// The engine's gathering part (see weight_gatherer.h).
#include "parallel/weight_gatherer.h"

#include <algorithm>

#include "core/error.h"
#include "model/llama_parameters.h"

namespace anvil {

WeightGatherer::WeightGatherer(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan,
                               const ShardPlan* frozen_plan, RankState& state)
    : model_(&model),
      mesh_(&mesh),
      plan_(&plan),
      frozen_plan_(frozen_plan),
      state_(&state),
      shards_offloaded_(mesh.zero_stage() == 3 && mesh.offload()),
      params_offloaded_(shards_offloaded_ && mesh.offload_params()) {}

void WeightGatherer::begin_pass(bool train) {
  position_ = 0;
  uses_ = stage3_weight_uses(model_->config(), train);
}

void WeightGatherer::end_pass() {
  // The tied embedding stays pinned for a whole pass (the head reads it after the layers).
  for (SlotPool& pool : state_->weight_pools())
    for (int s = 0; s < pool.count(); ++s) pool.set_in_use(s, false);
}

void WeightGatherer::poll() {
  for (SlotPool& pool : state_->weight_pools()) pool.poll();
}

void WeightGatherer::wait_all() {
  for (SlotPool& pool : state_->weight_pools()) pool.wait_all();
}

void WeightGatherer::forget_cached() {
  for (SlotPool& pool : state_->weight_pools()) pool.forget_cached();
}

SlotPool& WeightGatherer::pool(int group) {
  return state_->weight_pools()[static_cast<size_t>(
      state_->sizing().weight_slots.pool[static_cast<size_t>(group)])];
}

Tensor WeightGatherer::frozen_slot_view(int slot, int group) {
  return pool(group).view(slot, model_->parameters().dtype(), layout(group).frozen_offset,
                          frozen_plan_->group(group).padded);
}

void WeightGatherer::start_gather(int group, int slot, bool with_frozen) {
  SlotPool& slots = pool(group);
  slots.set_pending(slot, gather_into(group, slots.buffer(slot), with_frozen));
}

std::vector<std::unique_ptr<CommHandle>> WeightGatherer::gather_into(int group,
                                                                     const Buffer& target,
                                                                     bool with_frozen) {
  std::vector<std::unique_ptr<CommHandle>> gathers;
  const GroupShard& s = plan_->group(group);
  const SlotLayout& layout = this->layout(group);
  Communicator& fsdp = mesh_->fsdp();
  if (s.numel > 0) {
    if (before_gather_) before_gather_(group);
    const Tensor shard = state_->weight_shard_view(group, DType::f32, 0, s.shard);
    if (params_offloaded_) {
      // The shard is in host memory: this rank's parts go up into their places in the target
      // and are gathered in place.
      const int f = static_cast<int>(s.shard_begin / s.shard);
      auto gather_own = [&](const Tensor& host_part, const Tensor& all, int64_t part) {
        const Tensor own = all.flat(int64_t{f} * part, part);
        model_->backend().copy_from_host(own, host_part.data);
        gathers.push_back(fsdp.all_gather_async(own, all));
      };
      if (layout.compute) {
        gather_own(state_->weight_shard_view(group, gather_dtype(), 0, s.shard),
                   buffer_view(target, gather_dtype(), layout.compute_offset, s.padded), s.shard);
        if (layout.packed > 0) {
          gather_own(
              state_->weight_shard_view(group, DType::f32,
                                        offloaded_packed_offset(s, gather_dtype()), layout.packed),
              buffer_view(target, DType::f32, layout.packed_offset,
                          int64_t{fsdp.size()} * layout.packed),
              layout.packed);
        }
      } else {
        gather_own(shard, buffer_view(target, DType::f32, 0, s.padded), s.shard);
      }
    } else if (layout.compute && shards_offloaded_) {
      // The device shard is already in the compute dtype, its f32 parts packed behind it.
      gathers.push_back(fsdp.all_gather_async(
          state_->weight_shard_view(group, gather_dtype(), 0, s.shard),
          buffer_view(target, gather_dtype(), layout.compute_offset, s.padded)));
      if (layout.packed > 0) {
        gathers.push_back(fsdp.all_gather_async(
            state_->weight_shard_view(group, DType::f32, offloaded_packed_offset(s, gather_dtype()),
                                      layout.packed),
            buffer_view(target, DType::f32, layout.packed_offset,
                        int64_t{fsdp.size()} * layout.packed)));
      }
    } else if (layout.compute) {
      // Each rank casts its shard into its place in the target (element-wise, so the gathered
      // values are the cast of the gathered masters) and packs its f32 parts beside it.
      const Tensor all = buffer_view(target, gather_dtype(), layout.compute_offset, s.padded);
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
      gathers.push_back(fsdp.all_gather_async(shard, buffer_view(target, DType::f32, 0, s.padded)));
    }
  }
  if (with_frozen && frozen_plan_ != nullptr && frozen_plan_->group(group).numel > 0) {
    gathers.push_back(fsdp.all_gather_async(
        state_->frozen_shard_view(group, model_->parameters().dtype()),
        buffer_view(target, model_->parameters().dtype(), layout.frozen_offset,
                    frozen_plan_->group(group).padded)));
  }
  return gathers;
}

void WeightGatherer::bind_gathered(int group, int slot) {
  const GroupShard& s = plan_->group(group);
  SlotPool& slots = pool(group);
  if (gather_dtype() == DType::f32) {
    if (s.numel > 0) model_->bind_trainable_weights(group, slots.tensor(slot, s.padded));
    if (frozen_plan_ != nullptr) model_->bind_weights(group, frozen_slot_view(slot, group));
    return;
  }
  if (!slots.prepared(slot)) prepare(group, slots.buffer(slot));
  slots.set_prepared(slot);
  bind_views(group, slots.buffer(slot));
}

void WeightGatherer::prepare(int group, const Buffer& target) {
  const GroupShard& s = plan_->group(group);
  const SlotLayout& layout = this->layout(group);
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
                 buffer_view(target, gather_dtype(), layout.compute_offset, s.padded));
  }
}

void WeightGatherer::bind_views(int group, const Buffer& target) {
  const GroupShard& s = plan_->group(group);
  const SlotLayout& layout = this->layout(group);
  const Tensor compute = layout.parts.reads_compute
                             ? buffer_view(target, gather_dtype(), layout.compute_offset, s.padded)
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

bool WeightGatherer::in_prefetch_window(int group) const {
  const size_t end = std::min(uses_.size(), position_ + static_cast<size_t>(mesh_->prefetch()));
  for (size_t i = position_; i < end; ++i)
    if (uses_[i] == group) return true;
  return false;
}

void WeightGatherer::acquire(int group) {
  // Follow the pass's use order; a call out of order (never made by the model) only costs
  // the prefetch.
  while (position_ < uses_.size() && uses_[position_] != group) {
    ++position_;
  }
  if (position_ < uses_.size()) ++position_;
  SlotPool& slots = pool(group);
  int slot = slots.find(group);
  if (slot < 0) {
    slot = slots.take_unclaimed(group, [&](int g) { return in_prefetch_window(g); });
    ANVIL_CHECK(slot >= 0, "[parallel] no weight slot is free for group {}", group);
    start_gather(group, slot, true);
  }
  slots.wait(slot);
  slots.set_in_use(slot, true);
  bind_gathered(group, slot);
  prefetch_next();
}

void WeightGatherer::prefetch_next() {
  const size_t end = std::min(uses_.size(), position_ + static_cast<size_t>(mesh_->prefetch()));
  for (size_t i = position_; i < end; ++i) {
    const int next = uses_[i];
    SlotPool& slots = pool(next);
    if (slots.find(next) >= 0) continue;
    const int slot = slots.take_unclaimed(next, [&](int g) { return in_prefetch_window(g); });
    if (slot < 0) break;
    start_gather(next, slot, true);
  }
}

void WeightGatherer::release(int group) {
  if (model_->config().tie_embeddings && group == kEmbeddingGroup) return;  // until end_pass
  SlotPool& slots = pool(group);
  const int slot = slots.find(group);
  if (slot >= 0) slots.set_in_use(slot, false);
}

}  // namespace anvil
