// `anvil prepare`: tokenize text files, folders or JSONL into train/val/test token shards and
// meta.json (formats in docs/formats.md). With --sft, JSONL chat/alpaca records are rendered
// with a chat template into loss-masked shards instead. All the work is in data/prepare.h and
// data/sft_prepare.h; this file maps flags to their options and prints the summary.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/sft.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

// Returns config.json's model_type when --tokenizer names a model folder that has one.
std::string model_type_beside(const std::string& tokenizer_path) {
  const std::filesystem::path config = std::filesystem::path(tokenizer_path) / "config.json";
  if (!std::filesystem::is_directory(tokenizer_path) || !std::filesystem::exists(config))
    return "";
  try {
    std::ifstream in(config);
    return nlohmann::json::parse(in).value("model_type", "");
  } catch (const nlohmann::json::exception& e) {
    ANVIL_FAIL("[prepare] {}: {}", config.string(), e.what());
  }
}

struct SftFlags {
  bool enabled = false;
  std::string chat_template;
  int64_t max_tokens = 0;
  bool packing = true;
  int64_t seq_len = 0;
};

int run_sft_prepare(const PrepareOptions& common, const SftFlags& flags,
                    const std::string& tokenizer_path) {
  SftPrepareOptions options;
  options.inputs = common.inputs;
  options.out_dir = common.out_dir;
  if (!flags.chat_template.empty())
    options.chat_template = parse_chat_template(flags.chat_template);
  options.model_type = model_type_beside(tokenizer_path);
  options.split_ratios = common.split_ratios;
  options.seed = common.seed;
  options.max_record_bytes = common.max_record_bytes;
  options.max_tokens = flags.max_tokens;
  options.on_error = common.skip_bad_records ? SftOnError::skip : SftOnError::fail;
  options.packing = flags.packing;
  options.seq_len = flags.seq_len;
  options.force = common.replace_existing;
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  const SftPrepareSummary summary = prepare_sft_dataset(options, *tokenizer);
  const std::string layout =
      options.packing ? "packed" : fmt::format("padded to {}-token windows", options.seq_len);
  fmt::print("prepared {} (SFT, template {}, {}): {} examples, {} tokens ({} trained, {} padding) "
             "in {:.1f} s\n",
             options.out_dir, chat_template_name(summary.chat_template), layout,
             summary.examples, summary.tokens, summary.loss_tokens, summary.padding_tokens,
             summary.seconds);
  for (size_t s = 0; s < kSplitNames.size(); ++s)
    fmt::print("  {:<5} {:>10} examples {:>14} tokens  {} part(s)\n", kSplitNames[s],
               summary.splits[s].documents, summary.splits[s].tokens,
               summary.splits[s].files.size());
  if (summary.skipped_records > 0)
    fmt::print("  skipped {} bad records (--on-error skip)\n", summary.skipped_records);
  return 0;
}

int run_prepare(const std::vector<std::string>& args) {
  CLI::App app("Tokenize text files, folders or JSONL into train/val/test token shards.",
               "anvil prepare");
  PrepareOptions options;
  std::string tokenizer_path;
  std::string split = "0.8,0.1,0.1";
  std::string doc_separator;
  std::string on_error = "fail";
  app.add_option("--input", options.inputs,
                 "text files, folders (walked recursively, sorted) or glob patterns; "
                 ".jsonl/.ndjson files hold one JSON record per line; .parquet files (found by "
                 "their magic bytes) hold the text in a column; any other file may be gzip, "
                 "zstd or xz compressed (found by its magic bytes, streamed)")
      ->required()
      ->expected(1, -1);
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json, tokenizer.model or a folder")
      ->required();
  app.add_option("--out", options.out_dir, "output folder (must not exist or be empty)")
      ->required();
  app.add_option("--split", split, "train,val,test fractions of the documents")
      ->capture_default_str();
  app.add_option("--text-field", options.text_field,
                 "JSONL field or Parquet column holding the document text")
      ->capture_default_str();
  app.add_option("--doc-separator", doc_separator,
                 "split text files into documents at lines equal to this (e.g. % for fortunes)");
  app.add_option("--seed", options.seed, "seed of the document -> split assignment")
      ->capture_default_str();
  app.add_option("--on-error", on_error,
                 "bad JSONL records (and records over --max-record-bytes): fail (default) or "
                 "skip with a warning, counted in the summary")
      ->check(CLI::IsMember({"fail", "skip"}));
  add_max_record_bytes_option(app, options.max_record_bytes,
                              "JSONL record or line (a longer text document is prepared in "
                              "pieces cut at whitespace)");
  app.add_option("--part-tokens", options.part_tokens,
                 "start a new shard part after this many tokens")
      ->capture_default_str();
  std::string part;
  app.add_option("--part", part,
                 "i/N: write only part i of N into --out/part-0000i-of-0000N (N processes or "
                 "machines, same other arguments); with all N written, --out trains as the "
                 "one-process output does");
  app.add_flag("--force", options.replace_existing,
               "replace a non-empty --out folder (with --part: that part's folder)");
  SftFlags sft;
  app.add_flag("--sft", sft.enabled,
               "JSONL chat ({\"messages\": [...]}) or alpaca records -> chat-template tokens "
               "with a loss mask on assistant turns");
  CLI::Option* template_option =
      app.add_option("--chat-template", sft.chat_template,
                     "with --sft: llama3, chatml, llama2 or plain (default: from the "
                     "tokenizer's special tokens)");
  CLI::Option* max_tokens_option = app.add_option(
      "--max-tokens", sft.max_tokens, "with --sft: longer examples are bad records (0: no limit)");
  CLI::Option* packing_option = app.add_option(
      "--packing", sft.packing,
      "with --sft: true packs examples back to back; false pads each to whole --seq-len windows");
  CLI::Option* seq_len_option = app.add_option(
      "--seq-len", sft.seq_len, "with --sft --packing false: the training sequence length");
  ThreadOption threads;
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  options.split_ratios = parse_split_ratios(split);
  if (!doc_separator.empty()) options.doc_separator = doc_separator;
  options.skip_bad_records = on_error == "skip";
  for (const CLI::Option* sft_only :
       {template_option, max_tokens_option, packing_option, seq_len_option})
    ANVIL_CHECK(sft.enabled || sft_only->count() == 0, "[prepare] {} needs --sft",
                sft_only->get_name());
  if (sft.enabled) {
    for (const char* text_only : {"--text-field", "--doc-separator", "--part-tokens", "--part"})
      ANVIL_CHECK(app.count(text_only) == 0, "[prepare] {} does not apply with --sft", text_only);
    return run_sft_prepare(options, sft, tokenizer_path);
  }

  if (!part.empty()) options.part = parse_part(part);
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  const PrepareSummary summary = prepare_dataset(options, *tokenizer);
  const std::string where =
      options.part ? (std::filesystem::path(options.out_dir) / options.part->folder_name()).string()
                   : options.out_dir;
  fmt::print("prepared {}: {} documents, {} tokens ({}-byte tokens) in {:.1f} s\n", where,
             summary.documents, summary.tokens, summary.token_bytes, summary.seconds);
  for (size_t s = 0; s < kSplitNames.size(); ++s)
    fmt::print("  {:<5} {:>10} documents {:>14} tokens  {} part(s)\n", kSplitNames[s],
               summary.splits[s].documents, summary.splits[s].tokens,
               summary.splits[s].files.size());
  if (summary.skipped_records > 0)
    fmt::print("  skipped {} bad JSONL records (--on-error skip)\n", summary.skipped_records);
  return 0;
}

}  // namespace

ANVIL_COMMAND("prepare", "tokenize text/JSONL into train/val/test token shards", 30, run_prepare);

}  // namespace anvil::cli
