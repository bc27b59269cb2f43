// TensorBoard event files: CRC32C against the RFC 3720 check values, the framing and the Event
// encoding byte for byte against a file TensorBoard's own writer made
// (tools/tensorboard_fixture.py), reading that file back, truncated and corrupt records, and
// the writer's resume-time cut. These run everywhere; the end-to-end check with TensorBoard's
// Python reader is tests/cli/tensorboard_cli_test.cpp.
#include <gtest/gtest.h>

#include "io/tensorboard_events.h"
#include "io_test_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::read_raw;
using testing::TempDir;
using testing::write_raw;

const fs::path kReference =
    fs::path(ANVIL_TEST_DATA) / "io" / "fixtures" / "tensorboard_reference.tfevents";

// The events tools/tensorboard_fixture.py writes after the file_version event.
std::vector<TensorBoardEvent> reference_events() {
  return {
      {1700000001.5, 7, "", {{"train/loss", 2.5f}, {"train/lr", 0.001f}, {"train/zero", 0.0f}}},
      {1700000002.25,
       123456789012,
       "",
       {{"eval/mmlu_acc", 0.3125f}, {"memory/activations", -1.75f}, {"train/big", 3e38f}}},
      {1700000003.0, 8, "", {}},
  };
}

TensorBoardEvent version_event(double wall_time) {
  TensorBoardEvent event;
  event.wall_time = wall_time;
  event.file_version = kTensorBoardFileVersion;
  return event;
}

void expect_same(const TensorBoardEvent& actual, const TensorBoardEvent& expected) {
  EXPECT_EQ(actual.wall_time, expected.wall_time);
  EXPECT_EQ(actual.step, expected.step);
  EXPECT_EQ(actual.file_version, expected.file_version);
  ASSERT_EQ(actual.scalars.size(), expected.scalars.size());
  for (size_t i = 0; i < actual.scalars.size(); ++i) {
    EXPECT_EQ(actual.scalars[i].tag, expected.scalars[i].tag);
    EXPECT_EQ(actual.scalars[i].value, expected.scalars[i].value);
  }
}

TEST(TensorBoardEvents, Crc32cMatchesTheRfc3720CheckValues) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  // mask(c) = rotr(c, 15) + 0xa282ead8, written out for one value.
  EXPECT_EQ(mask_crc32c(0x00008000u), 0x00000001u + 0xa282ead8u);
}

TEST(TensorBoardEvents, WritesTheBytesTensorBoardsOwnWriterWrites) {
  std::string bytes = tfrecord_frame(encode_event(version_event(1700000000.0)));
  for (const TensorBoardEvent& event : reference_events()) {
    bytes += tfrecord_frame(encode_event(event));
  }
  EXPECT_EQ(bytes, read_raw(kReference));
}

TEST(TensorBoardEvents, ReadsTensorBoardsFileBack) {
  const std::vector<TensorBoardEvent> events = read_event_file(kReference);
  ASSERT_EQ(events.size(), 4u);
  expect_same(events[0], version_event(1700000000.0));
  const std::vector<TensorBoardEvent> expected = reference_events();
  for (size_t i = 0; i < expected.size(); ++i) expect_same(events[i + 1], expected[i]);
}

TEST(TensorBoardEvents, StopsAtATruncatedOrCorruptRecord) {
  const std::string bytes = read_raw(kReference);
  const size_t first = tfrecord_frame(encode_event(version_event(1700000000.0))).size();
  const TfRecordStream whole = read_tfrecords(bytes);
  EXPECT_EQ(whole.records.size(), 4u);
  EXPECT_EQ(whole.problem, "");
  EXPECT_EQ(whole.intact_bytes, bytes.size());

  const TfRecordStream torn = read_tfrecords(bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(torn.records.size(), 3u);
  EXPECT_EQ(torn.problem, "truncated record");
  const TfRecordStream torn_header = read_tfrecords(bytes.substr(0, first + 5));
  EXPECT_EQ(torn_header.records.size(), 1u);
  EXPECT_EQ(torn_header.problem, "truncated record header");

  std::string bad_data = bytes;
  bad_data[first + 12] ^= 0x01;  // the second record's first data byte
  const TfRecordStream corrupt = read_tfrecords(bad_data);
  EXPECT_EQ(corrupt.records.size(), 1u);
  EXPECT_EQ(corrupt.intact_bytes, first);
  EXPECT_EQ(corrupt.problem, "record data fails its CRC");
  std::string bad_length = bytes;
  bad_length[first] ^= 0x40;
  EXPECT_EQ(read_tfrecords(bad_length).problem, "record length fails its CRC");

  TempDir dir;
  write_raw(dir / "events.out.tfevents.1.host", bad_data);
  EXPECT_EQ(error_of([&] { read_event_file(dir / "events.out.tfevents.1.host"); }),
            "[tensorboard] " + (dir / "events.out.tfevents.1.host").string() +
                ": record data fails its CRC at byte " + std::to_string(first));
}

TEST(TensorBoardEvents, RejectsARecordThatIsNoEvent) {
  EXPECT_EQ(error_of([] { decode_event("\xff\xff\xff"); }),
            "[tensorboard] a record is not an Event protobuf");
}

std::vector<int64_t> steps_of(const fs::path& path) {
  std::vector<int64_t> steps;
  for (const TensorBoardEvent& event : read_event_file(path)) {
    steps.push_back(event.file_version.empty() ? event.step : -1);
  }
  return steps;
}

TEST(TensorBoardEvents, WriterStartsAFileAndCutsItBackOnResume) {
  TempDir dir;
  fs::path path;
  {
    EventFileWriter writer(dir.path(), -1, "testhost");
    path = writer.path();
    for (int64_t step = 1; step <= 5; ++step) writer.write(step, {{"train/loss", 1.0f * step}});
  }
  EXPECT_TRUE(path.filename().string().starts_with("events.out.tfevents."));
  EXPECT_TRUE(path.filename().string().ends_with(".testhost"));
  EXPECT_EQ(event_files(dir.path()), std::vector<fs::path>{path});
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{-1, 1, 2, 3, 4, 5}));
  // A crash mid-write leaves a torn record; the resume drops it with what is past step 3.
  write_raw(path, read_raw(path) + std::string("\x20\x00\x00", 3));
  {
    EventFileWriter writer(dir.path(), 3, "testhost");
    EXPECT_EQ(writer.path(), path);
    writer.write(4, {{"train/loss", 40.0f}});
  }
  EXPECT_EQ(steps_of(path), (std::vector<int64_t>{-1, 1, 2, 3, 4}));
  EXPECT_EQ(read_event_file(path).back().scalars[0].value, 40.0f);
  // A fresh start replaces the old file.
  { EventFileWriter writer(dir.path(), -1, "otherhost"); }
  const std::vector<fs::path> files = event_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(files[0].filename().string().ends_with(".otherhost"));
  EXPECT_EQ(steps_of(files[0]), (std::vector<int64_t>{-1}));
}

}  // namespace
}  // namespace anvil
