// Normalizers: Sequence, Prepend, Replace (string or regex pattern) and the Unicode forms NFC,
// NFD, NFKC and NFKD. Anything else (Lowercase, StripAccents, BertNormalizer, Precompiled, ...)
// is rejected when the file is loaded.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_forms.h"

namespace anvil::tok {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> stages)
      : stages_(std::move(stages)) {}
  void normalize(std::string& text) const override {
    for (const auto& stage : stages_) stage->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

// Prepends a string to non-empty text (the SentencePiece "▁" of Llama 2 / Mistral files).
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Replaces every non-overlapping match of a pattern with fixed content.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string_view pattern, std::string content, const std::string& file)
      : regex_(pattern, file), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::string out;
    size_t done = 0;
    regex_.for_each_match(text, [&](size_t begin, size_t end) {
      out.append(text, done, begin - done);
      out.append(content_);
      done = end;
    });
    if (done == 0 && out.empty()) return;  // nothing matched
    out.append(text, done, std::string::npos);
    text.swap(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

// A Unicode normalization form (NFC in Qwen2 files; NFKC, NFD, NFKD elsewhere).
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(std::string& text) const override { normalize_unicode(text, form_); }

 private:
  UnicodeForm form_;
};

}  // namespace

std::string escape_regex_literal(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && u != ' ' && u != '_') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool json_bool(const nlohmann::json& spec, const char* key, bool fallback) {
  return spec.contains(key) && spec[key].is_boolean() ? spec[key].get<bool>() : fallback;
}

std::string hf_pattern_regex(const nlohmann::json& pattern, const char* component,
                             const std::string& file) {
  ANVIL_CHECK(pattern.is_object(), "[tokenizer] {}: {} has no pattern object", file, component);
  if (pattern.contains("String")) return escape_regex_literal(pattern["String"].get<std::string>());
  if (pattern.contains("Regex")) return pattern["Regex"].get<std::string>();
  ANVIL_FAIL("[tokenizer] {}: {} pattern must be String or Regex, got {}", file, component,
             pattern.dump());
}

std::string json_string(const nlohmann::json& spec, const char* key, const char* component,
                        const std::string& file) {
  ANVIL_CHECK(spec.contains(key) && spec[key].is_string(),
              "[tokenizer] {}: {} needs a string '{}'", file, component, key);
  return spec[key].get<std::string>();
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", "normalizer", file);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> stages;
    for (const auto& stage : spec.at("normalizers"))
      if (auto made = make_normalizer(stage, file)) stages.push_back(std::move(made));
    return std::make_unique<SequenceNormalizer>(std::move(stages));
  }
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(json_string(spec, "prepend", "Prepend", file));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(
        hf_pattern_regex(spec.at("pattern"), "Replace", file),
        json_string(spec, "content", "Replace", file), file);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfkd);
  ANVIL_FAIL("[tokenizer] {}: unsupported normalizer type '{}' (supported: Sequence, Prepend, "
             "Replace, NFC, NFD, NFKC, NFKD)",
             file, type);
}

}  // namespace anvil::tok
