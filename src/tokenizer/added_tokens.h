// Added (and special) tokens: literal strings matched in the text before the model sees it,
// with Hugging Face's semantics: leftmost-longest, non-overlapping matches over one byte trie;
// then, per matched token, `single_word` discards a match glued to word characters, `lstrip` /
// `rstrip` absorb the whitespace beside it. A discarded match does not rescan its span (as in
// HF, whose Aho-Corasick iterator has already moved past it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Builds the matcher; `patterns[i]` is the text matched for tokens[i] (its content, or its
  // normalized content for tokens matched after normalization).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Splits `text` into runs: on_text(begin, end) for plain text (never empty) and on_token(id)
  // for each added token, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t done = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t begin = 0;
      size_t end = 0;
      int32_t index = -1;
      if (!find_next(text, pos, begin, end, index)) break;
      pos = end;
      if (!accept(text, index, begin, end, done)) continue;
      if (begin > done) on_text(done, begin);
      on_token(tokens_[index].id);
      done = end;
      pos = end;
    }
    if (done < text.size()) on_text(done, text.size());
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  // Finds the leftmost-longest match starting at or after `from`.
  bool find_next(std::string_view text, size_t from, size_t& begin, size_t& end,
                 int32_t& index) const;
  // Applies single_word / lstrip / rstrip; widens [begin, end) and returns false to discard.
  bool accept(std::string_view text, int32_t index, size_t& begin, size_t& end,
              size_t done) const;
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace anvil::tok
