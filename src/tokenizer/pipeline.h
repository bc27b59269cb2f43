// The stages of a Hugging Face tokenizer pipeline, as anvil implements them:
//   normalizer -> pre-tokenizer -> model (BPE) -> post-processor   (encode)
//   ids -> token strings -> decoder                                 (decode)
// Each stage is an interface with one implementation per supported tokenizer.json "type";
// the make_* factories build a stage from its JSON and throw anvil::Error naming the type and
// the file for anything unsupported, so a tokenizer never silently tokenizes differently.
// Pre-tokenizers stream: each piece is handed to a sink while the stage runs, so chained
// stages need no intermediate lists and transformed text only lives for the call.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace anvil::tok {

// A non-owning reference to a callable; cheaper than std::function for per-piece callbacks.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

// A run of text on its way to the model. `at_origin` is true when the run starts at offset 0
// of the caller's original text (Metaspace's "first" prepend scheme depends on it).
struct Piece {
  std::string_view text;
  bool at_origin = false;
};
using PieceSink = FunctionRef<void(Piece)>;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites well-formed UTF-8 text in place.
  virtual void normalize(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and possibly rewrites) one piece, passing each non-empty result to `sink`.
  virtual void split(Piece piece, PieceSink sink) const = 0;
  // Returns true when the stage maps text to GPT-2 byte-level characters.
  virtual bool is_byte_level() const { return false; }
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings in place (a stage may fuse them into fewer strings).
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// What a post-processor adds around a single sequence when add_special is set. Every
// supported post-processor reduces to fixed ids before and after the encoded text.
struct SpecialAffixes {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

// Each factory returns nullptr for a JSON null and throws for an unsupported type; `file`
// names the tokenizer file in error messages.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& file);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& file);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& file);
// Returns the affixes of a post_processor spec (none for a JSON null).
SpecialAffixes parse_post_processor(const nlohmann::json& spec, const std::string& file);

// Returns a pre-tokenizer that splits with `pattern`, each match its own piece (HF "Isolated").
std::unique_ptr<PreTokenizer> make_isolating_split(std::string_view pattern,
                                                   const std::string& file);
// Returns a decoder that concatenates tokens as raw bytes (tiktoken files).
std::unique_ptr<Decoder> make_concat_decoder();

// Returns the PCRE2 spelling of a literal string (every ASCII punctuation byte escaped).
std::string escape_regex_literal(std::string_view literal);

// Returns spec[key] as a string, or throws naming the component, key and file.
std::string json_string(const nlohmann::json& spec, const char* key, const char* component,
                        const std::string& file);
// Returns spec[key] when it is a boolean, else `fallback`.
bool json_bool(const nlohmann::json& spec, const char* key, bool fallback);
// Returns the regex of an HF pattern object: {"String": s} (escaped) or {"Regex": r}.
std::string hf_pattern_regex(const nlohmann::json& pattern, const char* component,
                             const std::string& file);

}  // namespace anvil::tok
