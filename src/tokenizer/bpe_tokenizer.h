// The one Tokenizer implementation: a BPE model inside a HF-style pipeline. Both loaders (HF
// tokenizer.json and tiktoken tokenizer.model) fill a BpeTokenizerParts and hand it over; the
// tiktoken loader adds Meta's whitespace pre-split and a prefix-BOS post-processor.
// Encode order: [Meta pre-split] -> raw added tokens -> invalid-UTF-8 isolation -> normalizer
// -> normalized added tokens -> pre-tokenizer -> BPE -> post-processor affixes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace anvil::tok {

struct BpeTokenizerParts {
  std::string source_path;
  std::string fingerprint;
  std::unique_ptr<BpeModel> model;
  StringIdMap token_ids;                 // vocab spelled as in the file, plus added tokens
  std::vector<std::string> id_to_token;  // index = id; added tokens hold their content
  std::vector<uint8_t> id_assigned;      // 0 for ids no token uses
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;  // nullptr: tokens are joined with spaces (as HF does)
  SpecialAffixes affixes;
  bool meta_pre_split = false;  // Llama 3 tiktoken files: 400k-char windows, 25k-char runs
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
};

// Invalid UTF-8: each byte that is not part of a well-formed character becomes its own
// pre-token before normalization, and the text runs around it are encoded separately. A
// byte-level model then emits that byte's token; a SentencePiece-style model emits its <0xXX>
// byte-fallback token (or unk).
// Round trips: byte-level files without a normalizer or whitespace-stripping added tokens give
// decode(encode(x)) == x for any bytes x. SentencePiece files in the Llama 2 layout (Prepend +
// Replace normalizer, Strip decoder) give it for valid UTF-8 without special-token text or "▁"
// (which decodes as a space); the Metaspace (prepend_scheme "first") layout drops a leading
// space, exactly as HF does; around an invalid byte each run gains its own "▁".
class BpeTokenizer final : public Tokenizer {
 public:
  // Takes the parts; patterns of added tokens marked normalized go through the normalizer.
  explicit BpeTokenizer(BpeTokenizerParts parts);

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  std::vector<int32_t> encode_ordinary(std::string_view text, bool at_origin) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(p_.id_to_token.size()); }
  std::optional<int32_t> bos_id() const override { return p_.bos_id; }
  std::optional<int32_t> eos_id() const override { return p_.eos_id; }
  std::optional<int32_t> token_id(std::string_view token) const override {
    return p_.token_ids.find(token);
  }
  std::string fingerprint() const override { return p_.fingerprint; }
  std::string source_path() const override { return p_.source_path; }
  std::vector<int32_t> special_prefix() const override { return p_.affixes.prefix; }
  std::vector<int32_t> special_suffix() const override { return p_.affixes.suffix; }
  bool is_special(int32_t id) const override;

 private:
  void encode_text(std::string_view text, bool at_origin, bool match_added,
                   std::vector<int32_t>& ids) const;
  void encode_segment(std::string_view text, bool at_origin, bool match_added,
                      std::vector<int32_t>& ids) const;
  void encode_valid(std::string_view text, bool at_origin, bool match_added,
                    std::vector<int32_t>& ids) const;
  void encode_normalized(std::string_view text, bool at_origin, bool match_added,
                         std::vector<int32_t>& ids) const;

  BpeTokenizerParts p_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized == true
  std::vector<uint8_t> special_ids_;
};

// Calls fn(begin, end) for each slice of Meta's Llama 3 pre-split: windows of 400,000
// characters, cut further so no run of whitespace or non-whitespace exceeds 25,000 characters.
void for_each_meta_chunk(std::string_view text, FunctionRef<void(size_t, size_t)> fn);

}  // namespace anvil::tok
