// `anvil prepare`: tokenize text files, folders or JSONL into train/val/test token shards and
// meta.json (formats in docs/formats.md). All the work is in data/prepare.h; this file maps
// flags to PrepareOptions and prints the summary.
#include <fmt/format.h>

#include "cli/command.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

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
                 ".jsonl/.ndjson files hold one JSON record per line")
      ->required()
      ->expected(1, -1);
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json, tokenizer.model or a folder")
      ->required();
  app.add_option("--out", options.out_dir, "output folder (must not exist or be empty)")
      ->required();
  app.add_option("--split", split, "train,val,test fractions of the documents")
      ->capture_default_str();
  app.add_option("--text-field", options.text_field, "JSONL field holding the document text")
      ->capture_default_str();
  app.add_option("--doc-separator", doc_separator,
                 "split text files into documents at lines equal to this (e.g. % for fortunes)");
  app.add_option("--seed", options.seed, "seed of the document -> split assignment")
      ->capture_default_str();
  app.add_option("--on-error", on_error, "bad JSONL records: fail (default) or skip with a warning")
      ->check(CLI::IsMember({"fail", "skip"}));
  app.add_option("--part-tokens", options.part_tokens,
                 "start a new shard part after this many tokens")
      ->capture_default_str();
  app.add_flag("--force", options.replace_existing, "replace a non-empty --out folder");
  ThreadOption threads;
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  options.split_ratios = parse_split_ratios(split);
  if (!doc_separator.empty()) options.doc_separator = doc_separator;
  options.skip_bad_records = on_error == "skip";

  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  const PrepareSummary summary = prepare_dataset(options, *tokenizer);
  fmt::print("prepared {}: {} documents, {} tokens ({}-byte tokens) in {:.1f} s\n", options.out_dir,
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
