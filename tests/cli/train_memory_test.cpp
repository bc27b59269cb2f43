// The measured memory end to end through the built binary: sharding.json's memory_per_rank
// holds, per rank and category, exactly the bytes the layout and the shard plan's padding give
// (ZeRO 0 in one process, ZeRO 3 over `anvil launch --nproc 2`); metrics.jsonl's train records
// carry mem_bytes, mem_peak_bytes and mem_peak (every category, in order), consistent with one
// another and with the report, and the JSON summary's peak_device_mb is the measured peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "core/memory_category.h"
#include "model/llama_parameters.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

constexpr int kGradAccum = 2;  // tiny_synthetic_args

// Returns the bytes one rank of `world` holds after setup at ZeRO `stage` (0 or 3) for the
// model of tiny_synthetic_args, by category name; activations and workspace are left out (the
// arena's size is the model's business, tested in test_parallel).
std::map<std::string, int64_t> expected_state(int stage, int world, int rank) {
  std::vector<std::string> args;
  std::istringstream words(tiny_synthetic_args());
  for (std::string word; words >> word;) args.push_back(word);
  TrainConfig config;
  for (const ConfigOverride& o : extract_config_overrides(args))
    apply_config_override(config, o.name, o.value);
  const auto layout = make_llama_layout(llama_config_from(config.model), false);
  int64_t weights = 0, optimizer = 0, largest = 0, largest_layer = 0;
  std::vector<std::pair<int, int64_t>> outer_groups;  // the embedding's and the head's sizes
  for (int g = 0; g < layout->group_count(); ++g) {
    const int64_t n = layout->group_numel(g);
    const int64_t unit = world * kParameterAlignment;
    const int64_t padded = (n + unit - 1) / unit * unit;
    const int64_t shard = stage == 3 ? padded / world : n;
    const int64_t first = stage == 3 ? rank * shard : 0;
    weights += 4 * shard;
    optimizer += 8 * std::clamp<int64_t>(n - first, 0, shard);
    largest = std::max(largest, padded);
    if (g == kEmbeddingGroup || g == layout->group_count() - 1) {
      outer_groups.push_back({g, padded});
    } else {
      largest_layer = std::max(largest_layer, padded);
    }
  }
  // The embedding and head share the layer slots when no larger than a layer, except a tied
  // table (pinned for the pass); the others have one slot (tied: one each).
  const bool tied = config.model.tie_embeddings;
  int64_t largest_outer = 0, outer_slots = 0;
  for (const auto& [g, padded] : outer_groups) {
    if (!(tied && g == kEmbeddingGroup) && padded <= largest_layer) continue;
    largest_outer = std::max(largest_outer, padded);
    ++outer_slots;
  }
  if (!tied) outer_slots = std::min<int64_t>(outer_slots, 1);
  // Stage 0: world rank 0 keeps a running gradient sum over the micro-batches. Stage 3 (f32):
  // weight and gradient slots, two of the largest layer (weights: in use and prefetched;
  // gradients: in backward and reducing) and the outer ones, and one running-sum slot of the
  // largest group.
  const int64_t gradients = stage == 0 && rank == 0 ? 2 * weights : weights;
  const int64_t communication =
      stage == 3 ? 2 * (2 * 4 * largest_layer + outer_slots * 4 * largest_outer) + 4 * largest
                 : 0;
  return {{"frozen_weights", 0},          {"trainable_weights", weights},
          {"gradients", gradients},       {"optimizer_state", optimizer},
          {"communication", communication}};
}

// Returns a run's train records with their fields in file order.
std::vector<nlohmann::ordered_json> train_records(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::vector<nlohmann::ordered_json> records;
  for (std::string line; std::getline(in, line);) {
    nlohmann::ordered_json record = nlohmann::ordered_json::parse(line);
    if (record["type"] == "train") {
      records.push_back(std::move(record));
    } else {
      EXPECT_FALSE(record.contains("mem_bytes")) << line;  // evaluations measure nothing
    }
  }
  return records;
}

// Checks one run's sharding.json against expected_state and returns its memory_per_rank.
nlohmann::json check_sharding_memory(const fs::path& run, int stage, int world) {
  std::ifstream in(run / "sharding.json");
  const nlohmann::json report = nlohmann::json::parse(in);
  const nlohmann::json& ranks = report["memory_per_rank"];
  EXPECT_EQ(ranks.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const nlohmann::json& entry = ranks[r];
    EXPECT_EQ(entry["rank"], r);
    int64_t total = 0;
    for (const std::string_view name : kMemoryCategoryNames) {
      const std::string key(name);
      EXPECT_TRUE(entry.contains(key) && entry["peak"].contains(key)) << key;
      total += entry.value(key, int64_t{0});
      EXPECT_GE(entry["peak"].value(key, int64_t{0}), entry.value(key, int64_t{0})) << key;
    }
    EXPECT_EQ(entry["total"].get<int64_t>(), total);
    EXPECT_GE(entry["total_peak"].get<int64_t>(), total);
    EXPECT_GT(entry["activations"].get<int64_t>(), 0);
    for (const auto& [key, bytes] : expected_state(stage, world, r))
      EXPECT_EQ(entry[key].get<int64_t>(), bytes) << "stage " << stage << ", rank " << r << ": "
                                                  << key;
  }
  return ranks;
}

// Checks a run's train records: every memory field, each the maximum over `ranks`.
void check_metrics_memory(const fs::path& run, const nlohmann::json& ranks, int steps) {
  const std::vector<nlohmann::ordered_json> records = train_records(run);
  ASSERT_EQ(records.size(), static_cast<size_t>(steps));
  int64_t last_peak = 0;
  for (const nlohmann::ordered_json& r : records) {
    const int64_t held = r["mem_bytes"].get<int64_t>();
    const int64_t peak = r["mem_peak_bytes"].get<int64_t>();
    EXPECT_GT(held, 0);
    EXPECT_GE(peak, held);
    EXPECT_GE(peak, last_peak) << "a peak since the run started never falls";
    last_peak = peak;
    ASSERT_TRUE(r["mem_peak"].is_object());
    ASSERT_EQ(r["mem_peak"].size(), kMemoryCategoryNames.size());
    int64_t sum = 0;
    size_t index = 0;
    for (const auto& [key, bytes] : r["mem_peak"].items()) {
      EXPECT_EQ(key, kMemoryCategoryNames[index++]);  // the categories' order
      sum += bytes.get<int64_t>();
      EXPECT_LE(bytes.get<int64_t>(), peak) << key;
    }
    EXPECT_GE(sum, peak) << "the total's peak is at most the sum of the category peaks";
    // Weights, gradients and optimizer state never change size after setup.
    for (const char* key : {"trainable_weights", "gradients", "optimizer_state"}) {
      int64_t most = 0;
      for (const nlohmann::json& rank : ranks) most = std::max(most, rank[key].get<int64_t>());
      EXPECT_EQ(r["mem_peak"][key].get<int64_t>(), most) << key;
    }
  }
}

class TrainMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override { root = scratch_dir("memory"); }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

TEST_F(TrainMemoryTest, OneProcessZeroStage0MeasuresTheLayoutsBytes) {
  const fs::path run = root / "zero0";
  const auto result = run_anvil("train " + tiny_synthetic_args() +
                                " --training.steps=3 --logging.json=true --run-dir " +
                                run.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("memory per rank, MiB (measured"), std::string::npos)
      << result.output;
  const nlohmann::json ranks = check_sharding_memory(run, 0, 1);
  check_metrics_memory(run, ranks, 3);
  // The summary's peak is this process's measured peak at the end (MiB).
  std::istringstream lines(result.output);
  std::string line, summary;
  while (std::getline(lines, line))
    if (!line.empty() && line.front() == '{') summary = line;
  const double peak_mb = nlohmann::json::parse(summary)["peak_device_mb"].get<double>();
  const int64_t last = train_records(run).back()["mem_peak_bytes"].get<int64_t>();
  EXPECT_GE(peak_mb, static_cast<double>(last) / (1024.0 * 1024.0));
}

TEST_F(TrainMemoryTest, TwoRankZeroStage3HoldsItsShardsAndSlots) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const fs::path dry = root / "dry";
  const auto planned = run_anvil("launch --nproc 2 -- train " + tiny_synthetic_args() +
                                 " --parallel.zero_stage=3 --dry-run --run-dir " + dry.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  check_sharding_memory(dry, 3, 2);
  const fs::path run = root / "zero3";
  const auto result = run_anvil("launch --nproc 2 -- train " + tiny_synthetic_args() +
                                " --parallel.zero_stage=3 --training.steps=3 --run-dir " +
                                run.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json ranks = check_sharding_memory(run, 3, 2);
  check_metrics_memory(run, ranks, 3);
  // The gradient reductions stage the other rank's slices: communication peaks above the
  // slots it holds from setup on.
  int64_t slots = 0;
  for (const nlohmann::json& rank : ranks)
    slots = std::max(slots, rank["communication"].get<int64_t>());
  EXPECT_GT(train_records(run).back()["mem_peak"]["communication"].get<int64_t>(), slots);
}

}  // namespace
}  // namespace anvil
