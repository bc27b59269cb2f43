// Unicode normalization through utf8proc_map, one well-formed UTF-8 run at a time.
#include "tokenizer/unicode_forms.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

utf8proc_option_t form_options(UnicodeForm form) {
  // STABLE: unassigned code points are kept as they are, as UAX #15 requires.
  switch (form) {
    case UnicodeForm::kNfc: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case UnicodeForm::kNfd: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case UnicodeForm::kNfkc:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case UnicodeForm::kNfkd:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  ANVIL_FAIL("[tokenizer] unknown Unicode normalization form {}", static_cast<int>(form));
}

// ASCII is fixed under every form, and nothing below U+0300 changes under NFC (no character
// there decomposes canonically or combines with what follows), so most Latin text skips utf8proc.
bool is_fixed(std::string_view text, UnicodeForm form) {
  const unsigned char limit = form == UnicodeForm::kNfc ? 0xCC : 0x80;  // 0xCC leads U+0300
  for (char c : text)
    if (static_cast<unsigned char>(c) >= limit) return false;
  return true;
}

// Appends the normalization of one well-formed run (embedded NULs included) to `out`.
void append_normalized(std::string_view run, UnicodeForm form, std::string& out) {
  if (is_fixed(run, form)) {
    out.append(run);
    return;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &mapped, form_options(form));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  // The run passed utf8_char_length(), whose RFC 3629 rules utf8proc shares, so a refusal
  // here is a disagreement between the two (or memory running out), never the user's text.
  ANVIL_CHECK(length >= 0, "[tokenizer] utf8proc {} cannot normalize a {}-byte run: {}",
              utf8proc_version(), run.size(), utf8proc_errmsg(length));
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
}

}  // namespace

void normalize_unicode(std::string& text, UnicodeForm form) {
  if (is_fixed(text, form)) return;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_char_length(text, pos);
    if (length != 0) {
      pos += length;
      continue;
    }
    append_normalized(std::string_view(text).substr(run_start, pos - run_start), form, out);
    out.push_back(text[pos]);
    run_start = ++pos;
  }
  append_normalized(std::string_view(text).substr(run_start), form, out);
  text.swap(out);
}

const char* unicode_data_version() { return utf8proc_unicode_version(); }

}  // namespace anvil::tok
