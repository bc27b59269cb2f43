// `anvil eval --task` and `[eval] tasks` end to end: a run scores MMLU during training, and
// `anvil eval --task` on its final checkpoint, the run and its Hugging Face export gives the same
// per-question log-likelihoods and the accuracy the run logged. Bad task input fails with one
// line and leaves no --items file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../eval_test_util.h"
#include "cli_test_util.h"

namespace anvil::test {
namespace {

namespace fs = std::filesystem;

const fs::path kEvalText = fs::path(ANVIL_HF_GOLDEN_DIR) / "eval_text.txt";

// Writes the fixture's MMLU subjects (made-up questions) in the original CSV layout.
void write_mmlu(const fs::path& dir) {
  const nlohmann::json fixture =
      nlohmann::json::parse(read_file(fs::path(ANVIL_HF_GOLDEN_DIR) / "lm_eval_prompts.json"));
  for (const nlohmann::json& entry : fixture["tasks"]) {
    if (entry["task"] != "mmlu") continue;
    const std::string subject = entry["subject"];
    for (const auto& [split, docs] : {std::pair{"test", entry["docs"]}, std::pair{"dev", entry["fewshot_docs"]}}) {
      fs::create_directories(dir / split);
      std::ofstream out(dir / split / (subject + "_" + split + ".csv"));
      const auto field = [](const nlohmann::json& text) {  // quoted, quotes doubled
        std::string quoted = "\"";
        for (const char c : text.get<std::string>()) quoted += c == '"' ? "\"\"" : std::string(1, c);
        return quoted + "\"";
      };
      for (const nlohmann::json& doc : docs) {
        out << field(doc["question"]);
        for (const nlohmann::json& choice : doc["choices"]) out << "," << field(choice);
        out << "," << static_cast<char>('A' + doc["answer"].get<int>()) << "\n";
      }
    }
  }
}

std::vector<nlohmann::json> json_lines_of(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_file(file));
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TaskEvalCli, TrainingScoresEqualEvalOnEveryModelSource) {
  TempDir tmp;
  write_mmlu(tmp / "mmlu");
  run_ok("tokenizer train --input " + quoted(kEvalText) + " --vocab-size 300 --out " +
         quoted(tmp / "tok.json"));
  run_ok("prepare --threads 1 --input " + quoted(kEvalText) + " --tokenizer " +
         quoted(tmp / "tok.json") + " --out " + quoted(tmp / "data") + " --split 1,0,0");
  // A 96-token context cuts the longer 1-shot prompts from the left, as the harness does.
  run_ok("train --threads 1 --run-dir " + quoted(tmp / "run") + " --data.path=" +
         (tmp / "data").string() + " --data.tokenizer=" + (tmp / "tok.json").string() +
         " --model.dim=32 --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2 "
         "--model.ffn_dim=64 --model.vocab_size=320 --model.max_seq_len=96 "
         "--training.batch_size=2 --training.seq_len=16 --training.steps=3 "
         "--training.eval_every=0 --training.eval_steps=0 --optimizer.warmup_steps=1 "
         "'--eval.tasks=[\"mmlu\"]' '--eval.task_data=[\"" + (tmp / "mmlu").string() +
         "\"]' --eval.task_shots=1");
  const std::vector<nlohmann::json> metrics = json_lines_of(tmp / "run" / "metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  const nlohmann::json& logged = metrics.back();
  ASSERT_EQ(logged["type"], "eval");
  EXPECT_EQ(logged["step"], 3);
  EXPECT_FALSE(logged.contains("loss"));  // no validation split, only the benchmark
  ASSERT_TRUE(logged.contains("mmlu_acc"));

  run_ok("convert --from " + quoted(tmp / "run") + " --to " + quoted(tmp / "hf"));
  const fs::path checkpoint = tmp / "run" / "checkpoints" / "step-0000003";
  std::vector<std::vector<nlohmann::json>> items;
  for (const fs::path& source : {fs::path(tmp / "run"), checkpoint, fs::path(tmp / "hf")}) {
    const fs::path items_file = tmp / ("items-" + std::to_string(items.size()) + ".jsonl");
    const nlohmann::json summary = last_json_line(
        run_ok("eval --threads 1 --model " + quoted(source) + " --task mmlu --data " +
               quoted(tmp / "mmlu") + " --shots 1 --batch-size 3 --json --items " +
               quoted(items_file)));
    EXPECT_EQ(summary["acc"], logged["mmlu_acc"]) << source;
    EXPECT_EQ(summary["task"], "mmlu");
    EXPECT_EQ(summary["shots"], 1);
    items.push_back(json_lines_of(items_file));
    ASSERT_EQ(items.back().size(), summary["items"].get<size_t>());
  }
  for (size_t d = 0; d < items[0].size(); ++d) {
    const nlohmann::json& first = items[0][d];
    EXPECT_EQ(first["loglikelihoods"].size(), 4u);
    EXPECT_TRUE(first["task"].get<std::string>().starts_with("mmlu_"));
    for (size_t s = 1; s < items.size(); ++s) {
      EXPECT_EQ(items[s][d], first) << "source " << s << " doc " << d;
    }
  }
}

TEST(TaskEvalCli, BadInputIsOneLineAndWritesNothing) {
  TempDir tmp;
  fs::create_directories(tmp / "mmlu" / "dev");
  fs::create_directories(tmp / "mmlu" / "test");
  std::ofstream(tmp / "mmlu" / "dev" / "anatomy_dev.csv") << "q,a,b,c,d,A\n";
  std::ofstream(tmp / "mmlu" / "test" / "anatomy_test.csv") << "q,a,b,c,d,A\nq2,a,b,c,d,F\n";
  fs::create_directories(tmp / "few" / "dev");
  fs::create_directories(tmp / "few" / "test");
  std::ofstream(tmp / "few" / "dev" / "anatomy_dev.csv") << "q,a,b,c,d,A\n";
  std::ofstream(tmp / "few" / "test" / "anatomy_test.csv") << "q,a,b,c,d,A\n";
  const auto expect_error = [&](const std::string& args, const std::string& message) {
    const CommandResult result = run_anvil("eval --model " + quoted(ANVIL_HF_GOLDEN_DIR "/llama3") +
                                           " " + args + " --items " + quoted(tmp / "items.jsonl"));
    EXPECT_NE(result.exit_code, 0) << args;
    EXPECT_NE(result.output.find(message), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(tmp / "items.jsonl")) << args;
  };
  expect_error("--task mmlu --data " + quoted(tmp / "mmlu") + " --shots 1",
               "anatomy_test.csv:2: the answer column is 'F'");
  expect_error("--task mmlu --data " + quoted(tmp / "few") + " --shots 3",
               "1 dev questions, fewer than the 3 shots");
  expect_error("--task mmlu_pro --data " + quoted(tmp / "mmlu"), "unknown task 'mmlu_pro'");
  expect_error("--task piqa --data " + quoted(tmp / "none.jsonl"), "none.jsonl: no such file");
  expect_error("--task mmlu", "--task mmlu needs --data");

  const CommandResult train = run_anvil(
      "train --run-dir " + quoted(tmp / "run") + " '--eval.tasks=[\"mmlu\", \"hellaswg\"]' "
      "'--eval.task_data=[\"a\", \"b\"]'");
  EXPECT_NE(train.exit_code, 0);
  EXPECT_NE(train.output.find("unknown task 'hellaswg' (did you mean 'hellaswag'?)"),
            std::string::npos)
      << train.output;
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

}  // namespace
}  // namespace anvil::test
