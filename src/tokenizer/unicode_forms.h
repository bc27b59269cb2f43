// The four Unicode normalization forms (UAX #15) of Hugging Face's NFC, NFD, NFKC and NFKD
// normalizers, computed by utf8proc (Debian libutf8proc-dev). utf8proc refuses text that is not
// well-formed UTF-8; the tokenizer splits stray bytes out before normalizing (byte-level BPE
// must keep them), and normalize_unicode() keeps them in place for any other caller.
#pragma once

#include <string>

namespace anvil::tok {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

// Rewrites text into `form` in place; bytes that are not well-formed UTF-8 stay where they
// are, and the well-formed runs between them are normalized each on its own.
void normalize_unicode(std::string& text, UnicodeForm form);

// Returns the Unicode version of utf8proc's tables, e.g. "15.0.0".
const char* unicode_data_version();

}  // namespace anvil::tok
