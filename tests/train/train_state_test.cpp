// train_state.json and `--section.key=value` overrides under hostile values: counts that do not
// fit, negative counts and mistyped fields are one error naming the file (or flag) and the
// value as written, never a wrapped step number.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "core/error.h"
#include "train/config.h"
#include "train/train_state.h"
#include "error_message.h"

namespace anvil {
namespace {

constexpr const char* kState = R"({"step": 20, "optimizer_step": 18, "tokens_seen": 4096,
  "train_seconds": 1.5, "skipped_steps": 2, "consecutive_skipped_steps": 1,
  "loss_scale": {"scale": 1024.0, "clean_steps": 3},
  "data_cursor": {"next_sample": 160, "seed": 7, "seq_len": 128, "split": "train",
                  "tokenizer_fingerprint": "00ff"}})";

using test::error_of;

std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string state_error(const std::string& text) {
  return error_of([&] { parse_train_state(text, "ck/train_state.json"); });
}

TEST(TrainState, ParsesEveryField) {
  const TrainStateFile state = parse_train_state(kState, "ck/train_state.json");
  EXPECT_EQ(state.progress.step, 20);
  EXPECT_EQ(state.optimizer_step, 18);
  EXPECT_EQ(state.progress.tokens_seen, 4096);
  EXPECT_EQ(state.progress.skipped_steps, 2);
  EXPECT_EQ(state.progress.consecutive_skipped, 1);
  ASSERT_TRUE(state.progress.loss_scale.has_value());
  EXPECT_EQ(state.progress.loss_scale->clean_steps, 3);
  EXPECT_EQ(state.progress.cursor.seq_len, 128);
}

TEST(TrainState, HostileNumbersAreOneErrorWithTheValueAsWritten) {
  EXPECT_EQ(state_error(with(kState, "\"step\": 20", "\"step\": 18446744073709551615")),
            "[checkpoint] ck/train_state.json: 'step' is out of range: 18446744073709551615");
  EXPECT_EQ(state_error(with(kState, "\"tokens_seen\": 4096", "\"tokens_seen\": -5")),
            "[checkpoint] ck/train_state.json: 'tokens_seen' is out of range: -5");
  EXPECT_EQ(state_error(with(kState, "\"seq_len\": 128", "\"seq_len\": 4294967424")),
            "[checkpoint] ck/train_state.json: [data] cursor: field 'seq_len' is out of range: "
            "4294967424");
  EXPECT_EQ(state_error(with(kState, "\"skipped_steps\": 2", "\"skipped_steps\": 21")),
            "[checkpoint] ck/train_state.json: 21 skipped steps exceed the 20 steps taken");
  EXPECT_EQ(state_error(with(kState, "\"train_seconds\": 1.5", "\"train_seconds\": \"x\"")),
            "[checkpoint] ck/train_state.json: field 'train_seconds' has the wrong type");
  EXPECT_EQ(state_error("{\"step\": 1, \"step\": 2}"),
            "[checkpoint] ck/train_state.json has duplicate key 'step'");
  EXPECT_NE(state_error("[[[[[[[[[[1]]]]]]]]]]").find("nests deeper than"), std::string::npos);
}

TEST(ConfigOverride, NumbersPastTheirTypeAreOutOfRange) {
  TrainConfig config;
  EXPECT_EQ(error_of([&] {
              apply_config_override(config, "training.steps", "99999999999999999999");
            }),
            "[config] --training.steps is out of range: 99999999999999999999");
  EXPECT_EQ(error_of([&] {
              apply_config_override(config, "training.steps", "-99999999999999999999");
            }),
            "[config] --training.steps is out of range: -99999999999999999999");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "optimizer.lr", "1e999"); }),
            "[config] --optimizer.lr is out of range: 1e999");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "training.steps", "12x"); }),
            "[config] --training.steps must be an integer, got '12x'");
}

// A value that fits 64 bits but not the field (sizes and counts are held as int; reals as
// float) is out of range as written, from TOML and from the command line alike: never wrapped
// (dim = 2^40 once became "dim must be positive, got 0").
TEST(ConfigToml, NumbersPastTheirFieldAreOutOfRangeAsWritten) {
  TrainConfig config;
  EXPECT_EQ(
      error_of([&] { apply_config_toml(config, "[model]\ndim = 1099511627776\n", "a.toml"); }),
      "[config] a.toml: model.dim is out of range: 1099511627776");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "model.dim", "1099511627776"); }),
            "[config] --model.dim is out of range: 1099511627776");
  EXPECT_EQ(error_of([&] {
              apply_config_toml(config, "[training]\nbatch_size = -2147483649\n", "a.toml");
            }),
            "[config] a.toml: training.batch_size is out of range: -2147483649");
  EXPECT_EQ(
      error_of([&] { apply_config_toml(config, "[model]\nrope_theta = 1e39\n", "a.toml"); }),
      "[config] a.toml: model.rope_theta is out of range: 1e+39");
  EXPECT_EQ(error_of([&] { apply_config_toml(config, "[optimizer]\nlr = nan\n", "a.toml"); }),
            "[config] a.toml: optimizer.lr is out of range: nan");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "model.norm_eps", "inf"); }),
            "[config] --model.norm_eps is out of range: inf");
  EXPECT_EQ(error_of([&] {
              apply_config_toml(config, "[data]\nsources = [{ path = \"a\", weight = inf }]\n",
                                "a.toml");
            }),
            "[config] a.toml: data.sources is out of range: inf");
  // The edges fit; the seed takes all 64 bits.
  apply_config_toml(config, "[model]\ndim = 2147483647\n[training]\nseed = 1099511627776\n",
                    "a.toml");
  EXPECT_EQ(config.model.dim, 2147483647);
  EXPECT_EQ(config.training.seed, 1099511627776);
  apply_config_override(config, "training.seed", "-9223372036854775808");
  EXPECT_EQ(config.training.seed, std::numeric_limits<int64_t>::min());
}

TEST(ConfigToml, IntegersPast64BitsAreErrorsNamingTheFile) {
  TrainConfig config;
  const std::string error = error_of(
      [&] { apply_config_toml(config, "[training]\nsteps = 99999999999999999999\n", "a.toml"); });
  EXPECT_EQ(error.rfind("[config] a.toml:2:", 0), 0u) << error;
}

}  // namespace
}  // namespace anvil
