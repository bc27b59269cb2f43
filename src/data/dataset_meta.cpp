// The shared meta.json pieces of prepared datasets (see dataset_meta.h).
#include "data/dataset_meta.h"

#include <cstdint>
#include <optional>

#include "core/error.h"
#include "io/json_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {

namespace {

// meta.json holds a few flat objects (tokenizer, splits, per-file counts).
constexpr int kMaxMetaDepth = 8;

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

std::string meta_tokenizer_path(std::string_view text, const std::string& meta_path) {
  const nlohmann::json meta = parse_json_strict(text, "[run] " + meta_path, kMaxMetaDepth);
  const auto tokenizer = meta.is_object() ? meta.find("tokenizer") : meta.end();
  const bool named = tokenizer != meta.end() && tokenizer->is_object() &&
                     tokenizer->contains("path") && (*tokenizer)["path"].is_string();
  ANVIL_CHECK(named, "[run] {}: no tokenizer.path string; pass --tokenizer FILE", meta_path);
  const std::string path = (*tokenizer)["path"].get<std::string>();
  ANVIL_CHECK(!path.empty() && path.find('\0') == std::string::npos,
              "[run] {}: tokenizer.path is not a file name; pass --tokenizer FILE", meta_path);
  return path;
}

}  // namespace anvil
