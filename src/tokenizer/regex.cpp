// PCRE2 compilation and matching with per-thread match state.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Match data, context and JIT stack for one thread; shared by every Regex that thread uses.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  ThreadMatchState() {
    data = pcre2_match_data_create(16, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long whitespace or letter runs (25k+ characters) need more than the 32 KiB default.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ANVIL_CHECK(data && context && stack, "[tokenizer] out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

}  // namespace

std::string to_pcre2_pattern(std::string_view pattern, std::string_view context) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  size_t class_start = 0;  // position just after '[' or '[^'
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      if (!in_class && c == '[') {
        in_class = true;
        class_start = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
      } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        const size_t close = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
        if (close != std::string_view::npos) {
          out.append(pattern.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      } else if (in_class && c == ']' && i != class_start) {
        in_class = false;
      }
      out.push_back(c);
      continue;
    }
    const char escaped = pattern[++i];
    switch (escaped) {
      case 's': out.append("\\p{White_Space}"); break;
      case 'S': out.append("\\P{White_Space}"); break;
      case 'w':
        out.append(in_class ? std::string(kWordItems) : fmt::format("[{}]", kWordItems));
        break;
      case 'h':
        out.append(in_class ? std::string(kHexItems) : fmt::format("[{}]", kHexItems));
        break;
      case 'W':
      case 'H':
        ANVIL_CHECK(!in_class, "[tokenizer] {}: regex '{}' uses \\{} inside a character class, "
                    "which anvil cannot translate to PCRE2", context, pattern, escaped);
        out.append(fmt::format("[^{}]", escaped == 'W' ? kWordItems : kHexItems));
        break;
      case 'Q': {  // \Q...\E quotes literally
        const size_t end = pattern.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(i - 1, stop - (i - 1)));
        i = stop - 1;
        break;
      }
      default:
        out.push_back('\\');
        out.push_back(escaped);
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view context) : pattern_(pattern) {
  const std::string translated = to_pcre2_pattern(pattern, context);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &error_offset, nullptr);
  ANVIL_CHECK(code_ != nullptr, "[tokenizer] {}: cannot compile regex '{}': {} at offset {}",
              context, pattern, pcre2_message(error), error_offset);
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::find(std::string_view subject, size_t offset, size_t& begin, size_t& end) const {
  ThreadMatchState& state = thread_state();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code_, text, subject.size(), offset, PCRE2_NO_UTF_CHECK,
                                        state.data, state.context)
                      : pcre2_match(code_, text, subject.size(), offset, PCRE2_NO_UTF_CHECK,
                                    state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  ANVIL_CHECK(rc >= 0, "[tokenizer] regex '{}' failed: {}", pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

size_t Regex::next_char(std::string_view subject, size_t pos) {
  if (pos >= subject.size()) return pos + 1;
  const size_t length = utf8_char_length(subject, pos);
  return pos + (length == 0 ? 1 : length);
}

}  // namespace anvil::tok
