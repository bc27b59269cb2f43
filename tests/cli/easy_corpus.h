// A small, easily learnt corpus prepared into token shards for `anvil train` tests on real
// data: 300 short sentences over five animals and five places, a 300-token BPE tokenizer.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "data/prepare.h"
#include "io/file_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace anvil::testing_support {

// Model and batch flags for runs on the easy corpus (add --model.vocab_size=300).
inline constexpr const char* kEasyCorpusModel =
    "--threads 1 --model.dim=32 --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2 "
    "--model.ffn_dim=64 --model.max_seq_len=32 --training.batch_size=2 --training.seq_len=16 "
    "--training.eval_steps=2 --optimizer.warmup_steps=2 --logging.every=1000";

// Writes corpus.txt and tokenizer.json into `root` and the prepared shards into root/data;
// returns the shard folder.
inline std::filesystem::path write_easy_corpus(const std::filesystem::path& root) {
  std::string corpus;
  const char* animals[] = {"cat", "dog", "owl", "fox", "yak"};
  const char* places[] = {"mat", "log", "hill", "barn", "boat"};
  for (int i = 0; i < 300; ++i) {
    corpus += fmt::format("the {} number {} sat on the {}.\n%\n", animals[i % 5], i,
                          places[(i / 5) % 5]);
  }
  write_file_atomic(root / "corpus.txt", corpus);
  BpeTrainOptions options;
  options.vocab_size = 300;
  write_file_atomic(root / "tokenizer.json",
                    train_bpe_tokenizer({std::string_view(corpus)}, options));
  const auto tokenizer = Tokenizer::load((root / "tokenizer.json").string());
  PrepareOptions prepare;
  prepare.inputs = {(root / "corpus.txt").string()};
  prepare.out_dir = (root / "data").string();
  prepare.doc_separator = "%";
  prepare.show_progress = false;
  prepare_dataset(prepare, *tokenizer);
  return root / "data";
}

}  // namespace anvil::testing_support
