// Decoders: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace and Sequence, with HF's
// per-token semantics. One deliberate difference: where HF turns bytes that do not form valid
// UTF-8 into U+FFFD (ByteLevel's from_utf8_lossy, ByteFallback's "�" per byte), anvil keeps
// the raw bytes, so decode(encode(x)) == x byte for byte and callers that stream ids can join
// partial characters themselves.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> stages)
      : stages_(std::move(stages)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& stage : stages_) stage->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

// Maps GPT-2 alphabet characters back to bytes; a token with any other character is kept as
// its own UTF-8 bytes (e.g. added tokens). All tokens fuse into one string.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string out;
    for (const std::string& token : tokens) {
      if (auto bytes = byte_level_to_bytes(token))
        out.append(*bytes);
      else
        out.append(token);
    }
    tokens.assign(1, std::move(out));
  }
};

// Joins each run of "<0xXX>" tokens into the bytes they name.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool in_run = false;
    for (std::string& token : tokens) {
      int value = -1;
      if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>')
        value = hex_byte(token[3], token[4]);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        in_run = true;
        continue;
      }
      if (in_run) out.push_back(std::move(bytes));
      bytes.clear();
      in_run = false;
      out.push_back(std::move(token));
    }
    if (in_run) out.push_back(std::move(bytes));
    tokens.swap(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int hex_byte(char high, char low) {
    const int h = hex_digit(high);
    const int l = hex_digit(low);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string out;
    for (const std::string& token : tokens) out.append(token);
    tokens.assign(1, std::move(out));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (std::string& token : tokens) {
      size_t begin = 0;
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0; ++i)
        begin += content_.size();
      size_t end = token.size();
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

// Replaces a literal (String pattern) or a regex (Regex pattern) in each token. Regex
// replacement skips tokens that are not valid UTF-8 (only raw byte tokens can be).
class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  ReplaceDecoder(std::string_view regex, std::string content, const std::string& file)
      : regex_(std::make_unique<Regex>(regex, file)), content_(std::move(content)) {}

  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens)
      token = regex_ ? replace_regex(token) : replace_literal(token);
  }

 private:
  std::string replace_literal(const std::string& token) const {
    if (literal_.empty()) return token;
    std::string out;
    size_t done = 0;
    for (size_t at = token.find(literal_); at != std::string::npos;
         at = token.find(literal_, done)) {
      out.append(token, done, at - done);
      out.append(content_);
      done = at + literal_.size();
    }
    out.append(token, done, std::string::npos);
    return out;
  }
  std::string replace_regex(const std::string& token) const {
    if (!is_valid_utf8(token)) return token;
    std::string out;
    size_t done = 0;
    regex_->for_each_match(token, [&](size_t begin, size_t end) {
      out.append(token, done, begin - done);
      out.append(content_);
      done = end;
    });
    out.append(token, done, std::string::npos);
    return out;
  }

  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// SentencePiece spaces back to ' '; in the first token they are dropped when the encoder
// prepends one (HF drops every replacement character of token 0, not only the first).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string with = (i == 0 && drop_in_first_) ? "" : " ";
      std::string out;
      const std::string& token = tokens[i];
      size_t done = 0;
      for (size_t at = token.find(replacement_); at != std::string::npos;
           at = token.find(replacement_, done)) {
        out.append(token, done, at - done);
        out.append(with);
        done = at + replacement_.size();
      }
      out.append(token, done, std::string::npos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

size_t json_size(const nlohmann::json& spec, const char* key, const std::string& file) {
  ANVIL_CHECK(spec.contains(key) && spec[key].is_number_unsigned(),
              "[tokenizer] {}: Strip decoder needs a non-negative integer '{}'", file, key);
  return spec[key].get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", "decoder", file);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> stages;
    for (const auto& stage : spec.at("decoders"))
      if (auto made = make_decoder(stage, file)) stages.push_back(std::move(made));
    return std::make_unique<SequenceDecoder>(std::move(stages));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(json_string(spec, "content", "Strip", file),
                                          json_size(spec, "start", file),
                                          json_size(spec, "stop", file));
  if (type == "Replace") {
    const auto& pattern = spec.at("pattern");
    std::string content = json_string(spec, "content", "Replace", file);
    if (pattern.contains("String"))
      return std::make_unique<ReplaceDecoder>(pattern["String"].get<std::string>(),
                                              std::move(content));
    if (pattern.contains("Regex"))
      return std::make_unique<ReplaceDecoder>(pattern["Regex"].get<std::string>(),
                                              std::move(content), file);
    ANVIL_FAIL("[tokenizer] {}: Replace decoder pattern must be String or Regex", file);
  }
  if (type == "Metaspace") {
    bool drop = true;
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string())
      drop = spec["prepend_scheme"].get<std::string>() != "never";
    if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean())
      drop = drop && spec["add_prefix_space"].get<bool>();
    return std::make_unique<MetaspaceDecoder>(json_string(spec, "replacement", "Metaspace", file),
                                              drop);
  }
  ANVIL_FAIL("[tokenizer] {}: unsupported decoder type '{}' (supported: Sequence, ByteLevel, "
             "ByteFallback, Fuse, Strip, Replace, Metaspace)",
             file, type);
}

std::unique_ptr<Decoder> make_concat_decoder() { return std::make_unique<FuseDecoder>(); }

}  // namespace anvil::tok
