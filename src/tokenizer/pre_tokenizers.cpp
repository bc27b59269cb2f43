// Pre-tokenizers: Sequence, Split (string or regex; every HF delimiter behavior; invert),
// ByteLevel (GPT-2 regex and prefix space; the byte mapping itself is done by the model, which
// works on raw bytes), Metaspace and Digits. Other types are rejected when the file is loaded.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/regex.h"

namespace anvil::tok {
namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name, const std::string& file) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  ANVIL_FAIL("[tokenizer] {}: unknown Split behavior '{}'", file, name);
}

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Splits text by a regex exactly as HF's NormalizedString::split does for each behavior.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string_view pattern, Behavior behavior, bool invert,
                    const std::string& file)
      : regex_(pattern, file), behavior_(behavior), invert_(invert) {}

  void split(Piece piece, PieceSink sink) const override {
    auto emit = [&](size_t begin, size_t end) {
      if (end > begin)
        sink(Piece{piece.text.substr(begin, end - begin), piece.at_origin && begin == 0});
    };
    if (behavior_ == Behavior::kIsolated) {  // the common case streams without a span list
      size_t done = 0;
      regex_.for_each_match(piece.text, [&](size_t begin, size_t end) {
        emit(done, begin);
        emit(begin, end);
        done = end;
      });
      emit(done, piece.text.size());
      return;
    }
    std::vector<Span> spans;
    size_t done = 0;
    regex_.for_each_match(piece.text, [&](size_t begin, size_t end) {
      if (begin > done) spans.push_back({done, begin, invert_});
      spans.push_back({begin, end, !invert_});
      done = end;
    });
    if (done < piece.text.size()) spans.push_back({done, piece.text.size(), invert_});
    for (const Span& span : apply_behavior(spans))
      if (!(behavior_ == Behavior::kRemoved && span.is_match)) emit(span.begin, span.end);
  }

 private:
  std::vector<Span> apply_behavior(const std::vector<Span>& spans) const {
    std::vector<Span> out;
    bool previous_match = false;
    switch (behavior_) {
      case Behavior::kRemoved:
      case Behavior::kIsolated:
        return spans;
      case Behavior::kContiguous:
        for (const Span& s : spans) {
          if (s.is_match == previous_match && !out.empty())
            out.back().end = s.end;
          else
            out.push_back({s.begin, s.end, false});
          previous_match = s.is_match;
        }
        return out;
      case Behavior::kMergedWithPrevious:
        for (const Span& s : spans) {
          if (s.is_match && !previous_match && !out.empty())
            out.back().end = s.end;
          else
            out.push_back({s.begin, s.end, false});
          previous_match = s.is_match;
        }
        return out;
      case Behavior::kMergedWithNext:
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
          if (it->is_match && !previous_match && !out.empty())
            out.back().begin = it->begin;
          else
            out.push_back({it->begin, it->end, false});
          previous_match = it->is_match;
        }
        return {out.rbegin(), out.rend()};
    }
    return out;
  }

  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages)
      : stages_(std::move(stages)) {}
  void split(Piece piece, PieceSink sink) const override { run(0, piece, sink); }
  bool is_byte_level() const override {
    for (const auto& stage : stages_)
      if (stage->is_byte_level()) return true;
    return false;
  }

 private:
  void run(size_t stage, Piece piece, PieceSink sink) const {
    if (stage == stages_.size()) return sink(piece);
    stages_[stage]->split(piece, [&](Piece next) { run(stage + 1, next, sink); });
  }
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

// The byte-level stage. The model already works on raw bytes, so only the optional prefix
// space and the optional GPT-2 split remain here.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& file)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex)
      split_ = std::make_unique<SplitPreTokenizer>(kGpt2Pattern, Behavior::kIsolated, false, file);
  }
  void split(Piece piece, PieceSink sink) const override {
    std::string prefixed;
    if (add_prefix_space_ && !piece.text.starts_with(' ')) {
      prefixed.reserve(piece.text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece.text);
      piece.text = prefixed;
    }
    if (split_)
      split_->split(piece, sink);
    else if (!piece.text.empty())
      sink(piece);
  }
  bool is_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// SentencePiece-style spaces: ' ' becomes the replacement character, optionally prepended,
// and the text optionally split before each replacement character.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split_words,
                        const std::string& file)
      : replacement_(std::move(replacement)), scheme_(scheme) {
    if (split_words)
      split_ = std::make_unique<SplitPreTokenizer>(escape_regex_literal(replacement_),
                                                   Behavior::kMergedWithNext, false, file);
  }
  void split(Piece piece, PieceSink sink) const override {
    std::string text;
    text.reserve(piece.text.size() + replacement_.size());
    const bool prepend = (scheme_ == PrependScheme::kAlways ||
                          (scheme_ == PrependScheme::kFirst && piece.at_origin)) &&
                         !piece.text.starts_with(' ') && !piece.text.starts_with(replacement_);
    if (prepend) text.append(replacement_);
    for (char c : piece.text) {
      if (c == ' ')
        text.append(replacement_);
      else
        text.push_back(c);
    }
    const Piece rewritten{text, piece.at_origin};
    if (split_)
      split_->split(rewritten, sink);
    else if (!text.empty())
      sink(rewritten);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

PrependScheme parse_prepend_scheme(const nlohmann::json& spec, const std::string& file) {
  if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean() &&
      !spec["add_prefix_space"].get<bool>())
    return PrependScheme::kNever;
  if (!spec.contains("prepend_scheme") || spec["prepend_scheme"].is_null())
    return PrependScheme::kAlways;
  const std::string scheme = spec["prepend_scheme"].get<std::string>();
  if (scheme == "always") return PrependScheme::kAlways;
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  ANVIL_FAIL("[tokenizer] {}: unknown Metaspace prepend_scheme '{}'", file, scheme);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& file) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", "pre_tokenizer", file);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    for (const auto& stage : spec.at("pretokenizers")) {
      auto made = make_pre_tokenizer(stage, file);
      if (!made) continue;
      ANVIL_CHECK(stages.empty() || !stages.back()->is_byte_level(),
                  "[tokenizer] {}: a pre-tokenizer after ByteLevel is not supported", file);
      stages.push_back(std::move(made));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(stages));
  }
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(
        hf_pattern_regex(spec.at("pattern"), "Split", file),
        parse_behavior(json_string(spec, "behavior", "Split", file), file),
        json_bool(spec, "invert", false), file);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(json_bool(spec, "add_prefix_space", true),
                                                   json_bool(spec, "use_regex", true), file);
  if (type == "Metaspace")
    return std::make_unique<MetaspacePreTokenizer>(
        json_string(spec, "replacement", "Metaspace", file), parse_prepend_scheme(spec, file),
        json_bool(spec, "split", true), file);
  if (type == "Digits")
    return std::make_unique<SplitPreTokenizer>(
        "\\p{N}", json_bool(spec, "individual_digits", false) ? Behavior::kIsolated
                                                              : Behavior::kContiguous,
        false, file);
  ANVIL_FAIL("[tokenizer] {}: unsupported pre_tokenizer type '{}' (supported: Sequence, Split, "
             "ByteLevel, Metaspace, Digits)",
             file, type);
}

std::unique_ptr<PreTokenizer> make_isolating_split(std::string_view pattern,
                                                   const std::string& file) {
  return std::make_unique<SplitPreTokenizer>(pattern, Behavior::kIsolated, false, file);
}

}  // namespace anvil::tok
