// Event file framing, encoding and the resume-time cut. The CRC32C comes from Intel's ISA-L
// (crc32_iscsi, hardware-accelerated where the CPU has it); the protobuf code is generated
// from tensorboard_event.proto and linked against libprotobuf-lite. Integers in the framing
// are written and read byte by byte, little-endian, whatever the host's byte order.
#include "io/tensorboard_events.h"

#include <isa-l/crc.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "io/append_file.h"
#include "io/file_util.h"
#include "io/tensorboard_event.pb.h"

namespace anvil {
namespace {

constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data
constexpr std::string_view kEventFilePrefix = "events.out.tfevents.";

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(in[at + static_cast<size_t>(i)])} << (8 * i);
  }
  return value;
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Returns the framed first event of a file.
std::string file_version_record(double wall_time) {
  TensorBoardEvent version;
  version.wall_time = wall_time;
  version.file_version = kTensorBoardFileVersion;
  return tfrecord_frame(encode_event(version));
}

// Rewrites `path` holding only its events up to `keep_through_step`.
void cut_event_file(const std::filesystem::path& path, int64_t keep_through_step) {
  const std::string bytes = read_file(path);
  const TfRecordStream stream = read_tfrecords(bytes);
  if (!stream.problem.empty()) {
    log_warn("[tensorboard] {}: {} at byte {}; the events from there on are dropped",
             path.string(), stream.problem, stream.intact_bytes);
  }
  std::string kept;
  for (const std::string& record : stream.records) {
    const TensorBoardEvent event = decode_event(record);
    if (!event.file_version.empty() || event.step <= keep_through_step) {
      kept += tfrecord_frame(record);
    }
  }
  // A file whose very first record was torn gets its file_version event back.
  if (kept.empty()) kept = file_version_record(unix_seconds_now());
  write_file_atomic(path, kept);
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  // crc32_iscsi takes a non-const buffer it never writes, and returns the CRC before the
  // final inversion.
  return ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data())),
                      static_cast<int>(bytes.size()), 0xffffffffu);
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(kHeaderBytes + data.size() + kFooterBytes);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(out)), 4);
  out.append(data);
  put_le(out, mask_crc32c(crc32c(data)), 4);
  return out;
}

TfRecordStream read_tfrecords(std::string_view stream) {
  TfRecordStream result;
  size_t at = 0;
  while (at < stream.size()) {
    const size_t left = stream.size() - at;
    if (left < kHeaderBytes) {
      result.problem = "truncated record header";
      break;
    }
    const uint64_t length = get_le(stream, at, 8);
    if (mask_crc32c(crc32c(stream.substr(at, 8))) != get_le(stream, at + 8, 4)) {
      result.problem = "record length fails its CRC";
      break;
    }
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      result.problem = "truncated record";
      break;
    }
    const std::string_view data = stream.substr(at + kHeaderBytes, length);
    if (mask_crc32c(crc32c(data)) != get_le(stream, at + kHeaderBytes + length, 4)) {
      result.problem = "record data fails its CRC";
      break;
    }
    result.records.emplace_back(data);
    at += kHeaderBytes + length + kFooterBytes;
    result.intact_bytes = at;
  }
  return result;
}

std::string encode_event(const TensorBoardEvent& event) {
  tensorboard::Event message;
  message.set_wall_time(event.wall_time);
  message.set_step(event.step);
  if (!event.file_version.empty()) {
    message.set_file_version(event.file_version);
  } else {
    tensorboard::Summary* summary = message.mutable_summary();
    for (const TensorBoardScalar& scalar : event.scalars) {
      tensorboard::Summary::Value* value = summary->add_value();
      value->set_tag(scalar.tag);
      value->set_simple_value(scalar.value);
    }
  }
  return message.SerializeAsString();
}

TensorBoardEvent decode_event(std::string_view bytes) {
  tensorboard::Event message;
  ANVIL_CHECK(message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
              "[tensorboard] a record is not an Event protobuf");
  TensorBoardEvent event;
  event.wall_time = message.wall_time();
  event.step = message.step();
  event.file_version = message.file_version();
  for (const tensorboard::Summary::Value& value : message.summary().value()) {
    ANVIL_CHECK(value.has_simple_value(), "[tensorboard] summary value {} at step {} is not a "
                "simple_value", value.tag(), event.step);
    event.scalars.push_back({value.tag(), value.simple_value()});
  }
  return event;
}

std::vector<TensorBoardEvent> read_event_file(const std::filesystem::path& path) {
  const std::string bytes = read_file(path);
  const TfRecordStream stream = read_tfrecords(bytes);
  ANVIL_CHECK(stream.problem.empty(), "[tensorboard] {}: {} at byte {}", path.string(),
              stream.problem, stream.intact_bytes);
  std::vector<TensorBoardEvent> events;
  for (const std::string& record : stream.records) events.push_back(decode_event(record));
  return events;
}

std::vector<std::filesystem::path> event_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file() && entry.path().filename().string().starts_with(kEventFilePrefix)) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

EventFileWriter::EventFileWriter(const std::filesystem::path& dir, int64_t keep_through_step,
                                 const std::string& host) {
  std::vector<std::filesystem::path> files = event_files(dir);
  for (const std::filesystem::path& file : files) {
    if (keep_through_step < 0) {
      std::error_code error;
      std::filesystem::remove(file, error);
      ANVIL_CHECK(!error, "[tensorboard] cannot remove {}: {}", file.string(), error.message());
    } else {
      cut_event_file(file, keep_through_step);
    }
  }
  if (keep_through_step >= 0 && !files.empty()) {
    file_ = std::make_unique<AppendFile>(files.back(), "[tensorboard]");
    return;
  }
  const double now = unix_seconds_now();
  const std::filesystem::path path =
      dir / fmt::format("{}{}.{}", kEventFilePrefix, static_cast<int64_t>(now), host);
  write_file_atomic(path, file_version_record(now));
  file_ = std::make_unique<AppendFile>(path, "[tensorboard]");
}

EventFileWriter::~EventFileWriter() = default;

void EventFileWriter::write(int64_t step, const std::vector<TensorBoardScalar>& scalars) {
  TensorBoardEvent event;
  event.wall_time = unix_seconds_now();
  event.step = step;
  event.scalars = scalars;
  file_->append(tfrecord_frame(encode_event(event)));
}

const std::filesystem::path& EventFileWriter::path() const { return file_->path(); }

}  // namespace anvil
