// Strict safetensors header parsing. The JSON goes through parse_json_strict (no duplicate
// keys, which nlohmann::json would silently collapse; no nesting deeper than a header has,
// which bounds the parser's memory on hostile input); the decoded header is then checked field
// by field and the byte ranges are checked to tile the data area exactly.
#include "io/safetensors_header.h"

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_util.h"

namespace anvil {
namespace {

using nlohmann::json;

// In the reference library's enum order: the index is the writer's sort rank.
constexpr std::array<SafetensorsDType, 22> kDTypes = {{
    {"BOOL", 8, 0},        {"F4", 4, 1},           {"F6_E2M3", 6, 2},      {"F6_E3M2", 6, 3},
    {"U8", 8, 4},          {"I8", 8, 5},           {"F8_E5M2", 8, 6},      {"F8_E4M3", 8, 7},
    {"F8_E8M0", 8, 8},     {"F8_E4M3FNUZ", 8, 9},  {"F8_E5M2FNUZ", 8, 10}, {"I16", 16, 11},
    {"U16", 16, 12},       {"F16", 16, 13},        {"BF16", 16, 14},       {"I32", 32, 15},
    {"U32", 32, 16},       {"F32", 32, 17},        {"C64", 64, 18},        {"F64", 64, 19},
    {"I64", 64, 20},       {"U64", 64, 21},
}};

// A header is an object of objects holding at most one array level (shape, data_offsets).
constexpr int kMaxContainerDepth = 2;

bool is_non_negative_integer(const json& value) {
  return value.is_number_unsigned() ||
         (value.is_number_integer() && value.get<int64_t>() >= 0);
}

std::vector<int64_t> parse_shape(const json& desc, const std::string& file,
                                 const std::string& name) {
  auto found = desc.find("shape");
  ANVIL_CHECK(found != desc.end(), "[safetensors] {}: tensor '{}' has no shape", file, name);
  ANVIL_CHECK(found->is_array(), "[safetensors] {}: tensor '{}': shape is not an array", file,
              name);
  std::vector<int64_t> shape;
  for (const json& dim : *found) {
    ANVIL_CHECK(is_non_negative_integer(dim) &&
                    dim.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
                "[safetensors] {}: tensor '{}': shape entry {} is not a non-negative integer",
                file, name, quote_for_message(dim.dump()));
    shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  return shape;
}

// Returns numel * bits / 8, or nullopt on overflow or when the bits do not fill whole bytes.
std::optional<uint64_t> expected_bytes(const std::vector<int64_t>& shape, int bits) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t numel = 1;
  for (int64_t dim : shape)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) return std::nullopt;
  uint64_t total_bits;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &total_bits)) return std::nullopt;
  if (total_bits % 8 != 0) return std::nullopt;
  return total_bits / 8;
}

SafetensorsEntry parse_entry(const std::string& name, const json& desc, uint64_t data_size,
                             const std::string& file) {
  const std::string quoted = quote_for_message(name);
  ANVIL_CHECK(desc.is_object(), "[safetensors] {}: tensor '{}': description is not an object",
              file, quoted);
  SafetensorsEntry entry;
  entry.name = name;
  entry.file = file;

  auto dtype = desc.find("dtype");
  ANVIL_CHECK(dtype != desc.end() && dtype->is_string(),
              "[safetensors] {}: tensor '{}' has no dtype string", file, quoted);
  entry.dtype = dtype->get<std::string>();
  const SafetensorsDType* info = find_safetensors_dtype(entry.dtype);
  ANVIL_CHECK(info != nullptr, "[safetensors] {}: tensor '{}': unknown dtype '{}'", file, quoted,
              quote_for_message(entry.dtype));

  entry.shape = parse_shape(desc, file, quoted);

  auto offsets = desc.find("data_offsets");
  ANVIL_CHECK(offsets != desc.end() && offsets->is_array() && offsets->size() == 2 &&
                  is_non_negative_integer((*offsets)[0]) &&
                  is_non_negative_integer((*offsets)[1]),
              "[safetensors] {}: tensor '{}': data_offsets must be two non-negative integers, "
              "got {}",
              file, quoted, offsets == desc.end() ? "nothing" : quote_for_message(offsets->dump()));
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  ANVIL_CHECK(entry.begin <= entry.end,
              "[safetensors] {}: tensor '{}': data_offsets [{}, {}] begin after they end", file,
              quoted, entry.begin, entry.end);
  ANVIL_CHECK(entry.end <= data_size,
              "[safetensors] {}: tensor '{}': byte range [{}, {}) lies outside the data area of "
              "{} bytes",
              file, quoted, entry.begin, entry.end, data_size);

  std::optional<uint64_t> bytes = expected_bytes(entry.shape, info->bits);
  ANVIL_CHECK(bytes.has_value(),
              "[safetensors] {}: tensor '{}': shape {} of dtype {} does not describe a whole "
              "number of bytes below 2^64",
              file, quoted, format_dims(entry.shape), entry.dtype);
  ANVIL_CHECK(*bytes == entry.nbytes(),
              "[safetensors] {}: tensor '{}': byte count {} does not match shape {} of dtype {} "
              "({} bytes)",
              file, quoted, entry.nbytes(), format_dims(entry.shape), entry.dtype, *bytes);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& file) {
  ANVIL_CHECK(value.is_object(), "[safetensors] {}: __metadata__ is not an object", file);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    ANVIL_CHECK(item.is_string(),
                "[safetensors] {}: __metadata__ value for key '{}' is not a string (got {})", file,
                quote_for_message(key), quote_for_message(item.dump()));
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Checks that the ranges, sorted by offset, cover [0, data_size) with no gap and no overlap.
void check_coverage(const std::vector<SafetensorsEntry>& entries, uint64_t data_size,
                    const std::string& file) {
  uint64_t cursor = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& entry : entries) {
    ANVIL_CHECK(entry.begin >= cursor,
                "[safetensors] {}: tensor '{}': byte range [{}, {}) overlaps tensor '{}' which "
                "ends at {}",
                file, quote_for_message(entry.name), entry.begin, entry.end,
                previous ? quote_for_message(previous->name) : std::string(), cursor);
    ANVIL_CHECK(entry.begin == cursor,
                "[safetensors] {}: tensor '{}': gap in the data area, bytes [{}, {}) belong to "
                "no tensor",
                file, quote_for_message(entry.name), cursor, entry.begin);
    cursor = entry.end;
    previous = &entry;
  }
  ANVIL_CHECK(cursor == data_size,
              "[safetensors] {}: bytes [{}, {}) at the end of the data area belong to no tensor",
              file, cursor, data_size);
}

}  // namespace

const SafetensorsDType* find_safetensors_dtype(std::string_view name) {
  for (const SafetensorsDType& dtype : kDTypes)
    if (dtype.name == name) return &dtype;
  return nullptr;
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::u16: return "U16";
  }
  ANVIL_FAIL("[safetensors] dtype {} has no safetensors name", static_cast<int>(dtype));
}

std::optional<DType> anvil_dtype_from_safetensors(std::string_view name) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u32, DType::u16})
    if (safetensors_dtype_name(dtype) == name) return dtype;
  return std::nullopt;
}

int64_t SafetensorsEntry::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string format_dims(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size, uint64_t file_size,
                                           std::string_view source) {
  const std::string file(source);
  ANVIL_CHECK(file_size >= 8,
              "[safetensors] {}: file is {} bytes, shorter than the 8-byte header length", file,
              file_size);
  ANVIL_CHECK(size >= 8 && size <= file_size,
              "[safetensors] {}: {} bytes given for a file of {} bytes", file, size, file_size);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  ANVIL_CHECK(header_bytes <= kSafetensorsMaxHeaderBytes,
              "[safetensors] {}: header length {} exceeds the limit of {} bytes", file,
              header_bytes, kSafetensorsMaxHeaderBytes);
  ANVIL_CHECK(header_bytes <= file_size - 8,
              "[safetensors] {}: header length {} runs past the end of the file ({} bytes)", file,
              header_bytes, file_size);
  ANVIL_CHECK(size - 8 >= header_bytes,
              "[safetensors] {}: only {} bytes given, the header needs {}", file, size,
              header_bytes + 8);
  ANVIL_CHECK(header_bytes > 0 && bytes[8] == '{',
              "[safetensors] {}: header does not start with '{{'", file);

  SafetensorsHeader header;
  header.header_bytes = header_bytes;
  header.data_offset = 8 + header_bytes;
  const uint64_t data_size = file_size - header.data_offset;

  const json root = parse_json_strict(
      std::string_view(reinterpret_cast<const char*>(bytes + 8), header_bytes),
      fmt::format("[safetensors] {}: header", file), kMaxContainerDepth, "tensor name");
  // The '{' check above makes every header that parses a JSON object.
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      header.metadata = parse_metadata(value, file);
    } else {
      header.entries.push_back(parse_entry(key, value, data_size, file));
    }
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  check_coverage(header.entries, data_size, file);
  return header;
}

}  // namespace anvil
