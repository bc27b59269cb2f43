// Sharded safetensors: the Hugging Face sharding rule, index round trips, re-saving over an
// earlier save, and indexes that disagree with their shards.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "io/safetensors_collection.h"
#include "io_test_util.h"

namespace anvil {
namespace {

using testing::error_of;
using testing::TempDir;

// Tensors of 40, 40, 40, 100, 8 and 8 bytes, added in that order.
struct SixTensors {
  std::vector<std::vector<uint8_t>> payloads;
  SafetensorsWriter writer;

  SixTensors() {
    const std::vector<std::pair<std::string, size_t>> layout = {
        {"a", 40}, {"b", 40}, {"c", 40}, {"huge", 100}, {"d", 8}, {"e", 8}};
    for (size_t i = 0; i < layout.size(); ++i) {
      payloads.emplace_back(layout[i].second);
      for (size_t j = 0; j < layout[i].second; ++j)
        payloads.back()[j] = static_cast<uint8_t>(i * 31 + j);
    }
    for (size_t i = 0; i < layout.size(); ++i)
      writer.add(layout[i].first, "U8", {static_cast<int64_t>(layout[i].second)},
                 payloads[i].data(), layout[i].second);
    writer.set_metadata("format", "pt");
  }
};

TEST(SafetensorsSharded, FollowsTheHuggingFaceShardingRuleAndRoundTrips) {
  TempDir dir;
  SixTensors six;
  ShardedWriteResult result = write_safetensors_sharded(six.writer, dir.path(), 64);
  // a | b | huge (alone: larger than the limit, emitted at once) | c d e (56 bytes).
  EXPECT_EQ(result.files,
            (std::vector<std::string>{"model-00001-of-00004.safetensors",
                                      "model-00002-of-00004.safetensors",
                                      "model-00003-of-00004.safetensors",
                                      "model-00004-of-00004.safetensors"}));
  EXPECT_TRUE(result.indexed);
  EXPECT_EQ(result.total_size, 236u);

  const nlohmann::json index =
      nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 236);
  EXPECT_EQ(index["weight_map"]["a"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["b"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["huge"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["c"], "model-00004-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["e"], "model-00004-of-00004.safetensors");
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));

  SafetensorsCollection collection = SafetensorsCollection::open(dir.path());
  EXPECT_EQ(collection.source(), dir / "model.safetensors.index.json");
  EXPECT_EQ(collection.names(), (std::vector<std::string>{"a", "b", "c", "d", "e", "huge"}));
  EXPECT_EQ(collection.files().size(), 4u);
  EXPECT_EQ(collection.index_metadata()["total_size"], 236);
  const std::vector<std::string> names = {"a", "b", "c", "huge", "d", "e"};
  for (size_t i = 0; i < names.size(); ++i) {
    const SafetensorsEntry& entry = collection.at(names[i]);
    ASSERT_EQ(entry.nbytes(), six.payloads[i].size());
    EXPECT_EQ(std::memcmp(entry.data, six.payloads[i].data(), entry.nbytes()), 0) << names[i];
  }
  for (const auto& file : collection.files()) EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_NE(error_of([&] { collection.at("zzz"); }).find("no tensor 'zzz'"), std::string::npos);
}

TEST(SafetensorsSharded, WritesOneFileWithoutIndexWhenItFitsAndRemovesStaleShards) {
  TempDir dir;
  SixTensors six;
  write_safetensors_sharded(six.writer, dir.path(), 64);
  ShardedWriteResult result = write_safetensors_sharded(six.writer, dir.path(), 1 << 20);
  EXPECT_EQ(result.files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_FALSE(result.indexed);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"model.safetensors"}));
  SafetensorsCollection collection = SafetensorsCollection::open(dir.path());
  EXPECT_EQ(collection.size(), 6u);
  EXPECT_EQ(collection.source(), dir / "model.safetensors");
  EXPECT_TRUE(collection.index_metadata().empty());

  // And back to shards: the single file goes away.
  write_safetensors_sharded(six.writer, dir.path(), 100);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_EQ(SafetensorsCollection::open(dir.path()).size(), 6u);
}

TEST(SafetensorsSharded, OpensASingleFileOrAnIndexPathDirectly) {
  TempDir dir;
  SixTensors six;
  write_safetensors_sharded(six.writer, dir.path(), 64);
  EXPECT_EQ(SafetensorsCollection::open(dir / "model.safetensors.index.json").size(), 6u);
  EXPECT_EQ(SafetensorsCollection::open(dir / "model-00003-of-00004.safetensors").names(),
            (std::vector<std::string>{"huge"}));
  TempDir empty;
  EXPECT_NE(error_of([&] { SafetensorsCollection::open(empty.path()); })
                .find("neither model.safetensors.index.json nor model.safetensors found"),
            std::string::npos);
}

class SafetensorsIndexErrors : public ::testing::Test {
 protected:
  void SetUp() override { write_safetensors_sharded(six_.writer, dir_.path(), 64); }
  void rewrite_index(const std::string& text) {
    testing::write_raw(dir_ / "model.safetensors.index.json", text);
  }
  std::string open_error() {
    return error_of([&] { SafetensorsCollection::open(dir_.path()); });
  }
  nlohmann::json index() {
    return nlohmann::json::parse(read_file(dir_ / "model.safetensors.index.json"));
  }
  std::string index_path() const { return (dir_ / "model.safetensors.index.json").string(); }

  TempDir dir_;
  SixTensors six_;
};

TEST_F(SafetensorsIndexErrors, MissingShard) {
  std::filesystem::remove(dir_ / "model-00002-of-00004.safetensors");
  const std::string message = open_error();
  EXPECT_NE(message.find(index_path()), std::string::npos) << message;
  EXPECT_NE(message.find("shard 'model-00002-of-00004.safetensors' (listed for tensor 'b') does "
                         "not exist"),
            std::string::npos)
      << message;
}

TEST_F(SafetensorsIndexErrors, TensorListedButAbsentFromItsShard) {
  nlohmann::json changed = index();
  changed["weight_map"]["a"] = "model-00002-of-00004.safetensors";
  rewrite_index(changed.dump());
  EXPECT_NE(open_error().find("tensor 'a' is listed in shard 'model-00002-of-00004.safetensors' "
                              "but the shard has no such tensor"),
            std::string::npos);
}

TEST_F(SafetensorsIndexErrors, ShardHoldsAnUnlistedTensor) {
  nlohmann::json changed = index();
  changed["weight_map"].erase("e");
  rewrite_index(changed.dump());
  EXPECT_NE(open_error().find("shard 'model-00004-of-00004.safetensors' holds tensor 'e' which "
                              "the weight_map does not list for it"),
            std::string::npos);
}

TEST_F(SafetensorsIndexErrors, StructuralProblems) {
  rewrite_index("{\"metadata\":{}}");
  EXPECT_NE(open_error().find("\"weight_map\" is missing or not an object"), std::string::npos);
  rewrite_index("{\"weight_map\":{\"a\":\"../outside.safetensors\"}}");
  EXPECT_NE(open_error().find("tensor 'a' maps to '../outside.safetensors', which is not a file "
                              "inside the checkpoint directory"),
            std::string::npos);
  rewrite_index("{\"weight_map\":{\"a\":\"model-00001-of-00004.safetensors\",\"a\":\"x\"}}");
  EXPECT_NE(open_error().find("has duplicate key 'a' in 'weight_map'"), std::string::npos);
  rewrite_index("{\"weight_map\":{\"a\":3}}");
  EXPECT_NE(open_error().find("weight_map entry for tensor 'a' is not a file name"),
            std::string::npos);
  rewrite_index("{\"weight_map\":");
  EXPECT_NE(open_error().find("is not valid JSON"), std::string::npos);
}

TEST_F(SafetensorsIndexErrors, CorruptShardIsReportedByName) {
  testing::write_raw(dir_ / "model-00001-of-00004.safetensors", "garbage");
  const std::string message = open_error();
  EXPECT_NE(message.find("model-00001-of-00004.safetensors: file is 7 bytes"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace anvil
