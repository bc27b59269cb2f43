// The safetensors header: its dtype table and a strict parser that works on bytes in memory
// (the fuzz target and SafetensorsFile both call it). Layout: u64 little-endian N, N bytes of
// JSON starting with '{' (space padded), then the data area. Invariant of a parsed header: the
// tensors' byte ranges, sorted by offset, tile the data area exactly from 0 to its end, each
// range holds numel * bits / 8 bytes, names are unique and metadata values are strings. Every
// violation is one anvil::Error "[safetensors] <file>: [tensor '<name>': ]<problem>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace anvil {

// One dtype of the format. `writer_rank` is the dtype's position in the reference library's
// enum; its writer sorts tensors by descending rank (then name), which is also descending
// alignment, and anvil's writer does the same so files match byte for byte.
struct SafetensorsDType {
  std::string_view name;
  int bits;
  int writer_rank;
};

// Returns the format's description of a dtype name ("F32", "BF16", ...), nullptr if unknown.
const SafetensorsDType* find_safetensors_dtype(std::string_view name);
// Returns the safetensors spelling of an anvil dtype (f32 -> "F32", bf16 -> "BF16", ...).
std::string_view safetensors_dtype_name(DType dtype);
// Returns the anvil dtype stored as the given safetensors dtype, or nullopt when anvil has none.
std::optional<DType> anvil_dtype_from_safetensors(std::string_view name);

// The largest header the reference library accepts.
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor of a file. `data` points into the mapped file (nullptr when only the header was
// parsed); the memory is read-only and lives as long as the SafetensorsFile that owns it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as spelled in the header: "F32", "BF16", ...
  std::vector<int64_t> shape;   // empty for a scalar
  uint64_t begin = 0;           // byte range [begin, end) relative to the data area
  uint64_t end = 0;
  const uint8_t* data = nullptr;
  std::string file;             // the file it came from, for error messages

  // Returns the number of elements (1 for a scalar).
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
  // Returns the raw bytes; requires data != nullptr.
  std::span<const uint8_t> bytes() const;
  // Returns a zero-copy anvil view (F32, BF16, F16, I32, U32, U16; rank <= 4, aligned data).
  // The memory is read-only: writing through the view is undefined.
  Tensor view() const;
  // Converts a floating tensor (F32, BF16, F16) to f32 into `out` of exactly numel() values.
  void read_f32(std::span<float> out) const;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;                      // N, padding included
  uint64_t data_offset = 0;                       // 8 + N: start of the data area in the file
  std::vector<SafetensorsEntry> entries;          // sorted by byte offset
  std::map<std::string, std::string> metadata;   // the "__metadata__" object
};

// Parses and validates a safetensors header. `bytes` holds the first `size` bytes of a file
// whose total size is `file_size` (size may be the whole file); `source` names the file in
// error messages. Throws anvil::Error on the first violation of the format.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size, uint64_t file_size,
                                           std::string_view source);

// Returns {"dim0", ...} as "[2, 3]" for messages.
std::string format_dims(const std::vector<int64_t>& dims);

}  // namespace anvil
