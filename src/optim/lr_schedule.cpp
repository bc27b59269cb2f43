// Learning-rate schedule formulas. All arithmetic is in double so the rate for a step is the
// same on every machine; the optimizer narrows it to f32 once per update.
#include "optim/lr_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace anvil {
namespace {

constexpr LrScheduleKind kAllKinds[] = {LrScheduleKind::cosine, LrScheduleKind::linear,
                                        LrScheduleKind::constant, LrScheduleKind::wsd};

// Returns how far `step` is through the span (start, end], in [0, 1].
double progress_through(int64_t step, int64_t start, int64_t end) {
  if (end <= start) return 1.0;
  return std::clamp(static_cast<double>(step - start) / static_cast<double>(end - start), 0.0, 1.0);
}

}  // namespace

double LrSchedule::lr_at(int64_t step) const {
  const int64_t total = std::max<int64_t>(total_steps, 1);
  step = std::clamp<int64_t>(step, 1, total);
  if (step <= warmup_steps) {
    return peak_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  const int64_t decay_start = std::max<int64_t>(warmup_steps, 0);
  switch (kind) {
    case LrScheduleKind::constant:
      return peak_lr;
    case LrScheduleKind::linear:
      return peak_lr + (min_lr - peak_lr) * progress_through(step, decay_start, total);
    case LrScheduleKind::cosine: {
      const double p = progress_through(step, decay_start, total);
      return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * p)) * (peak_lr - min_lr);
    }
    case LrScheduleKind::wsd: {
      const auto decay_steps =
          static_cast<int64_t>(std::llround(wsd_decay_fraction * static_cast<double>(total)));
      const int64_t stable_end = std::max(decay_start, total - decay_steps);
      if (step <= stable_end) return peak_lr;
      return peak_lr + (min_lr - peak_lr) * progress_through(step, stable_end, total);
    }
  }
  ANVIL_FAIL("[lr_schedule] unhandled schedule kind");
}

LrScheduleKind parse_lr_schedule_kind(std::string_view name) {
  for (LrScheduleKind kind : kAllKinds) {
    if (lr_schedule_kind_name(kind) == name) return kind;
  }
  ANVIL_FAIL("[lr_schedule] unknown schedule '{}' (valid: {})", name,
             fmt::join(lr_schedule_kind_names(), ", "));
}

std::string_view lr_schedule_kind_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::cosine:
      return "cosine";
    case LrScheduleKind::linear:
      return "linear";
    case LrScheduleKind::constant:
      return "constant";
    case LrScheduleKind::wsd:
      return "wsd";
  }
  return "?";
}

std::vector<std::string> lr_schedule_kind_names() {
  std::vector<std::string> names;
  for (LrScheduleKind kind : kAllKinds) names.emplace_back(lr_schedule_kind_name(kind));
  return names;
}

}  // namespace anvil
