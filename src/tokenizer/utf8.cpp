// UTF-8 scanning, whitespace classes and the GPT-2 byte-level alphabet.
#include "tokenizer/utf8.h"

namespace anvil::tok {

size_t utf8_char_length(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t left = text.size() - pos;
  const unsigned char c = s[pos];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i) { return (s[pos + i] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !cont(1) || !cont(2)) return 0;
    const unsigned char c1 = s[pos + 1];
    if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    const unsigned char c1 = s[pos + 1];
    if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
    if (c == 0xF4 && c1 >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

uint32_t utf8_decode(std::string_view text, size_t pos, size_t length) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  switch (length) {
    case 1: return s[0];
    case 2: return (uint32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return (uint32_t(s[0] & 0x0F) << 12) | (uint32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
      return (uint32_t(s[0] & 0x07) << 18) | (uint32_t(s[1] & 0x3F) << 12) |
             (uint32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word;
      __builtin_memcpy(&word, text.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    const size_t length = utf8_char_length(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

bool is_unicode_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_python_space(uint32_t cp) {
  // Python adds the ASCII information separators (U+001C-U+001F) to White_Space.
  return (cp >= 0x1C && cp <= 0x1F) || is_unicode_white_space(cp);
}

namespace {

struct ByteLevelAlphabet {
  std::array<uint32_t, 256> to_unicode{};
  std::array<int16_t, 512> to_byte{};  // every alphabet code point is below 512

  ByteLevelAlphabet() {
    to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to 256 + n in order.
    uint32_t next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_unicode[b] = printable ? static_cast<uint32_t>(b) : 256 + next++;
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet table;
  return table;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t byte) { return alphabet().to_unicode[byte]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? alphabet().to_byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8_append(out, byte_to_unicode(b));
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_char_length(text, pos);
    if (length == 0) return std::nullopt;
    const int byte = unicode_to_byte(utf8_decode(text, pos, length));
    if (byte < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte));
    pos += length;
  }
  return out;
}

}  // namespace anvil::tok
