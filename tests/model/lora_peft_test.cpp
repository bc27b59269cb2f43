// PEFT interop: the fixture of tools/golden/make_peft_golden.py (a transformers LlamaForCausalLM
// with a peft LoRA adapter, non-zero B) loaded by anvil gives PyTorch's logits, loss and adapter
// gradients; an adapter anvil saves reloads bit for bit; malformed adapter directories fail
// with one error naming the file. With ANVIL_PEFT_ROUNDTRIP_DIR set, the round-trip test also
// leaves its adapter and logits there for `make_peft_golden.py --check DIR`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "lora_test_util.h"
#include "model/hf_checkpoint.h"
#include "model/peft_adapter.h"

namespace anvil::test {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(ANVIL_MODEL_GOLDEN_DIR) / "peft_llama";

struct Fixture {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  std::unique_ptr<LlamaModel> model;
  SafetensorsFile expected = SafetensorsFile::open(kGolden / "expected.safetensors");
  HostBatch batch;

  explicit Fixture(DType dtype = DType::f32) {
    ModelOptions options;
    options.max_batch = 2;
    options.max_seq = 12;
    options.compute_dtype = dtype;
    options.lora = read_peft_adapter_config(kGolden / "adapter").lora;
    model = load_hf_model(kGolden / "base", *backend, options);
    load_peft_adapter(kGolden / "adapter", *model);
    const SafetensorsEntry& tokens = expected.at("tokens");
    const int32_t* ids = reinterpret_cast<const int32_t*>(tokens.data);
    batch = HostBatch::from_tokens(std::vector<int32_t>(ids, ids + tokens.numel()),
                                   static_cast<int>(tokens.shape[0]),
                                   static_cast<int>(tokens.shape[1]));
  }
  std::vector<float> values(const std::string& name) const {
    const SafetensorsEntry& entry = expected.at(name);
    std::vector<float> out(static_cast<size_t>(entry.numel()));
    entry.read_f32(out);
    return out;
  }
};

// Returns a fresh temporary directory for one test.
fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("anvil_lora_" + name + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(LoraPeftTest, AdapterLogitsLossAndGradientsMatchPeft) {
  Fixture f;
  const std::vector<float> logits = logits_of(*f.model, f.batch);
  const double logits_error = max_abs_error(logits, f.values("logits"));
  std::printf("[lora] PEFT golden logits: max abs error %.3e\n", logits_error);
  EXPECT_LE(logits_error, 1e-4);

  Batch view = f.batch.view();
  const int64_t count = f.model->count_loss_tokens(view);
  f.model->trainable_gradients().zero();
  const LossSum loss = f.model->forward_backward(view, 1.0f / static_cast<float>(count));
  EXPECT_NEAR(loss.mean(), f.values("loss")[0], 1e-5);
  double worst = 0.0;
  for (const ParameterInfo& info : f.model->trainable().layout().params()) {
    const std::vector<float> expected = f.values("grad.base_model.model." + info.name);
    const std::vector<float> actual =
        to_host(*f.backend, f.model->trainable_gradients().tensor(info.name));
    EXPECT_LE(relative_max_error(actual, expected), 1e-4) << info.name;
    worst = std::max(worst, max_abs_error(actual, expected));
  }
  std::printf("[lora] PEFT golden loss %.6f vs %.6f; gradients max abs error %.3e\n", loss.mean(),
              f.values("loss")[0], worst);
}

TEST(LoraPeftTest, Bf16BaseWithPeftAdapterStaysCloseToPeft) {
  Fixture f(DType::bf16);
  const std::vector<float> logits = logits_of(*f.model, f.batch);
  EXPECT_LE(relative_max_error(logits, f.values("logits")), 3e-2);
}

TEST(LoraPeftTest, SavedAdapterReloadsExactly) {
  Fixture f;
  randomize_adapters(*f.model, 99, 0.05);
  const char* env = std::getenv("ANVIL_PEFT_ROUNDTRIP_DIR");
  const fs::path dir = env ? fs::path(env) : temp_dir("roundtrip");
  save_peft_adapter(dir, *f.model, "peft_llama/base");
  const std::vector<float> logits = logits_of(*f.model, f.batch);
  if (env) {
    SafetensorsWriter writer;
    writer.add_copy("logits", "F32",
                    {f.batch.batch, f.batch.seq, f.model->config().vocab_size},
                    {reinterpret_cast<const uint8_t*>(logits.data()), logits.size() * 4});
    writer.write(dir / "anvil_logits.safetensors");
  }
  EXPECT_EQ(read_peft_adapter_config(dir).lora.targets, f.model->options().lora.targets);
  Fixture reloaded;
  load_peft_adapter(dir, *reloaded.model);
  EXPECT_TRUE(bitwise_equal(logits_of(*reloaded.model, reloaded.batch), logits));
  if (!env) fs::remove_all(dir);
}

// Copies the fixture adapter into a temporary directory, applies `edit` and returns the error
// message of loading it (empty when it loads).
std::string load_error(const std::string& name,
                       const std::function<void(const fs::path&)>& edit) {
  Fixture f;
  const fs::path dir = temp_dir(name);
  fs::copy(kGolden / "adapter", dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  edit(dir);
  std::string message;
  try {
    load_peft_adapter(dir, *f.model);
  } catch (const Error& e) {
    message = e.what();
  }
  fs::remove_all(dir);
  return message;
}

// Rewrites adapter_config.json with `key` set to the JSON text `value`.
void set_config(const fs::path& dir, const std::string& key, const std::string& value) {
  std::ifstream in(dir / "adapter_config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config[key] = nlohmann::json::parse(value);
  std::ofstream(dir / "adapter_config.json") << config.dump(2);
}

// Rewrites adapter_model.safetensors through `edit` of its name -> (shape, values) map.
void edit_weights(const fs::path& dir,
                  const std::function<void(std::map<std::string, std::vector<int64_t>>&)>& edit) {
  const SafetensorsFile file = SafetensorsFile::open(dir / "adapter_model.safetensors");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const SafetensorsEntry& e : file.entries()) shapes[e.name] = e.shape;
  edit(shapes);
  SafetensorsWriter writer;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    writer.add_copy(name, "F32", shape,
                    {reinterpret_cast<const uint8_t*>(zeros.data()), zeros.size() * 4});
  }
  writer.write(dir / "adapter_model.safetensors");
}

TEST(LoraPeftTest, BadAdaptersFailNamingTheFile) {
  const std::string config_file = "adapter_config.json";
  const std::string weights_file = "adapter_model.safetensors";
  auto expect_error = [](const std::string& message, const std::string& file,
                         const std::string& what) {
    EXPECT_NE(message.find(file), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expect_error(load_error("unknown", [](const fs::path& d) {
                 set_config(d, "target_modules", R"(["q_proj", "lm_head"])");
               }),
               config_file, "unknown target 'lm_head'");
  expect_error(load_error("rank", [](const fs::path& d) { set_config(d, "r", "8"); }),
               config_file, "r = 8");
  expect_error(load_error("dora", [](const fs::path& d) { set_config(d, "use_dora", "true"); }),
               config_file, "DoRA");
  expect_error(load_error("bias", [](const fs::path& d) { set_config(d, "bias", R"("all")"); }),
               config_file, "bias");
  expect_error(load_error("missing", [](const fs::path& d) {
                 edit_weights(d, [](auto& shapes) {
                   shapes.erase("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
                 });
               }),
               weights_file, "missing tensor 'base_model.model.model.layers.1.mlp.up_proj");
  expect_error(load_error("shape", [](const fs::path& d) {
                 edit_weights(d, [](auto& shapes) {
                   const char* name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
                   shapes[name] = {4, 32};
                 });
               }),
               weights_file, "has shape [4, 32], expected [4, 64]");
  expect_error(load_error("extra", [](const fs::path& d) {
                 edit_weights(d, [](auto& shapes) {
                   shapes["base_model.model.lm_head.lora_A.weight"] = {4, 64};
                 });
               }),
               weights_file, "unexpected tensor");
}

}  // namespace
}  // namespace anvil::test
