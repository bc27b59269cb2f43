// TensorBoard event files: a TFRecord stream of serialized Event protobufs
// (tensorboard_event.proto). A TFRecord is a little-endian uint64 length, the masked CRC32C of
// those 8 bytes, the data, and the masked CRC32C of the data; mask(c) = rotr(c, 15) +
// 0xa282ead8. A file's first event carries file_version "brain.Event:2" and no step; every
// other event holds one step's scalars as Summary values with a simple_value (a float).
// Records are self-delimiting, so a file can be cut after any whole record.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

// The file_version of a file's first event, the one TensorBoard's readers expect.
inline constexpr const char* kTensorBoardFileVersion = "brain.Event:2";

// Returns the CRC32C (Castagnoli polynomial, as iSCSI and TFRecord use) of `bytes`.
uint32_t crc32c(std::string_view bytes);
// Returns TFRecord's masked form of a CRC.
uint32_t mask_crc32c(uint32_t crc);
// Returns `data` framed as one TFRecord.
std::string tfrecord_frame(std::string_view data);

struct TfRecordStream {
  std::vector<std::string> records;  // the data of each whole, intact record, in order
  uint64_t intact_bytes = 0;         // length of the prefix those records fill
  std::string problem;               // why reading stopped before the end ("" at the end)
};

// Splits a TFRecord stream into records, stopping at the first truncated or corrupt one.
TfRecordStream read_tfrecords(std::string_view stream);

struct TensorBoardScalar {
  std::string tag;
  float value = 0;
};

struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;  // set in a file's first event only
  std::vector<TensorBoardScalar> scalars;
};

// Returns the serialized Event protobuf.
std::string encode_event(const TensorBoardEvent& event);
// Parses a serialized Event; throws when the bytes are not one.
TensorBoardEvent decode_event(std::string_view bytes);
// Returns every event of an event file; throws naming the file and the offset of the first
// truncated or corrupt record.
std::vector<TensorBoardEvent> read_event_file(const std::filesystem::path& path);

class AppendFile;

// Appends scalar events to one event file in `dir`, each event at once (a crash loses at
// most the event being written).
class EventFileWriter {
 public:
  // Opens the newest events.out.tfevents.* file of `dir` after dropping from it every event
  // past `keep_through_step` (its torn last record too), or, with `keep_through_step` < 0 or
  // no file there, removes the old event files and starts events.out.tfevents.<unix time>.
  // <host> with its file_version event. Other event files of `dir` are cut alike.
  EventFileWriter(const std::filesystem::path& dir, int64_t keep_through_step,
                  const std::string& host);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one event holding `scalars` at `step`, stamped with the current time.
  void write(int64_t step, const std::vector<TensorBoardScalar>& scalars);

  // Returns the path of the file written to.
  const std::filesystem::path& path() const;

 private:
  std::unique_ptr<AppendFile> file_;
};

// Returns the event files (events.out.tfevents.*) of `dir`, sorted by name (oldest first).
std::vector<std::filesystem::path> event_files(const std::filesystem::path& dir);

}  // namespace anvil
