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

#include <unistd.h>

#include <fmt/format.h>
#include <xxhash.h>
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

// Progress on stderr: input bytes read of the total, MB/s and the time left; redrawn in place
// on a terminal, one line every 10 s otherwise.
class Progress {
 public:
  Progress(bool enabled, uint64_t total_bytes)
      : enabled_(enabled), terminal_(isatty(fileno(stderr)) == 1), total_(total_bytes) {}

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
    if (terminal_) fmt::print(stderr, "\n");
    std::fflush(stderr);
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  void print(uint64_t documents, uint64_t tokens, uint64_t bytes, double seconds) const {
    const double rate = seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0;
    const double percent = total_ > 0 ? 100.0 * static_cast<double>(bytes) / total_ : 100.0;
    const std::string eta =
        rate > 0 && bytes < total_
            ? fmt::format("{:.0f} s", static_cast<double>(total_ - bytes) / 1e6 / rate)
            : std::string("0 s");
    const std::string line = fmt::format(
        "prepare: {:.1f}/{:.1f} MB ({:.1f}%), {} documents, {} tokens, {:.1f} MB/s, ETA {}",
        bytes / 1e6, total_ / 1e6, percent, documents, tokens, rate, eta);
    if (terminal_) {
      fmt::print(stderr, "\r{}", line);
    } else {
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  }

  bool enabled_;
  bool terminal_;
  uint64_t total_;
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

// The settings every part of a dataset shares: the top of meta.json, and all of the top-level
// meta.json of a dataset written in parts (so all N processes write the same bytes).
nlohmann::ordered_json shared_meta(const PrepareOptions& options, const Tokenizer& tokenizer,
                                   bool adds_bos, const ResolvedInputs& inputs) {
  nlohmann::ordered_json ratios = nlohmann::ordered_json::object();
  for (size_t s = 0; s < kSplitNames.size(); ++s) ratios[kSplitNames[s]] = options.split_ratios[s];
  return {{"format", "anvil-token-shards"},
          {"format_version", kShardVersion},
          {"tokenizer", tokenizer_meta_json(tokenizer, adds_bos)},
          {"token_bytes", token_bytes_for_vocab(static_cast<uint64_t>(tokenizer.vocab_size()))},
          {"seed", options.seed},
          {"split_ratios", ratios},
          {"text_field", options.text_field},
          {"doc_separator", options.doc_separator ? nlohmann::ordered_json(*options.doc_separator)
                                                  : nlohmann::ordered_json(nullptr)},
          {"part_tokens", options.part_tokens},
          {"inputs", inputs.files}};
}

// Returns the top-level meta.json of a dataset written in `count` parts.
nlohmann::ordered_json parts_meta(nlohmann::ordered_json shared, uint32_t count) {
  nlohmann::ordered_json folders = nlohmann::ordered_json::array();
  for (uint32_t i = 0; i < count; ++i) folders.push_back(PartSpec{i, count}.folder_name());
  shared["parts"] = count;
  shared["part_folders"] = folders;
  return shared;
}

void write_json(const fs::path& path, const nlohmann::ordered_json& json) {
  std::ofstream out(path, std::ios::trunc);
  out << json.dump(2) << "\n";
  out.close();
  ANVIL_CHECK(out.good(), "[prepare] cannot write {}", path.string());
}

// Checks that --out holds nothing but parts of this same dataset (an identical top-level
// meta.json, if any), so parts of different runs never mix.
void check_parts_folder(const fs::path& out, const nlohmann::ordered_json& meta) {
  const fs::path path = out / "meta.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::ifstream in(path);
  std::string existing((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ANVIL_CHECK(existing == meta.dump(2) + "\n",
              "[prepare] {} describes a dataset prepared with other inputs, settings or --part "
              "count; write this part to another --out",
              path.string());
}

// Writes the top-level meta.json of a parted dataset atomically (temp file, then rename), so
// parts finishing at the same time never leave a torn file.
void publish_parts_meta(const fs::path& out, const nlohmann::ordered_json& meta) {
  const fs::path temp = out / fmt::format(".meta.json.tmp-{}", getpid());
  write_json(temp, meta);
  std::error_code ec;
  fs::rename(temp, out / "meta.json", ec);
  if (ec) fs::remove(temp);
  ANVIL_CHECK(!ec, "[prepare] cannot write {}: {}", (out / "meta.json").string(), ec.message());
}

void write_meta(const fs::path& dir, nlohmann::ordered_json meta, const PrepareOptions& options,
                const PrepareSummary& summary, const CorpusReader& reader,
                const ResolvedInputs& inputs) {
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  for (size_t s = 0; s < kSplitNames.size(); ++s) {
    splits[kSplitNames[s]] = {{"documents", summary.splits[s].documents},
                              {"tokens", summary.splits[s].tokens},
                              {"files", summary.splits[s].files}};
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (size_t f = 0; f < reader.files().size(); ++f)
    sources.push_back({{"path", reader.files()[f]}, {"documents", reader.documents_per_file()[f]}});
  meta.erase("inputs");
  if (options.part) meta["part"] = {{"index", options.part->index}, {"count", options.part->count}};
  meta["documents"] = summary.documents;
  meta["tokens"] = summary.tokens;
  meta["input_bytes"] = summary.input_bytes;
  meta["blank_documents_dropped"] = summary.blank_documents;
  meta["bad_records_skipped"] = summary.skipped_records;
  meta["splits"] = splits;
  meta["sources"] = sources;
  meta["skipped_inputs"] = {{"binary", inputs.skipped_binary},
                            {"duplicates", inputs.skipped_duplicates}};
  write_json(dir / "meta.json", meta);
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

namespace {

int split_of_hash(uint64_t hash, const std::array<double, 3>& ratios) {
  const double u = data::unit_interval(hash);
  if (u < ratios[0] || (ratios[1] == 0 && ratios[2] == 0)) return 0;
  if (u < ratios[0] + ratios[1] || ratios[2] == 0) return 1;
  return 2;
}

}  // namespace

int split_of_document(uint64_t index, uint64_t seed, const std::array<double, 3>& ratios) {
  return split_of_hash(data::hash_pair(seed, index), ratios);
}

int split_of_text(std::string_view text, uint64_t seed, const std::array<double, 3>& ratios) {
  return split_of_hash(XXH3_64bits_withSeed(text.data(), text.size(), seed), ratios);
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
  std::vector<InputPiece> pieces =
      plan_pieces(inputs.files, options.text_field, options.piece_bytes,
                  options.doc_separator.has_value());
  const nlohmann::ordered_json shared = shared_meta(options, tokenizer, adds_bos, inputs);
  fs::path out_dir = options.out_dir;
  if (options.part) {
    pieces = pieces_of_part(pieces, *options.part);
    check_parts_folder(out_dir, parts_meta(shared, options.part->count));
    out_dir /= options.part->folder_name();
  }
  uint64_t total_bytes = 0;
  for (const InputPiece& piece : pieces) total_bytes += piece.bytes;

  StagingFolder staging(out_dir.string(), options.replace_existing);
  ShardWriterOptions shard_options;
  shard_options.vocab_size = static_cast<uint32_t>(vocab_size);
  shard_options.bos_id = bos.value_or(-1);
  shard_options.eos_id = *eos;
  shard_options.tokenizer_fingerprint = tokenizer.fingerprint();
  std::vector<SplitParts> outputs;
  for (const char* split : kSplitNames)
    outputs.emplace_back(staging.path(), split, shard_options, options.part_tokens);

  CorpusReader reader(inputs.files, pieces,
                      CorpusOptions{options.text_field, options.doc_separator,
                                    options.skip_bad_records, options.max_record_bytes});
  PrepareSummary summary;
  Progress progress(options.show_progress, total_bytes);
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
          ANVIL_FAIL("[prepare] {}: cannot tokenize document: {}", reader.location(chunk[i]),
                     e.what());
        }
      }
      const int split = split_of_text(chunk[i].text, options.seed, options.split_ratios);
      outputs[split].add(encoded[i]);
      summary.documents += 1;
      summary.tokens += encoded[i].size();
    }
    progress.update(summary.documents, summary.tokens, reader.progress_bytes());
  }
  progress.done(summary.documents, summary.tokens, reader.progress_bytes());

  summary.input_bytes = reader.bytes_read();
  summary.skipped_records = reader.skipped_records();
  summary.blank_documents = reader.blank_documents();
  ANVIL_CHECK(summary.documents > 0 || options.part,
              "[prepare] empty corpus: no documents in {} input file(s) ({} blank documents, {} "
              "bad records skipped)",
              inputs.files.size(), summary.blank_documents, summary.skipped_records);
  if (summary.documents == 0)
    log_warn("[prepare] part {} holds no documents: the input has fewer pieces than parts",
             options.part->folder_name());
  for (size_t s = 0; s < outputs.size(); ++s) {
    summary.splits[s] = outputs[s].finish();
    if (summary.splits[s].documents == 0 && options.split_ratios[s] > 0 && !options.part)
      log_warn("[prepare] split '{}' received no documents (corpus of {} documents)",
               kSplitNames[s], summary.documents);
  }
  summary.token_bytes = token_bytes_for_vocab(static_cast<uint64_t>(vocab_size));
  write_meta(staging.path(), shared, options, summary, reader, inputs);
  staging.commit();
  if (options.part) publish_parts_meta(options.out_dir, parts_meta(shared, options.part->count));
  summary.seconds = progress.elapsed();
  return summary;
}

}  // namespace anvil
