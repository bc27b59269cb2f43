// `anvil train` on a weighted mixture of two prepared datasets (data.sources): the token shares
// follow the weights, metrics carry source_tokens and source_val_loss, a resumed run repeats
// the uninterrupted one byte for byte (also from 2 ranks to 1), and a changed mixture, a
// missing source or sources with different tokenizers are refused with one clear line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "easy_corpus.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::scratch_dir;

// 8 sequences of 16 tokens per step, two validation batches per source; a constant learning
// rate, so a run stopped early (a smaller training.steps) follows the same schedule.
const std::string kModel = std::string(testing_support::kEasyCorpusModel) +
                           " --model.vocab_size=300 --training.batch_size=4 "
                           "--training.grad_accum=2 --optimizer.lr=1e-2 "
                           "--optimizer.schedule=constant --optimizer.warmup_steps=0";

class TrainMixTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(scratch_dir("mix"));
    fs::create_directories(*root_ / "web");
    testing_support::write_easy_corpus(*root_ / "web");
    // A second, smaller corpus prepared with the first one's tokenizer: it runs out first.
    std::string code;
    for (int i = 0; i < 40; ++i) code += fmt::format("the owl {} sat on the boat.\n%\n", i * 7);
    write_file_atomic(*root_ / "code.txt", code);
    const auto tokenizer = Tokenizer::load((*root_ / "web" / "tokenizer.json").string());
    PrepareOptions prepare;
    prepare.inputs = {(*root_ / "code.txt").string()};
    prepare.out_dir = (*root_ / "code").string();
    prepare.doc_separator = "%";
    prepare.show_progress = false;
    prepare_dataset(prepare, *tokenizer);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  static std::string web() { return (*root_ / "web" / "data").string(); }
  static std::string code() { return (*root_ / "code").string(); }
  // Returns the --data.sources flag for the two datasets at weights 0.8 and 0.2.
  static std::string mixture_flag(const std::string& web_weight = "0.8") {
    return fmt::format("'--data.sources=[{{ path = \"{}\", weight = {} }}, {{ path = \"{}\", "
                       "weight = 0.2 }}]'",
                       web(), web_weight, code());
  }
  static std::string train(const fs::path& run, const std::string& extra) {
    return "train --run-dir " + run.string() + " " + kModel + " " + mixture_flag() + " " + extra;
  }
  static fs::path* root_;
};

fs::path* TrainMixTest::root_ = nullptr;

std::vector<nlohmann::json> records(const fs::path& run, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : deterministic_metrics(run)) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == type) out.push_back(std::move(record));
  }
  return out;
}

TEST_F(TrainMixTest, SharesFollowTheWeightsAndMetricsNameEachSource) {
  // 25 steps x 8 windows = 200 windows: 160 from web, 40 from code.
  const fs::path run = *root_ / "shares";
  const auto result = run_anvil(
      train(run, "--training.steps=25 --training.eval_every=10 --logging.tensorboard=true"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("mixture of 2 sources"), std::string::npos) << result.output;
  // The small source repeats in a new order, and the log says so.
  EXPECT_NE(result.output.find("data source '" + code() + "' ran out"), std::string::npos)
      << result.output;
  const auto train_records = records(run, "train");
  ASSERT_EQ(train_records.size(), 25u);
  for (const nlohmann::json& record : train_records) {
    const auto windows = record["step"].get<int64_t>() * 8;
    const nlohmann::json& tokens = record["source_tokens"];
    ASSERT_EQ(tokens.size(), 2u) << record;
    const double web_windows = tokens[web()].get<double>() / 16;
    const double code_windows = tokens[code()].get<double>() / 16;
    EXPECT_EQ(web_windows + code_windows, static_cast<double>(windows)) << record;
    EXPECT_LT(std::abs(web_windows - 0.8 * static_cast<double>(windows)), 1.0) << record;
  }
  const nlohmann::json& last = train_records.back()["source_tokens"];
  const double total = last[web()].get<double>() + last[code()].get<double>();
  EXPECT_EQ(total, 200 * 16);
  EXPECT_NEAR(last[web()].get<double>() / total, 0.8, 0.01);
  EXPECT_NEAR(last[code()].get<double>() / total, 0.2, 0.01);

  const auto evals = records(run, "eval");
  ASSERT_EQ(evals.size(), 3u);
  for (const nlohmann::json& record : evals) {
    const nlohmann::json& losses = record["source_val_loss"];
    ASSERT_EQ(losses.size(), 2u) << record;
    // The overall validation loss weighs the sources' losses by the mixture weights.
    EXPECT_NEAR(record["loss"].get<double>(),
                0.8 * losses[web()].get<double>() + 0.2 * losses[code()].get<double>(), 1e-6);
  }
  // TensorBoard gets one scalar per source, and `anvil report` charts both groups.
  bool tensorboard_written = false;
  for (const auto& entry : fs::directory_iterator(run))
    tensorboard_written |= entry.path().filename().string().starts_with("events.out.tfevents");
  EXPECT_TRUE(tensorboard_written);
  const auto report = run_anvil("report " + run.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string html = read_file(run / "report.html");
  EXPECT_NE(html.find("Tokens per source"), std::string::npos);
  EXPECT_NE(html.find("Validation loss per source"), std::string::npos);
  EXPECT_NE(html.find(code()), std::string::npos);
  // `anvil generate` finds the tokenizer through the first source's meta.json.
  const auto generated = run_anvil("generate --run " + run.string() +
                                   " --prompt 'the owl' --max-new-tokens 4 --greedy --threads 1");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
}

TEST_F(TrainMixTest, ResumedRunRepeatsTheStraightOneBitForBit) {
  const fs::path straight = *root_ / "straight";
  // Every step evaluates, so a run that stops at any step writes the same records.
  ASSERT_EQ(run_anvil(train(straight, "--training.steps=9 --training.eval_every=1")).exit_code,
            0);
  // Stopped after steps 2 and 5 (checkpoints at the end of each part), resumed each time.
  const fs::path resumed = *root_ / "resumed";
  for (const char* steps : {"2", "5", "9"}) {
    const auto part = run_anvil(
        train(resumed, std::string("--training.eval_every=1 --training.steps=") + steps));
    ASSERT_EQ(part.exit_code, 0) << part.output;
  }
  EXPECT_EQ(deterministic_metrics(resumed), deterministic_metrics(straight));
}

TEST_F(TrainMixTest, TwoRanksResumedOnOneRepeatTheStraightRun) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const fs::path straight = *root_ / "straight-1";
  ASSERT_EQ(run_anvil(train(straight, "--training.steps=6 --training.eval_every=3")).exit_code,
            0);
  // Steps 1-3 on 2 ranks (4 sequences x 1 micro-step each), steps 4-6 on one process.
  const fs::path moved = *root_ / "moved";
  const auto first = run_anvil("launch --nproc 2 -- " +
                               train(moved, "--training.steps=3 --training.eval_every=3 "
                                            "--training.grad_accum=1"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second =
      run_anvil(train(moved, "--training.steps=6 --training.eval_every=3"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  EXPECT_EQ(deterministic_metrics(moved), deterministic_metrics(straight));
}

TEST_F(TrainMixTest, ResumingWithOtherWeightsIsAnError) {
  const fs::path run = *root_ / "reweighted";
  ASSERT_EQ(run_anvil(train(run, "--training.steps=2 --training.eval_steps=0")).exit_code, 0);
  const auto result = run_anvil("train --run-dir " + run.string() + " " + kModel + " " +
                                mixture_flag("0.5") +
                                " --training.steps=4 --training.eval_steps=0");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("the checkpoint was trained on the mixture " + web() + " 0.8; " +
                               code() + " 0.2 but data.sources now gives the mixture " + web() +
                               " 0.7142857"),
            std::string::npos)
      << result.output;
}

TEST_F(TrainMixTest, MissingSourcePrintsThePrepareCommand) {
  const std::string missing = (*root_ / "nowhere").string();
  const auto result = run_anvil(
      "train --run-dir " + (*root_ / "missing").string() + " " + kModel +
      fmt::format(" '--data.sources=[{{ path = \"{}\", weight = 1 }}, {{ path = \"{}\", "
                  "weight = 1 }}]'",
                  web(), missing));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("no training data in '" + missing + "'"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("anvil prepare --input"), std::string::npos);
}

TEST_F(TrainMixTest, SourcesWithDifferentTokenizersAreAnError) {
  const fs::path other = *root_ / "other";
  fs::create_directories(other);
  write_file_atomic(other / "text.txt", "a b c d e f g h i j k l m n o p q r s t u v w x y z\n");
  BpeTrainOptions options;
  options.vocab_size = 280;
  write_file_atomic(other / "tokenizer.json",
                    train_bpe_tokenizer({read_file(*root_ / "web" / "corpus.txt")}, options));
  PrepareOptions prepare;
  prepare.inputs = {(*root_ / "web" / "corpus.txt").string()};
  prepare.out_dir = (other / "data").string();
  prepare.doc_separator = "%";
  prepare.show_progress = false;
  prepare_dataset(prepare, *Tokenizer::load((other / "tokenizer.json").string()));
  const std::string other_data = (other / "data").string();
  const auto result = run_anvil(
      "train --run-dir " + (*root_ / "mismatch").string() + " " + kModel +
      fmt::format(" '--data.sources=[{{ path = \"{}\", weight = 1 }}, {{ path = \"{}\", "
                  "weight = 1 }}]'",
                  web(), other_data));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("data.sources '" + web() + "' and '" + other_data +
                               "' were prepared with different tokenizers"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace anvil
