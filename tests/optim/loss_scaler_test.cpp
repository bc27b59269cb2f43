// The dynamic loss scaler's schedule: halving on overflow, growth after clean steps, checkpoints.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace anvil {
namespace {

TEST(LossScaler, HalvesOnOverflowAndGrowsAfterTheIntervalOfCleanSteps) {
  DynamicLossScaler scaler({.initial_scale = 1024.0, .growth_interval = 3, .min_scale = 1.0});
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.state().clean_steps, 2);
  // An overflow resets the count of clean steps.
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_EQ(scaler.state().clean_steps, 0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.state().clean_steps, 0);
}

TEST(LossScaler, NeverHalvesBelowTheMinimum) {
  DynamicLossScaler scaler({.initial_scale = 4.0, .growth_interval = 10, .min_scale = 2.0});
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 2.0);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 2.0);
}

TEST(LossScaler, RestoresACheckpointedState) {
  DynamicLossScaler scaler({.initial_scale = 65536.0, .growth_interval = 2, .min_scale = 1.0});
  scaler.restore({.scale = 8.0, .clean_steps = 1});
  EXPECT_EQ(scaler.scale(), 8.0);
  EXPECT_TRUE(scaler.update(true));  // the restored clean step counts
  EXPECT_EQ(scaler.scale(), 16.0);
}

TEST(LossScaler, RejectsScalesThatAreNotPowersOfTwo) {
  EXPECT_THROW(DynamicLossScaler({.initial_scale = 1000.0}), Error);
  EXPECT_THROW(DynamicLossScaler({.initial_scale = 0.0}), Error);
  EXPECT_THROW(DynamicLossScaler({.initial_scale = 1024.0, .growth_interval = 0}), Error);
  DynamicLossScaler scaler({});
  EXPECT_THROW(scaler.restore({.scale = 3.0, .clean_steps = 0}), Error);
  try {
    DynamicLossScaler bad({.initial_scale = 1000.0});
    FAIL() << "accepted 1000";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil
