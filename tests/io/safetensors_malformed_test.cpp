// Hand-made malformed safetensors files, one per rule of the format: each must be refused by
// SafetensorsFile::open with one anvil::Error naming the file and (where there is one) the
// tensor, and the problem.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace anvil {
namespace {

using testing::error_of;
using testing::TempDir;

std::string length_prefix(uint64_t length) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return prefix;
}

// Returns a file made of a header (unpadded) and `data_bytes` bytes of data.
std::string file_with(const std::string& header, size_t data_bytes) {
  return length_prefix(header.size()) + header + std::string(data_bytes, '\x01');
}

std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape,
                   const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

struct MalformedCase {
  std::string name;
  std::string bytes;
  std::string expected;  // a substring of the error message
};

std::ostream& operator<<(std::ostream& out, const MalformedCase& c) { return out << c.name; }

std::vector<MalformedCase> malformed_cases() {
  const std::string w4 = tensor("w", "F32", "[1]", "[0,4]");
  return {
      {"ShorterThanEightBytes", std::string("\x02\x00\x00\x00\x00", 5),
       "file is 5 bytes, shorter than the 8-byte header length"},
      {"HeaderPastEndOfFile", length_prefix(1000) + "{}",
       "header length 1000 runs past the end of the file (10 bytes)"},
      {"HeaderAboveLimit", length_prefix(100'000'001) + "{}",
       "header length 100000001 exceeds the limit of 100000000 bytes"},
      {"HeaderNotStartingWithBrace", file_with(" {}", 0), "header does not start with '{'"},
      {"HeaderIsAnArrayNotAnObject", file_with("[{}]", 0), "header does not start with '{'"},
      {"EmptyHeader", length_prefix(0), "header does not start with '{'"},
      {"InvalidJson", file_with("{\"w\":{\"dtype\":", 0), "header is not valid JSON"},
      {"TrailingGarbageAfterJson", file_with("{}x", 0), "header is not valid JSON"},
      {"InvalidUtf8Name", file_with("{" + tensor("w\xff", "F32", "[1]", "[0,4]") + "}", 4),
       "header is not valid JSON"},
      {"UnknownDType", file_with("{" + tensor("w", "F12", "[1]", "[0,4]") + "}", 4),
       "tensor 'w': unknown dtype 'F12'"},
      {"MissingDType", file_with("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
       "tensor 'w' has no dtype string"},
      {"MissingShape", file_with("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4),
       "tensor 'w' has no shape"},
      {"NegativeShapeEntry", file_with("{" + tensor("w", "F32", "[-1]", "[0,4]") + "}", 4),
       "tensor 'w': shape entry -1 is not a non-negative integer"},
      {"FractionalShapeEntry", file_with("{" + tensor("w", "F32", "[2.5]", "[0,4]") + "}", 4),
       "tensor 'w': shape entry 2.5 is not a non-negative integer"},
      {"StringShapeEntry", file_with("{" + tensor("w", "F32", "[\"1\"]", "[0,4]") + "}", 4),
       "tensor 'w': shape entry \"1\" is not a non-negative integer"},
      {"ShapeNotArray", file_with("{" + tensor("w", "F32", "1", "[0,4]") + "}", 4),
       "tensor 'w': shape is not an array"},
      {"OneOffset", file_with("{" + tensor("w", "F32", "[1]", "[4]") + "}", 4),
       "tensor 'w': data_offsets must be two non-negative integers, got [4]"},
      {"ThreeOffsets", file_with("{" + tensor("w", "F32", "[1]", "[0,4,4]") + "}", 4),
       "tensor 'w': data_offsets must be two non-negative integers"},
      {"NegativeOffset", file_with("{" + tensor("w", "F32", "[1]", "[-4,0]") + "}", 4),
       "tensor 'w': data_offsets must be two non-negative integers"},
      {"MissingOffsets", file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
       "tensor 'w': data_offsets must be two non-negative integers, got nothing"},
      {"BeginAfterEnd", file_with("{" + tensor("w", "U8", "[1]", "[4,3]") + "}", 4),
       "tensor 'w': data_offsets [4, 3] begin after they end"},
      {"RangeOutsideDataArea", file_with("{" + tensor("w", "F32", "[100]", "[0,400]") + "}", 16),
       "tensor 'w': byte range [0, 400) lies outside the data area of 16 bytes"},
      {"ByteCountMismatch", file_with("{" + tensor("w", "F32", "[3]", "[0,8]") + "}", 8),
       "tensor 'w': byte count 8 does not match shape [3] of dtype F32 (12 bytes)"},
      {"SubByteDTypeNotWholeBytes", file_with("{" + tensor("w", "F4", "[3]", "[0,1]") + "}", 1),
       "tensor 'w': shape [3] of dtype F4 does not describe a whole number of bytes"},
      {"ShapeOverflow",
       file_with("{" + tensor("w", "U8", "[4611686018427387904,8]", "[0,4]") + "}", 4),
       "tensor 'w': shape [4611686018427387904, 8] of dtype U8 does not describe"},
      {"Overlap",
       file_with("{" + tensor("a", "F32", "[2]", "[0,8]") + "," +
                     tensor("b", "F32", "[2]", "[4,12]") + "}", 12),
       "tensor 'b': byte range [4, 12) overlaps tensor 'a' which ends at 8"},
      {"Gap",
       file_with("{" + tensor("a", "F32", "[1]", "[0,4]") + "," +
                     tensor("b", "F32", "[1]", "[8,12]") + "}", 12),
       "tensor 'b': gap in the data area, bytes [4, 8) belong to no tensor"},
      {"DataNotStartingAtZero", file_with("{" + tensor("w", "F32", "[1]", "[4,8]") + "}", 8),
       "tensor 'w': gap in the data area, bytes [0, 4) belong to no tensor"},
      {"UncoveredTrailingBytes", file_with("{" + w4 + "}", 8),
       "bytes [4, 8) at the end of the data area belong to no tensor"},
      {"DuplicateTensorName", file_with("{" + w4 + "," + w4 + "}", 4),
       "header has duplicate tensor name 'w'"},
      {"DuplicateKeyInTensor",
       file_with("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}", 4),
       "header has duplicate key 'dtype' in 'w'"},
      {"DuplicateMetadataKey",
       file_with("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}," + w4 + "}", 4),
       "header has duplicate key 'k' in '__metadata__'"},
      {"MetadataValueNotString", file_with("{\"__metadata__\":{\"k\":1}," + w4 + "}", 4),
       "__metadata__ value for key 'k' is not a string (got 1)"},
      {"MetadataNotObject", file_with("{\"__metadata__\":\"x\"," + w4 + "}", 4),
       "__metadata__ is not an object"},
      {"TensorDescriptionNotObject", file_with("{\"w\":[1]}", 0),
       "tensor 'w': description is not an object"},
      {"TensorDescriptionScalar", file_with("{\"w\":5}", 0),
       "tensor 'w': description is not an object"},
      {"NestingTooDeep",
       file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", 4),
       "header nests deeper than 3 levels in 'w'"},
  };
}

class SafetensorsMalformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(SafetensorsMalformed, IsRefusedWithAClearError) {
  TempDir dir;
  const MalformedCase& c = GetParam();
  const auto path = dir / (c.name + ".safetensors");
  testing::write_raw(path, c.bytes);
  const std::string message = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  EXPECT_EQ(message.rfind("[safetensors] " + path.string() + ": ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Rules, SafetensorsMalformed, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SafetensorsMalformedFile, MissingFileAndDirectoryAreClearErrors) {
  TempDir dir;
  EXPECT_NE(error_of([&] { SafetensorsFile::open(dir / "nope.safetensors"); }).find("no such file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsFile::open(dir.path()); }).find("not a regular file"),
            std::string::npos);
}

TEST(SafetensorsMalformedFile, ValidEdgeCasesAreAccepted) {
  TempDir dir;
  // Extra keys in a tensor description are ignored, as the reference does; zero-length tensors
  // may share an offset; a header without tensors describes an empty data area.
  testing::write_raw(dir / "a.safetensors",
                     file_with("{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4],"
                               "\"extra\":true}," +
                                   tensor("f", "F16", "[0,2]", "[4,4]") + "," +
                                   tensor("w", "F32", "[1]", "[0,4]") + "}",
                               4));
  SafetensorsFile file = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(file.entries().size(), 3u);
  testing::write_raw(dir / "b.safetensors", file_with("{}      ", 0));
  EXPECT_TRUE(SafetensorsFile::open(dir / "b.safetensors").entries().empty());
}

TEST(SafetensorsMalformedFile, MisalignedTensorsCanBeConvertedButNotViewed) {
  // Another writer may order by name only, leaving an F32 at an odd offset: valid, but a
  // zero-copy float view would be misaligned.
  TempDir dir;
  std::string bytes = file_with("{" + tensor("a", "U8", "[1]", "[0,1]") + "," +
                                    tensor("b", "F32", "[1]", "[1,5]") + "}",
                                0);
  bytes.append(1, '\x07');
  const float value = 2.5f;
  bytes.append(reinterpret_cast<const char*>(&value), 4);
  ASSERT_NE((bytes.size() - 4) % 4, 0u) << "the test wants the F32 at a misaligned offset";
  testing::write_raw(dir / "m.safetensors", bytes);
  SafetensorsFile file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_NE(error_of([&] { file.at("b").view(); }).find("is not aligned to 4 bytes"),
            std::string::npos);
  float out = 0;
  file.at("b").read_f32(std::span<float>(&out, 1));
  EXPECT_EQ(out, 2.5f);
}

}  // namespace
}  // namespace anvil
