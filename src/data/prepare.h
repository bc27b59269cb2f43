// Dataset preparation (`anvil prepare`): text documents -> tokenized train/val/test shards plus
// meta.json. Document d goes to a split by u = unit_interval(hash_pair(seed, d)) against the
// cumulative ratios, so the split is fixed by (inputs, seed) alone. Each document is encoded
// with the tokenizer's post-processor (BOS where it adds one) and followed by EOS (once: not
// again when the post-processor's suffix already ends with EOS). Chunks of
// documents are tokenized in parallel and written in document order, so the bytes written are
// identical for any thread count. Output is built in a hidden temp folder next to --out and
// renamed into place at the end: on any error, --out is left untouched. Memory is bounded by a
// chunk (and one document or Parquet row group), not by the corpus.
//
// With `part` = i/N, only part i's pieces of the input (input_pieces.h) are read, and the
// output goes to the folder --out/part-0000i-of-0000N (committed the same all-or-nothing way),
// beside a meta.json that names all N parts and that every part writes identically. Once all
// N parts are there, the folder reads (shard_set.h) as the same token stream, in the same
// order, that one process writes into --out.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/input_pieces.h"
#include "data/shard_format.h"
#include "data/split_parts.h"

namespace anvil {

class Tokenizer;

inline constexpr std::array<const char*, 3> kSplitNames = {"train", "val", "test"};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, folders or glob patterns
  std::string out_dir;
  std::array<double, 3> split_ratios = {0.8, 0.1, 0.1};
  std::string text_field = "text";
  std::optional<std::string> doc_separator;
  uint64_t seed = 0;
  bool skip_bad_records = false;  // --on-error skip
  uint64_t part_tokens = kDefaultPartTokens;
  bool replace_existing = false;  // --force: replace a non-empty --out (or --part folder)
  bool show_progress = true;
  std::optional<PartSpec> part;  // --part i/N
  uint64_t piece_bytes = kDefaultPieceBytes;  // JSON Lines and split text files: range size
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // --max-record-bytes (corpus.h)
};

struct PrepareSummary {
  std::array<SplitSummary, 3> splits;  // train, val, test
  uint64_t documents = 0;
  uint64_t tokens = 0;
  uint64_t input_bytes = 0;
  uint64_t skipped_records = 0;
  uint64_t blank_documents = 0;
  uint32_t token_bytes = 0;
  double seconds = 0;
};

// Parses "0.8,0.1,0.1": three non-negative numbers summing to 1 (within 1e-6).
std::array<double, 3> parse_split_ratios(const std::string& text);
// Returns the split (0 train, 1 val, 2 test) of document `index` under `seed` (SFT examples).
int split_of_document(uint64_t index, uint64_t seed, const std::array<double, 3>& ratios);
// Returns the split of the document with this text under `seed`.
int split_of_text(std::string_view text, uint64_t seed, const std::array<double, 3>& ratios);
// Prepares the dataset; throws anvil::Error (leaving out_dir untouched) on any bad input.
PrepareSummary prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace anvil
