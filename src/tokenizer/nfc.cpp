// NFC: a quick scan for code points that can change, then decompose / reorder / compose.
#include "tokenizer/nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

using namespace nfc_data;

// Hangul syllables compose and decompose arithmetically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

template <typename T>
const T* find_run(const T* runs, size_t count, uint32_t cp) {
  const T* end = runs + count;
  const T* it = std::upper_bound(runs, end, cp, [](uint32_t v, const T& r) { return v < r.first; });
  if (it == runs) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const ClassRun* run = find_run(kCombiningClasses, kCombiningClassCount, cp);
  return run ? run->combining_class : 0;
}

bool may_change(uint32_t cp) {
  return cp >= 0x300 && find_run(kMaybeChanges, kMaybeChangeCount, cp) != nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp,
      [](const Decomposition& d, uint32_t v) { return d.code_point < v; });
  if (it == end || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// Returns the primary composite of (first, second), or 0.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount)
    return first + (second - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(
      kCompositions, end, std::make_pair(first, second), [](const Composition& c, const auto& key) {
        return c.first != key.first ? c.first < key.first : c.second < key.second;
      });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

void nfc_normalize(std::string& text) {
  bool needed = false;
  for (size_t pos = 0; pos < text.size() && !needed;) {
    if (static_cast<unsigned char>(text[pos]) < 0xCC) {  // below U+0300
      pos += utf8_char_length(text, pos) ? utf8_char_length(text, pos) : 1;
      continue;
    }
    const size_t length = utf8_char_length(text, pos);
    if (length == 0) return;  // callers pass well-formed text only
    needed = may_change(utf8_decode(text, pos, length));
    pos += length;
  }
  if (!needed) return;

  std::vector<uint32_t> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_char_length(text, pos);
    decompose(utf8_decode(text, pos, length), chars);
    pos += length;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < chars.size();) {
    if (combining_class(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && combining_class(chars[j]) != 0) ++j;
    std::stable_sort(chars.begin() + static_cast<ptrdiff_t>(i),
                     chars.begin() + static_cast<ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) {
                       return combining_class(a) < combining_class(b);
                     });
    i = j;
  }
  // Canonical composition (the UAX #15 sample algorithm).
  size_t starter = 0;
  size_t kept = 1;
  int last_class = chars.empty() ? 0 : combining_class(chars[0]);
  if (last_class != 0) last_class = 256;  // a leading non-starter blocks everything after it
  for (size_t i = 1; i < chars.size(); ++i) {
    const uint32_t ch = chars[i];
    const int ch_class = combining_class(ch);
    const uint32_t composite = compose(chars[starter], ch);
    if (composite != 0 && (last_class < ch_class || last_class == 0)) {
      chars[starter] = composite;
      continue;
    }
    if (ch_class == 0) starter = kept;
    last_class = ch_class;
    chars[kept++] = ch;
  }
  chars.resize(std::min(kept, chars.size()));

  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : chars) utf8_append(out, cp);
  text.swap(out);
}

}  // namespace anvil::tok
