// safetensors reading (mmap + validation, views and f32 conversion of entries) and writing
// (reference ordering, 8-byte header padding, atomic replacement of the target file).
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace anvil {
namespace {

Shape shape_from_dims(const std::vector<int64_t>& dims, const SafetensorsEntry& entry) {
  switch (dims.size()) {
    case 0: return Shape{};
    case 1: return Shape{dims[0]};
    case 2: return Shape{dims[0], dims[1]};
    case 3: return Shape{dims[0], dims[1], dims[2]};
    case 4: return Shape{dims[0], dims[1], dims[2], dims[3]};
  }
  ANVIL_FAIL("[safetensors] {}: tensor '{}': rank {} exceeds anvil's maximum of {}", entry.file,
             entry.name, dims.size(), Shape::kMaxRank);
}

// Returns `text` as a JSON string literal; tensor names and metadata must be valid UTF-8.
std::string json_string(const std::string& text, const char* what) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    ANVIL_FAIL("[safetensors] {} is not valid UTF-8: '{}'", what, text);
  }
}

}  // namespace

std::span<const uint8_t> SafetensorsEntry::bytes() const {
  ANVIL_CHECK(data != nullptr, "[safetensors] {}: tensor '{}' has no data mapped", file, name);
  return {data, static_cast<size_t>(nbytes())};
}

Tensor SafetensorsEntry::view() const {
  std::optional<DType> dtype_anvil = anvil_dtype_from_safetensors(dtype);
  ANVIL_CHECK(dtype_anvil.has_value(),
              "[safetensors] {}: tensor '{}': dtype {} has no anvil view (anvil views F32, BF16, "
              "F16, I32, U32 and U16)",
              file, name, dtype);
  const Shape anvil_shape = shape_from_dims(shape, *this);
  std::span<const uint8_t> raw = bytes();
  const size_t alignment = dtype_size(*dtype_anvil);
  ANVIL_CHECK(raw.empty() || reinterpret_cast<uintptr_t>(raw.data()) % alignment == 0,
              "[safetensors] {}: tensor '{}' is not aligned to {} bytes in the file; read it with "
              "read_f32 or copy its bytes",
              file, name, alignment);
  return Tensor(const_cast<uint8_t*>(raw.data()), *dtype_anvil, anvil_shape);
}

void SafetensorsEntry::read_f32(std::span<float> out) const {
  ANVIL_CHECK(out.size() == static_cast<size_t>(numel()),
              "[safetensors] {}: tensor '{}' has {} elements, destination holds {}", file, name,
              numel(), out.size());
  std::span<const uint8_t> raw = bytes();
  if (dtype == "F32") {
    if (out.empty()) return;  // memcpy must not see the null pointer of an empty span
    std::memcpy(out.data(), raw.data(), raw.size());
  } else if (dtype == "BF16" || dtype == "F16") {
    const bool is_bf16 = dtype == "BF16";
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t half;
      std::memcpy(&half, raw.data() + 2 * i, 2);
      out[i] = is_bf16 ? bf16_to_float(half) : f16_to_float(half);
    }
  } else {
    ANVIL_FAIL("[safetensors] {}: tensor '{}': dtype {} cannot be converted to f32 (expected F32, "
               "BF16 or F16)",
               file, name, dtype);
  }
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  std::error_code error;
  ANVIL_CHECK(std::filesystem::exists(path, error), "[safetensors] {}: no such file",
              path.string());
  ANVIL_CHECK(std::filesystem::is_regular_file(path, error),
              "[safetensors] {}: not a regular file", path.string());
  file.mapping_ = MappedFile(path);
  file.header_ = parse_safetensors_header(file.mapping_.data(), file.mapping_.size(),
                                          file.mapping_.size(), path.string());
  const uint8_t* data_area = file.mapping_.data() + file.header_.data_offset;
  for (size_t i = 0; i < file.header_.entries.size(); ++i) {
    SafetensorsEntry& entry = file.header_.entries[i];
    entry.data = data_area + entry.begin;
    file.index_.emplace(entry.name, i);
  }
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto found = index_.find(name);
  return found == index_.end() ? nullptr : &header_.entries[found->second];
}

const SafetensorsEntry& SafetensorsFile::at(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  ANVIL_CHECK(entry != nullptr, "[safetensors] {}: no tensor '{}'", path_.string(), name);
  return *entry;
}

void SafetensorsWriter::add(std::string name, std::string_view dtype, std::vector<int64_t> shape,
                            const void* data, uint64_t nbytes) {
  PendingTensor tensor{std::move(name), std::string(dtype), std::move(shape), nbytes,
                       static_cast<const uint8_t*>(data), {}};
  ANVIL_CHECK(data != nullptr || nbytes == 0, "[safetensors] tensor '{}' has no data",
              tensor.name);
  add_pending(std::move(tensor));
}

void SafetensorsWriter::add(std::string name, const Tensor& tensor) {
  ANVIL_CHECK(tensor.device.is_cpu(), "[safetensors] tensor '{}' is not in host memory", name);
  std::vector<int64_t> dims;
  for (int i = 0; i < tensor.shape.rank(); ++i) dims.push_back(tensor.shape[i]);
  add(std::move(name), safetensors_dtype_name(tensor.dtype), std::move(dims), tensor.data,
      tensor.nbytes());
}

void SafetensorsWriter::add_copy(std::string name, std::string_view dtype,
                                 std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  PendingTensor tensor{std::move(name), std::string(dtype), std::move(shape), bytes.size(),
                       nullptr, std::vector<uint8_t>(bytes.begin(), bytes.end())};
  add_pending(std::move(tensor));
}

void SafetensorsWriter::add_pending(PendingTensor tensor) {
  ANVIL_CHECK(tensor.name != "__metadata__",
              "[safetensors] '__metadata__' is reserved and cannot name a tensor");
  json_string(tensor.name, "tensor name");
  const SafetensorsDType* info = find_safetensors_dtype(tensor.dtype);
  ANVIL_CHECK(info != nullptr, "[safetensors] tensor '{}': unknown dtype '{}'", tensor.name,
              tensor.dtype);
  uint64_t bits = static_cast<uint64_t>(info->bits);
  bool overflow = false;
  for (int64_t dim : tensor.shape) {
    ANVIL_CHECK(dim >= 0, "[safetensors] tensor '{}': negative dimension in shape {}",
                tensor.name, format_dims(tensor.shape));
    overflow |= __builtin_mul_overflow(bits, static_cast<uint64_t>(dim), &bits);
  }
  ANVIL_CHECK(!overflow && bits % 8 == 0 && bits / 8 == tensor.nbytes,
              "[safetensors] tensor '{}': {} bytes given for shape {} of dtype {} ({} expected)",
              tensor.name, tensor.nbytes, format_dims(tensor.shape), tensor.dtype, bits / 8);
  ANVIL_CHECK(names_.emplace(tensor.name, tensors_.size()).second,
              "[safetensors] tensor '{}' added twice", tensor.name);
  tensors_.push_back(std::move(tensor));
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  json_string(key, "metadata key");
  json_string(value, "metadata value");
  metadata_[std::move(key)] = std::move(value);
}

std::vector<size_t> SafetensorsWriter::file_order() const {
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int rank_a = find_safetensors_dtype(tensors_[a].dtype)->writer_rank;
    const int rank_b = find_safetensors_dtype(tensors_[b].dtype)->writer_rank;
    if (rank_a != rank_b) return rank_a > rank_b;
    return tensors_[a].name < tensors_[b].name;
  });
  return order;
}

std::string SafetensorsWriter::serialize_header() const {
  // Written by hand rather than through nlohmann::json, whose objects sort keys: the format's
  // reference puts __metadata__ first, tensors in file order, and dtype/shape/data_offsets.
  std::string json = "{";
  if (!metadata_.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata_) {
      json += fmt::format("{}{}:{}", first ? "" : ",", json_string(key, "metadata key"),
                          json_string(value, "metadata value"));
      first = false;
    }
    json += "}";
  }
  uint64_t offset = 0;
  for (size_t index : file_order()) {
    const PendingTensor& tensor = tensors_[index];
    std::string dims;
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      if (i > 0) dims += ',';
      dims += std::to_string(tensor.shape[i]);
    }
    json += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        json.size() > 1 ? "," : "", json_string(tensor.name, "tensor name"),
                        tensor.dtype, dims, offset, offset + tensor.nbytes);
    offset += tensor.nbytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string header(8, '\0');
  uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return header + json;
}

uint64_t SafetensorsWriter::file_size() const {
  uint64_t size = serialize_header().size();
  for (const PendingTensor& tensor : tensors_) size += tensor.nbytes;
  return size;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  const std::string header = serialize_header();
  AtomicFileWriter out(path);
  out.write(header);
  for (size_t index : file_order()) out.write(tensors_[index].bytes(), tensors_[index].nbytes);
  out.commit();
}

}  // namespace anvil
