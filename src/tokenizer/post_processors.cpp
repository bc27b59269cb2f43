// Post-processors for a single sequence: TemplateProcessing (the "single" template), Bert and
// Roberta processing (cls $A sep), ByteLevel (it only trims offsets, so it adds no ids) and
// Sequence (each stage wraps the result of the previous ones).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pipeline.h"

namespace anvil::tok {
namespace {

// Returns a post-processor's token id; a value that is not a non-negative 32-bit integer is an
// error with the value as the file wrote it (never wrapped).
int32_t token_id(const nlohmann::json& value, const std::string& file) {
  ANVIL_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                  value.get<int64_t>() < INT32_MAX,
              "[tokenizer] {}: post_processor token id {} is out of range", file, value.dump());
  return static_cast<int32_t>(value.get<int64_t>());
}

SpecialAffixes parse_template(const nlohmann::json& spec, const std::string& file) {
  const auto& single = spec.at("single");
  ANVIL_CHECK(single.is_array(), "[tokenizer] {}: TemplateProcessing 'single' must be a list",
              file);
  const auto& specials = spec.contains("special_tokens") ? spec["special_tokens"]
                                                          : nlohmann::json::object();
  SpecialAffixes affixes;
  bool seen_sequence = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      const std::string id = piece["Sequence"].value("id", "A");
      ANVIL_CHECK(id == "A" && !seen_sequence,
                  "[tokenizer] {}: TemplateProcessing single template must hold $A once", file);
      seen_sequence = true;
      continue;
    }
    ANVIL_CHECK(piece.contains("SpecialToken"),
                "[tokenizer] {}: unknown TemplateProcessing piece {}", file, piece.dump());
    const std::string name = piece["SpecialToken"].at("id").get<std::string>();
    ANVIL_CHECK(specials.contains(name),
                "[tokenizer] {}: TemplateProcessing uses '{}' but special_tokens lacks it", file,
                name);
    auto& target = seen_sequence ? affixes.suffix : affixes.prefix;
    for (const auto& id : specials[name].at("ids")) target.push_back(token_id(id, file));
  }
  ANVIL_CHECK(seen_sequence, "[tokenizer] {}: TemplateProcessing single template lacks $A", file);
  return affixes;
}

int32_t pair_id(const nlohmann::json& spec, const char* key, const std::string& file) {
  ANVIL_CHECK(spec.contains(key) && spec[key].is_array() && spec[key].size() == 2,
              "[tokenizer] {}: post_processor needs '{}' as [token, id]", file, key);
  return token_id(spec[key][1], file);
}

}  // namespace

SpecialAffixes parse_post_processor(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return {};
  const std::string type = json_string(spec, "type", "post_processor", file);
  if (type == "TemplateProcessing") return parse_template(spec, file);
  if (type == "ByteLevel") return {};
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return {{pair_id(spec, "cls", file)}, {pair_id(spec, "sep", file)}};
  if (type == "Sequence") {
    SpecialAffixes all;
    for (const auto& stage_spec : spec.at("processors")) {
      const SpecialAffixes stage = parse_post_processor(stage_spec, file);
      all.prefix.insert(all.prefix.begin(), stage.prefix.begin(), stage.prefix.end());
      all.suffix.insert(all.suffix.end(), stage.suffix.begin(), stage.suffix.end());
    }
    return all;
  }
  ANVIL_FAIL("[tokenizer] {}: unsupported post_processor type '{}' (supported: "
             "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)",
             file, type);
}

}  // namespace anvil::tok
