// Trie construction, leftmost-longest search and the HF whitespace/word rules for added tokens.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

// Returns true when the character starting at `pos` is a regex word character (\w).
bool is_word_char_at(std::string_view text, size_t pos) {
  static const Regex word("^\\w", "added-token single_word check");
  size_t length = utf8_char_length(text, pos);
  if (length == 0) return false;
  size_t begin = 0;
  size_t end = 0;
  return word.find(text.substr(pos, length), 0, begin, end);
}

// Returns the start of the character that ends at `end` (end > 0).
size_t previous_char_start(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80 && end - pos < 4) --pos;
  return pos;
}

bool white_space_at(std::string_view text, size_t pos, size_t& length) {
  length = utf8_char_length(text, pos);
  return length != 0 && is_unicode_white_space(utf8_decode(text, pos, length));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& pattern = patterns[i];
    if (pattern.empty()) continue;
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
    int32_t node = 0;
    for (unsigned char byte : pattern) {
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(),
                                         std::make_pair(byte, int32_t{0})),
                        {byte, next});
        nodes_.emplace_back();
      }
      node = next;
    }
    // With duplicate patterns the first token listed keeps the match.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

bool AddedTokenMatcher::find_next(std::string_view text, size_t from, size_t& begin,
                                  size_t& end, int32_t& index) const {
  for (size_t start = from; start < text.size(); ++start) {
    if (!first_byte_[static_cast<unsigned char>(text[start])]) continue;
    int32_t node = 0;
    index = -1;
    for (size_t pos = start; pos < text.size(); ++pos) {
      node = child(node, static_cast<unsigned char>(text[pos]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        index = nodes_[node].token;
        end = pos + 1;
      }
    }
    if (index >= 0) {
      begin = start;
      return true;
    }
  }
  return false;
}

bool AddedTokenMatcher::accept(std::string_view text, int32_t index, size_t& begin, size_t& end,
                               size_t done) const {
  const AddedToken& token = tokens_[index];
  if (token.single_word) {
    const bool word_before = begin > 0 && is_word_char_at(text, previous_char_start(text, begin));
    const bool word_after = end < text.size() && is_word_char_at(text, end);
    if (word_before || word_after) return false;
  }
  if (token.lstrip) {
    size_t start = begin;
    while (start > done) {
      const size_t prev = previous_char_start(text, start);
      size_t length = 0;
      if (!white_space_at(text, prev, length) || prev + length != start) break;
      start = prev;
    }
    begin = start;
  }
  if (token.rstrip) {
    size_t length = 0;
    while (end < text.size() && white_space_at(text, end, length)) end += length;
  }
  return true;
}

}  // namespace anvil::tok
