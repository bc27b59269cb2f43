// libFuzzer target for the safetensors header parser. Any input must either parse into a header
// whose invariants hold (ranges tile the data area, sizes match shapes) or be rejected with an
// anvil::Error; any other exception, crash, sanitizer report or broken invariant is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const anvil::SafetensorsHeader header =
        anvil::parse_safetensors_header(data, size, size, "fuzz-input");
    uint64_t cursor = 0;
    for (const anvil::SafetensorsEntry& entry : header.entries) {
      if (entry.begin != cursor || entry.end < entry.begin) std::abort();
      const anvil::SafetensorsDType* dtype = anvil::find_safetensors_dtype(entry.dtype);
      if (dtype == nullptr) std::abort();
      if (static_cast<unsigned __int128>(entry.numel()) * dtype->bits != entry.nbytes() * 8)
        std::abort();
      cursor = entry.end;
    }
    if (header.data_offset != 8 + header.header_bytes || header.data_offset + cursor != size)
      std::abort();
  } catch (const anvil::Error&) {
  }
  return 0;
}
