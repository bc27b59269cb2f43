// SplitParts (see split_parts.h).
#include "data/split_parts.h"

#include <utility>

#include "data/shard_format.h"

namespace anvil {

SplitParts::SplitParts(std::filesystem::path dir, std::string split, ShardWriterOptions options,
                       uint64_t part_tokens)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      options_(std::move(options)),
      part_tokens_(part_tokens) {
  open_part();
}

void SplitParts::add(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask) {
  if (writer_->token_count() > 0 && writer_->token_count() + tokens.size() > part_tokens_) {
    writer_->finish();
    open_part();
  }
  writer_->add_document(tokens, loss_mask);
  summary_.documents += 1;
  summary_.tokens += tokens.size();
}

SplitSummary SplitParts::finish() {
  writer_->finish();
  return summary_;
}

void SplitParts::open_part() {
  const std::string name = shard_file_name(split_, static_cast<int>(summary_.files.size()));
  writer_ = std::make_unique<ShardWriter>((dir_ / name).string(), options_);
  summary_.files.push_back(name);
}

}  // namespace anvil
