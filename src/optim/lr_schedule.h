// Learning-rate schedules: linear warmup, then cosine, linear, constant or warmup-stable-decay
// (WSD). Steps are 1-based optimizer updates: step k is the k-th update, so warmup reaches the
// peak exactly at step == warmup_steps and every decaying schedule reaches min_lr exactly at
// step == total_steps. The value is a pure function of the step, which is what makes resume
// bit-exact: restoring the step counter restores the schedule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

enum class LrScheduleKind { cosine, linear, constant, wsd };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double peak_lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  // WSD only: the rate decays linearly over the last round(fraction * total_steps) steps
  // (never into the warmup).
  double wsd_decay_fraction = 0.2;

  // Returns the learning rate for 1-based update `step` (clamped to [1, total_steps]).
  double lr_at(int64_t step) const;
};

// Parses "cosine" | "linear" | "constant" | "wsd"; throws naming the valid choices.
LrScheduleKind parse_lr_schedule_kind(std::string_view name);
// Returns the name parse_lr_schedule_kind accepts for `kind`.
std::string_view lr_schedule_kind_name(LrScheduleKind kind);
// Returns every schedule name, for help texts and validation messages.
std::vector<std::string> lr_schedule_kind_names();

}  // namespace anvil
