// Token shard format: round trips at both token widths, the loss-mask section, and one clear
// error (naming the file) for every kind of damage: payload, header, truncation, bad tables.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>

#include "data_test_util.h"
#include "data/shard_reader.h"

namespace anvil {
namespace {

using testing::expect_error;
using testing::TempDir;

std::vector<std::vector<int32_t>> sample_documents(int32_t vocab, int32_t eos) {
  std::vector<std::vector<int32_t>> docs;
  uint32_t state = 12345;
  for (int d = 0; d < 7; ++d) {
    std::vector<int32_t> doc;
    const int length = 1 + d * 5;
    for (int i = 0; i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      doc.push_back(static_cast<int32_t>(state % static_cast<uint32_t>(vocab)));
    }
    doc.push_back(eos);
    docs.push_back(doc);
  }
  return docs;
}

void expect_round_trip(uint32_t vocab, uint32_t expected_width) {
  TempDir dir;
  const std::string path = dir.file(shard_file_name("train", 0));
  const auto docs = sample_documents(static_cast<int32_t>(vocab), static_cast<int32_t>(vocab - 1));
  testing::write_shard(path, docs, vocab, static_cast<int32_t>(vocab - 1));

  ShardReader reader(path);
  EXPECT_EQ(reader.header().token_bytes, expected_width);
  EXPECT_EQ(reader.header().vocab_size, vocab);
  EXPECT_EQ(reader.header().eos_id, static_cast<int32_t>(vocab - 1));
  EXPECT_EQ(reader.header().bos_id, -1);
  EXPECT_EQ(reader.header().tokenizer_fingerprint, "0123456789abcdef");
  EXPECT_FALSE(reader.has_loss_mask());
  EXPECT_TRUE(reader.loss_mask().empty());
  ASSERT_EQ(reader.document_count(), docs.size());
  std::vector<int32_t> all;
  std::vector<uint64_t> starts;
  for (const auto& doc : docs) {
    starts.push_back(all.size());
    all.insert(all.end(), doc.begin(), doc.end());
  }
  ASSERT_EQ(reader.token_count(), all.size());
  std::vector<int32_t> read(all.size());
  reader.read_tokens(0, all.size(), read.data());
  EXPECT_EQ(read, all);
  EXPECT_EQ(reader.token(5), all[5]);
  const auto offsets = reader.doc_offsets();
  EXPECT_EQ(std::vector<uint64_t>(offsets.begin(), offsets.end()), starts);
  EXPECT_EQ(std::filesystem::file_size(path), reader.header().file_bytes());
  // Only the finished file remains: no temp file next to it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(Shard, RoundTrip16Bit) { expect_round_trip(1000, 2); }

TEST(Shard, RoundTrip32Bit) { expect_round_trip(128256, 4); }

TEST(Shard, TokenWidthFollowsVocabulary) {
  EXPECT_EQ(token_bytes_for_vocab(32000), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2u);  // ids 0..65535 still fit u16
  EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
  expect_round_trip(65536, 2);
  expect_round_trip(65537, 4);
}

TEST(Shard, FileNames) {
  EXPECT_EQ(shard_file_name("train", 0), "train-00000.tok");
  EXPECT_EQ(shard_file_name("val", 12), "val-00012.tok");
}

TEST(Shard, OddTokenCountIsPaddedToEightBytes) {
  TempDir dir;
  const std::string path = dir.file("train-00000.tok");
  testing::write_shard(path, {{1, 2, 0}}, 10, 0);  // 3 tokens * 2 bytes = 6, padded to 8
  EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + 8 + 8);
  ShardReader reader(path);
  EXPECT_EQ(reader.token_count(), 3u);
}

TEST(Shard, EmptyShardRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("val-00000.tok");
  testing::write_shard(path, {}, 10, 0);
  ShardReader reader(path);
  EXPECT_EQ(reader.token_count(), 0u);
  EXPECT_EQ(reader.document_count(), 0u);
}

TEST(Shard, LossMaskRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("train-00000.tok");
  const std::vector<std::vector<int32_t>> docs = {{5, 6, 7, 0}, {8, 9, 0}};
  const std::vector<std::vector<uint8_t>> masks = {{0, 0, 1, 1}, {0, 1, 1}};
  testing::write_shard(path, docs, 10, 0, &masks);
  ShardReader reader(path);
  ASSERT_TRUE(reader.has_loss_mask());
  const auto mask = reader.loss_mask();
  EXPECT_EQ(std::vector<uint8_t>(mask.begin(), mask.end()),
            (std::vector<uint8_t>{0, 0, 1, 1, 0, 1, 1}));
}

TEST(Shard, WriterRejectsBadInputAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("train-00000.tok");
  {
    ShardWriterOptions options;
    options.vocab_size = 10;
    ShardWriter writer(path, options);
    writer.add_document(std::vector<int32_t>{1, 2});
    expect_error(
        [&] {
          writer.add_document(std::vector<int32_t>{3, 10});
        },
        {"[shard]", path, "token id 10 outside the vocabulary of 10"});
    expect_error([&] { writer.add_document(std::vector<int32_t>{}); }, {"at least one token"});
    const std::vector<uint8_t> mask = {1};
    expect_error([&] { writer.add_document(std::vector<int32_t>{3}, mask); }, {"without one"});
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  ShardWriterOptions narrow;
  narrow.vocab_size = 70000;
  narrow.token_bytes = 2;
  expect_error([&] { ShardWriter(path, narrow); }, {"does not fit 2-byte tokens"});
}

class DamagedShard : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("train-00000.tok");
    testing::write_shard(path_, {{1, 2, 3, 0}, {4, 5, 0}, {6, 0}}, 10, 0);
    bytes_ = testing::read_bytes(path_);
  }
  // Rewrites both checksums so that only the structural check under test can fail.
  void reseal() {
    ShardHeader header = decode_shard_header(bytes_.data(), path_);
    header.payload_checksum =
        XXH64(bytes_.data() + kShardHeaderBytes, bytes_.size() - kShardHeaderBytes, 0);
    const auto encoded = encode_shard_header(header);
    std::copy(encoded.begin(), encoded.end(), bytes_.begin());
  }
  void expect_open_error(const std::vector<std::string>& needles) {
    testing::write_bytes(path_, bytes_);
    std::vector<std::string> all = needles;
    all.push_back("[shard] " + path_ + ": ");
    expect_error([&] { ShardReader reader(path_); }, all);
  }

  TempDir dir_;
  std::string path_;
  std::vector<uint8_t> bytes_;
};

TEST_F(DamagedShard, PayloadByteFlip) {
  bytes_[kShardHeaderBytes + 2] ^= 0x01;
  expect_open_error({"payload checksum mismatch (file corrupt or truncated)"});
  ShardReader unchecked(path_, /*verify_payload=*/false);  // the structure is still valid
  EXPECT_EQ(unchecked.token_count(), 9u);
}

TEST_F(DamagedShard, HeaderByteFlip) {
  bytes_[21] ^= 0x40;  // inside vocab_size
  expect_open_error({"header checksum mismatch"});
}

TEST_F(DamagedShard, Truncated) {
  bytes_.resize(bytes_.size() - 8);
  expect_open_error({"truncated"});
}

TEST_F(DamagedShard, ShorterThanHeader) {
  bytes_.resize(100);
  expect_open_error({"shorter than the 128-byte header"});
}

TEST_F(DamagedShard, BadMagic) {
  bytes_[0] = 'X';
  expect_open_error({"not an anvil token shard"});
}

TEST_F(DamagedShard, NewerVersion) {
  ShardHeader header = decode_shard_header(bytes_.data(), path_);
  header.version = 2;
  const auto encoded = encode_shard_header(header);
  std::copy(encoded.begin(), encoded.end(), bytes_.begin());
  expect_open_error({"unsupported shard version 2"});
}

TEST_F(DamagedShard, DocumentTableOutOfOrder) {
  const ShardHeader header = decode_shard_header(bytes_.data(), path_);
  uint64_t repeated = 0;  // document 1 claims to start where document 0 does
  std::memcpy(bytes_.data() + header.doc_offsets_offset() + 8, &repeated, 8);
  reseal();
  expect_open_error({"document 1 starts at token 0", "corrupt document table"});
}

TEST(Shard, MissingFile) {
  expect_error([] { ShardReader reader("/nonexistent/train-00000.tok"); },
               {"[shard] /nonexistent/train-00000.tok: cannot open"});
}

}  // namespace
}  // namespace anvil
