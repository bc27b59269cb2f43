// Hugging Face directories <-> model weights: exact widening of F32/BF16/F16 sources (sharded
// and single-file), every malformed checkpoint rejected with the tensor named, lossless export
// round trips, re-sharding without a model, and exports that never leave partial output.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>

#include "core/dtype.h"
#include "eval_test_util.h"
#include "model/hf_checkpoint.h"

namespace anvil::test {
namespace {

namespace fs = std::filesystem;

struct TensorData {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using TensorMap = std::map<std::string, TensorData>;

TensorMap read_tensors(const fs::path& dir) {
  const SafetensorsCollection collection = SafetensorsCollection::open(dir);
  TensorMap out;
  for (const std::string& name : collection.names()) {
    const SafetensorsEntry& entry = collection.at(name);
    out[name] = {entry.dtype, entry.shape, {entry.bytes().begin(), entry.bytes().end()}};
  }
  return out;
}

// Writes a checkpoint directory: `family`'s config.json and the given tensors.
void write_checkpoint(const fs::path& dir, const std::string& family, const TensorMap& tensors) {
  fs::create_directories(dir);
  fs::copy_file(golden_dir(family) / "config.json", dir / "config.json");
  SafetensorsWriter writer;
  for (const auto& [name, t] : tensors) writer.add(name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  writer.write(dir / "model.safetensors");
}

std::unique_ptr<LlamaModel> load(const fs::path& dir, Backend& backend) {
  return load_hf_model(dir, backend, ModelOptions{});
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = make_backend("cpu");
  TempDir tmp_;
};

TEST_F(HfCheckpointTest, LoadsEveryFamilyWithTheSourceValuesExactly) {
  for (const std::string& family : golden_families()) {
    SCOPED_TRACE(family);
    const std::unique_ptr<LlamaModel> model = load(golden_dir(family), *backend_);
    const SafetensorsCollection source = open_hf_tensors(golden_dir(family));
    for (const ParameterInfo& info : model->parameters().layout().params()) {
      const SafetensorsEntry& entry = source.at(info.name);
      const std::vector<float> got = weight_values(*model, info.name);
      ASSERT_EQ(got.size(), static_cast<size_t>(entry.numel())) << info.name;
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t want_bits = 0;
        if (entry.dtype == "F32") {
          std::memcpy(&want_bits, entry.data + 4 * i, 4);
        } else {
          uint16_t half = 0;
          std::memcpy(&half, entry.data + 2 * i, 2);
          want_bits = float_bits(entry.dtype == "BF16" ? bf16_to_float(half) : f16_to_float(half));
        }
        ASSERT_EQ(float_bits(got[i]), want_bits) << info.name << "[" << i << "]";
      }
    }
  }
}

TEST_F(HfCheckpointTest, ReadsTheShardsTransformersWrote) {
  const SafetensorsCollection tensors = open_hf_tensors(golden_dir("llama3"));
  EXPECT_EQ(tensors.files().size(), 4u);
  EXPECT_EQ(tensors.at("model.embed_tokens.weight").dtype, "BF16");
  EXPECT_NO_THROW(check_hf_tensors(tensors, read_hf_config(golden_dir("llama3")).llama));
}

TEST_F(HfCheckpointTest, RejectsMissingTensor) {
  TensorMap tensors = read_tensors(golden_dir("llama2"));
  tensors.erase("model.layers.1.mlp.up_proj.weight");
  write_checkpoint(tmp_ / "m", "llama2", tensors);
  expect_error([&] { load(tmp_ / "m", *backend_); },
               {"missing tensor 'model.layers.1.mlp.up_proj.weight'", "model.safetensors"});
}

TEST_F(HfCheckpointTest, RejectsWrongShape) {
  TensorMap tensors = read_tensors(golden_dir("llama2"));
  TensorData& k = tensors["model.layers.0.self_attn.k_proj.weight"];
  k.shape = {k.shape[1], k.shape[0] / 2};  // same bytes as two matrices, wrong shape
  k.bytes.resize(k.bytes.size() / 2);
  write_checkpoint(tmp_ / "m", "llama2", tensors);
  expect_error([&] { load(tmp_ / "m", *backend_); },
               {"'model.layers.0.self_attn.k_proj.weight'", "has shape [32, 16]",
                "expected [32, 32]"});
}

TEST_F(HfCheckpointTest, RejectsUnexpectedTensorButIgnoresInvFreq) {
  TensorMap tensors = read_tensors(golden_dir("llama2"));
  const std::vector<float> inv_freq(4, 0.5f);
  const auto* bytes = reinterpret_cast<const uint8_t*>(inv_freq.data());
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = {"F32", {4}, {bytes, bytes + 16}};
  write_checkpoint(tmp_ / "ok", "llama2", tensors);
  EXPECT_NO_THROW(load(tmp_ / "ok", *backend_));
  tensors["model.layers.0.self_attn.o_proj.bias"] = {"F32", {4}, {bytes, bytes + 16}};
  write_checkpoint(tmp_ / "bad", "llama2", tensors);
  expect_error([&] { load(tmp_ / "bad", *backend_); },
               {"unexpected tensor 'model.layers.0.self_attn.o_proj.bias'"});
}

TEST_F(HfCheckpointTest, ChecksTiedAndUntiedHeads) {
  TensorMap tensors = read_tensors(golden_dir("smollm"));  // tied: no lm_head in the file
  ASSERT_EQ(tensors.count("lm_head.weight"), 0u);
  tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"];
  write_checkpoint(tmp_ / "equal", "smollm", tensors);
  EXPECT_NO_THROW(load(tmp_ / "equal", *backend_));
  tensors["lm_head.weight"].bytes[10] ^= 0x40;
  write_checkpoint(tmp_ / "differs", "smollm", tensors);
  expect_error([&] { load(tmp_ / "differs", *backend_); },
               {"tie_word_embeddings", "'lm_head.weight' differs"});
  TensorMap untied = read_tensors(golden_dir("llama2"));
  untied.erase("lm_head.weight");
  write_checkpoint(tmp_ / "no_head", "llama2", untied);
  expect_error([&] { load(tmp_ / "no_head", *backend_); }, {"missing tensor 'lm_head.weight'"});
}

TEST_F(HfCheckpointTest, RejectsNonFloatTensorsAndBinOnlyDirectories) {
  TensorMap tensors = read_tensors(golden_dir("llama2"));
  tensors["model.norm.weight"].dtype = "I32";
  write_checkpoint(tmp_ / "int", "llama2", tensors);
  expect_error([&] { load(tmp_ / "int", *backend_); }, {"'model.norm.weight' is I32"});
  fs::create_directories(tmp_ / "bin");
  fs::copy_file(golden_dir("llama2") / "config.json", tmp_ / "bin" / "config.json");
  write_file_atomic(tmp_ / "bin" / "pytorch_model.bin", "not really");
  expect_error([&] { load(tmp_ / "bin", *backend_); }, {"only PyTorch .bin weights"});
}

TEST_F(HfCheckpointTest, ExportThenReloadIsBitwiseLossless) {
  for (const std::string& family : golden_families()) {
    SCOPED_TRACE(family);
    HfModelConfig config;
    const std::unique_ptr<LlamaModel> model =
        load_hf_model(golden_dir(family), *backend_, ModelOptions{}, &config);
    const fs::path out = tmp_ / family;
    save_hf_model(*model, config, out, HfExportOptions{});
    EXPECT_TRUE(fs::exists(out / "generation_config.json"));
    EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
    HfModelConfig back_config;
    const std::unique_ptr<LlamaModel> back =
        load_hf_model(out, *backend_, ModelOptions{}, &back_config);
    EXPECT_EQ(back_config.llama.summary(), config.llama.summary());
    EXPECT_EQ(back_config.torch_dtype, "float32");
    EXPECT_TRUE(all_weights(*back) == all_weights(*model));
  }
}

TEST_F(HfCheckpointTest, Bf16ExportReproducesTheBf16SourceBytes) {
  HfModelConfig config;
  const std::unique_ptr<LlamaModel> model =
      load_hf_model(golden_dir("qwen2"), *backend_, ModelOptions{}, &config);
  HfExportOptions options;
  options.dtype = DType::bf16;
  save_hf_model(*model, config, tmp_ / "out", options);
  const TensorMap source = read_tensors(golden_dir("qwen2"));
  const TensorMap exported = read_tensors(tmp_ / "out");
  ASSERT_EQ(exported.size(), source.size());
  for (const auto& [name, data] : source) {
    ASSERT_EQ(exported.count(name), 1u) << name;
    EXPECT_EQ(exported.at(name).dtype, "BF16");
    EXPECT_TRUE(exported.at(name).bytes == data.bytes) << name;
  }
}

TEST_F(HfCheckpointTest, ReshardsAndRedtypesWithoutAModel) {
  const SafetensorsCollection source = open_hf_tensors(golden_dir("llama3"));
  const HfModelConfig config = read_hf_config(golden_dir("llama3"));
  HfExportOptions one_file;
  one_file.dtype = DType::bf16;
  save_hf_tensors(source, config, tmp_ / "single", one_file);
  EXPECT_TRUE(fs::exists(tmp_ / "single" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp_ / "single" / "model.safetensors.index.json"));
  const TensorMap original = read_tensors(golden_dir("llama3"));
  const TensorMap single = read_tensors(tmp_ / "single");
  for (const auto& [name, data] : original) EXPECT_TRUE(single.at(name).bytes == data.bytes) << name;

  HfExportOptions sharded;
  sharded.max_shard_bytes = parse_shard_size("50KB");
  save_hf_tensors(source, config, tmp_ / "sharded", sharded);
  const SafetensorsCollection written = SafetensorsCollection::open(tmp_ / "sharded");
  EXPECT_GT(written.files().size(), 4u);
  EXPECT_EQ(written.at("model.norm.weight").dtype, "F32");
  const std::unique_ptr<LlamaModel> a = load(golden_dir("llama3"), *backend_);
  const std::unique_ptr<LlamaModel> b = load(tmp_ / "sharded", *backend_);
  EXPECT_TRUE(all_weights(*a) == all_weights(*b));
}

TEST_F(HfCheckpointTest, DropsATiedHeadAndCopiesExtraFiles) {
  TensorMap tensors = read_tensors(golden_dir("smollm"));
  tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"];
  write_checkpoint(tmp_ / "src", "smollm", tensors);
  HfExportOptions options;
  options.copy_files["tokenizer.json"] = golden_dir("llama3") / "tokenizer.json";
  options.extra_files["notes.txt"] = "hello\n";
  save_hf_tensors(open_hf_tensors(tmp_ / "src"), read_hf_config(tmp_ / "src"), tmp_ / "out",
                  options);
  EXPECT_EQ(read_tensors(tmp_ / "out").count("lm_head.weight"), 0u);
  EXPECT_EQ(read_file(tmp_ / "out" / "tokenizer.json"),
            read_file(golden_dir("llama3") / "tokenizer.json"));
  EXPECT_EQ(read_file(tmp_ / "out" / "notes.txt"), "hello\n");
}

TEST_F(HfCheckpointTest, ExportNeverLeavesPartialOutput) {
  const SafetensorsCollection source = open_hf_tensors(golden_dir("llama2"));
  const HfModelConfig config = read_hf_config(golden_dir("llama2"));
  fs::create_directories(tmp_ / "busy");
  write_file_atomic(tmp_ / "busy" / "keep.txt", "mine");
  expect_error([&] { save_hf_tensors(source, config, tmp_ / "busy", HfExportOptions{}); },
               {"busy", "not an empty directory"});
  EXPECT_EQ(read_file(tmp_ / "busy" / "keep.txt"), "mine");

  HfExportOptions broken;
  broken.copy_files["tokenizer.json"] = tmp_ / "no-such-tokenizer.json";
  expect_error([&] { save_hf_tensors(source, config, tmp_ / "out", broken); },
               {"no-such-tokenizer.json", "not found"});
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
  EXPECT_FALSE(fs::exists(tmp_ / "out.partial"));

  fs::create_directories(tmp_ / "empty");
  EXPECT_NO_THROW(save_hf_tensors(source, config, tmp_ / "empty", HfExportOptions{}));
  EXPECT_TRUE(fs::exists(tmp_ / "empty" / "model.safetensors"));
}

TEST(HfShardSize, ParsesTransformersUnits) {
  EXPECT_EQ(parse_shard_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_shard_size("500MB"), 500'000'000u);
  EXPECT_EQ(parse_shard_size("100kb"), 100'000u);
  EXPECT_EQ(parse_shard_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_shard_size("3MiB"), 3ull << 20);
  EXPECT_EQ(parse_shard_size("123456"), 123456u);
  for (const char* bad : {"", "GB", "1.5GB", "-1GB", "5TB", "0"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_shard_size(bad), Error);
  }
}

}  // namespace
}  // namespace anvil::test
