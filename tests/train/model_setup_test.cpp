// The model a config builds: parameter counts of the presets (the numbers configs/README.md
// states), and optimizer decay spans that follow the model's parameter layout.
#include "train/model_setup.h"

#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "model/llama_parameters.h"
#include "parallel/shard_plan.h"
#include "train/config.h"

namespace anvil {
namespace {

TrainConfig load_preset(const std::string& name) {
  TrainConfig config;
  apply_config_file(config, std::string(ANVIL_TEST_DATA) + "/../configs/" + name + ".toml");
  return config;
}

TEST(ModelSetupTest, PresetParameterCountsMatchTheirDocumentation) {
  const std::pair<const char*, int64_t> presets[] = {
      {"tiny", 5'475'584},          {"30M", 29'368'832},
      {"125M", 124'668'672},        {"1B", 1'100'048'384},
      {"llama2-7b", 6'738'415'616}, {"llama3-8b", 8'030'261'248},
      {"llama3.1-405b", 405'853'388'800}};
  for (const auto& [name, documented] : presets) {
    const LlamaConfig llama = llama_config_from(load_preset(name).model);
    EXPECT_EQ(llama.param_count(), documented) << name;
    EXPECT_EQ(make_llama_layout(llama, false)->total_params(), documented) << name;
  }
}

TEST(ModelSetupTest, OptimizerSpansFollowTheLayoutsDecayFlags) {
  TrainConfig config;
  config.model.dim = 32;
  config.model.n_layers = 2;
  config.model.n_heads = 4;
  config.model.n_kv_heads = 2;
  config.model.ffn_dim = 48;
  config.model.vocab_size = 50;  // odd sizes leave alignment padding inside groups
  config.model.max_seq_len = 16;
  const auto backend = make_backend("cpu-ref");
  for (const bool decay_embeddings : {false, true}) {
    ModelOptions options;
    options.max_batch = 1;
    options.decay_embeddings = decay_embeddings;
    LlamaModel model(llama_config_from(config.model), *backend, options);
    const ParameterLayout& layout = model.parameters().layout();
    const std::vector<std::vector<ParamSpan>> spans = layout_decay_spans(layout);
    ASSERT_EQ(static_cast<int>(spans.size()), layout.group_count());
    for (size_t g = 0; g < spans.size(); ++g) {
      int64_t next = 0;
      for (const ParamSpan& span : spans[g]) {
        EXPECT_EQ(span.offset, next);
        next += span.count;
      }
      EXPECT_EQ(next, layout.group_numel(static_cast<int>(g)));
    }
    for (const ParameterInfo& info : layout.params()) {
      bool decays = false;
      for (const ParamSpan& span : spans[static_cast<size_t>(info.group)]) {
        if (info.offset >= span.offset && info.offset < span.offset + span.count) {
          decays = span.weight_decay;
          EXPECT_LE(info.offset + info.numel(), span.offset + span.count) << info.name;
        }
      }
      EXPECT_EQ(decays, info.weight_decay) << info.name;
      const bool is_norm = info.name.find("norm") != std::string::npos;
      if (is_norm) {
        EXPECT_FALSE(decays) << info.name;
      }
      if (info.name == "model.embed_tokens.weight") {
        EXPECT_EQ(decays, decay_embeddings);
      }
      if (info.name.find("q_proj.weight") != std::string::npos) {
        EXPECT_TRUE(decays) << info.name;
      }
    }
  }
}

}  // namespace
}  // namespace anvil
