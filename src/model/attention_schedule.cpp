// Visible-pair counts of an attention schedule (see attention_schedule.h), for the FLOP count
// of a step: per query, the sink keys plus, segment by segment, the keys that the window and
// the pattern leave, so the count is exact and costs O(T x T / segment), not O(T^2).
#include "model/attention_schedule.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace anvil {

namespace {

// The visible fraction of one mask rule over a sequence of seq_len positions.
double visible_fraction_of(const MaskRule& rule, int64_t seq_len) {
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

bool same_rule(const MaskRule& a, const MaskRule& b) {
  return a.causal == b.causal && a.window == b.window && a.pattern == b.pattern &&
         a.segment == b.segment && a.stride == b.stride && a.sinks == b.sinks;
}

}  // namespace

double AttentionSchedule::visible_fraction(int layer, int64_t seq_len) const {
  AttentionParams params;
  apply(layer, params);
  return visible_fraction_of(params.mask_rule(), seq_len);
}

double AttentionSchedule::mean_visible_fraction(int n_layers, int64_t seq_len) const {
  if (n_layers <= 0) return 1.0;
  // Layers with one rule see the same pairs, and a long sequence takes seconds to count
  // (131072 positions in 64-position segments: 2^28 steps), so each rule is counted once.
  std::vector<std::pair<MaskRule, double>> counted;
  double total = 0.0;
  for (int layer = 0; layer < n_layers; ++layer) {
    AttentionParams params;
    apply(layer, params);
    const MaskRule rule = params.mask_rule();
    auto known = std::find_if(counted.begin(), counted.end(),
                              [&](const auto& entry) { return same_rule(entry.first, rule); });
    if (known == counted.end()) {
      counted.emplace_back(rule, visible_fraction_of(rule, seq_len));
      known = counted.end() - 1;
    }
    total += known->second;
  }
  return total / n_layers;
}

}  // namespace anvil
