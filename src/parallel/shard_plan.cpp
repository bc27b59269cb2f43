// Shard arithmetic and decay spans (see shard_plan.h).
#include "parallel/shard_plan.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {
namespace {

int64_t clipped_length(int64_t begin, int64_t count, int64_t numel) {
  return std::clamp<int64_t>(numel - begin, 0, count);
}

}  // namespace

ShardPlan::ShardPlan(const ParameterLayout& layout, int world, int fsdp, int rank)
    : world_(world), fsdp_(fsdp) {
  ANVIL_CHECK(world >= 1 && fsdp >= 1 && world % fsdp == 0 && rank >= 0 && rank < world,
              "[parallel] bad shard plan: world {}, fsdp {}, rank {}", world, fsdp, rank);
  const int dp = world / fsdp;
  const int fsdp_index = rank / dp;
  const int64_t unit = static_cast<int64_t>(world) * kShardAlignment;
  for (int g = 0; g < layout.group_count(); ++g) {
    GroupShard s;
    s.numel = layout.group_numel(g);
    s.padded = (s.numel + unit - 1) / unit * unit;
    s.shard = s.padded / fsdp;
    s.slice = s.padded / world;
    s.shard_begin = s.shard * fsdp_index;
    s.shard_length = clipped_length(s.shard_begin, s.shard, s.numel);
    s.slice_begin = s.slice * rank;
    s.slice_length = clipped_length(s.slice_begin, s.slice, s.numel);
    groups_.push_back(s);
  }
}

int64_t ShardPlan::max_padded() const {
  int64_t largest = 0;
  for (const GroupShard& s : groups_) largest = std::max(largest, s.padded);
  return largest;
}

int64_t ShardPlan::total_padded() const {
  int64_t total = 0;
  for (const GroupShard& s : groups_) total += s.padded;
  return total;
}

int64_t ShardPlan::total_shard() const {
  int64_t total = 0;
  for (const GroupShard& s : groups_) total += s.shard;
  return total;
}

int64_t ShardPlan::total_shard_length() const {
  int64_t total = 0;
  for (const GroupShard& s : groups_) total += s.shard_length;
  return total;
}

std::vector<std::vector<ParamSpan>> layout_decay_spans(const ParameterLayout& layout) {
  std::vector<std::vector<ParamSpan>> spans(static_cast<size_t>(layout.group_count()));
  std::vector<const ParameterInfo*> params;
  for (const ParameterInfo& info : layout.params()) params.push_back(&info);
  std::stable_sort(params.begin(), params.end(),
                   [](const ParameterInfo* a, const ParameterInfo* b) {
                     return a->group != b->group ? a->group < b->group : a->offset < b->offset;
                   });
  for (size_t i = 0; i < params.size(); ++i) {
    const ParameterInfo& info = *params[i];
    const bool last_in_group = i + 1 == params.size() || params[i + 1]->group != info.group;
    const int64_t end = last_in_group ? layout.group_numel(info.group) : params[i + 1]->offset;
    std::vector<ParamSpan>& group = spans[static_cast<size_t>(info.group)];
    if (group.empty() && info.offset > 0) group.push_back({0, info.offset, false});
    if (!group.empty() && group.back().weight_decay == info.weight_decay) {
      group.back().count = end - group.back().offset;
    } else {
      group.push_back({info.offset, end - info.offset, info.weight_decay});
    }
  }
  return spans;
}

std::vector<ParamSpan> spans_in_range(const std::vector<ParamSpan>& spans, int64_t begin,
                                      int64_t length) {
  std::vector<ParamSpan> out;
  const int64_t end = begin + length;
  for (const ParamSpan& span : spans) {
    const int64_t lo = std::max(span.offset, begin);
    const int64_t hi = std::min(span.offset + span.count, end);
    if (lo < hi) out.push_back({lo - begin, hi - lo, span.weight_decay});
  }
  return out;
}

}  // namespace anvil
