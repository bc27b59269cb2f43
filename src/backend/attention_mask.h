// The attention mask rule every backend implements: which key positions a query position may
// see. The rule is a few integers, never a (T, T) matrix, so a mask costs O(1) memory (plus
// the O(T) document ids, checked beside it). Positions are absolute; segments are runs of
// `segment` positions starting at position 0. A pair (query t, key s) is visible when
//   causal (s <= t, when on)  and  same document (when ids are given)  and
//   (s < sinks  or  (inside the window  and  the segments are related by the pattern)).
// Patterns: dense (every segment), strided (segments whose distance is a multiple of
// `stride`: the query's own segment plus every stride-th earlier one, Sparse Transformer
// style) and lines (distance 0 or a power of two: own segment plus the segments 1, 2, 4, 8,
// ... back, O(n log n) visible pairs). Everything here is inline and usable from CUDA code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ANVIL_HOST_DEVICE __host__ __device__
#else
#define ANVIL_HOST_DEVICE
#endif

namespace anvil {

enum class SparsePattern : int32_t { dense = 0, strided = 1, lines = 2 };

// The position-level part of a mask (documents need the id arrays and are checked apart).
struct MaskRule {
  bool causal = true;
  int32_t window = 0;  // a query at t sees keys with |t - s| < window; 0 disables it
  SparsePattern pattern = SparsePattern::dense;
  int32_t segment = 0;  // positions per segment (strided and lines)
  int32_t stride = 0;   // strided: segment distances that are multiples of this are visible
  int32_t sinks = 0;    // keys at positions [0, sinks) are visible to every query (causally)
};

// Returns whether the pattern relates two segments `distance` apart (either direction).
ANVIL_HOST_DEVICE inline bool segment_distance_visible(SparsePattern pattern, int32_t stride,
                                                       int64_t distance) {
  if (distance < 0) distance = -distance;
  switch (pattern) {
    case SparsePattern::strided:
      return distance % stride == 0;
    case SparsePattern::lines:
      return (distance & (distance - 1)) == 0;  // 0, 1, 2, 4, 8, ...
    case SparsePattern::dense:
    default:
      return true;
  }
}

// Returns whether the query at position t may see the key at position s (documents aside).
ANVIL_HOST_DEVICE inline bool position_visible(const MaskRule& rule, int64_t t, int64_t s) {
  if (rule.causal && s > t) return false;
  if (s < rule.sinks) return true;
  if (rule.window > 0 && (t - s >= rule.window || s - t >= rule.window)) return false;
  if (rule.pattern == SparsePattern::dense) return true;
  return segment_distance_visible(rule.pattern, rule.stride, t / rule.segment - s / rule.segment);
}

}  // namespace anvil
