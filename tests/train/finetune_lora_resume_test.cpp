// LoRA training through the ordinary trainer, in process, on a tiny random base model saved
// as a Hugging Face folder and synthetic tokens: the run trains only the adapters (the base
// is bitwise unchanged and the checkpoint is a PEFT adapter folder with optimizer state and
// the base's identity), 2N steps straight equal N steps plus a resume to 2N bit for bit
// (metrics and adapters, with adapter dropout on), and a checkpoint refuses a different base.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/backend.h"
#include "core/error.h"
#include "io/safetensors_collection.h"
#include "model/hf_checkpoint.h"
#include "train/config.h"
#include "train/finetune.h"
#include "train/model_setup.h"
#include "train/trainer.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

LlamaConfig tiny_llama() {
  LlamaConfig config;
  config.dim = 32;
  config.n_layers = 2;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.ffn_dim = 64;
  config.vocab_size = 96;
  config.max_seq_len = 32;
  config.tie_embeddings = true;
  return config;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> metrics_without_times(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  const std::regex measured_fields(
      R"re(,"(mem_bytes|mem_peak_bytes|mem_planned_bytes|tokens_per_s|mfu|host_waits|readback_bytes|elapsed_s)":[-0-9.eE+]+)re"
      R"re(|,"mem_peak":\{[^}]*\})re");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(std::regex_replace(line, measured_fields, ""));
  return lines;
}

class FinetuneLoraResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = fs::temp_directory_path() /
           ("anvil_ft_lora_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    fs::create_directories(root);
    base = root / "base";
    const std::unique_ptr<Backend> backend = make_backend("cpu");
    LlamaModel model(tiny_llama(), *backend, ModelOptions{});
    model.init_weights(7);
    save_hf_model(model, hf_config_from_llama(tiny_llama()), base, HfExportOptions{});
  }
  void TearDown() override { fs::remove_all(root); }

  TrainConfig lora_config(int64_t steps) const {
    TrainConfig config;
    config.model = model_section_from(tiny_llama());
    config.model.init_from = base.string();
    config.data.synthetic = true;
    config.training.steps = steps;
    config.training.batch_size = 2;
    config.training.grad_accum = 2;
    config.training.seq_len = 16;
    config.training.eval_every = 4;
    config.training.eval_steps = 2;
    config.optimizer.schedule = "constant";
    config.optimizer.lr = 1e-2;
    config.optimizer.warmup_steps = 2;
    config.checkpoint.every = 0;
    config.lora.r = 4;
    config.lora.alpha = 8.0;
    config.lora.dropout = 0.1;
    config.lora.targets = {"q_proj", "v_proj", "down_proj"};
    config.logging.every = 1000;
    return config;
  }

  TrainResult train(const fs::path& run_dir, const TrainConfig& config) {
    validate_config(config);
    TrainRunOptions options;
    options.config = config;
    options.run_dir = run_dir;
    return run_training(options);
  }

  fs::path root;
  fs::path base;
};

TEST_F(FinetuneLoraResumeTest, TrainsOnlyAdaptersAndCheckpointsAPeftFolder) {
  const std::string base_bytes = file_bytes(base / "model.safetensors");
  const TrainResult result = train(root / "run", lora_config(6));
  EXPECT_EQ(result.final_step, 6);
  EXPECT_EQ(file_bytes(base / "model.safetensors"), base_bytes);
  const fs::path checkpoint = result.last_checkpoint;
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors",
                           "optimizer.safetensors", "base_model.json", "train_state.json"}) {
    EXPECT_TRUE(fs::exists(checkpoint / name)) << name;
  }
  EXPECT_FALSE(fs::exists(checkpoint / "model.safetensors"));
  const SafetensorsCollection adapter =
      SafetensorsCollection::open(checkpoint / "adapter_model.safetensors");
  // 2 layers x 3 targets x (A, B); B started at zero and has moved.
  EXPECT_EQ(adapter.size(), 12u);
  std::vector<float> b(static_cast<size_t>(
      adapter.at("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").numel()));
  adapter.at("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").read_f32(b);
  EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float v) { return v != 0.0f; }));
  const std::string adapter_config = file_bytes(checkpoint / "adapter_config.json");
  EXPECT_NE(adapter_config.find(base.string()), std::string::npos) << adapter_config;
}

TEST_F(FinetuneLoraResumeTest, ResumeEqualsStraightRunBitForBit) {
  train(root / "straight", lora_config(8));
  train(root / "resumed", lora_config(4));
  const TrainResult second = train(root / "resumed", lora_config(8));
  EXPECT_EQ(second.steps_this_run, 4);
  const std::vector<std::string> straight = metrics_without_times(root / "straight");
  ASSERT_EQ(straight.size(), 10u);  // 8 steps, evaluations at 4 and 8
  EXPECT_EQ(metrics_without_times(root / "resumed"), straight);
  const fs::path last = "checkpoints/step-0000008";
  EXPECT_EQ(file_bytes(root / "resumed" / last / "adapter_model.safetensors"),
            file_bytes(root / "straight" / last / "adapter_model.safetensors"));
  EXPECT_EQ(file_bytes(root / "resumed" / last / "optimizer.safetensors"),
            file_bytes(root / "straight" / last / "optimizer.safetensors"));
}

TEST_F(FinetuneLoraResumeTest, ResumeAgainstAnotherBaseIsRefused) {
  train(root / "run", lora_config(2));
  // Same shapes, different config.json (another RoPE base): a different model.
  LlamaConfig other = tiny_llama();
  other.rope_theta = 500000.0f;
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  LlamaModel model(other, *backend, ModelOptions{});
  fs::remove_all(base);
  save_hf_model(model, hf_config_from_llama(other), base, HfExportOptions{});
  TrainConfig config = lora_config(4);
  config.model.rope_theta = 500000.0;
  try {
    train(root / "run", config);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use the same base model"), std::string::npos) << e.what();
  }
}

TEST(FinetuneConfigTest, StepsFollowEpochs) {
  EXPECT_EQ(steps_for_epochs(3.0, 100, 8), 38);  // ceil(300 / 8)
  EXPECT_EQ(steps_for_epochs(1.0, 3, 8), 1);
  EXPECT_THROW(steps_for_epochs(1.0, 0, 8), Error);
  EXPECT_THROW(steps_for_epochs(0.0, 10, 8), Error);
}

TEST(FinetuneConfigTest, SftDefaults) {
  const TrainConfig lora = sft_defaults(false);
  EXPECT_EQ(lora.lora.r, 8);
  EXPECT_EQ(lora.lora.alpha, 16.0);
  EXPECT_EQ(lora.lora.dropout, 0.05);
  EXPECT_EQ(lora.lora.targets, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_EQ(lora.optimizer.lr, 2e-4);
  EXPECT_EQ(lora.optimizer.schedule, "cosine");
  const TrainConfig full = sft_defaults(true);
  EXPECT_EQ(full.lora.r, 0);
  EXPECT_EQ(full.optimizer.lr, 2e-5);
}

TEST(FinetuneConfigTest, PresetFilesSpellOutTheDefaults) {
  for (const bool full : {false, true}) {
    TrainConfig config = sft_defaults(full);
    apply_config_file(config, std::string(ANVIL_TEST_DATA) + "/../configs/sft-" +
                                  (full ? "full" : "lora") + ".toml");
    EXPECT_EQ(config_to_toml(config), config_to_toml(sft_defaults(full))) << full;
  }
}

TEST(FinetuneConfigTest, BadRequestsAreOneLineErrors) {
  FinetuneRequest request;
  request.model_dir = "/nonexistent/model";
  request.data = "x.jsonl";
  try {
    resolve_finetune_config(request, world());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--model /nonexistent/model: no such directory"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace anvil
