// `anvil tokenizer train`: trains a byte-level BPE tokenizer (GPT-4 / Llama 3 split pattern)
// on text files and writes a Hugging Face tokenizer.json, atomically.
#include <chrono>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "io/file_util.h"
#include "tokenizer/bpe_trainer.h"

namespace anvil::cli {
namespace {

int run_tokenizer_train(const std::vector<std::string>& args) {
  CLI::App app(
      "Train a byte-level BPE tokenizer on text files and write a Hugging Face tokenizer.json "
      "(GPT-4 / Llama 3 split pattern, ByteLevel decoder). Special tokens get the last ids; "
      "<|endoftext|> is the EOS by name. The output depends only on the inputs and options, "
      "not on --threads.",
      "anvil tokenizer train");
  std::vector<std::string> inputs;
  std::string out_path;
  BpeTrainOptions options;
  std::vector<std::string> specials = options.special_tokens;
  ThreadOption threads;
  app.add_option("--input", inputs, "text files to train on (UTF-8; any bytes are accepted)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--vocab-size", options.vocab_size,
                 "ids in the result: 256 byte tokens + merges + special tokens")
      ->required();
  app.add_option("--out", out_path, "path of the tokenizer.json to write")->required();
  app.add_option("--special-tokens", specials,
                 "comma-separated special tokens, matched in text and given the last ids "
                 "(default <|endoftext|>; pass \"\" for none)")
      ->delimiter(',');
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();

  options.special_tokens.clear();
  for (const std::string& token : specials)
    if (!token.empty()) options.special_tokens.push_back(token);
  options.progress = [](const std::string& line) { log_info("[tokenizer train] {}", line); };

  std::vector<std::string> contents;
  for (const std::string& path : inputs) contents.push_back(read_file(path));
  std::vector<std::string_view> texts(contents.begin(), contents.end());

  const auto start = std::chrono::steady_clock::now();
  BpeTrainStats stats;
  const std::string json = train_bpe_tokenizer(texts, options, &stats);
  write_file_atomic(out_path, json);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info("[tokenizer train] wrote {}: vocab {} ({} merges) from {:.1f} MB, {} words ({} "
           "distinct) in {:.1f} s",
           out_path, stats.vocab_size, stats.merges, stats.bytes / 1e6, stats.words,
           stats.unique_words, seconds);
  if (stats.vocab_size < options.vocab_size)
    log_warn("the text ran out of pairs: vocab is {} instead of {}", stats.vocab_size,
             options.vocab_size);
  return 0;
}

}  // namespace

ANVIL_COMMAND("tokenizer train", "train a byte-level BPE tokenizer (tokenizer.json)", 61,
              run_tokenizer_train);

}  // namespace anvil::cli
