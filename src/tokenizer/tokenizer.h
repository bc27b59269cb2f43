// The tokenizer interface every other layer codes against, and its loader. anvil reads
// Hugging Face tokenizer.json files with a BPE model (byte-level: GPT-2, Llama 3, Qwen2;
// SentencePiece-style with byte fallback: Llama 2, TinyLlama, Mistral) and Meta's
// tiktoken-format tokenizer.model (Llama 3). Anything the loader cannot reproduce exactly
// (another model type, an unknown pipeline stage) is an error naming the component and file.
// Thread-safety: encode/decode are const and may run concurrently on one instance.
// Decoding returns raw bytes: it never replaces invalid UTF-8 with U+FFFD (see decoders.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads tokenizer.json (HF) or a tiktoken-format tokenizer.model (Meta Llama 3); a directory
  // means <dir>/tokenizer.json, else <dir>/tokenizer.model. Throws anvil::Error naming the file.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // Encodes text. Added tokens in the text (special or not, per the file's flags) are matched
  // before the model runs. add_special applies the post-processor (e.g. prepends BOS).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  // Encodes text as ordinary text: added-token strings in it are not matched (they are
  // tokenized like any other text) and no post-processor affixes are added. at_origin says
  // whether the text starts the whole input (Metaspace prepend_scheme "first" marks only that
  // position). Chat templates encode message content with it. The default, for tokenizers
  // without added tokens, is encode(text, false).
  virtual std::vector<int32_t> encode_ordinary(std::string_view text, bool at_origin) const {
    (void)at_origin;
    return encode(text, false);
  }
  // Decodes ids (special tokens included) to bytes; throws on an id with no token.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Returns max id + 1, including added tokens.
  virtual int32_t vocab_size() const = 0;
  // Returns the BOS id: tokenizer_config.json beside the file, else the post-processor's
  // prefix, else a conventional name (<|begin_of_text|>, <s>, <bos>, <|startoftext|>).
  virtual std::optional<int32_t> bos_id() const = 0;
  // Returns the EOS id: tokenizer_config.json, else the post-processor's suffix, else a
  // conventional name (<|end_of_text|>, </s>, <|endoftext|>, <eos>).
  virtual std::optional<int32_t> eos_id() const = 0;
  // Returns the id of an added/special token or of a vocab entry spelled as in the file.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  // Returns the hex xxHash64 of the file bytes.
  virtual std::string fingerprint() const = 0;
  // Returns the path of the file that was loaded.
  virtual std::string source_path() const = 0;
  // Returns the ids the post-processor puts before / after a sequence when add_special is set.
  virtual std::vector<int32_t> special_prefix() const = 0;
  virtual std::vector<int32_t> special_suffix() const = 0;
  // Returns true for ids of added tokens marked special.
  virtual bool is_special(int32_t id) const = 0;
};

}  // namespace anvil
