// The engine's slot plans (see slot_plans.h): what a slot holds for each group, how big each
// kind of slot is, and which gathers a pass runs through them.
#include "parallel/slot_plans.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "model/llama_parameters.h"

namespace anvil {
namespace {

constexpr size_t kSlotAlignment = 64;

size_t aligned(size_t bytes) {
  return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}

}  // namespace

int slot_kind(const LlamaConfig& config, int group) {
  return group == kEmbeddingGroup || group == head_group(config) ? 1 : 0;
}

std::vector<PackedPiece> packed_pieces(const ComputeParts& parts, int64_t shard, int f) {
  std::vector<PackedPiece> pieces;
  const int64_t lo = shard * f, hi = shard * (f + 1);
  int64_t unpacked = 0;
  for (const ComputeParts::Range& range : parts.f32) {
    const int64_t begin = std::max(lo, range.offset);
    const int64_t end = std::min(hi, range.offset + range.length);
    if (begin < end) pieces.push_back({begin, end - begin, unpacked + (begin - range.offset)});
    unpacked += range.length;
  }
  return pieces;
}

WeightSlotPlan plan_weight_slots(const LlamaConfig& shard_config, const ParameterLayout& layout,
                                 const ShardPlan& plan, const ShardPlan* frozen_plan,
                                 DType frozen_dtype, DType gather_dtype, int prefetch,
                                 bool reshard_after_forward) {
  WeightSlotPlan out;
  const int64_t f32 = sizeof(float);
  const int64_t dsize = static_cast<int64_t>(dtype_size(gather_dtype));
  for (int g = 0; g < plan.group_count(); ++g) {
    const GroupShard& s = plan.group(g);
    SlotLayout slot;
    if (gather_dtype != DType::f32) {
      slot.parts = ComputeWeights::parts(shard_config, layout, g);
      slot.compute = !slot.parts.all_f32;
      slot.cast_locally = slot.parts.all_f32 && slot.parts.reads_compute;
    }
    if (slot.compute) {
      for (int f = 0; f < plan.fsdp(); ++f) {
        int64_t count = 0;
        for (const PackedPiece& piece : packed_pieces(slot.parts, s.shard, f))
          count += piece.length;
        slot.packed = std::max(slot.packed, count);
      }
      slot.compute_offset = 0;
      slot.packed_offset = aligned(static_cast<size_t>(s.padded * dsize));
      slot.f32_offset =
          aligned(slot.packed_offset + static_cast<size_t>(plan.fsdp() * slot.packed * f32));
      slot.bytes = slot.f32_offset + static_cast<size_t>(slot.parts.f32_numel * f32);
      slot.gather_bytes = s.padded * dsize + plan.fsdp() * slot.packed * f32;
    } else {
      slot.f32_offset = 0;
      slot.bytes = static_cast<size_t>(s.padded * f32);
      slot.gather_bytes = s.numel > 0 ? s.padded * f32 : 0;
      if (slot.cast_locally) {
        slot.compute_offset = aligned(slot.bytes);
        slot.bytes = slot.compute_offset + static_cast<size_t>(s.padded * dsize);
      }
    }
    if (frozen_plan != nullptr) {
      const GroupShard& fs = frozen_plan->group(g);
      slot.frozen_offset = aligned(slot.bytes);
      slot.bytes = slot.frozen_offset + static_cast<size_t>(fs.padded) * dtype_size(frozen_dtype);
      if (fs.numel > 0)
        slot.gather_bytes += fs.padded * static_cast<int64_t>(dtype_size(frozen_dtype));
    }
    out.groups.push_back(std::move(slot));
  }
  std::vector<int64_t> sizes;
  for (const SlotLayout& slot : out.groups) sizes.push_back(static_cast<int64_t>(slot.bytes));
  const std::array<int64_t, 2> largest = assign_pools(shard_config, sizes, out.pool, out.count[1]);
  out.bytes = {static_cast<size_t>(largest[0]), static_cast<size_t>(largest[1])};
  // Pool 0: the group in use and `prefetch` ahead; kept gathered, one slot for each of its
  // groups, so that no slot is reused before the end of the step (least recently taken first
  // picks a slot never taken before any other).
  int kept = 0;
  for (int g = 0; g < plan.group_count(); ++g)
    kept += out.pool[static_cast<size_t>(g)] == 0 && sizes[static_cast<size_t>(g)] > 0 ? 1 : 0;
  out.count[0] = out.bytes[0] == 0       ? 0
                 : reshard_after_forward ? 1 + prefetch
                                         : std::max(1 + prefetch, kept);
  return out;
}

std::array<int64_t, 2> assign_pools(const LlamaConfig& config, const std::vector<int64_t>& sizes,
                                    std::vector<int>& pool, int& outer_slots) {
  const int groups = static_cast<int>(sizes.size());
  std::array<int64_t, 2> largest{};
  for (int g = 0; g < groups; ++g)
    if (slot_kind(config, g) == 0) largest[0] = std::max(largest[0], sizes[g]);
  pool.assign(sizes.size(), 0);
  int outer = 0;
  for (int g = 0; g < groups; ++g) {
    if (slot_kind(config, g) == 0 || sizes[g] == 0) continue;
    const bool pinned = config.tie_embeddings && g == kEmbeddingGroup;
    if (!pinned && sizes[g] <= largest[0]) continue;  // shares the layer slots
    pool[g] = 1;
    largest[1] = std::max(largest[1], sizes[g]);
    ++outer;
  }
  // The embedding and the head are in use at different times, except a tied embedding, which
  // stays pinned while the head runs.
  outer_slots = config.tie_embeddings ? outer : std::min(outer, 1);
  return largest;
}

GradientSlotPlan plan_gradient_slots(const LlamaConfig& config, const ShardPlan& plan) {
  GradientSlotPlan out;
  std::vector<int64_t> sizes;
  for (int g = 0; g < plan.group_count(); ++g)
    sizes.push_back(plan.group(g).numel > 0 ? plan.group(g).padded : 0);
  out.elements = assign_pools(config, sizes, out.pool, out.count[1]);
  // Pool 0: the group in backward and one whose reduce-scatter is in flight.
  out.count[0] = out.elements[0] > 0 ? 2 : 0;
  return out;
}

GradientSlotPlan plan_shard_staging(const LlamaConfig& config, const ShardPlan& plan) {
  GradientSlotPlan out = plan_gradient_slots(config, plan);
  out.elements = {};
  for (int g = 0; g < plan.group_count(); ++g) {
    if (plan.group(g).numel == 0) continue;
    int64_t& most = out.elements[static_cast<size_t>(out.pool[static_cast<size_t>(g)])];
    most = std::max(most, plan.group(g).shard);
  }
  return out;
}

size_t offloaded_packed_offset(const GroupShard& shard, DType gather_dtype) {
  return static_cast<size_t>(shard.shard) * dtype_size(gather_dtype);  // 64-byte multiple
}

size_t offloaded_shard_bytes(const SlotLayout& layout, const GroupShard& shard,
                             DType gather_dtype) {
  if (!layout.compute) return static_cast<size_t>(shard.shard) * sizeof(float);
  return offloaded_packed_offset(shard, gather_dtype) +
         static_cast<size_t>(layout.packed) * sizeof(float);
}

DType reduction_dtype(const ParallelSettings& settings, int data_world) {
  return settings.reduce_mode() == ReduceMode::fast && data_world > 1 ? settings.reduce_type()
                                                                      : DType::f32;
}

ScatterScratch plan_scatter_scratch(int64_t elements, int data_world, DType dtype,
                                    int micro_batches) {
  ScatterScratch out;
  const int64_t slice = elements / data_world;
  const size_t reduced = dtype_size(dtype);
  if (dtype != DType::f32) {
    out.received_offset = static_cast<size_t>(elements) * reduced;
    out.partial_offset = out.received_offset + static_cast<size_t>(slice) * reduced;
  }
  out.bytes = out.partial_offset;
  if (micro_batches > 1) out.bytes += static_cast<size_t>(slice) * sizeof(float);
  return out;
}

int64_t stage3_gather_bytes(const LlamaConfig& config, int micro_batches,
                            const WeightSlotPlan& slots, int prefetch) {
  // The engine's pools as SlotPool::take_unclaimed keeps them: a slot not in use and not
  // holding a group of the prefetch window is reused least recently taken first.
  struct Slot {
    int group = -1;
    bool in_use = false;
    uint64_t last_taken = 0;
  };
  std::array<std::vector<Slot>, 2> pools;
  for (size_t k = 0; k < 2; ++k) pools[k].resize(static_cast<size_t>(slots.count[k]));
  uint64_t clock = 0;
  int64_t total = 0;
  const std::vector<int> uses = stage3_weight_uses(config, true);
  size_t position = 0;
  auto pool = [&](int group) -> std::vector<Slot>& {
    return pools[static_cast<size_t>(slots.pool[static_cast<size_t>(group)])];
  };
  auto find = [&](int group) {
    std::vector<Slot>& p = pool(group);
    for (size_t s = 0; s < p.size(); ++s)
      if (p[s].group == group) return static_cast<int>(s);
    return -1;
  };
  auto claimed = [&](int group) {
    for (size_t i = position; i < uses.size() && i < position + static_cast<size_t>(prefetch); ++i)
      if (uses[i] == group) return true;
    return false;
  };
  auto take = [&](int group) {
    std::vector<Slot>& p = pool(group);
    int best = -1;
    for (size_t s = 0; s < p.size(); ++s) {
      if (p[s].in_use || (p[s].group >= 0 && claimed(p[s].group))) continue;
      if (best < 0 || p[s].last_taken < p[static_cast<size_t>(best)].last_taken)
        best = static_cast<int>(s);
    }
    if (best < 0) return best;
    p[static_cast<size_t>(best)].group = group;
    p[static_cast<size_t>(best)].last_taken = ++clock;
    total += slots.groups[static_cast<size_t>(group)].gather_bytes;
    return best;
  };
  for (int m = 0; m < micro_batches; ++m) {
    position = 0;
    for (const int group : uses) {
      while (position < uses.size() && uses[position] != group) ++position;
      if (position < uses.size()) ++position;
      int slot = find(group);
      if (slot < 0) slot = take(group);
      pool(group)[static_cast<size_t>(slot)].in_use = true;
      for (size_t i = position; i < uses.size() && i < position + static_cast<size_t>(prefetch);
           ++i) {
        if (find(uses[i]) >= 0) continue;
        if (take(uses[i]) < 0) break;
      }
      // release: the tied embedding stays pinned for the pass
      if (!(config.tie_embeddings && group == kEmbeddingGroup))
        pool(group)[static_cast<size_t>(slot)].in_use = false;
    }
    for (auto& p : pools)
      for (Slot& slot : p) slot.in_use = false;  // end_pass
  }
  return total;
}

std::vector<int> stage3_weight_uses(const LlamaConfig& config, bool train) {
  const int layers = config.n_layers;
  std::vector<int> uses = {kEmbeddingGroup};
  for (int l = 0; l < layers; ++l) uses.push_back(layer_group(l));
  uses.push_back(head_group(config));
  if (train) {
    for (int l = layers - 1; l >= 0; --l) uses.push_back(layer_group(l));
    // An untied embedding's backward reads no weight: it is not gathered again.
    if (config.tie_embeddings) uses.push_back(kEmbeddingGroup);
  }
  return uses;
}

}  // namespace anvil
