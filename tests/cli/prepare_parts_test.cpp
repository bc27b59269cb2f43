// `anvil prepare --part i/N` end to end: two processes write the two parts of a corpus into one
// --out, and `anvil train` on it logs the same losses, bit for bit, as on the one-process
// output; a folder with a part missing is refused by `anvil train`, naming the part.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "easy_corpus.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::count_containing;
using testing_support::deterministic_metrics;
using testing_support::run_anvil;

class PrepareParts : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing_support::scratch_dir("prepare_parts");
    testing_support::write_easy_corpus(root_);  // for its tokenizer
    // The easy corpus again, as six files, so each of two parts gets some of them.
    fs::create_directories(root_ / "corpus");
    const char* animals[] = {"cat", "dog", "owl", "fox", "yak"};
    const char* places[] = {"mat", "log", "hill", "barn", "boat"};
    for (int f = 0; f < 6; ++f) {
      std::string text;
      for (int i = f * 50; i < f * 50 + 50; ++i)
        text += fmt::format("the {} number {} sat on the {}.\n%\n", animals[i % 5], i,
                            places[(i / 5) % 5]);
      write_file_atomic(root_ / "corpus" / fmt::format("{}.txt", f), text);
    }
  }
  void TearDown() override { fs::remove_all(root_); }

  testing_support::CommandResult prepare(const fs::path& out, const std::string& extra = "") {
    return run_anvil("prepare --input " + (root_ / "corpus").string() + " --tokenizer " +
                     (root_ / "tokenizer.json").string() + " --doc-separator % --out " +
                     out.string() + " " + extra);
  }

  testing_support::CommandResult train(const fs::path& data, const fs::path& run) {
    return run_anvil("train --run-dir " + run.string() + " " +
                     testing_support::kEasyCorpusModel + " --data.path=" + data.string() +
                     " --model.vocab_size=300 --training.steps=12 --training.eval_every=6 "
                     "--optimizer.lr=1e-2 --logging.json=true");
  }

  fs::path root_;
};

TEST_F(PrepareParts, TwoPartsTrainToTheOneProcessLossesBitForBit) {
  ASSERT_EQ(prepare(root_ / "one").exit_code, 0);
  for (const char* part : {"1/2", "0/2"}) {
    const auto run = prepare(root_ / "two", std::string("--part ") + part);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("part-0000" + std::string(1, part[0]) + "-of-00002"),
              std::string::npos)
        << run.output;
  }
  ASSERT_TRUE(fs::exists(root_ / "two/part-00000-of-00002/train-00000.tok"));
  ASSERT_TRUE(fs::exists(root_ / "two/part-00001-of-00002/train-00000.tok"));
  const auto one = train(root_ / "one", root_ / "run-one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = train(root_ / "two", root_ / "run-two");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto metrics_one = deterministic_metrics(root_ / "run-one");
  EXPECT_EQ(count_containing(metrics_one, "\"type\":\"train\""), 12);
  EXPECT_EQ(count_containing(metrics_one, "\"type\":\"eval\""), 2);
  EXPECT_EQ(deterministic_metrics(root_ / "run-two"), metrics_one);
}

TEST_F(PrepareParts, TrainRefusesAFolderWithAPartMissing) {
  ASSERT_EQ(prepare(root_ / "two", "--part 0/2").exit_code, 0);
  const auto run = train(root_ / "two", root_ / "run");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("1 of its 2 parts are missing: part-00001-of-00002"),
            std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace anvil
