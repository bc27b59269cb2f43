// `anvil finetune`, `anvil export` and `anvil generate --adapter --chat`, end to end through
// the built binary on a tiny model the test makes itself: a random-init model exported as a
// Hugging Face folder with a byte-level tokenizer, fully fine-tuned on a synthetic instruction
// task ("Next: abc" -> "bcd", each letter shifted by one in a 16-letter alphabet), then given
// LoRA adapters for a second task on top of that model ("Prev: abc" -> "pab", two exchanges
// per training conversation); prompts have six random letters. Accuracy (every letter right) is
// greedy chat generation (plain template) on 40 held-out prompts none of the training records
// contain; the thresholds are stated next to each check. Also: multi-turn chat over piped
// stdin, PEFT and merged exports, and one-line errors for bad input with no output left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "io/safetensors_collection.h"
#include "tokenizer/tokenizer.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::CommandResult;
using testing_support::run_anvil;

constexpr const char* kLetters = "abcdefghijklmnop";
constexpr int kAlphabet = 16;
constexpr int kLength = 6;  // letters per prompt
constexpr int kHeldOut = 40;
// Settings every fine-tune of this file shares: one example per 40-token window (padding, no
// packing), so document masks have nothing to separate and are left off (the faster path).
// Every command runs on one thread: CTest runs two tests at once on two cores, and a tiny
// model's short parallel regions wait whole scheduler slices for a preempted second thread.
constexpr const char* kWindowArgs =
    "--training.seq_len=40 --packing false --training.doc_mask=false "
    "--training.batch_size=16 --logging.every=1000";

struct Example {
  std::string prompt;
  std::string answer;
};

// Returns prompts of task `word` (kLength random letters) with answers shifted by `delta`:
// kHeldOut distinct held-out prompts, then `train_count` distinct training prompts that are not
// among them.
std::pair<std::vector<Example>, std::vector<Example>> make_task(const std::string& word, int delta,
                                                                int train_count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<std::string> used;
  const auto fresh_example = [&] {
    std::string in, out;
    do {
      in.clear();
      for (int i = 0; i < kLength; ++i) in += kLetters[rng() % kAlphabet];
    } while (!used.insert(in).second);
    for (const char ch : in) out += kLetters[(ch - 'a' + delta + kAlphabet) % kAlphabet];
    return Example{word + ": " + in, out};
  };
  std::vector<Example> held, train;
  for (int i = 0; i < kHeldOut; ++i) held.push_back(fresh_example());
  for (int i = 0; i < train_count; ++i) train.push_back(fresh_example());
  return {held, train};
}

void write_jsonl(const fs::path& path, const std::vector<Example>& examples) {
  std::ofstream out(path);
  for (const Example& e : examples) {
    out << R"({"messages": [{"role": "user", "content": ")" << e.prompt
        << R"("}, {"role": "assistant", "content": ")" << e.answer << "\"}]}\n";
  }
}

// Writes two-turn conversations: examples 2i and 2i + 1 are one record's two exchanges.
void write_two_turn_jsonl(const fs::path& path, const std::vector<Example>& examples) {
  std::ofstream out(path);
  for (size_t i = 0; i + 1 < examples.size(); i += 2) {
    out << R"({"messages": [)";
    for (size_t j = i; j < i + 2; ++j) {
      out << (j == i ? "" : ", ") << R"({"role": "user", "content": ")" << examples[j].prompt
          << R"("}, {"role": "assistant", "content": ")" << examples[j].answer << "\"}";
    }
    out << "]}\n";
  }
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

void expect_ok(const CommandResult& result) { ASSERT_EQ(result.exit_code, 0) << result.output; }

// Runs `anvil <args>` with stderr sent to `stderr_path`; returns the exit code and stdout.
CommandResult run_anvil_stdout(const std::string& args,
                               const std::string& stderr_path = "/dev/null") {
  return test::run_capturing_stdout(std::string(ANVIL_BINARY) + " " + args + " 2>" +
                                    stderr_path);
}

// Runs one chat session per prompt and returns how many greedy replies equal the answer.
int held_out_correct(const std::string& model_args, const std::vector<Example>& examples,
                     const fs::path& scratch) {
  int correct = 0;
  for (const Example& e : examples) {
    write_text(scratch / "prompt.txt", e.prompt + "\n");
    const CommandResult result = run_anvil_stdout("generate " + model_args +
                                                  " --chat --greedy --max-new-tokens 8 "
                                                  "--threads 1 < " +
                                                  (scratch / "prompt.txt").string());
    // The plain template's reply follows "Assistant:" and starts with its space.
    if (result.exit_code == 0 && result.output == " " + e.answer + "\n") ++correct;
  }
  return correct;
}

class FinetuneSftTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root = testing_support::scratch_dir("finetune_sft");
    // A byte-level tokenizer (no merges) with <|endoftext|> as EOS: one token per character.
    write_text(root / "corpus.txt", "User: Next: abc\nAssistant: bcd\n");
    expect_ok(run_anvil("tokenizer train --input " + (root / "corpus.txt").string() +
                        " --vocab-size 257 --out " + (root / "tokenizer.json").string()));
    // A random-init model (one step on synthetic tokens) exported as a Hugging Face folder.
    expect_ok(run_anvil("train --run-dir " + (root / "init").string() +
                        " --threads 1 --data.synthetic=true --model.dim=64 --model.n_layers=2 "
                        "--model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=128 "
                        "--model.vocab_size=257 --model.max_seq_len=128 --training.steps=1 "
                        "--training.seq_len=16 --training.batch_size=1 --training.eval_steps=0"));
    expect_ok(run_anvil("export --run " + (root / "init").string() + " --out " +
                        (root / "base").string()));
    fs::copy_file(root / "tokenizer.json", root / "base" / "tokenizer.json");
    std::tie(next_held, next_train) = make_task("Next", 1, 600, 1);
    std::tie(prev_held, prev_train) = make_task("Prev", -1, 600, 2);
    write_jsonl(root / "next.jsonl", next_train);
    write_two_turn_jsonl(root / "prev.jsonl", prev_train);
  }
  static void TearDownTestSuite() { fs::remove_all(root); }

  // Returns the fully fine-tuned "Next" model (trained on first use).
  static fs::path next_model() {
    const fs::path run = root / "next";
    if (!fs::exists(run / "hf")) {
      expect_ok(run_anvil(
          "finetune --full --model " + (root / "base").string() + " --data " +
          (root / "next.jsonl").string() + " --run-dir " + run.string() + " " + kWindowArgs +
          " --threads 1 --training.batch_size=64 --optimizer.lr=3e-3 --training.steps=" +
          std::to_string(kFullSteps)));
    }
    return run / "hf";
  }
  // Returns the LoRA run that teaches "Prev" on top of next_model() (trained on first use).
  static fs::path prev_run() {
    const fs::path run = root / "prev";
    if (!fs::exists(run / "adapter")) {
      // Two exchanges per conversation: 80-token windows hold a whole one.
      last_lora_output =
          run_anvil("finetune --model " + next_model().string() + " --data " +
                    (root / "prev.jsonl").string() + " --run-dir " + run.string() + " " +
                    kWindowArgs +
                    " --threads 1 --training.seq_len=80 --optimizer.lr=1e-2 --training.steps=200 "
                    "--lora.targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
              .output;
    }
    return run;
  }

  // Multi-turn chat over piped stdin: the history grows until it outgrows the context.
  static void check_chat_keeps_history(const fs::path& run);
  // PEFT and merged exports, and the run directory as a model source, answer alike.
  static void check_exports_answer_alike(const fs::path& run);

  // Batches of 64 learn the task by step 400-500 for every seed tried and on every kernel
  // table (the loss plateaus near 2.1 until attention finds the aligned prompt letter, then
  // falls); batches of 16 left that plateau anywhere between steps 150 and 600.
  static constexpr int kFullSteps = 600;
  static inline fs::path root;
  static inline std::vector<Example> next_held, next_train, prev_held, prev_train;
  static inline std::string last_lora_output;
};

TEST_F(FinetuneSftTest, HeldOutPromptsAreNotInTraining) {
  std::set<std::string> seen;
  for (const Example& e : next_train) seen.insert(e.prompt);
  for (const Example& e : next_held) EXPECT_EQ(seen.count(e.prompt), 0u) << e.prompt;
  EXPECT_EQ(seen.size(), next_train.size());
}

// One test trains both models and checks everything that uses them (each test of this file
// runs in a process of its own under CTest, so every extra test would train them again).
// Accuracy thresholds are 90% of the held-out prompts: a learned task clears them whatever
// the CPU's rounding, a task not learned stays near zero.
TEST_F(FinetuneSftTest, FullAndLoraFineTunesLearnTheirTasksAndTheAdapterChatsAndExports) {
  const fs::path model = next_model();
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(model / name)) << name;
  }
  const int full = held_out_correct("--model " + model.string(), next_held, root);
  std::printf("full fine-tune: %d of %d held-out prompts right\n", full, kHeldOut);
  EXPECT_GE(full, 36) << full << " of " << kHeldOut;

  const fs::path run = prev_run();
  ASSERT_TRUE(fs::exists(run / "adapter" / "adapter_model.safetensors")) << last_lora_output;
  EXPECT_NE(last_lora_output.find("memory per rank"), std::string::npos) << last_lora_output;
  EXPECT_NE(last_lora_output.find("layers.*.self_attn.q_proj.lora_A"), std::string::npos)
      << last_lora_output;
  EXPECT_TRUE(fs::exists(run / "sharding.json"));
  const std::string model_args =
      "--model " + model.string() + " --adapter " + (run / "adapter").string();
  const int lora = held_out_correct(model_args, prev_held, root);
  std::printf("LoRA: %d of %d held-out prompts right\n", lora, kHeldOut);
  EXPECT_GE(lora, 36) << lora << " of " << kHeldOut;
  // Without the adapter the model still answers the first task, never this one.
  const std::vector<Example> some(prev_held.begin(), prev_held.begin() + 10);
  const int without = held_out_correct("--model " + model.string(), some, root);
  std::printf("the base without the adapter: %d of %zu\n", without, some.size());
  EXPECT_LE(without, 1);
  check_chat_keeps_history(run);
  check_exports_answer_alike(run);
}

void FinetuneSftTest::check_chat_keeps_history(const fs::path& run) {
  SCOPED_TRACE("chat");
  constexpr int kTurns = 8;
  std::string turns;
  for (int i = 0; i < kTurns; ++i) turns += prev_held[static_cast<size_t>(i)].prompt + "\n";
  write_text(root / "turns.txt", turns);
  const fs::path errors = root / "chat_errors.txt";
  const CommandResult session = run_anvil_stdout(
      "generate --model " + next_model().string() + " --adapter " + (run / "adapter").string() +
      " --chat --greedy --max-new-tokens 8 --threads 1 < " + (root / "turns.txt").string(),
      errors.string());
  std::ifstream error_file(errors);
  const std::string error_text(std::istreambuf_iterator<char>(error_file), {});
  EXPECT_EQ(session.exit_code, 1) << error_text;

  // The printed replies, one line each, and the conversation the next turn would render.
  std::vector<ChatMessage> history;
  std::istringstream printed(session.output);
  size_t turn = 0;
  for (std::string reply; std::getline(printed, reply); ++turn) {
    ASSERT_LT(turn, static_cast<size_t>(kTurns)) << session.output;
    history.push_back({"user", prev_held[turn].prompt});
    history.push_back({"assistant", reply});
  }
  ASSERT_GE(turn, 1u) << "no reply before the context ran out: " << error_text;
  ASSERT_LT(turn, static_cast<size_t>(kTurns)) << error_text;
  history.push_back({"user", prev_held[turn].prompt});
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load((root / "tokenizer.json").string());
  const size_t tokens = render_chat(ChatTemplate::plain, *tokenizer, history, true).tokens.size();
  EXPECT_NE(error_text.find("grown to " + std::to_string(tokens) +
                            " tokens, past the 128-token context"),
            std::string::npos)
      << "expected " << tokens << " tokens after " << turn << " replies: " << error_text;
  std::printf("chat: %zu replies before the context ran out at %zu tokens\n", turn, tokens);
}

void FinetuneSftTest::check_exports_answer_alike(const fs::path& run) {
  SCOPED_TRACE("export");
  expect_ok(run_anvil("export --run " + run.string() + " --out " + (root / "peft").string()));
  EXPECT_TRUE(fs::exists(root / "peft" / "adapter_config.json"));
  expect_ok(
      run_anvil("export --run " + run.string() + " --merge --out " + (root / "merged").string()));
  EXPECT_TRUE(fs::exists(root / "merged" / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(root / "merged" / "adapter_config.json"));
  const std::vector<Example> some(prev_held.begin(), prev_held.begin() + 10);
  const int with_adapter = held_out_correct(
      "--model " + next_model().string() + " --adapter " + (root / "peft").string(), some, root);
  EXPECT_EQ(held_out_correct("--model " + (root / "merged").string(), some, root), with_adapter);
  // The run directory itself works as a model source: base plus the checkpoint's adapter.
  EXPECT_EQ(held_out_correct("--run " + run.string(), some, root), with_adapter);
}

TEST_F(FinetuneSftTest, LoraUnderAnvilLaunchTrainsWhatOneProcessTrains) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  // 2 ranks x 1 micro-batch of 4 = 1 process x 2 micro-batches of 4, adapter dropout on.
  const std::string common = "--model " + (root / "base").string() + " --data " +
                             (root / "next.jsonl").string() + " " + kWindowArgs +
                             " --threads 1 --training.steps=4 --training.batch_size=4";
  expect_ok(run_anvil("finetune " + common + " --training.grad_accum=2 --run-dir " +
                      (root / "one").string()));
  expect_ok(run_anvil("launch --nproc 2 -- finetune " + common + " --run-dir " +
                      (root / "two").string()));
  const auto one = testing_support::deterministic_metrics(root / "one");
  ASSERT_EQ(one.size(), 5u);  // 4 steps and the final evaluation
  EXPECT_EQ(testing_support::deterministic_metrics(root / "two"), one);
  const auto bytes = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(root / "two" / "adapter" / "adapter_model.safetensors"),
            bytes(root / "one" / "adapter" / "adapter_model.safetensors"));
}

// A zstd-compressed JSONL file is the same data: the run trains on the same samples, so its
// metrics (the first step's loss among them, printed in full precision) are identical.
TEST_F(FinetuneSftTest, CompressedJsonlTrainsOnTheSameSamples) {
  if (std::system("command -v zstd > /dev/null 2>&1") != 0) GTEST_SKIP() << "no zstd tool";
  const fs::path packed = root / "next.jsonl.zst";
  ASSERT_EQ(std::system(("zstd -q -c " + (root / "next.jsonl").string() + " > " +
                         packed.string())
                            .c_str()),
            0);
  const std::string common = "--model " + (root / "base").string() + " " + kWindowArgs +
                             " --threads 1 --training.steps=2 --training.batch_size=4";
  expect_ok(run_anvil("finetune " + common + " --data " + (root / "next.jsonl").string() +
                      " --run-dir " + (root / "plain_data").string()));
  expect_ok(run_anvil("finetune " + common + " --data " + packed.string() + " --run-dir " +
                      (root / "zstd_data").string()));
  const auto plain = testing_support::deterministic_metrics(root / "plain_data");
  ASSERT_GE(plain.size(), 2u);
  ASSERT_NE(plain.front().find("\"loss\""), std::string::npos) << plain.front();
  EXPECT_EQ(testing_support::deterministic_metrics(root / "zstd_data"), plain);
}

TEST_F(FinetuneSftTest, BadInputsAreOneLineErrorsWithNothingLeftBehind) {
  const auto expect_one_line_error = [](const CommandResult& result, const std::string& needle) {
    EXPECT_EQ(result.exit_code, 1) << result.output;
    const size_t line_end = result.output.find('\n');
    EXPECT_EQ(line_end + 1, result.output.size()) << result.output;
    EXPECT_EQ(result.output.rfind("anvil: error: ", 0), 0u) << result.output;
    EXPECT_NE(result.output.find(needle), std::string::npos) << result.output;
  };
  const std::string base = (root / "base").string();
  const fs::path run = root / "bad_run";
  expect_one_line_error(run_anvil("finetune --model " + (root / "missing").string() +
                                  " --data x.jsonl --run-dir " + run.string()),
                        "no such directory");
  expect_one_line_error(run_anvil("finetune --model " + base + " --full --lora.r 4 --data " +
                                  (root / "next.jsonl").string() + " --run-dir " + run.string()),
                        "--full");
  // A mixture of pretraining datasets is refused, never ignored (nor half prepared).
  expect_one_line_error(
      run_anvil("finetune --model " + base + " --data " + (root / "next.jsonl").string() +
                " '--data.sources=[{ path = \"x\", weight = 1 }]' --run-dir " + run.string()),
      "data.sources is set (1 sources), but anvil finetune trains on the one dataset --data "
      "names");
  EXPECT_FALSE(fs::exists(run));
  write_text(root / "bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  expect_one_line_error(
      run_anvil("finetune --model " + base + " --data " + (root / "bad.jsonl").string() +
                " --run-dir " + run.string() + " --threads 1"),
      "bad.jsonl:1");
  EXPECT_FALSE(fs::exists(run));
  // peft's golden adapter (for a 64-wide model) does not fit a 32-wide one.
  expect_ok(run_anvil("train --run-dir " + (root / "narrow_init").string() +
                      " --threads 1 --data.synthetic=true --model.dim=32 --model.n_layers=2 "
                      "--model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=128 "
                      "--model.vocab_size=257 --model.max_seq_len=64 --training.steps=1 "
                      "--training.seq_len=16 --training.batch_size=1 --training.eval_steps=0"));
  expect_ok(run_anvil("export --run " + (root / "narrow_init").string() + " --out " +
                      (root / "narrow").string()));
  fs::copy_file(root / "tokenizer.json", root / "narrow" / "tokenizer.json");
  write_text(root / "prompt.txt", "Prev: abc\n");
  expect_one_line_error(
      run_anvil("generate --model " + (root / "narrow").string() + " --adapter " +
                std::string(ANVIL_TEST_DATA) + "/model/golden/peft_llama/adapter --chat < " +
                (root / "prompt.txt").string()),
      "adapter_model.safetensors");
  const fs::path short_run = root / "short_lora";
  expect_ok(run_anvil("finetune --model " + base + " --data " + (root / "next.jsonl").string() +
                      " --run-dir " + short_run.string() + " " + kWindowArgs +
                      " --threads 1 --training.steps=1"));
  expect_one_line_error(run_anvil("export --run " + short_run.string() + " --out " +
                                  (root / "bf16_adapter").string() + " --dtype bf16"),
                        "--merge");
  EXPECT_FALSE(fs::exists(root / "bf16_adapter"));
}

// `--adapter` continues a PEFT adapter: with a learning rate of 1e-30 one step changes no value
// by more than ~1e-30, so the adapter handed back equals the one the run started from, while a
// freshly initialised adapter (B = 0) could not: the first run's B matrices are far from zero.
TEST_F(FinetuneSftTest, ContinuesAPeftAdapter) {
  const std::string base = (root / "base").string();
  const std::string data = " --data " + (root / "next.jsonl").string() + " " + kWindowArgs;
  const fs::path first = root / "first_adapter", second = root / "second_adapter";
  expect_ok(run_anvil("finetune --model " + base + data + " --run-dir " + first.string() +
                      " --threads 1 --training.steps=3 --optimizer.lr=1e-2 --lora.r=4 "
                      "--lora.alpha=8 --lora.targets=q_proj,v_proj"));
  const CommandResult continued =
      run_anvil("finetune --model " + base + data + " --run-dir " + second.string() +
                " --adapter " + (first / "adapter").string() +
                " --threads 1 --training.steps=1 --optimizer.lr=1e-30");
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_NE(continued.output.find("continued from"), std::string::npos) << continued.output;

  const SafetensorsCollection before =
      SafetensorsCollection::open(first / "adapter" / "adapter_model.safetensors");
  const SafetensorsCollection after =
      SafetensorsCollection::open(second / "adapter" / "adapter_model.safetensors");
  ASSERT_EQ(before.names(), after.names());
  ASSERT_EQ(before.size(), 8u);  // 2 layers x (q_proj, v_proj) x (A, B)
  double largest_b = 0.0;
  for (const std::string& name : before.names()) {
    std::vector<float> a(static_cast<size_t>(before.at(name).numel()));
    std::vector<float> b(static_cast<size_t>(after.at(name).numel()));
    ASSERT_EQ(a.size(), b.size()) << name;
    before.at(name).read_f32(a);
    after.at(name).read_f32(b);
    double diff = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      if (name.find("lora_B") != std::string::npos)
        largest_b = std::max(largest_b, static_cast<double>(std::abs(a[i])));
    }
    EXPECT_LE(diff, 1e-12) << name;
  }
  EXPECT_GT(largest_b, 1e-3);
  const CommandResult full = run_anvil("finetune --full --model " + base + data + " --adapter " +
                                       (first / "adapter").string() + " --run-dir " +
                                       (root / "full_adapter").string());
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("--adapter"), std::string::npos) << full.output;
}

}  // namespace
}  // namespace anvil
