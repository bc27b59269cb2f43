// ShardPlan: how each parameter group's flat buffer is cut across the mesh. A group of n
// elements is padded to P, a multiple of world * kShardAlignment, so that
//   - its fsdp shard f is [f*S, (f+1)*S) with S = P / fsdp (optimizer state, and the weights
//     and reduced gradients under stages 3 and 2), replicated over the dp axis, and
//   - its world slice r is [r*Q, (r+1)*Q) with Q = P / world: the part of the gradient a rank
//     reduces (reduce-scatter over the world) and whose squares it counts for the norm.
// World rank r = f * dp + d, so world slices f*dp .. f*dp+dp-1 tile fsdp shard f. Every
// boundary is a multiple of kShardAlignment elements, like the layout's parameter offsets.
// Elements at or past n are padding: zero, never updated. "length" fields count real ones.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameters.h"
#include "optim/adamw.h"

namespace anvil {

// Shard and slice boundaries are multiples of this many elements.
inline constexpr int64_t kShardAlignment = kParameterAlignment;

struct GroupShard {
  int64_t numel = 0;         // n: the layout's group size
  int64_t padded = 0;        // P
  int64_t shard = 0;         // S = P / fsdp
  int64_t slice = 0;         // Q = P / world
  int64_t shard_begin = 0;   // f * S
  int64_t shard_length = 0;  // real elements of this rank's shard
  int64_t slice_begin = 0;   // r * Q
  int64_t slice_length = 0;  // real elements of this rank's slice
};

class ShardPlan {
 public:
  ShardPlan() = default;
  // Plans every group of `layout` for a world of `world` ranks cut into `fsdp` shards, as
  // seen from world rank `rank`.
  ShardPlan(const ParameterLayout& layout, int world, int fsdp, int rank);

  int group_count() const { return static_cast<int>(groups_.size()); }
  const GroupShard& group(int g) const { return groups_[static_cast<size_t>(g)]; }
  int world() const { return world_; }
  int fsdp() const { return fsdp_; }
  // Returns the largest padded group size (the size of a gather or gradient slot).
  int64_t max_padded() const;
  // Returns the sum over groups of the padded sizes, of the shard sizes, of the real
  // elements of this rank's shards.
  int64_t total_padded() const;
  int64_t total_shard() const;
  int64_t total_shard_length() const;

 private:
  std::vector<GroupShard> groups_;
  int world_ = 1;
  int fsdp_ = 1;
};

// Returns the weight-decay spans of every group of a layout: parameters in offset order,
// each gap (alignment padding) joining the span before it, adjacent spans with the same
// setting merged, the whole group covered (what the trainer's AdamW groups use).
std::vector<std::vector<ParamSpan>> layout_decay_spans(const ParameterLayout& layout);

// Returns the spans covering [begin, begin + length) of a group, rebased so that `begin` is
// offset 0 (the spans of one shard).
std::vector<ParamSpan> spans_in_range(const std::vector<ParamSpan>& spans, int64_t begin,
                                      int64_t length);

}  // namespace anvil
