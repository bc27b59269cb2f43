// Encode and decode through the pipeline stages; Meta's Llama 3 pre-split.
#include "tokenizer/bpe_tokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

constexpr size_t kMetaWindowChars = 400'000;
constexpr size_t kMetaMaxRunChars = 25'000;

// Returns the byte length of the unit at `pos`: a character, or 1 for a stray invalid byte.
size_t unit_length(std::string_view text, size_t pos) {
  const size_t length = utf8_char_length(text, pos);
  return length == 0 ? 1 : length;
}

bool unit_is_python_space(std::string_view text, size_t pos) {
  const size_t length = utf8_char_length(text, pos);
  return length != 0 && is_python_space(utf8_decode(text, pos, length));
}

// Splits one window so no run of whitespace or non-whitespace exceeds kMetaMaxRunChars
// (a transcription of Meta's _split_whitespaces_or_nonwhitespaces).
void split_runs(std::string_view text, size_t begin, size_t end,
                FunctionRef<void(size_t, size_t)> fn) {
  if (begin == end) return;
  size_t run_length = 0;
  bool run_is_space = unit_is_python_space(text, begin);
  size_t slice_start = begin;
  for (size_t pos = begin; pos < end; pos += unit_length(text, pos)) {
    const bool is_space = unit_is_python_space(text, pos);
    if (is_space != run_is_space) {
      run_length = 1;
      run_is_space = is_space;
    } else if (++run_length > kMetaMaxRunChars) {
      fn(slice_start, pos);
      slice_start = pos;
      run_length = 1;
    }
  }
  fn(slice_start, end);
}

}  // namespace

void for_each_meta_chunk(std::string_view text, FunctionRef<void(size_t, size_t)> fn) {
  if (text.size() <= kMetaMaxRunChars) {  // fewer bytes than the limit: nothing to cut
    if (!text.empty()) fn(0, text.size());
    return;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t window_end = pos;
    for (size_t chars = 0; chars < kMetaWindowChars && window_end < text.size(); ++chars)
      window_end += unit_length(text, window_end);
    split_runs(text, pos, window_end, fn);
    pos = window_end;
  }
}

BpeTokenizer::BpeTokenizer(BpeTokenizerParts parts) : p_(std::move(parts)) {
  std::vector<AddedToken> raw;
  std::vector<std::string> raw_patterns;
  std::vector<AddedToken> normalized;
  std::vector<std::string> normalized_patterns;
  special_ids_.assign(p_.id_to_token.size(), 0);
  for (const AddedToken& token : p_.added_tokens) {
    if (token.special) special_ids_[token.id] = 1;
    if (token.normalized) {
      std::string pattern = token.content;
      if (p_.normalizer && is_valid_utf8(pattern)) p_.normalizer->normalize(pattern);
      // HF decodes a normalized added token as its normalized content ("\ufb01ne" as "fine"
      // behind NFKC), while its id is still looked up by the content as written.
      p_.id_to_token[token.id] = pattern;
      normalized.push_back(token);
      normalized_patterns.push_back(std::move(pattern));
    } else {
      raw.push_back(token);
      raw_patterns.push_back(token.content);
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_ids_.size() && special_ids_[id];
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special) ids.insert(ids.end(), p_.affixes.prefix.begin(), p_.affixes.prefix.end());
  if (p_.meta_pre_split) {
    for_each_meta_chunk(text, [&](size_t begin, size_t end) {
      encode_text(text.substr(begin, end - begin), begin == 0, true, ids);
    });
  } else {
    encode_text(text, true, true, ids);
  }
  if (add_special) ids.insert(ids.end(), p_.affixes.suffix.begin(), p_.affixes.suffix.end());
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_ordinary(std::string_view text, bool at_origin) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (p_.meta_pre_split) {
    for_each_meta_chunk(text, [&](size_t begin, size_t end) {
      encode_text(text.substr(begin, end - begin), at_origin && begin == 0, false, ids);
    });
  } else {
    encode_text(text, at_origin, false, ids);
  }
  return ids;
}

void BpeTokenizer::encode_text(std::string_view text, bool at_origin, bool match_added,
                               std::vector<int32_t>& ids) const {
  if (raw_matcher_.empty() || !match_added)
    return encode_segment(text, at_origin, match_added, ids);
  raw_matcher_.split(
      text,
      [&](size_t begin, size_t end) {
        encode_segment(text.substr(begin, end - begin), at_origin && begin == 0, match_added,
                       ids);
      },
      [&](int32_t id) { ids.push_back(id); });
}

void BpeTokenizer::encode_segment(std::string_view text, bool at_origin, bool match_added,
                                  std::vector<int32_t>& ids) const {
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = utf8_char_length(text, pos);
    if (length != 0) {
      pos += length;
      continue;
    }
    if (pos > run_start)
      encode_valid(text.substr(run_start, pos - run_start), at_origin && run_start == 0,
                   match_added, ids);
    p_.model->encode_word(text.substr(pos, 1), ids);
    run_start = ++pos;
  }
  if (pos > run_start)
    encode_valid(text.substr(run_start, pos - run_start), at_origin && run_start == 0,
                 match_added, ids);
}

void BpeTokenizer::encode_valid(std::string_view text, bool at_origin, bool match_added,
                                std::vector<int32_t>& ids) const {
  if (!p_.normalizer) return encode_normalized(text, at_origin, match_added, ids);
  std::string normalized(text);
  p_.normalizer->normalize(normalized);
  encode_normalized(normalized, at_origin, match_added, ids);
}

void BpeTokenizer::encode_normalized(std::string_view text, bool at_origin, bool match_added,
                                     std::vector<int32_t>& ids) const {
  auto run_model = [&](std::string_view run, bool run_at_origin) {
    if (!p_.pre_tokenizer) return p_.model->encode_word(run, ids);
    p_.pre_tokenizer->split(Piece{run, run_at_origin},
                            [&](Piece piece) { p_.model->encode_word(piece.text, ids); });
  };
  if (normalized_matcher_.empty() || !match_added) return run_model(text, at_origin);
  normalized_matcher_.split(
      text,
      [&](size_t begin, size_t end) {
        run_model(text.substr(begin, end - begin), at_origin && begin == 0);
      },
      [&](int32_t id) { ids.push_back(id); });
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    ANVIL_CHECK(id >= 0 && id < vocab_size() && p_.id_assigned[id],
                "[tokenizer] cannot decode id {}: {} (vocab size {}, {})", id,
                id >= 0 && id < vocab_size() ? "no token has this id" : "out of range",
                vocab_size(), p_.source_path);
    tokens.push_back(p_.id_to_token[id]);
  }
  if (!p_.decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) joined.push_back(' ');
      joined.append(tokens[i]);
    }
    return joined;
  }
  p_.decoder->decode(tokens);
  std::string out;
  for (const std::string& token : tokens) out.append(token);
  return out;
}

}  // namespace anvil::tok
