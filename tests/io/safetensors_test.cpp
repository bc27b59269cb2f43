// safetensors reading and writing: round trips of every dtype, the reference layout (sort
// order, alignment, padding), views and f32 conversion, and agreement with a file written by
// the reference Python library (tests/io/fixtures, made by tools/safetensors_fixture.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "io/safetensors.h"

namespace anvil {
namespace {

using testing::error_of;
using testing::read_raw;
using testing::TempDir;

const std::vector<std::string> kAllDTypes = {
    "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
    "U32", "F32", "C64", "F64", "I64", "U64"};

std::vector<uint8_t> pattern_bytes(size_t count, int seed) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + seed * 11 + 1);
  return bytes;
}

TEST(Safetensors, RoundTripsEveryDType) {
  TempDir dir;
  SafetensorsWriter writer;
  std::vector<std::vector<uint8_t>> payloads;
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    const int bits = find_safetensors_dtype(kAllDTypes[i])->bits;
    payloads.push_back(pattern_bytes(static_cast<size_t>(bits), static_cast<int>(i)));  // 8 elems
  }
  for (size_t i = 0; i < kAllDTypes.size(); ++i)
    writer.add("t." + kAllDTypes[i], kAllDTypes[i], {2, 4}, payloads[i].data(), payloads[i].size());
  writer.set_metadata("format", "pt");
  writer.set_metadata("note", "every dtype");
  writer.write(dir / "all.safetensors");

  SafetensorsFile file = SafetensorsFile::open(dir / "all.safetensors");
  ASSERT_EQ(file.entries().size(), kAllDTypes.size());
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    const SafetensorsEntry& entry = file.at("t." + kAllDTypes[i]);
    EXPECT_EQ(entry.dtype, kAllDTypes[i]);
    EXPECT_EQ(entry.shape, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(entry.numel(), 8);
    ASSERT_EQ(entry.nbytes(), payloads[i].size()) << kAllDTypes[i];
    EXPECT_EQ(std::memcmp(entry.data, payloads[i].data(), payloads[i].size()), 0);
  }
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "every dtype");
  EXPECT_EQ(file.find("missing"), nullptr);
  EXPECT_NE(error_of([&] { file.at("missing"); }).find("no tensor 'missing'"), std::string::npos);
}

TEST(Safetensors, ScalarsAndEmptyTensorsRoundTrip) {
  TempDir dir;
  const float scalar = 4.5f;
  SafetensorsWriter writer;
  writer.add("scalar", "F32", {}, &scalar, 4);
  writer.add("empty", "BF16", {0, 7}, nullptr, 0);
  writer.write(dir / "edge.safetensors");
  SafetensorsFile file = SafetensorsFile::open(dir / "edge.safetensors");
  EXPECT_TRUE(file.at("scalar").shape.empty());
  EXPECT_EQ(file.at("scalar").view().f32()[0], 4.5f);
  EXPECT_EQ(file.at("empty").nbytes(), 0u);
  EXPECT_EQ(file.at("empty").view().shape, (Shape{0, 7}));
  EXPECT_TRUE(file.metadata().empty());
}

TEST(Safetensors, OrdersByDescendingAlignmentThenNameAndAlignsEveryTensor) {
  TempDir dir;
  std::vector<uint8_t> bytes = pattern_bytes(64, 3);
  SafetensorsWriter writer;
  writer.add("z_u8", "U8", {3}, bytes.data(), 3);
  writer.add("b_f32", "F32", {3}, bytes.data(), 12);
  writer.add("a_bf16", "BF16", {5}, bytes.data(), 10);
  writer.add("m_i64", "I64", {1}, bytes.data(), 8);
  writer.add("a_f32", "F32", {1}, bytes.data(), 4);
  writer.add("c_f16", "F16", {1}, bytes.data(), 2);
  writer.add("d_f64", "F64", {2}, bytes.data(), 16);
  writer.write(dir / "order.safetensors");

  SafetensorsFile file = SafetensorsFile::open(dir / "order.safetensors");
  std::vector<std::string> order;
  for (const SafetensorsEntry& entry : file.entries()) order.push_back(entry.name);
  // The reference ranks I64 above F64 (enum order), BF16 above F16.
  EXPECT_EQ(order, (std::vector<std::string>{"m_i64", "d_f64", "a_f32", "b_f32", "a_bf16",
                                             "c_f16", "z_u8"}));
  EXPECT_EQ(file.data_offset() % 8, 0u);
  const std::string raw = read_raw(dir / "order.safetensors");
  const std::string header = raw.substr(8, file.data_offset() - 8);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // only spaces pad the JSON
  EXPECT_LT(header.size() - header.rfind('}') - 1, 8u);
  for (const SafetensorsEntry& entry : file.entries()) {
    const size_t alignment = static_cast<size_t>(find_safetensors_dtype(entry.dtype)->bits / 8);
    EXPECT_EQ((file.data_offset() + entry.begin) % alignment, 0u) << entry.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(entry.data) % alignment, 0u) << entry.name;
  }
  EXPECT_EQ(writer.file_size(), raw.size());
}

TEST(Safetensors, ViewsAndF32Conversion) {
  TempDir dir;
  std::vector<float> f32 = {1.5f, -2.0f, 0.1f};
  std::vector<uint16_t> bf16, f16;
  for (float value : f32) {
    bf16.push_back(float_to_bf16(value));
    f16.push_back(float_to_f16(value));
  }
  std::vector<int32_t> i32 = {7, -8};
  std::vector<int64_t> i64 = {1, 2};
  SafetensorsWriter writer;
  writer.add("f32", Tensor(f32.data(), DType::f32, Shape{3}));
  writer.add("bf16", Tensor(bf16.data(), DType::bf16, Shape{3}));
  writer.add("f16", Tensor(f16.data(), DType::f16, Shape{1, 3}));
  writer.add("i32", Tensor(i32.data(), DType::i32, Shape{2}));
  writer.add("i64", "I64", {2}, i64.data(), 16);
  writer.write(dir / "views.safetensors");
  SafetensorsFile file = SafetensorsFile::open(dir / "views.safetensors");

  EXPECT_EQ(file.at("bf16").dtype, "BF16");
  Tensor view = file.at("f16").view();
  EXPECT_EQ(view.dtype, DType::f16);
  EXPECT_EQ(view.shape, (Shape{1, 3}));
  EXPECT_EQ(view.u16()[2], f16[2]);
  EXPECT_EQ(file.at("i32").view().i32()[1], -8);

  std::vector<float> out(3);
  file.at("f32").read_f32(out);
  EXPECT_EQ(out, f32);
  file.at("bf16").read_f32(out);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], bf16_to_float(bf16[i]));
  file.at("f16").read_f32(out);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], f16_to_float(f16[i]));

  EXPECT_NE(error_of([&] { file.at("i64").view(); }).find("dtype I64 has no anvil view"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.at("i32").read_f32(std::span<float>(out.data(), 2)); })
                .find("cannot be converted to f32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.at("f32").read_f32(std::span<float>(out.data(), 2)); })
                .find("has 3 elements, destination holds 2"),
            std::string::npos);
}

TEST(Safetensors, WriterRejectsBadTensorsAndLeavesNoPartialFile) {
  TempDir dir;
  float value = 1.0f;
  SafetensorsWriter writer;
  writer.add("w", "F32", {1}, &value, 4);
  EXPECT_NE(error_of([&] { writer.add("w", "F32", {1}, &value, 4); }).find("added twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { writer.add("x", "F32", {2}, &value, 4); })
                .find("4 bytes given for shape [2] of dtype F32 (8 expected)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { writer.add("x", "F31", {1}, &value, 4); }).find("unknown dtype 'F31'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { writer.add("__metadata__", "F32", {1}, &value, 4); }).find("reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { writer.add(std::string("bad\xff", 4), "F32", {1}, &value, 4); })
                .find("not valid UTF-8"),
            std::string::npos);

  const auto target = dir / "missing-folder" / "w.safetensors";
  EXPECT_NE(error_of([&] { writer.write(target); }).find(target.string() + ".tmp"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "missing-folder"));

  // Rewriting replaces the file whole and leaves no temporary behind.
  writer.write(dir / "w.safetensors");
  SafetensorsWriter second;
  second.add("v", "F32", {1}, &value, 4);
  second.write(dir / "w.safetensors");
  EXPECT_TRUE(SafetensorsFile::open(dir / "w.safetensors").contains("v"));
  EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors.tmp"));
}

TEST(Safetensors, ParsesHeaderFromMemoryPrefix) {
  float values[2] = {1.0f, 2.0f};
  SafetensorsWriter writer;
  writer.add("w", "F32", {2}, values, 8);
  const std::string header = writer.serialize_header();
  const auto* bytes = reinterpret_cast<const uint8_t*>(header.data());
  SafetensorsHeader parsed = parse_safetensors_header(bytes, header.size(), header.size() + 8, "m");
  ASSERT_EQ(parsed.entries.size(), 1u);
  EXPECT_EQ(parsed.entries[0].end, 8u);
  EXPECT_EQ(parsed.entries[0].data, nullptr);
  EXPECT_NE(error_of([&] { parse_safetensors_header(bytes, 12, header.size() + 8, "m"); })
                .find("only 12 bytes given"),
            std::string::npos);
}

// ---- Agreement with the reference Python library -------------------------------------------

const std::filesystem::path kFixtures = std::filesystem::path(ANVIL_TEST_DATA) / "io" / "fixtures";

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

template <typename T>
T load_le(const uint8_t* data) {
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

TEST(SafetensorsReference, ReadsTheReferenceLibrarysFileExactly) {
  const nlohmann::json expected =
      nlohmann::json::parse(testing::read_raw(kFixtures / "reference.json"));
  SafetensorsFile file = SafetensorsFile::open(kFixtures / "reference.safetensors");
  EXPECT_EQ(std::filesystem::file_size(file.path()), expected["file_size"].get<uint64_t>());
  EXPECT_EQ(file.metadata(), (expected["metadata"].get<std::map<std::string, std::string>>()));
  ASSERT_EQ(file.entries().size(), expected["tensors"].size());

  int compared_values = 0;
  for (const auto& [name, want] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const SafetensorsEntry& entry = file.at(name);
    EXPECT_EQ(entry.dtype, want["dtype"].get<std::string>());
    EXPECT_EQ(entry.shape, want["shape"].get<std::vector<int64_t>>());
    const std::vector<uint8_t> raw = from_hex(want["hex"].get<std::string>());
    ASSERT_EQ(entry.nbytes(), raw.size());
    EXPECT_TRUE(std::equal(raw.begin(), raw.end(), entry.data));

    const nlohmann::json& values = want["values"];
    ASSERT_EQ(static_cast<int64_t>(values.size()), entry.numel());
    if (entry.dtype == "F32" || entry.dtype == "BF16" || entry.dtype == "F16") {
      std::vector<float> floats(static_cast<size_t>(entry.numel()));
      entry.read_f32(floats);
      for (size_t i = 0; i < floats.size(); ++i) {
        EXPECT_EQ(static_cast<double>(floats[i]), values[i].get<double>()) << i;
        EXPECT_EQ(std::signbit(floats[i]), std::signbit(values[i].get<double>())) << i;
        ++compared_values;
      }
    } else {
      for (size_t i = 0; i < values.size(); ++i) {
        const uint8_t* at = entry.data + i * (entry.nbytes() / values.size());
        int64_t got = 0;
        if (entry.dtype == "F64") {
          EXPECT_EQ(load_le<double>(at), values[i].get<double>());
          ++compared_values;
          continue;
        }
        if (entry.dtype == "I64") got = load_le<int64_t>(at);
        if (entry.dtype == "I32") got = load_le<int32_t>(at);
        if (entry.dtype == "I16") got = load_le<int16_t>(at);
        if (entry.dtype == "I8") got = load_le<int8_t>(at);
        if (entry.dtype == "U8" || entry.dtype == "BOOL") got = *at;
        EXPECT_EQ(got, values[i].get<int64_t>()) << i;
        ++compared_values;
      }
    }
  }
  EXPECT_GT(compared_values, 40);
}

TEST(SafetensorsReference, WriterOutputIsByteIdenticalToTheReferenceLibrary) {
  TempDir dir;
  SafetensorsFile reference = SafetensorsFile::open(kFixtures / "reference.safetensors");
  SafetensorsWriter writer;
  // Add in reverse file order so the writer's own sort is what produces the layout.
  const auto& entries = reference.entries();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    writer.add(it->name, it->dtype, it->shape, it->data, it->nbytes());
  for (const auto& [key, value] : reference.metadata()) writer.set_metadata(key, value);
  writer.write(dir / "anvil.safetensors");
  const std::string ours = read_raw(dir / "anvil.safetensors");
  const std::string theirs = read_raw(reference.path());
  EXPECT_EQ(ours.size(), theirs.size());
  EXPECT_TRUE(ours == theirs) << "anvil header: " << writer.serialize_header().substr(8)
                              << "\nreference header: "
                              << theirs.substr(8, reference.data_offset() - 8);
}

}  // namespace
}  // namespace anvil
