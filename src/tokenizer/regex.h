// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for pre-tokenizer splits, Replace
// stages and added-token word checks; std::regex lacks \p{L} and inline flags. A Regex is
// immutable and shared between threads; each thread matches with its own match data and JIT
// stack. Subjects must be well-formed UTF-8 (callers validate once): matching skips PCRE2's
// UTF check to stay linear. Dialect: tokenizer.json patterns are Oniguruma (Ruby syntax) and
// tiktoken's are Rust regex; both read \s as Unicode White_Space and \w as Unicode word
// characters, and Oniguruma anchors ^ and $ at every line. PCRE2 differs (its \s adds U+180E,
// its \w lacks marks), so patterns are rewritten (to_pcre2_pattern) and use PCRE2_MULTILINE.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace anvil::tok {

// Returns `pattern` with \s \S \w \W \h \H spelled as Oniguruma / Rust regex mean them.
std::string to_pcre2_pattern(std::string_view pattern, std::string_view context);

class Regex {
 public:
  // Compiles `pattern`; throws anvil::Error naming `context` and PCRE2's reason on failure.
  Regex(std::string_view pattern, std::string_view context);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each successive non-overlapping match in `subject`. An empty
  // match is reported and the search resumes one character later.
  template <typename OnMatch>
  void for_each_match(std::string_view subject, OnMatch&& on_match) const {
    size_t offset = 0;
    size_t begin = 0;
    size_t end = 0;
    while (offset <= subject.size() && find(subject, offset, begin, end)) {
      on_match(begin, end);
      offset = end > begin ? end : next_char(subject, end);
    }
  }

  // Finds the first match at or after `offset`; returns false when there is none.
  bool find(std::string_view subject, size_t offset, size_t& begin, size_t& end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  static size_t next_char(std::string_view subject, size_t pos);

  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace anvil::tok
