// UTF-8 scanning and the GPT-2 byte-level alphabet shared by every tokenizer component.
// Invariants: utf8_char_length() accepts exactly the well-formed sequences of RFC 3629 (no
// overlong forms, no surrogates, nothing above U+10FFFF), which is also what PCRE2's UTF check
// accepts, so text that passes it can be matched with PCRE2_NO_UTF_CHECK. The byte-level map is
// GPT-2's bytes_to_unicode(): a bijection between the 256 byte values and 256 code points.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace anvil::tok {

// Returns the length (1-4) of the well-formed UTF-8 character starting at text[pos], or 0 when
// the bytes there are not a well-formed character.
size_t utf8_char_length(std::string_view text, size_t pos);

// Returns the code point of the well-formed character of `length` bytes at text[pos].
uint32_t utf8_decode(std::string_view text, size_t pos, size_t length);

// Appends the UTF-8 encoding of a code point.
void utf8_append(std::string& out, uint32_t code_point);

// Returns true when every byte sequence in `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// Returns true for code points Python's str.isspace() accepts (Meta's Llama 3 pre-split uses it).
bool is_python_space(uint32_t code_point);

// Returns true for the Unicode White_Space property (the `\s` of Rust's regex crate).
bool is_unicode_white_space(uint32_t code_point);

// Returns the code point GPT-2's byte-level alphabet assigns to a byte.
uint32_t byte_to_unicode(uint8_t byte);

// Returns the byte a byte-level code point stands for, or -1 when it is not in the alphabet.
int unicode_to_byte(uint32_t code_point);

// Returns the byte-level (GPT-2 alphabet) spelling of raw bytes.
std::string bytes_to_byte_level(std::string_view bytes);

// Returns the raw bytes a byte-level string spells, or nullopt when a character of it is not
// in the alphabet (or the string is not well-formed UTF-8).
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace anvil::tok
