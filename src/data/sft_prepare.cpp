// `anvil prepare --sft` pipeline: read the records of each JSONL file in chunks, render each
// chunk in parallel (results kept in record order, so the output is identical for any thread
// count), reject bad ones (render errors, over-long), pad when packing is off, append each
// example to its split, write meta.json and publish the folder atomically.
#include "data/sft_prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "data/corpus.h"
#include "data/dataset_meta.h"
#include "data/shard_writer.h"
#include "data/split_parts.h"
#include "data/sft_records.h"
#include "data/staging_folder.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace fs = std::filesystem;
namespace {

// Records read and rendered together: enough to keep every thread busy, few enough (and at
// most about kChunkBytes of message text) that memory does not grow with the file.
constexpr size_t kChunkRecords = 4096;
constexpr size_t kChunkBytes = size_t{8} << 20;

// The parts of one split. When padding, the newest example is held back so the split's last
// example can gain the one extra pad token its last window needs as a target.
class SftSplitOutput {
 public:
  SftSplitOutput(fs::path dir, std::string split, ShardWriterOptions options, bool hold_last)
      : parts_(std::move(dir), std::move(split), std::move(options), kDefaultPartTokens),
        hold_last_(hold_last) {}

  void add(RenderedChat example) {
    if (!hold_last_) return write(example);
    if (!pending_.tokens.empty()) write(pending_);
    pending_ = std::move(example);
  }

  // Writes the held example, plus one mask-0 pad_id token, and closes the part.
  SplitSummary finish(int32_t pad_id) {
    if (!pending_.tokens.empty()) {
      pending_.tokens.push_back(pad_id);
      pending_.loss_mask.push_back(0);
      extra_padding_ += 1;
      write(pending_);
    }
    return parts_.finish();
  }

  uint64_t extra_padding() const { return extra_padding_; }

 private:
  void write(const RenderedChat& example) { parts_.add(example.tokens, example.loss_mask); }

  SplitParts parts_;
  bool hold_last_;
  RenderedChat pending_;
  uint64_t extra_padding_ = 0;
};

// Renders one record, or returns the reason it is a bad record (render error, over-long).
struct RenderResult {
  RenderedChat example;
  std::string error;
};

RenderResult render_record(const SftRecord& record, ChatTemplate t, const Tokenizer& tokenizer,
                           int64_t max_tokens) {
  RenderResult result;
  try {
    result.example = render_chat(t, tokenizer, record.messages, /*add_generation_prompt=*/false);
  } catch (const Error& e) {
    std::string_view reason = e.what();
    if (reason.starts_with("[chat] ")) reason.remove_prefix(7);
    result.error = std::string(reason);
    return result;
  }
  const auto length = static_cast<int64_t>(result.example.tokens.size());
  if (max_tokens > 0 && length > max_tokens)
    result.error = fmt::format("over-long example: {} tokens > --max-tokens {}", length,
                               max_tokens);
  return result;
}

// Pads an example with mask-0 pad tokens to a multiple of seq_len tokens.
uint64_t pad_to_windows(RenderedChat& example, int64_t seq_len, int32_t pad_id) {
  const auto window = static_cast<size_t>(seq_len);
  const size_t padded = (example.tokens.size() + window - 1) / window * window;
  const size_t added = padded - example.tokens.size();
  example.tokens.resize(padded, pad_id);
  example.loss_mask.resize(padded, 0);
  return added;
}

void write_meta(const fs::path& dir, const SftPrepareOptions& options, const Tokenizer& tokenizer,
                int32_t pad_id, const SftPrepareSummary& summary,
                const std::vector<std::string>& files,
                const std::vector<uint64_t>& examples_per_file) {
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  nlohmann::ordered_json ratios = nlohmann::ordered_json::object();
  for (size_t s = 0; s < kSplitNames.size(); ++s) {
    splits[kSplitNames[s]] = {{"documents", summary.splits[s].documents},
                              {"tokens", summary.splits[s].tokens},
                              {"files", summary.splits[s].files}};
    ratios[kSplitNames[s]] = options.split_ratios[s];
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (size_t f = 0; f < files.size(); ++f)
    sources.push_back({{"path", files[f]}, {"documents", examples_per_file[f]}});
  const nlohmann::ordered_json meta = {
      {"format", "anvil-token-shards"},
      {"format_version", kShardVersion},
      {"tokenizer", tokenizer_meta_json(tokenizer, false)},
      {"token_bytes", summary.token_bytes},
      {"seed", options.seed},
      {"split_ratios", ratios},
      {"part_tokens", kDefaultPartTokens},
      {"documents", summary.examples},
      {"tokens", summary.tokens},
      {"bad_records_skipped", summary.skipped_records},
      {"sft",
       {{"chat_template", chat_template_name(summary.chat_template)},
        {"packing", options.packing},
        {"seq_len", options.packing ? nlohmann::ordered_json(nullptr)
                                    : nlohmann::ordered_json(options.seq_len)},
        {"max_tokens",
         options.max_tokens > 0 ? nlohmann::ordered_json(options.max_tokens)
                                : nlohmann::ordered_json(nullptr)},
        {"pad_id", options.packing ? nlohmann::ordered_json(nullptr)
                                   : nlohmann::ordered_json(pad_id)},
        {"records", summary.records},
        {"loss_tokens", summary.loss_tokens},
        {"padding_tokens", summary.padding_tokens}}},
      {"splits", splits},
      {"sources", sources}};
  const fs::path path = dir / "meta.json";
  std::ofstream out(path, std::ios::trunc);
  out << meta.dump(2) << "\n";
  out.close();
  ANVIL_CHECK(out.good(), "[sft] cannot write {}", path.string());
}

}  // namespace

SftPrepareSummary prepare_sft_dataset(const SftPrepareOptions& options,
                                      const Tokenizer& tokenizer) {
  const auto start = std::chrono::steady_clock::now();
  const double ratio_sum =
      options.split_ratios[0] + options.split_ratios[1] + options.split_ratios[2];
  ANVIL_CHECK(std::fabs(ratio_sum - 1.0) <= 1e-6, "[sft] split ratios sum to {}, not 1",
              ratio_sum);
  ANVIL_CHECK(options.max_tokens >= 0, "[sft] --max-tokens must not be negative, got {}",
              options.max_tokens);
  ANVIL_CHECK(options.packing || options.seq_len >= 1,
              "[sft] --packing false pads each example to windows of --seq-len tokens; give "
              "--seq-len N (the training sequence length)");
  const int32_t vocab_size = tokenizer.vocab_size();
  ANVIL_CHECK(vocab_size > 0, "[sft] tokenizer {} reports an empty vocabulary",
              tokenizer.source_path());
  const int32_t pad_id = tokenizer.eos_id().value_or(0);

  SftPrepareSummary summary;
  summary.chat_template = options.chat_template.value_or(
      default_chat_template(tokenizer, options.model_type));
  const ResolvedInputs inputs = resolve_inputs(options.inputs);
  ANVIL_CHECK(!inputs.files.empty(), "[sft] no readable JSONL inputs");
  for (const std::string& file : inputs.files)
    ANVIL_CHECK(is_jsonl_path(file),
                "[sft] {} is not a .jsonl/.ndjson file; --sft reads JSONL chat or alpaca "
                "records",
                file);

  StagingFolder staging(options.out_dir, options.force);
  ShardWriterOptions shard_options;
  shard_options.vocab_size = static_cast<uint32_t>(vocab_size);
  shard_options.bos_id = tokenizer.bos_id().value_or(-1);
  shard_options.eos_id = tokenizer.eos_id().value_or(-1);
  shard_options.tokenizer_fingerprint = tokenizer.fingerprint();
  shard_options.with_loss_mask = true;
  std::vector<SftSplitOutput> outputs;
  for (const char* split : kSplitNames)
    outputs.emplace_back(staging.path(), split, shard_options, !options.packing);

  const bool skip = options.on_error == SftOnError::skip;
  std::vector<uint64_t> examples_per_file;
  std::vector<SftRecord> records;
  std::vector<SftBadRecord> bad;
  std::vector<RenderResult> rendered;
  for (const std::string& file : inputs.files) {
    SftRecordReader reader(file, options.max_record_bytes);
    uint64_t written = 0, skipped = 0;
    bool more = true;
    while (more) {
      // A chunk of records is read, rendered in parallel and written, so memory holds a chunk
      // (and one record of at most the bound), not the file.
      records.clear();
      bad.clear();
      size_t chunk_bytes = 0;
      SftRecord record;
      SftBadRecord bad_record;
      while (records.size() < kChunkRecords && chunk_bytes < kChunkBytes) {
        const SftRecordReader::Next next = reader.next(record, bad_record);
        if (next == SftRecordReader::Next::end) {
          more = false;
          break;
        }
        if (next == SftRecordReader::Next::bad) {
          bad.push_back(std::move(bad_record));
          continue;
        }
        for (const ChatMessage& message : record.messages) chunk_bytes += message.content.size();
        records.push_back(std::move(record));
      }
      summary.records += records.size();
      rendered.assign(records.size(), RenderResult{});
      const auto count = static_cast<int64_t>(records.size());
#pragma omp parallel for schedule(dynamic, 16)
      for (int64_t i = 0; i < count; ++i)
        rendered[i] = render_record(records[i], summary.chat_template, tokenizer,
                                    options.max_tokens);
      // Bad records of both kinds (unparsable, unrenderable) are reported in line order.
      for (size_t i = 0; i < records.size(); ++i)
        if (!rendered[i].error.empty()) bad.push_back({records[i].line, rendered[i].error});
      std::sort(bad.begin(), bad.end(),
                [](const SftBadRecord& a, const SftBadRecord& b) { return a.line < b.line; });
      for (const SftBadRecord& record : bad) {
        ANVIL_CHECK(skip, "[sft] {}:{}: {}", file, record.line, record.reason);
        log_warn("[sft] {}:{}: {} (record skipped)", file, record.line, record.reason);
      }
      skipped += bad.size();
      for (size_t i = 0; i < records.size(); ++i) {
        RenderResult& result = rendered[i];
        if (!result.error.empty()) continue;
        for (uint8_t bit : result.example.loss_mask) summary.loss_tokens += bit;
        if (!options.packing)
          summary.padding_tokens += pad_to_windows(result.example, options.seq_len, pad_id);
        const int split =
            split_of_document(summary.examples, options.seed, options.split_ratios);
        summary.tokens += result.example.tokens.size();
        outputs[split].add(std::move(result.example));
        summary.examples += 1;
        written += 1;
      }
    }
    summary.skipped_records += skipped;
    examples_per_file.push_back(written);
    if (options.show_progress)
      log_info("prepare --sft: {}: {} examples, {} bad records skipped", file, written, skipped);
  }
  ANVIL_CHECK(summary.examples > 0,
              "[sft] no examples: {} input file(s) hold {} valid records ({} bad records "
              "skipped)",
              inputs.files.size(), summary.records, summary.skipped_records);
  for (size_t s = 0; s < outputs.size(); ++s) {
    summary.splits[s] = outputs[s].finish(pad_id);
    summary.padding_tokens += outputs[s].extra_padding();
    summary.tokens += outputs[s].extra_padding();
    if (summary.splits[s].documents == 0 && options.split_ratios[s] > 0)
      log_warn("[sft] split '{}' received no examples ({} examples in all)", kSplitNames[s],
               summary.examples);
  }
  summary.token_bytes = token_bytes_for_vocab(static_cast<uint64_t>(vocab_size));
  write_meta(staging.path(), options, tokenizer, pad_id, summary, inputs.files,
             examples_per_file);
  staging.commit();
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace anvil
