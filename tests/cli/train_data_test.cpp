// `anvil train` on real token shards and the errors a user meets first: unknown keys (with
// the nearest valid key), a missing data folder (with the `anvil prepare` command), a model
// vocabulary smaller than the data's, seq_len beyond the context. Then `anvil generate` on the
// trained run, which finds the checkpoint and the tokenizer through the run's config.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "easy_corpus.h"
#include "train_test_support.h"

namespace anvil {
namespace {

using testing_support::count_containing;
using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

// Model and batch flags for the real-data runs (the vocabulary comes per test).
const char* const kSmallModel = testing_support::kEasyCorpusModel;

class TrainDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::filesystem::path(scratch_dir("data"));
    testing_support::write_easy_corpus(*root_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete root_;
  }
  static std::string data_flag() { return "--data.path=" + (*root_ / "data").string(); }
  static std::filesystem::path* root_;
};

std::filesystem::path* TrainDataTest::root_ = nullptr;

TEST_F(TrainDataTest, TrainsOnShardsEvaluatesAndGenerates) {
  const auto run = *root_ / "run";
  const auto result =
      run_anvil("train --run-dir " + run.string() + " " + kSmallModel + " " + data_flag() +
                " --model.vocab_size=300 --training.steps=30 "
                "--training.eval_every=10 --optimizer.lr=1e-2 --logging.json=true");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto metrics = deterministic_metrics(run);
  EXPECT_EQ(count_containing(metrics, "\"type\":\"train\""), 30);
  EXPECT_EQ(count_containing(metrics, "\"type\":\"eval\""), 3);
  // The JSON summary is the last line, and training made progress on this easy corpus.
  const auto last_line_start = result.output.rfind('\n', result.output.size() - 2);
  const auto summary = nlohmann::json::parse(result.output.substr(last_line_start + 1));
  EXPECT_EQ(summary["steps"], 30);
  EXPECT_GT(summary["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(summary["peak_rss_mb"].get<double>(), 0.0);
  EXPECT_LT(summary["final_val_loss"].get<double>(), std::log(300.0) - 1.0);

  const auto generated = run_anvil("generate --run " + run.string() +
                                   " --prompt 'the cat' --max-new-tokens 8 "
                                   "--greedy --threads 1");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(generated.output.rfind("the cat", 0), 0u) << generated.output;
  EXPECT_NE(generated.output.find("[generate]"), std::string::npos);
  // A checkpoint folder is also a Hugging Face model folder that model.init_from accepts: a run
  // started from it begins at the trained loss, far below a fresh model's first step.
  const auto continued = run_anvil(
      "train --run-dir " + (*root_ / "continued").string() + " " + kSmallModel + " " + data_flag() +
      " --model.vocab_size=300 --training.steps=1 --training.eval_steps=0 "
      "--model.init_from=" +
      (run / "checkpoints" / "step-0000030").string());
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_NE(continued.output.find("initialised weights from"), std::string::npos);
  const auto first_loss = [](const std::filesystem::path& dir) {
    return nlohmann::json::parse(deterministic_metrics(dir).front())["loss"].get<double>();
  };
  EXPECT_LT(first_loss(*root_ / "continued"), first_loss(run) - 1.0);

  // Context extension: the same weights continue at twice the context with a larger
  // rope_theta and llama3 scaling; the changed position keys are named, not refused.
  const auto extended = run_anvil(
      "train --run-dir " + (*root_ / "extended").string() + " " + kSmallModel + " " +
      data_flag() +
      " --model.vocab_size=300 --training.steps=1 --training.eval_steps=0 "
      "--model.max_seq_len=64 --training.seq_len=32 --model.rope_theta=40000 "
      "--model.rope_scaling_factor=2 --model.rope_original_max_position=32 "
      "--model.init_from=" +
      (run / "checkpoints" / "step-0000030").string());
  ASSERT_EQ(extended.exit_code, 0) << extended.output;
  EXPECT_NE(extended.output.find("context extension from"), std::string::npos)
      << extended.output;
  EXPECT_NE(extended.output.find("max_seq_len 32 -> 64, rope_theta 10000 -> 40000, "
                                 "rope_scaling_factor 0 -> 2"),
            std::string::npos)
      << extended.output;
  // A weight shape that differs is still an error.
  const auto wider = run_anvil(
      "train --run-dir " + (*root_ / "wider").string() + " " + kSmallModel + " " + data_flag() +
      " --model.vocab_size=300 --training.steps=1 --model.ffn_dim=96 --model.init_from=" +
      (run / "checkpoints" / "step-0000030").string());
  EXPECT_EQ(wider.exit_code, 1);
  EXPECT_NE(wider.output.find("make them agree"), std::string::npos) << wider.output;

  // Greedy decoding is deterministic.
  EXPECT_EQ(run_anvil("generate --run " + run.string() +
                      " --prompt 'the cat' --max-new-tokens 8 --greedy --threads 1")
                .output.substr(0, generated.output.find("[generate]")),
            generated.output.substr(0, generated.output.find("[generate]")));
}

TEST_F(TrainDataTest, ModelVocabularySmallerThanTheDataIsAnError) {
  const auto result = run_anvil("train --run-dir " + (*root_ / "small_vocab").string() + " " +
                                kSmallModel + " " + data_flag() + " --model.vocab_size=256");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("uses a 300-token vocabulary but model.vocab_size is 256"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("--model.vocab_size=300"), std::string::npos);
}

TEST(TrainErrorsTest, UnknownKeyNamesTheNearestValidKey) {
  // Each error test names its own run directory: two default names made in the same second
  // by tests running at once would share a lock.
  const auto root = scratch_dir("unknown-key");
  const auto result = run_anvil("train --run-dir " + (root / "run").string() +
                                " --training.lr=0.1");
  std::filesystem::remove_all(root);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("unknown key 'training.lr' (did you mean 'optimizer.lr'?)"),
            std::string::npos)
      << result.output;
}

TEST(TrainErrorsTest, MissingDataFolderPrintsThePrepareCommand) {
  const auto root = scratch_dir("missing");
  const auto result = run_anvil("train --run-dir " + (root / "run").string() +
                                " --data.path=" + (root / "nowhere").string());
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("anvil prepare --input"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--out " + (root / "nowhere").string()), std::string::npos);
  std::filesystem::remove_all(root);
}

TEST(TrainErrorsTest, SeqLenBeyondContextIsAnError) {
  const auto root = scratch_dir("seq-len");
  const auto result = run_anvil("train --run-dir " + (root / "run").string() + " " +
                                tiny_synthetic_args() + " --training.seq_len=64");
  std::filesystem::remove_all(root);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("training.seq_len (64) exceeds model.max_seq_len (32)"),
            std::string::npos)
      << result.output;
}

TEST(TrainErrorsTest, WrongValueTypeIsAnError) {
  const auto root = scratch_dir("value-type");
  const auto result = run_anvil("train --run-dir " + (root / "run").string() +
                                " --training.steps=many");
  std::filesystem::remove_all(root);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("--training.steps must be an integer, got 'many'"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace anvil
