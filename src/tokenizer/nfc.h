// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15) for the NFC normalizer that Qwen2-style tokenizer.json files use.
// The tables (nfc_tables.cpp) are generated from Python's unicodedata by
// tools/fixtures/unicode_nfc_tables.py. Text whose code points cannot change under NFC (all of
// ASCII and Latin-1, most CJK text) is returned untouched after one scan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace anvil::tok {

// Rewrites well-formed UTF-8 text into NFC in place.
void nfc_normalize(std::string& text);

namespace nfc_data {

struct ClassRun {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};
struct Decomposition {
  uint32_t code_point;
  uint32_t first;
  uint32_t second;  // 0 for a singleton decomposition
};
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};
struct Run {
  uint32_t first;
  uint32_t last;
};

extern const char* const kUnicodeVersion;
extern const ClassRun kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];  // sorted by (first, second)
extern const size_t kCompositionCount;
extern const Run kMaybeChanges[];
extern const size_t kMaybeChangeCount;

}  // namespace nfc_data
}  // namespace anvil::tok
