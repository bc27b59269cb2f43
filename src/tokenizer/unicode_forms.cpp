// Unicode normalization through utf8proc_map, applied only to the pieces of text that can change.
#include "tokenizer/unicode_forms.h"

#include <utf8proc.h>

#include <bitset>
#include <cstdint>
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

constexpr uint32_t kCodeSpace = 0x110000;
constexpr uint32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

// Returns the code points that can be the second half of a canonical composition: every
// element but the first of a full canonical decomposition (Hangul's V and T jamo included).
// Derived once from utf8proc's own data, so it follows whatever Unicode version it carries.
const std::bitset<kCodeSpace>& composition_seconds() {
  static const std::unique_ptr<std::bitset<kCodeSpace>> seconds = [] {
    auto bits = std::make_unique<std::bitset<kCodeSpace>>();
    for (uint32_t cp = 0; cp < kCodeSpace; ++cp) {
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      const bool hangul = cp >= kHangulFirst && cp <= kHangulLast;
      if (!hangul && (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0)) continue;
      utf8proc_int32_t parts[8];
      int boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), parts,
                                                         8, UTF8PROC_DECOMPOSE, &boundclass);
      for (utf8proc_ssize_t i = 1; i < n && i < 8; ++i) bits->set(static_cast<size_t>(parts[i]));
    }
    return bits;
  }();
  return *seconds;
}

// Appends utf8proc's normalization of one well-formed run (embedded NULs included).
void append_normalized(std::string_view run, UnicodeForm form, std::string& out) {
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

// Returns the stable code points of a form (UAX #15): starters the form maps to themselves
// that, for the composed forms, cannot be the second half of a composition either. Nothing on
// one side of such a code point can reach across it, so text can be cut before it and the
// pieces normalized separately.
std::unique_ptr<std::bitset<kCodeSpace>> build_stable_table(UnicodeForm form) {
  const bool composes = form == UnicodeForm::kNfc || form == UnicodeForm::kNfkc;
  auto stable = std::make_unique<std::bitset<kCodeSpace>>();
  std::string alone;
  std::string mapped;
  for (uint32_t cp = 0; cp < kCodeSpace; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates never reach here
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0 || (composes && composition_seconds().test(cp))) continue;
    if (p->decomp_seqindex != UINT16_MAX || (cp >= kHangulFirst && cp <= kHangulLast)) {
      alone.clear();
      mapped.clear();
      utf8_append(alone, cp);
      append_normalized(alone, form, mapped);
      if (mapped != alone) continue;
    }
    stable->set(cp);
  }
  return stable;
}

const std::bitset<kCodeSpace>& stable_code_points(UnicodeForm form) {
  switch (form) {
    case UnicodeForm::kNfc: {
      static const auto table = build_stable_table(UnicodeForm::kNfc);
      return *table;
    }
    case UnicodeForm::kNfd: {
      static const auto table = build_stable_table(UnicodeForm::kNfd);
      return *table;
    }
    case UnicodeForm::kNfkc: {
      static const auto table = build_stable_table(UnicodeForm::kNfkc);
      return *table;
    }
    case UnicodeForm::kNfkd: {
      static const auto table = build_stable_table(UnicodeForm::kNfkd);
      return *table;
    }
  }
  ANVIL_FAIL("[tokenizer] unknown Unicode normalization form {}", static_cast<int>(form));
}

}  // namespace

// Only the pieces that hold an unstable code point go through utf8proc; a piece runs from a
// stable code point (or the start, or a stray byte) to the next. Text with no unstable code
// point (ASCII, most CJK) is left untouched without a copy.
void normalize_unicode(std::string& text, UnicodeForm form) {
  const std::bitset<kCodeSpace>& stable = stable_code_points(form);
  std::string out;
  size_t copied = 0;   // text[0, copied) is in `out`
  size_t piece = 0;    // start of the current piece
  bool dirty = false;  // the current piece holds an unstable code point
  auto flush = [&](size_t end) {
    if (!dirty) return;
    out.append(text, copied, piece - copied);
    append_normalized(std::string_view(text).substr(piece, end - piece), form, out);
    copied = end;
    dirty = false;
  };
  for (size_t pos = 0; pos < text.size();) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    const size_t length = lead < 0x80 ? 1 : utf8_char_length(text, pos);
    if (length == 0) {  // a stray byte ends the piece and stays as it is
      flush(pos);
      piece = ++pos;
      continue;
    }
    if (lead < 0x80 || stable.test(utf8_decode(text, pos, length))) {
      flush(pos);
      piece = pos;
    } else {
      dirty = true;
    }
    pos += length;
  }
  flush(text.size());
  if (copied == 0) return;  // nothing was unstable
  out.append(text, copied, std::string::npos);
  text.swap(out);
}

const char* unicode_data_version() { return utf8proc_unicode_version(); }

}  // namespace anvil::tok
