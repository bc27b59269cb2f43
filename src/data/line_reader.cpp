// LineReader (see line_reader.h). Lines are found with memchr over the decoder's output buffer;
// a line is copied out only up to the caller's bound, and skipping copies nothing.
#include "data/line_reader.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace anvil {

std::string describe_record_bound(uint64_t max_record_bytes) {
  if (max_record_bytes >= (uint64_t{1} << 20) && max_record_bytes % (uint64_t{1} << 20) == 0)
    return fmt::format("{} bytes ({} MiB)", max_record_bytes, max_record_bytes >> 20);
  if (max_record_bytes >= 1024 && max_record_bytes % 1024 == 0)
    return fmt::format("{} bytes ({} KiB)", max_record_bytes, max_record_bytes >> 10);
  return fmt::format("{} bytes", max_record_bytes);
}

std::string json_array_refusal(const std::string& path) {
  return fmt::format(
      "{} is a JSON array ([{{...}}, ...]), not JSON Lines (one object per line); convert it "
      "with: jq -c '.[]' {} > records.jsonl (or datasets' to_json(..., lines=True))",
      path, path);
}

LineReader::LineReader(const std::string& path, uint64_t max_line_bytes, uint64_t start)
    : path_(path), buffer_(path, start), max_line_bytes_(max_line_bytes), offset_(start) {
  ANVIL_CHECK(max_line_bytes_ > 0 && max_line_bytes_ <= kLargestRecordBound,
              "--max-record-bytes must be between 1 and {} (got {})", kLargestRecordBound,
              max_line_bytes_);
  line_offset_ = start;
}

void LineReader::begin_line() {
  in_line_ = true;
  ++lines_;
  line_offset_ = offset_;
}

LineReader::Part LineReader::next_part(std::string& out, size_t max) {
  size_t appended = 0;
  // The string grows by doubling, but never past what this call may add: a line of the bound
  // costs the bound, not the next power of two above it.
  const size_t most = out.size() + max;
  const auto append = [&out, most](const char* data, size_t count) {
    if (out.size() + count > out.capacity())
      out.reserve(std::min(most, std::max(out.size() + count, 2 * out.capacity())));
    out.append(data, count);
  };
  while (true) {
    const std::string_view data = buffer_.available();
    if (data.empty()) {
      if (!in_line_) return Part::input_end;
      in_line_ = false;
      ended_with_newline_ = false;
      return Part::line_end;
    }
    if (!in_line_) begin_line();
    if (appended == max) return Part::more;
    const size_t scan = std::min(max - appended, data.size());
    const void* newline = std::memchr(data.data(), '\n', scan);
    if (newline != nullptr) {
      const auto length = static_cast<size_t>(static_cast<const char*>(newline) - data.data());
      append(data.data(), length);
      buffer_.consume(length + 1);
      offset_ += length + 1;
      in_line_ = false;
      ended_with_newline_ = true;
      return Part::line_end;
    }
    append(data.data(), scan);
    buffer_.consume(scan);
    offset_ += scan;
    appended += scan;
  }
}

void LineReader::skip_rest_of_line() {
  while (in_line_) {
    const std::string_view data = buffer_.available();
    if (data.empty()) {
      in_line_ = false;
      ended_with_newline_ = false;
      return;
    }
    const void* newline = std::memchr(data.data(), '\n', data.size());
    const size_t length = newline != nullptr
                              ? static_cast<size_t>(static_cast<const char*>(newline) -
                                                    data.data()) + 1
                              : data.size();
    buffer_.consume(length);
    offset_ += length;
    if (newline != nullptr) {
      in_line_ = false;
      ended_with_newline_ = true;
    }
  }
}

LineReader::Read LineReader::next(std::string& line) {
  line.clear();
  // One byte past the bound tells a line of exactly the bound from a longer one.
  const Part part = next_part(line, static_cast<size_t>(max_line_bytes_) + 1);
  if (part == Part::input_end) return Read::end;
  if (part == Part::line_end) return Read::line;
  std::string().swap(line);  // give the bound's worth of memory back before skipping
  skip_rest_of_line();
  return Read::too_long;
}

bool LineReader::starts_with_json_array() {
  std::string_view data = buffer_.available();
  if (data.starts_with("\xEF\xBB\xBF")) data.remove_prefix(3);
  const size_t first = data.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && data[first] == '[';
}

std::string LineReader::describe_offset(uint64_t offset) const {
  if (compression() == Compression::none) return fmt::format("byte {}", offset);
  return fmt::format("byte {} of the decompressed {} stream", offset,
                     compression_name(compression()));
}

}  // namespace anvil
