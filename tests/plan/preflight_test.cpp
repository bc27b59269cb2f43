// The pre-flight check's verdict (plan/preflight.h) against free memory set by the test: the
// planned peak is make_plan's; a run is refused exactly when it exceeds the free memory less
// the margin, the message names the numbers, the largest category and settings that fit, and
// the first of those settings then passes the same check. Where the device's memory is the
// host's, offload saves nothing and the host's share is what counts; on a device backend the
// host must also hold offload's part.
#include "plan/preflight.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "train/config.h"

namespace anvil {
namespace {

// The tiny preset at a micro-batch whose activations dominate.
TrainConfig big_batch_config() {
  TrainConfig config;
  config.training.batch_size = 64;
  return config;
}

int64_t planned_need(const TrainConfig& config, int nproc, bool device_is_host) {
  PlanSettings settings;
  settings.nproc = nproc;
  settings.memory_only = true;
  settings.device_is_host = device_is_host;
  settings.hardware.memory_bytes = int64_t{1} << 50;
  return make_plan(config, settings).needed;
}

RankMemory device_memory(int64_t free_bytes) {
  RankMemory memory;
  memory.device_free = free_bytes;
  memory.device_name = "sim";
  memory.host.bytes = int64_t{1} << 40;
  memory.host.limited_by = "MemAvailable";
  return memory;
}

RankMemory host_memory(int64_t free_bytes) {
  RankMemory memory;
  memory.host.bytes = free_bytes;
  memory.host.limited_by = "RLIMIT_AS";
  return memory;
}

// Returns the first "--section.key=value" a refusal offers.
std::pair<std::string, std::string> first_setting(const std::string& message) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(message, match, std::regex("fits with --([a-z_.]+)=([a-z0-9]+)")))
      << message;
  return {match[1], match[2]};
}

TEST(Preflight, RefusesARunOverTheFreeDeviceMemoryAndNamesWhatFits) {
  TrainConfig config = big_batch_config();
  const int64_t need = planned_need(config, 1, false);
  const PreflightVerdict verdict = preflight_verdict(config, 1, 0, device_memory(need / 2));
  ASSERT_FALSE(verdict.fits);
  EXPECT_EQ(verdict.needed, need);
  EXPECT_EQ(verdict.available, need / 2);
  const std::string& m = verdict.message;
  EXPECT_TRUE(m.starts_with("[preflight] the run needs ")) << m;
  EXPECT_NE(m.find(" per device at its peak (activations "), std::string::npos) << m;
  EXPECT_NE(m.find("free on the sim device"), std::string::npos) << m;
  EXPECT_NE(m.find("usable with the 5% margin (preflight.margin)"), std::string::npos) << m;
  EXPECT_NE(m.find("--preflight=warn goes on anyway"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  // The nearest setting is the largest micro-batch that fits, and it passes the check.
  const auto [key, value] = first_setting(m);
  EXPECT_EQ(key, "training.batch_size");
  apply_config_override(config, key, value);
  EXPECT_LT(config.training.batch_size, 64);
  EXPECT_TRUE(preflight_verdict(config, 1, 0, device_memory(need / 2)).fits);
  config.training.batch_size += 1;
  EXPECT_FALSE(preflight_verdict(config, 1, 0, device_memory(need / 2)).fits);
}

TEST(Preflight, TheMarginIsKeptFree) {
  TrainConfig config = big_batch_config();
  const int64_t need = planned_need(config, 1, false);
  const int64_t free_bytes = need + need / 40;  // 2.5% above the need
  EXPECT_FALSE(preflight_verdict(config, 1, 0, device_memory(free_bytes)).fits);
  config.preflight.margin = 0.01;
  EXPECT_TRUE(preflight_verdict(config, 1, 0, device_memory(free_bytes)).fits);
  config.preflight.margin = 0;
  EXPECT_TRUE(preflight_verdict(config, 1, 0, device_memory(need)).fits);
  EXPECT_FALSE(preflight_verdict(config, 1, 0, device_memory(need - 1)).fits);
}

TEST(Preflight, EachRankIsNamedOnAMultiRankJob) {
  TrainConfig config = big_batch_config();
  config.parallel.zero_stage = 3;
  const int64_t need = planned_need(config, 2, false);
  const PreflightVerdict verdict = preflight_verdict(config, 2, 1, device_memory(need / 2));
  ASSERT_FALSE(verdict.fits);
  EXPECT_TRUE(verdict.message.starts_with("[preflight] rank 1: the run needs ")) << verdict.message;
  const PreflightVerdict all = preflight_verdict(config, 2, -1, device_memory(need / 2));
  EXPECT_TRUE(all.message.starts_with("[preflight] each of the 2 ranks: ")) << all.message;
  EXPECT_TRUE(preflight_verdict(config, 2, 1, device_memory(2 * need)).fits);
}

// On the cpu backends the device is the host: offload moves the optimizer into the same
// memory, so it counts there and is never offered as a remedy.
TEST(Preflight, OnTheHostOffloadCountsAndIsNotARemedy) {
  TrainConfig config = big_batch_config();
  const int64_t on_device = planned_need(config, 1, false);
  const int64_t on_host = planned_need(config, 1, true);
  EXPECT_EQ(on_device, on_host);  // without offload the host holds nothing more
  config.parallel.offload = true;
  EXPECT_GT(planned_need(config, 1, true), planned_need(config, 1, false));
  config.parallel.offload = false;
  const PreflightVerdict verdict = preflight_verdict(config, 1, 0, host_memory(on_host / 2));
  ASSERT_FALSE(verdict.fits);
  EXPECT_NE(verdict.message.find("free in host memory (RLIMIT_AS)"), std::string::npos)
      << verdict.message;
  EXPECT_EQ(verdict.message.find("--parallel.offload=true"), std::string::npos)
      << verdict.message;
  // A pretraining run from scratch is not offered adapters.
  EXPECT_EQ(verdict.message.find("--lora.r"), std::string::npos) << verdict.message;
}

// Ranks sharing a host each get their share of its free memory.
TEST(Preflight, RanksOnOneHostShareItsMemory) {
  const TrainConfig config = big_batch_config();
  const int64_t need = planned_need(config, 1, true);
  RankMemory memory = host_memory(3 * need);
  EXPECT_TRUE(preflight_verdict(config, 1, 0, memory).fits);
  memory.host.bytes /= 4;
  memory.host_ranks = 4;
  const PreflightVerdict verdict = preflight_verdict(config, 1, 0, memory);
  ASSERT_FALSE(verdict.fits);
  EXPECT_NE(verdict.message.find("(1/4 of the host's, one share per rank on it)"),
            std::string::npos)
      << verdict.message;
}

// With offload on a device backend the device fits but the host must hold the optimizer.
TEST(Preflight, OffloadOnADeviceNeedsTheHostToo) {
  TrainConfig config = big_batch_config();
  config.parallel.offload = true;
  RankMemory memory = device_memory(int64_t{1} << 40);
  memory.host.bytes = 1024;
  const PreflightVerdict verdict = preflight_verdict(config, 1, 0, memory);
  ASSERT_FALSE(verdict.fits);
  EXPECT_TRUE(verdict.message.starts_with("[preflight] the run's offload needs "))
      << verdict.message;
  memory.host.bytes = int64_t{1} << 40;
  EXPECT_TRUE(preflight_verdict(config, 1, 0, memory).fits);
}

// Nothing readable says how much host memory there is: no verdict is guessed.
TEST(Preflight, UnknownHostMemoryIsNotARefusal) {
  RankMemory memory;
  EXPECT_TRUE(preflight_verdict(big_batch_config(), 1, 0, memory).fits);
}

}  // namespace
}  // namespace anvil
