// `anvil prepare` pipeline: read documents in order, tokenize chunks in parallel, append each
// document to its split's current part, write meta.json, then publish the folder atomically.
#include "data/prepare.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "data/corpus.h"
#include "data/dataset_meta.h"
#include "data/random.h"
#include "data/shard_writer.h"
#include "data/split_parts.h"
#include "data/staging_folder.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace fs = std::filesystem;
namespace {

// A chunk is tokenized in parallel before being written; bounded so memory stays small.
constexpr size_t kChunkDocuments = 4096;
constexpr size_t kChunkBytes = size_t{8} << 20;

// Progress on stdout: redrawn in place on a terminal, one line every 10 s otherwise.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), terminal_(stdout_is_terminal()) {}

  void update(uint64_t documents, uint64_t tokens, uint64_t bytes) {
    if (!enabled_) return;
    const double now = elapsed();
    if (now - last_print_ < (terminal_ ? 0.25 : 10.0)) return;
    last_print_ = now;
    print(documents, tokens, bytes, now);
  }

  void done(uint64_t documents, uint64_t tokens, uint64_t bytes) {
    if (!enabled_) return;
    print(documents, tokens, bytes, elapsed());
    if (terminal_) fmt::print("\n");
    std::fflush(stdout);
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  void print(uint64_t documents, uint64_t tokens, uint64_t bytes, double seconds) const {
    const double rate = seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0;
    const std::string line =
        fmt::format("prepare: {} documents, {} tokens, {:.1f} MB/s", documents, tokens, rate);
    if (terminal_) {
      fmt::print("\r{}", line);
    } else {
      fmt::print("{}\n", line);
    }
    std::fflush(stdout);
  }

  bool enabled_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_print_ = 0;
};

// Returns the document's tokens: the tokenizer's encoding with its post-processor (BOS where
// it adds one), then EOS unless the post-processor's suffix already ends with it.
std::vector<int32_t> encode_document(const Tokenizer& tokenizer, const std::string& text,
                                     int32_t eos_id, bool suffix_ends_with_eos) {
  std::vector<int32_t> ids = tokenizer.encode(text, /*add_special=*/true);
  if (!suffix_ends_with_eos) ids.push_back(eos_id);
  return ids;
}

void write_meta(const fs::path& dir, const PrepareOptions& options, const Tokenizer& tokenizer,
                bool adds_bos, const PrepareSummary& summary, const CorpusReader& reader,
                const ResolvedInputs& inputs) {
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  nlohmann::ordered_json ratios = nlohmann::ordered_json::object();
  for (size_t s = 0; s < kSplitNames.size(); ++s) {
    splits[kSplitNames[s]] = {{"documents", summary.splits[s].documents},
                              {"tokens", summary.splits[s].tokens},
                              {"files", summary.splits[s].files}};
    ratios[kSplitNames[s]] = options.split_ratios[s];
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (size_t f = 0; f < reader.files().size(); ++f)
    sources.push_back({{"path", reader.files()[f]}, {"documents", reader.documents_per_file()[f]}});
  const nlohmann::ordered_json meta = {
      {"format", "anvil-token-shards"},
      {"format_version", kShardVersion},
      {"tokenizer", tokenizer_meta_json(tokenizer, adds_bos)},
      {"token_bytes", summary.token_bytes},
      {"seed", options.seed},
      {"split_ratios", ratios},
      {"text_field", options.text_field},
      {"doc_separator", options.doc_separator ? nlohmann::ordered_json(*options.doc_separator)
                                              : nlohmann::ordered_json(nullptr)},
      {"part_tokens", options.part_tokens},
      {"documents", summary.documents},
      {"tokens", summary.tokens},
      {"input_bytes", summary.input_bytes},
      {"blank_documents_dropped", summary.blank_documents},
      {"bad_records_skipped", summary.skipped_records},
      {"splits", splits},
      {"sources", sources},
      {"skipped_inputs",
       {{"binary", inputs.skipped_binary}, {"duplicates", inputs.skipped_duplicates}}}};
  const fs::path path = dir / "meta.json";
  std::ofstream out(path, std::ios::trunc);
  out << meta.dump(2) << "\n";
  out.close();
  ANVIL_CHECK(out.good(), "[prepare] cannot write {}", path.string());
}

}  // namespace

std::array<double, 3> parse_split_ratios(const std::string& text) {
  std::array<double, 3> ratios{};
  size_t count = 0;
  bool valid = true;
  size_t begin = 0;
  while (valid) {
    const size_t comma = text.find(',', begin);
    const std::string item = text.substr(begin, comma == std::string::npos ? comma : comma - begin);
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    valid = !item.empty() && end == item.c_str() + item.size() && std::isfinite(value) &&
            value >= 0 && value <= 1 && count < ratios.size();
    if (valid) ratios[count++] = value;
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  const double sum = ratios[0] + ratios[1] + ratios[2];
  ANVIL_CHECK(valid && count == 3 && std::fabs(sum - 1.0) <= 1e-6,
              "[prepare] --split must be three numbers train,val,test in [0, 1] that sum to 1 "
              "(got '{}')",
              text);
  return ratios;
}

int split_of_document(uint64_t index, uint64_t seed, const std::array<double, 3>& ratios) {
  const double u = data::unit_interval(data::hash_pair(seed, index));
  if (u < ratios[0] || (ratios[1] == 0 && ratios[2] == 0)) return 0;
  if (u < ratios[0] + ratios[1] || ratios[2] == 0) return 1;
  return 2;
}

PrepareSummary prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer) {
  const double ratio_sum =
      options.split_ratios[0] + options.split_ratios[1] + options.split_ratios[2];
  ANVIL_CHECK(std::fabs(ratio_sum - 1.0) <= 1e-6, "[prepare] split ratios sum to {}, not 1",
              ratio_sum);
  ANVIL_CHECK(options.part_tokens > 0, "[prepare] part size must be at least one token");
  const std::optional<int32_t> eos = tokenizer.eos_id();
  ANVIL_CHECK(eos.has_value(),
              "[prepare] tokenizer {} defines no EOS token; prepare needs one to separate "
              "documents",
              tokenizer.source_path());
  const int32_t vocab_size = tokenizer.vocab_size();
  ANVIL_CHECK(vocab_size > 0, "[prepare] tokenizer {} reports an empty vocabulary",
              tokenizer.source_path());
  const std::optional<int32_t> bos = tokenizer.bos_id();
  const std::vector<int32_t> prefix = tokenizer.special_prefix();
  const std::vector<int32_t> suffix = tokenizer.special_suffix();
  const bool adds_bos = bos.has_value() && !prefix.empty() && prefix.front() == *bos;
  const bool suffix_ends_with_eos = !suffix.empty() && suffix.back() == *eos;

  const ResolvedInputs inputs = resolve_inputs(options.inputs);
  ANVIL_CHECK(!inputs.files.empty(),
              "[prepare] no readable text inputs ({} binary and {} duplicate files skipped)",
              inputs.skipped_binary.size(), inputs.skipped_duplicates.size());
  if (!inputs.skipped_binary.empty())
    log_warn("[prepare] skipped {} binary files in input folders (first: {})",
             inputs.skipped_binary.size(), inputs.skipped_binary.front());

  StagingFolder staging(options.out_dir, options.replace_existing);
  ShardWriterOptions shard_options;
  shard_options.vocab_size = static_cast<uint32_t>(vocab_size);
  shard_options.bos_id = bos.value_or(-1);
  shard_options.eos_id = *eos;
  shard_options.tokenizer_fingerprint = tokenizer.fingerprint();
  std::vector<SplitParts> outputs;
  for (const char* split : kSplitNames)
    outputs.emplace_back(staging.path(), split, shard_options, options.part_tokens);

  CorpusReader reader(inputs.files, CorpusOptions{options.text_field, options.doc_separator,
                                                  options.skip_bad_records});
  PrepareSummary summary;
  Progress progress(options.show_progress);
  std::vector<Document> chunk;
  std::vector<std::vector<int32_t>> encoded;
  std::vector<std::exception_ptr> errors;
  while (true) {
    chunk.clear();
    size_t chunk_bytes = 0;
    Document doc;
    while (chunk.size() < kChunkDocuments && chunk_bytes < kChunkBytes && reader.next(doc)) {
      chunk_bytes += doc.text.size();
      chunk.push_back(std::move(doc));
    }
    if (chunk.empty()) break;
    encoded.assign(chunk.size(), {});
    errors.assign(chunk.size(), nullptr);
    const auto count = static_cast<int64_t>(chunk.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i) {
      try {
        encoded[i] = encode_document(tokenizer, chunk[i].text, *eos, suffix_ends_with_eos);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (errors[i]) {
        try {
          std::rethrow_exception(errors[i]);
        } catch (const std::exception& e) {
          ANVIL_FAIL("[prepare] {}:{}: cannot tokenize document: {}", reader.files()[chunk[i].file],
                     chunk[i].line, e.what());
        }
      }
      const int split = split_of_document(summary.documents, options.seed, options.split_ratios);
      outputs[split].add(encoded[i]);
      summary.documents += 1;
      summary.tokens += encoded[i].size();
    }
    progress.update(summary.documents, summary.tokens, reader.bytes_read());
  }
  progress.done(summary.documents, summary.tokens, reader.bytes_read());

  summary.input_bytes = reader.bytes_read();
  summary.skipped_records = reader.skipped_records();
  summary.blank_documents = reader.blank_documents();
  ANVIL_CHECK(summary.documents > 0,
              "[prepare] empty corpus: no documents in {} input file(s) ({} blank documents, {} "
              "bad records skipped)",
              inputs.files.size(), summary.blank_documents, summary.skipped_records);
  for (size_t s = 0; s < outputs.size(); ++s) {
    summary.splits[s] = outputs[s].finish();
    if (summary.splits[s].documents == 0 && options.split_ratios[s] > 0)
      log_warn("[prepare] split '{}' received no documents (corpus of {} documents)",
               kSplitNames[s], summary.documents);
  }
  summary.token_bytes = token_bytes_for_vocab(static_cast<uint64_t>(vocab_size));
  write_meta(staging.path(), options, tokenizer, adds_bos, summary, reader, inputs);
  staging.commit();
  summary.seconds = progress.elapsed();
  return summary;
}

}  // namespace anvil
