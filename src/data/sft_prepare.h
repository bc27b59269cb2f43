// `anvil prepare --sft`: JSONL conversations -> rendered, loss-masked token shards plus
// meta.json, in the existing shard format (with the loss-mask section), so the dataloader and
// trainer read them unchanged. Example e (in input order, bad records excluded) goes to a split
// by split_of_document(e, seed, ratios), as `anvil prepare` assigns documents. Packing writes
// each example as one document (BOS-first where the template has a BOS, so document ids
// separate them); padding extends each example with mask-0 pad tokens to a multiple of seq_len
// tokens (the split's last example gets one more, the target of its last window), so no
// training window mixes two examples. Output is built in a hidden temp folder and renamed into
// place: on any error --out is left untouched.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/prepare.h"

namespace anvil {

class Tokenizer;

enum class SftOnError { fail, skip };

struct SftPrepareOptions {
  std::vector<std::string> inputs;  // .jsonl/.ndjson files, folders or glob patterns
  std::string out_dir;
  // nullopt: default_chat_template(tokenizer, model_type)
  std::optional<ChatTemplate> chat_template;
  std::string model_type;                     // config.json model_type when known, else empty
  std::array<double, 3> split_ratios = {0.8, 0.1, 0.1};
  uint64_t seed = 0;
  int64_t max_tokens = 0;  // > 0: longer rendered examples are bad records; 0: no limit
  SftOnError on_error = SftOnError::fail;
  bool packing = true;  // false: pad each example to whole windows of seq_len tokens
  int64_t seq_len = 0;  // the training sequence length; required when packing is false
  bool force = false;   // replace a non-empty out_dir
  bool show_progress = true;  // one stdout line per input file
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // --max-record-bytes (line_reader.h)
};

struct SftPrepareSummary {
  std::array<SplitSummary, 3> splits;  // documents = examples
  ChatTemplate chat_template = ChatTemplate::plain;
  uint64_t records = 0;         // valid records read
  uint64_t examples = 0;        // examples written (records minus over-long skipped ones)
  uint64_t tokens = 0;          // all tokens written, padding included
  uint64_t loss_tokens = 0;     // tokens with loss mask 1
  uint64_t padding_tokens = 0;  // pad tokens added when packing is false
  uint64_t skipped_records = 0;
  uint32_t token_bytes = 0;
  double seconds = 0;
};

// Prepares the SFT dataset; throws anvil::Error (leaving out_dir untouched) on any bad input
// when on_error is fail.
SftPrepareSummary prepare_sft_dataset(const SftPrepareOptions& options,
                                      const Tokenizer& tokenizer);

}  // namespace anvil
