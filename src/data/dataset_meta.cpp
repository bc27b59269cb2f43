// The shared meta.json pieces of prepared datasets (see dataset_meta.h).
#include "data/dataset_meta.h"

#include <cstdint>
#include <optional>

#include "tokenizer/tokenizer.h"

namespace anvil {

namespace {

nlohmann::ordered_json optional_id(std::optional<int32_t> id) {
  return id ? nlohmann::ordered_json(*id) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json tokenizer_meta_json(const Tokenizer& tokenizer, bool adds_bos) {
  return {{"path", tokenizer.source_path()},
          {"fingerprint", tokenizer.fingerprint()},
          {"vocab_size", tokenizer.vocab_size()},
          {"bos_id", optional_id(tokenizer.bos_id())},
          {"eos_id", optional_id(tokenizer.eos_id())},
          {"adds_bos", adds_bos}};
}

}  // namespace anvil
