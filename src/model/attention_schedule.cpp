// Visible-pair counts of an attention schedule (see attention_schedule.h), for the FLOP count
// of a step: per query, the sink keys plus, segment by segment, the keys that the window and
// the pattern leave, so the count is exact and costs O(T x T / segment), not O(T^2).
#include "model/attention_schedule.h"

#include <algorithm>

namespace anvil {

double AttentionSchedule::visible_fraction(int layer, int64_t seq_len) const {
  AttentionParams params;
  apply(layer, params);
  const MaskRule rule = params.mask_rule();
  if (seq_len <= 0 || (rule.window == 0 && rule.pattern == SparsePattern::dense)) return 1.0;
  const int64_t segment = rule.pattern == SparsePattern::dense ? seq_len : rule.segment;
  double pairs = 0.0;
  for (int64_t t = 0; t < seq_len; ++t) {
    const int64_t sinks = std::min<int64_t>(rule.sinks, t + 1);
    // Keys past the sinks, inside the window: positions [lowest, t].
    const int64_t lowest = std::max<int64_t>(sinks, rule.window > 0 ? t - rule.window + 1 : 0);
    int64_t visible = sinks;
    for (int64_t first = lowest / segment * segment; first <= t; first += segment) {
      if (!segment_distance_visible(rule.pattern, rule.stride, t / segment - first / segment))
        continue;
      visible += std::min(first + segment - 1, t) - std::max(first, lowest) + 1;
    }
    pairs += static_cast<double>(visible);
  }
  return pairs / (static_cast<double>(seq_len) * static_cast<double>(seq_len + 1) / 2.0);
}

double AttentionSchedule::mean_visible_fraction(int n_layers, int64_t seq_len) const {
  if (n_layers <= 0) return 1.0;
  double total = 0.0;
  for (int layer = 0; layer < n_layers; ++layer) total += visible_fraction(layer, seq_len);
  return total / n_layers;
}

}  // namespace anvil
