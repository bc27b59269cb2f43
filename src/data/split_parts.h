// SplitParts: the token shards of one split of a prepared dataset (pretraining or SFT), written
// as parts: a new part starts when adding a document would take the current one past
// `part_tokens` tokens (a part holds at least one document, so one larger document gets a part
// of its own). Parts are named shard_file_name(split, index) inside the dataset folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/shard_writer.h"

namespace anvil {

struct SplitSummary {
  uint64_t documents = 0;
  uint64_t tokens = 0;
  std::vector<std::string> files;  // shard file names inside out_dir
};

class SplitParts {
 public:
  // Opens the split's first part in `dir`.
  SplitParts(std::filesystem::path dir, std::string split, ShardWriterOptions options,
             uint64_t part_tokens);
  // Appends one document (ShardWriter::add_document's rules for `loss_mask`).
  void add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask = {});
  // Completes the last part; returns what the split holds.
  SplitSummary finish();

 private:
  void open_part();

  std::filesystem::path dir_;
  std::string split_;
  ShardWriterOptions options_;
  uint64_t part_tokens_;
  std::unique_ptr<ShardWriter> writer_;
  SplitSummary summary_;
};

}  // namespace anvil
