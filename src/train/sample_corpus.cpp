// Sample corpus preparation for the no-argument demo (see sample_corpus.h).
#include "train/sample_corpus.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "io/file_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace anvil {

std::string sample_corpus_tokenizer_path(const std::string& data_path) {
  std::string trimmed = data_path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return trimmed + "-tokenizer.json";
}

bool sample_corpus_needs_preparing(const std::string& data_path) {
  const std::filesystem::path normal = std::filesystem::path(data_path).lexically_normal();
  const std::filesystem::path sample = std::filesystem::path(kSampleCorpusDataPath);
  const bool is_sample = normal == sample || normal == sample / "";
  return is_sample && !std::filesystem::exists(normal / "meta.json");
}

void prepare_sample_corpus(const std::string& data_path, int vocab_size) {
  ANVIL_CHECK(std::filesystem::is_directory(kFortunesSourceDir),
              "[train] the demo corpus needs the Debian fortunes in {} (apt-get install "
              "fortunes); or train on your own data with --data.path=DIR, or on random tokens "
              "with --data.synthetic=true",
              kFortunesSourceDir);
  const auto start = std::chrono::steady_clock::now();
  const ResolvedInputs inputs = resolve_inputs({kFortunesSourceDir});
  const std::string tokenizer_path = sample_corpus_tokenizer_path(data_path);
  if (!std::filesystem::exists(tokenizer_path)) {
    log_info("demo: training a {}-token BPE tokenizer on {} ({} files)", vocab_size,
             kFortunesSourceDir, inputs.files.size());
    std::vector<std::string> contents;
    for (const std::string& file : inputs.files) contents.push_back(read_file(file));
    const std::vector<std::string_view> texts(contents.begin(), contents.end());
    BpeTrainOptions options;
    options.vocab_size = vocab_size;
    const std::filesystem::path parent = std::filesystem::path(tokenizer_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    write_file_atomic(tokenizer_path, train_bpe_tokenizer(texts, options));
  }
  log_info(
      "demo: tokenizing {} into {} (anvil prepare --input {} --tokenizer {} --out {} "
      "--doc-separator %)",
      kFortunesSourceDir, data_path, kFortunesSourceDir, tokenizer_path, data_path);
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  PrepareOptions options;
  options.inputs = {kFortunesSourceDir};
  options.out_dir = data_path;
  options.doc_separator = "%";
  options.show_progress = false;
  const PrepareSummary summary = prepare_dataset(options, *tokenizer);
  log_info("demo: prepared {} documents, {} tokens (train {}, val {}) in {:.1f} s",
           summary.documents, summary.tokens, summary.splits[0].tokens, summary.splits[1].tokens,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace anvil
