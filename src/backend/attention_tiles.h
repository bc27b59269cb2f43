// The tile-level view of the attention mask rule (attention_mask.h): whether a rectangle of
// query positions x key positions is entirely hidden (skip it), entirely visible (no per-element
// mask needed) or neither. The CUDA tensor-core kernels classify every 64 x 64 tile with it;
// tests/backend/attention_tiles_test.cpp checks it against position_visible pair by pair.
// Invariant: the answer is conservative. `hidden` only when no pair is visible, `full` only when
// every pair is; anything else is `partial`. Documents are not part of it (the kernels check
// their ids per tile). Inline and usable from CUDA code, like attention_mask.h.
#pragma once

#include <cstdint>

#include "backend/attention_mask.h"

namespace anvil {

enum class TileVisibility : int32_t { hidden = 0, partial = 1, full = 2 };

// Returns whether [lo, hi] (0 <= lo) holds 0 or a power of two.
ANVIL_HOST_DEVICE inline bool holds_zero_or_power_of_two(int64_t lo, int64_t hi) {
  if (lo > hi) return false;
  if (lo == 0) return true;
  int64_t power = 1;
  while (power < lo) power <<= 1;
  return power <= hi;
}

// Returns whether some pair of segments of the two position ranges is related by the sparse
// pattern (and, under causal masking, the key's segment is not after the query's).
ANVIL_HOST_DEVICE inline bool some_segments_related(const MaskRule& rule, int64_t q_first,
                                                    int64_t q_last, int64_t k_first,
                                                    int64_t k_last) {
  const int64_t segment = rule.segment;
  // Segment distances (query segment - key segment) over the rectangle fill [low, high].
  int64_t low = q_first / segment - k_last / segment;
  const int64_t high = q_last / segment - k_first / segment;
  if (rule.causal && low < 0) low = 0;  // s <= t puts the key's segment at or before the query's
  if (low > high) return false;
  int64_t abs_low = 0, abs_high = 0;  // the same distances without their sign
  if (low > 0) {
    abs_low = low;
    abs_high = high;
  } else if (high < 0) {
    abs_low = -high;
    abs_high = -low;
  } else {
    abs_high = -low > high ? -low : high;
  }
  if (rule.pattern == SparsePattern::strided)
    return abs_high / rule.stride * rule.stride >= abs_low;
  return holds_zero_or_power_of_two(abs_low, abs_high);
}

// Returns the visibility of queries at positions [q_first, q_last] against keys at positions
// [k_first, k_last] (both non-empty, positions >= 0) under `rule`, documents aside.
ANVIL_HOST_DEVICE inline TileVisibility classify_tile(const MaskRule& rule, int64_t q_first,
                                                      int64_t q_last, int64_t k_first,
                                                      int64_t k_last) {
  // Causality comes first in the rule and also hides sink keys.
  if (rule.causal && k_first > q_last) return TileVisibility::hidden;
  const bool causally_full = !rule.causal || k_last <= q_first;
  if (k_last < rule.sinks) return causally_full ? TileVisibility::full : TileVisibility::partial;
  if (k_first < rule.sinks) return TileVisibility::partial;  // some keys are sinks, some not
  if (rule.window > 0) {
    int64_t nearest = 0;  // the smallest |t - s| over the rectangle
    if (k_last < q_first) nearest = q_first - k_last;
    if (k_first > q_last) nearest = k_first - q_last;
    if (nearest >= rule.window) return TileVisibility::hidden;
  }
  if (rule.pattern != SparsePattern::dense) {
    if (!some_segments_related(rule, q_first, q_last, k_first, k_last))
      return TileVisibility::hidden;
    // Only a rectangle inside one query segment and one key segment has a single distance.
    const int64_t segment = rule.segment;
    if (q_first / segment != q_last / segment || k_first / segment != k_last / segment)
      return TileVisibility::partial;
  }
  if (!causally_full) return TileVisibility::partial;
  if (rule.window > 0) {
    const int64_t farthest_back = q_last - k_first, farthest_ahead = k_last - q_first;
    if (farthest_back >= rule.window || farthest_ahead >= rule.window)
      return TileVisibility::partial;
  }
  return TileVisibility::full;
}

}  // namespace anvil
