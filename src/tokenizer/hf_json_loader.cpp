// Hugging Face tokenizer.json -> BpeTokenizerParts. Supported: model BPE (merges as "a b"
// strings or [a, b] pairs, ignore_merges, byte_fallback, unk_token/fuse_unk), added_tokens
// with their flags, and the stages listed in pipeline.h. Refused with an error naming the
// component: other model types (Unigram, WordPiece, WordLevel), BPE dropout (random
// tokenization), continuing_subword_prefix / end_of_word_suffix. Ignored on purpose:
// "truncation" and "padding" (anvil encodes single texts; the data layer packs sequences).
// BOS/EOS come from tokenizer_config.json beside the file when it names them.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/loaders.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

using nlohmann::json;

json parse_json(const std::string& path, const std::string& content) {
  try {
    return json::parse(content);
  } catch (const json::exception& e) {
    ANVIL_FAIL("[tokenizer] {}: malformed JSON: {}", path, e.what());
  }
}

std::string model_type(const json& model, const std::string& path) {
  if (model.contains("type")) return json_string(model, "type", "model", path);
  // Files written by old versions omit the type; a merges list means BPE.
  if (model.contains("merges")) return "BPE";
  if (model.contains("vocab") && model["vocab"].is_array()) return "Unigram";
  return "unknown";
}

void check_model_options(const json& model, const std::string& path) {
  if (model.contains("dropout") && !model["dropout"].is_null())
    ANVIL_CHECK(model["dropout"].get<double>() == 0.0,
                "[tokenizer] {}: BPE dropout {} is not supported (it makes encoding random)",
                path, model["dropout"].dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.contains(key) || model[key].is_null()) continue;
    ANVIL_CHECK(model[key].is_string() && model[key].get<std::string>().empty(),
                "[tokenizer] {}: BPE option {} is not supported", path, key);
  }
}

std::vector<AddedToken> parse_added_tokens(const json& root, const std::string& path) {
  std::vector<AddedToken> tokens;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return tokens;
  for (const json& spec : root["added_tokens"]) {
    AddedToken token;
    token.content = json_string(spec, "content", "added token", path);
    ANVIL_CHECK(spec.contains("id") && spec["id"].is_number_integer() &&
                    spec["id"].get<int64_t>() >= 0 && spec["id"].get<int64_t>() < INT32_MAX,
                "[tokenizer] {}: added token '{}' has no valid id", path, token.content);
    token.id = spec["id"].get<int32_t>();
    token.special = json_bool(spec, "special", false);
    token.normalized = json_bool(spec, "normalized", !token.special);
    token.lstrip = json_bool(spec, "lstrip", false);
    token.rstrip = json_bool(spec, "rstrip", false);
    token.single_word = json_bool(spec, "single_word", false);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// Returns the merges as (left, right) strings in rank order.
std::vector<std::pair<std::string, std::string>> parse_merges(const json& model,
                                                               const std::string& path) {
  std::vector<std::pair<std::string, std::string>> merges;
  ANVIL_CHECK(model.contains("merges") && model["merges"].is_array(),
              "[tokenizer] {}: BPE model has no merges list", path);
  for (const json& merge : model["merges"]) {
    if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    ANVIL_CHECK(merge.is_string(), "[tokenizer] {}: merge {} is neither \"a b\" nor [a, b]", path,
                merge.dump());
    const std::string line = merge.get<std::string>();
    if (line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    ANVIL_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                "[tokenizer] {}: merge \"{}\" must be two tokens separated by one space", path,
                line);
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

// Returns the token a tokenizer_config.json entry names: a string, {"content": ...} or null.
std::optional<std::optional<std::string>> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& value = config[key];
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return std::optional<std::string>(value["content"].get<std::string>());
  return std::optional<std::string>();
}

void resolve_bos_eos(BpeTokenizerParts& parts, const std::string& path) {
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  json config = json::object();
  if (std::filesystem::exists(config_path)) {
    std::ifstream in(config_path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    config = parse_json(config_path.string(), text);
  }
  auto lookup = [&](const char* key, const std::vector<int32_t>& affix,
                    std::initializer_list<const char*> names) -> std::optional<int32_t> {
    if (auto named = config_token(config, key))
      return *named ? parts.token_ids.find(**named) : std::nullopt;
    if (affix.size() == 1) return affix[0];
    for (const char* name : names)
      if (auto id = parts.token_ids.find(name)) return id;
    return std::nullopt;
  };
  parts.bos_id = lookup("bos_token", parts.affixes.prefix,
                        {"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
  parts.eos_id = lookup("eos_token", parts.affixes.suffix,
                        {"<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>"});
}

// Builds the parts; the pipeline readers index the JSON directly, so a component missing a key
// or holding the wrong type surfaces as a nlohmann::json exception (turned into one error line
// by load_hf_json).
BpeTokenizerParts parts_from_json(const std::string& path, const std::string& content) {
  const json root = parse_json(path, content);
  ANVIL_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(),
              "[tokenizer] {}: not a tokenizer.json (no 'model' object)", path);
  const json& model = root["model"];
  const std::string type = model_type(model, path);
  ANVIL_CHECK(type == "BPE", "[tokenizer] {}: unsupported model type '{}' (anvil supports BPE)",
              path, type);
  check_model_options(model, path);

  BpeTokenizerParts parts;
  auto member = [&](const char* key) { return root.contains(key) ? root[key] : json(); };
  parts.normalizer = make_normalizer(member("normalizer"), path);
  parts.pre_tokenizer = make_pre_tokenizer(member("pre_tokenizer"), path);
  parts.decoder = make_decoder(member("decoder"), path);
  parts.affixes = parse_post_processor(member("post_processor"), path);
  parts.added_tokens = parse_added_tokens(root, path);

  ANVIL_CHECK(model.contains("vocab") && model["vocab"].is_object(),
              "[tokenizer] {}: BPE model has no vocab object", path);
  const json& vocab = model["vocab"];
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    ANVIL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                "[tokenizer] {}: vocab entry '{}' has invalid id {}", path, token, id.dump());
    max_id = std::max(max_id, id.get<int64_t>());
  }
  for (const AddedToken& token : parts.added_tokens)
    max_id = std::max<int64_t>(max_id, token.id);
  // Ids index the token tables, so they are bounded by the file before anything is sized:
  // vocabularies are dense apart from small gaps (sizes padded to a multiple of 64 or 128),
  // and an id past the entry count plus kMaxIdGap would only allocate for nothing.
  constexpr int64_t kMaxIdGap = int64_t{1} << 16;
  const auto entries = static_cast<int64_t>(vocab.size() + parts.added_tokens.size());
  ANVIL_CHECK(max_id < entries + kMaxIdGap,
              "[tokenizer] {}: token id {} is out of range for {} vocab and added tokens", path,
              max_id, entries);
  parts.id_to_token.resize(static_cast<size_t>(max_id + 1));
  parts.id_assigned.assign(parts.id_to_token.size(), 0);

  // Added tokens win over vocab entries in both directions, as in HF.
  for (const AddedToken& token : parts.added_tokens) {
    parts.token_ids.insert(token.content, token.id);
    parts.id_to_token[token.id] = token.content;
    parts.id_assigned[token.id] = 1;
  }
  const bool byte_level = parts.pre_tokenizer && parts.pre_tokenizer->is_byte_level();
  StringIdMap file_vocab;  // the model's own spelling, for merges
  StringIdMap unit_vocab;  // the spelling the model matches (raw bytes when byte-level)
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = id_json.get<int32_t>();
    file_vocab.insert(token, id);
    parts.token_ids.insert(token, id);
    if (!parts.id_assigned[id]) {
      parts.id_to_token[id] = token;
      parts.id_assigned[id] = 1;
    }
    if (!byte_level) {
      unit_vocab.insert(token, id);
    } else if (auto bytes = byte_level_to_bytes(token)) {
      unit_vocab.insert(*bytes, id);
    }
  }

  std::vector<BpeMerge> merges;
  const auto merge_strings = parse_merges(model, path);
  merges.reserve(merge_strings.size());
  for (size_t rank = 0; rank < merge_strings.size(); ++rank) {
    const auto& [left, right] = merge_strings[rank];
    const auto left_id = file_vocab.find(left);
    const auto right_id = file_vocab.find(right);
    const auto merged_id = file_vocab.find(left + right);
    ANVIL_CHECK(left_id && right_id && merged_id,
                "[tokenizer] {}: merge {} ('{}' '{}') uses a token missing from the vocab", path,
                rank, left, right);
    merges.push_back({*left_id, *right_id, *merged_id, static_cast<uint32_t>(rank)});
  }

  BpeConfig config;
  config.byte_units = byte_level;
  config.ignore_merges = json_bool(model, "ignore_merges", false);
  config.byte_fallback = json_bool(model, "byte_fallback", false);
  config.fuse_unk = json_bool(model, "fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    config.unk_id = file_vocab.find(unk);
    ANVIL_CHECK(config.unk_id.has_value(), "[tokenizer] {}: unk_token '{}' is not in the vocab",
                path, unk);
  }
  parts.model = std::make_unique<BpeModel>(config, std::move(unit_vocab), merges);
  // The post-processor's ids go into every encoding: each must name a token.
  for (const std::vector<int32_t>* affix : {&parts.affixes.prefix, &parts.affixes.suffix}) {
    for (const int32_t id : *affix) {
      ANVIL_CHECK(static_cast<size_t>(id) < parts.id_to_token.size() && parts.id_assigned[id],
                  "[tokenizer] {}: post_processor token id {} names no token", path, id);
    }
  }
  resolve_bos_eos(parts, path);
  return parts;
}

}  // namespace

BpeTokenizerParts load_hf_json(const std::string& path, const std::string& content) {
  try {
    return parts_from_json(path, content);
  } catch (const nlohmann::json::exception& e) {
    ANVIL_FAIL("[tokenizer] {}: malformed tokenizer.json: {}", path, e.what());
  }
}

}  // namespace anvil::tok
