// Learning-rate schedules at their key points: warmup, peak, midpoint, end, WSD's knee.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace anvil {
namespace {

LrSchedule make(LrScheduleKind kind) {
  LrSchedule s;
  s.kind = kind;
  s.peak_lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_steps = 10;
  s.total_steps = 110;
  return s;
}

TEST(LrScheduleTest, WarmupIsLinearToThePeak) {
  for (LrScheduleKind kind : {LrScheduleKind::cosine, LrScheduleKind::linear,
                              LrScheduleKind::constant, LrScheduleKind::wsd}) {
    const LrSchedule s = make(kind);
    EXPECT_DOUBLE_EQ(s.lr_at(1), 0.1);
    EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5);
    EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  }
}

TEST(LrScheduleTest, CosineHalfwayAndEnd) {
  const LrSchedule s = make(LrScheduleKind::cosine);
  EXPECT_DOUBLE_EQ(s.lr_at(60), 0.55);  // halfway through the 100 decay steps
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(35), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.25)));
  EXPECT_DOUBLE_EQ(s.lr_at(500), 0.1);  // clamped past the end
}

TEST(LrScheduleTest, LinearAndConstant) {
  const LrSchedule linear = make(LrScheduleKind::linear);
  EXPECT_DOUBLE_EQ(linear.lr_at(60), 0.55);
  EXPECT_DOUBLE_EQ(linear.lr_at(110), 0.1);
  const LrSchedule constant = make(LrScheduleKind::constant);
  EXPECT_DOUBLE_EQ(constant.lr_at(60), 1.0);
  EXPECT_DOUBLE_EQ(constant.lr_at(110), 1.0);
}

TEST(LrScheduleTest, WsdIsFlatThenDecaysOverTheLastFraction) {
  LrSchedule s = make(LrScheduleKind::wsd);
  s.total_steps = 100;
  s.wsd_decay_fraction = 0.2;  // decay over steps 81..100
  EXPECT_DOUBLE_EQ(s.lr_at(50), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(80), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(90), 1.0 + (0.1 - 1.0) * 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(100), 0.1);
}

TEST(LrScheduleTest, NoWarmupStartsAtPeak) {
  LrSchedule s = make(LrScheduleKind::cosine);
  s.warmup_steps = 0;
  s.total_steps = 4;
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.25)));
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.1);
}

TEST(LrScheduleTest, ParsesNames) {
  EXPECT_EQ(parse_lr_schedule_kind("wsd"), LrScheduleKind::wsd);
  EXPECT_THROW(parse_lr_schedule_kind("step"), Error);
}

}  // namespace
}  // namespace anvil
