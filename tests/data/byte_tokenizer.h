// ByteTokenizer: a stand-in tokenizer for the prepare tests (byte b -> id b + 3), so their
// expected shards follow from the text alone.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace anvil::testing {

// Byte b -> id b + 3; 1 is BOS (added when add_bos), 2 is EOS.
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(bool add_bos = true, bool has_eos = true)
      : add_bos_(add_bos), has_eos_(has_eos) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special && add_bos_) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c + 3);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids)
      if (id >= 3) text.push_back(static_cast<char>(id - 3));
    return text;
  }
  int32_t vocab_size() const override { return 259; }
  std::optional<int32_t> bos_id() const override { return 1; }
  std::optional<int32_t> eos_id() const override {
    return has_eos_ ? std::optional<int32_t>(2) : std::nullopt;
  }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string fingerprint() const override { return "fedcba9876543210"; }
  std::string source_path() const override { return "byte-tokenizer"; }
  std::vector<int32_t> special_prefix() const override {
    return add_bos_ ? std::vector<int32_t>{1} : std::vector<int32_t>{};
  }
  std::vector<int32_t> special_suffix() const override { return {}; }
  bool is_special(int32_t id) const override { return id < 3; }

 private:
  bool add_bos_;
  bool has_eos_;
};

}  // namespace anvil::testing
