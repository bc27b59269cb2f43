// config.json -> LlamaConfig for every supported family (the transformers-written fixtures and
// hand-written variants), the sliding-window rule, class defaults, every rejection naming its
// field and file, and config.json writing that reads back to the same model.
#include <gtest/gtest.h>

#include "eval_test_util.h"
#include "model/hf_config.h"

namespace anvil::test {
namespace {

using nlohmann::json;

// A complete Llama config.json; tests edit fields of it.
json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 256},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

HfModelConfig parse(const json& config) { return parse_hf_config(config.dump(), "m/config.json"); }

void expect_rejected(const json& config, const std::vector<std::string>& fragments) {
  std::vector<std::string> with_file = fragments;
  with_file.push_back("m/config.json");
  expect_error([&] { parse(config); }, with_file);
}

TEST(HfConfig, ReadsEveryGoldenFamily) {
  struct Expected {
    std::string family, architecture;
    int head_dim, max_seq;
    bool tied, bias;
    float scaling;
  };
  const std::vector<Expected> cases = {
      {"llama2", "LlamaForCausalLM", 8, 128, false, false, 0.0f},
      {"llama3", "LlamaForCausalLM", 16, 256, false, false, 0.0f},
      {"llama31", "LlamaForCausalLM", 16, 512, false, false, 8.0f},
      {"llama32", "LlamaForCausalLM", 24, 256, true, false, 32.0f},
      {"smollm", "LlamaForCausalLM", 16, 128, true, false, 0.0f},
      {"mistral", "MistralForCausalLM", 16, 32, false, false, 0.0f},
      {"qwen2", "Qwen2ForCausalLM", 16, 256, true, true, 0.0f}};
  for (const Expected& e : cases) {
    SCOPED_TRACE(e.family);
    const HfModelConfig config = read_hf_config(golden_dir(e.family));
    EXPECT_EQ(config.architecture, e.architecture);
    EXPECT_EQ(config.llama.resolved_head_dim(), e.head_dim);
    EXPECT_EQ(config.llama.max_seq_len, e.max_seq);
    EXPECT_EQ(config.llama.tie_embeddings, e.tied);
    EXPECT_EQ(config.llama.attention_bias, e.bias);
    EXPECT_EQ(config.llama.rope_scaling_factor, e.scaling);
    EXPECT_FALSE(config.torch_dtype.empty());
  }
}

TEST(HfConfig, ReadsLlama31RopeScalingAndIds) {
  const HfModelConfig config = read_hf_config(golden_dir("llama31") / "config.json");
  EXPECT_EQ(config.llama.rope_theta, 500000.0f);
  EXPECT_EQ(config.llama.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(config.llama.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(config.llama.rope_original_max_position, 64);
  EXPECT_EQ(config.llama.norm_eps, 1e-5f);
  EXPECT_EQ(config.torch_dtype, "bfloat16");
  EXPECT_EQ(config.bos_token_id, 1);
  EXPECT_EQ(config.eos_token_ids, std::vector<int32_t>{2});
}

TEST(HfConfig, AcceptsOldRopeScalingSpellingAndEosList) {
  json config = llama_json();
  config["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  config["eos_token_id"] = {128001, 128008, 128009};
  const HfModelConfig parsed = parse(config);
  EXPECT_EQ(parsed.llama.rope_scaling_factor, 8.0f);
  EXPECT_EQ(parsed.llama.rope_original_max_position, 8192);
  EXPECT_EQ(parsed.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  config["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(config).llama.rope_scaling_factor, 0.0f);
}

TEST(HfConfig, ReadsTransformers5RopeParameters) {
  // transformers 5 writes rope_theta and the scaling together, and no top-level rope_theta.
  json config = llama_json();
  config.erase("rope_theta");
  config.erase("rope_scaling");
  config["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0},
                               {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192},
                               {"rope_theta", 500000.0}};
  const HfModelConfig parsed = parse(config);
  EXPECT_EQ(parsed.llama.rope_theta, 500000.0f);
  EXPECT_EQ(parsed.llama.rope_scaling_factor, 8.0f);
  EXPECT_EQ(parsed.llama.rope_original_max_position, 8192);
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  EXPECT_EQ(parse(config).llama.rope_theta, 1000000.0f);
  EXPECT_EQ(parse(config).llama.rope_scaling_factor, 0.0f);
  // Both spellings: they must agree.
  config["rope_theta"] = 10000.0;
  expect_rejected(config, {"'rope_parameters' (rope_theta 1000000, scaling factor 0) "
                           "disagrees with the top-level rope_theta"});
  config["rope_theta"] = 1000000.0;
  EXPECT_EQ(parse(config).llama.rope_theta, 1000000.0f);
  config["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_rejected(config, {"'rope_parameters' type yarn is not supported"});
}

TEST(HfConfig, UsesClassDefaultsForAbsentFields) {
  json config = llama_json();
  for (const char* key : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "hidden_act",
                          "tie_word_embeddings", "architectures"}) {
    config.erase(key);
  }
  const HfModelConfig parsed = parse(config);
  EXPECT_EQ(parsed.architecture, "LlamaForCausalLM");  // from model_type
  EXPECT_EQ(parsed.llama.n_kv_heads, 4);
  EXPECT_EQ(parsed.llama.norm_eps, 1e-6f);
  EXPECT_EQ(parsed.llama.rope_theta, 10000.0f);
  EXPECT_FALSE(parsed.llama.tie_embeddings);
}

TEST(HfConfig, SlidingWindowCapsTheContextOnlyWhenShorter) {
  json config = llama_json();
  config["architectures"] = {"MistralForCausalLM"};
  config["model_type"] = "mistral";
  config["max_position_embeddings"] = 32768;
  config["sliding_window"] = 4096;
  HfModelConfig parsed = parse(config);
  EXPECT_EQ(parsed.llama.max_seq_len, 4096);
  EXPECT_EQ(parsed.sliding_window, 4096);
  EXPECT_EQ(parsed.max_position_embeddings, 32768);
  config["sliding_window"] = 32768;
  parsed = parse(config);
  EXPECT_EQ(parsed.llama.max_seq_len, 32768);
  EXPECT_FALSE(parsed.sliding_window.has_value());
  config["sliding_window"] = nullptr;
  EXPECT_EQ(parse(config).llama.max_seq_len, 32768);
  config["sliding_window"] = 0;
  expect_rejected(config, {"'sliding_window'", "positive"});
}

TEST(HfConfig, Qwen2WindowAppliesOnlyWithUseSlidingWindow) {
  json config = llama_json();
  config["architectures"] = {"Qwen2ForCausalLM"};
  config["model_type"] = "qwen2";
  config["sliding_window"] = 64;
  config["use_sliding_window"] = false;
  HfModelConfig parsed = parse(config);
  EXPECT_TRUE(parsed.llama.attention_bias);
  EXPECT_EQ(parsed.llama.max_seq_len, 128);
  config["use_sliding_window"] = true;
  parsed = parse(config);
  EXPECT_EQ(parsed.llama.max_seq_len, 64);
}

TEST(HfConfig, RejectsUnsupportedArchitecture) {
  json config = llama_json();
  config["architectures"] = {"GPT2LMHeadModel"};
  expect_rejected(config, {"'architectures'", "GPT2LMHeadModel", "not supported",
                           "LlamaForCausalLM"});
  config.erase("architectures");
  config["model_type"] = "gemma";
  expect_rejected(config, {"'model_type'", "gemma"});
  config.erase("model_type");
  expect_rejected(config, {"architectures", "model_type"});
}

TEST(HfConfig, RejectsUnsupportedRopeScaling) {
  json config = llama_json();
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_rejected(config, {"'rope_scaling'", "linear", "not supported"});
  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_rejected(config, {"'rope_scaling'", "yarn"});
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}};
  expect_rejected(config, {"'rope_scaling.original_max_position_embeddings'", "missing"});
}

TEST(HfConfig, RejectsVariantsAnvilDoesNotCompute) {
  json config = llama_json();
  config["hidden_act"] = "gelu";
  expect_rejected(config, {"'hidden_act'", "gelu"});
  config = llama_json();
  config["attention_bias"] = true;
  expect_rejected(config, {"'attention_bias'", "o_proj"});
  config = llama_json();
  config["mlp_bias"] = true;
  expect_rejected(config, {"'mlp_bias'"});
  config = llama_json();
  config["quantization_config"] = {{"quant_method", "gptq"}};
  expect_rejected(config, {"'quantization_config'"});
}

TEST(HfConfig, RejectsInconsistentHeadDims) {
  json config = llama_json();
  config["hidden_size"] = 66;
  expect_rejected(config, {"'hidden_size'", "not divisible", "num_attention_heads"});
  config = llama_json();
  config["architectures"] = {"Qwen2ForCausalLM"};
  config["head_dim"] = 32;
  expect_rejected(config, {"'head_dim'", "Qwen2ForCausalLM"});
  config = llama_json();
  config["head_dim"] = 0;
  expect_rejected(config, {"'head_dim'", "positive"});
  config = llama_json();
  config["num_key_value_heads"] = 3;
  expect_rejected(config, {"'num_key_value_heads'", "divide"});
  config = llama_json();
  config["head_dim"] = 15;  // odd: RoPE rotates pairs
  expect_rejected(config, {"head_dim must be even"});
}

TEST(HfConfig, RejectsMissingOrMistypedFields) {
  json config = llama_json();
  config.erase("hidden_size");
  expect_rejected(config, {"'hidden_size' is missing"});
  config = llama_json();
  config["num_hidden_layers"] = "2";
  expect_rejected(config, {"'num_hidden_layers'", "integer"});
  config = llama_json();
  config["vocab_size"] = -5;
  expect_rejected(config, {"'vocab_size'", "positive"});
  config = llama_json();
  config["tie_word_embeddings"] = 1;
  expect_rejected(config, {"'tie_word_embeddings'", "true or false"});
  expect_error([] { parse_hf_config("{\"hidden_size\": 1, \"hidden_size\": 2}", "dup.json"); },
               {"dup.json", "duplicate", "hidden_size"});
  expect_error([] { parse_hf_config("[1, 2]", "list.json"); }, {"list.json", "object"});
}

TEST(HfConfig, MissingConfigJsonNamesTheDirectory) {
  TempDir dir;
  expect_error([&] { read_hf_config(dir.path()); }, {dir.path().string(), "config.json"});
}

TEST(HfConfig, WrittenConfigReadsBackToTheSameModel) {
  for (const std::string& family : golden_families()) {
    SCOPED_TRACE(family);
    const HfModelConfig original = read_hf_config(golden_dir(family));
    const json written = hf_config_to_json(original, "float32");
    const HfModelConfig back = parse_hf_config(written.dump(), "written");
    const LlamaConfig& a = original.llama;
    const LlamaConfig& b = back.llama;
    EXPECT_EQ(a.summary(), b.summary());
    EXPECT_EQ(a.resolved_head_dim(), b.resolved_head_dim());
    EXPECT_EQ(a.norm_eps, b.norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_low_freq_factor, b.rope_low_freq_factor);
    EXPECT_EQ(a.rope_high_freq_factor, b.rope_high_freq_factor);
    EXPECT_EQ(a.rope_original_max_position, b.rope_original_max_position);
    EXPECT_EQ(back.architecture, original.architecture);
    EXPECT_EQ(back.max_position_embeddings, original.max_position_embeddings);
    EXPECT_EQ(back.eos_token_ids, original.eos_token_ids);
    EXPECT_EQ(written["torch_dtype"], "float32");
    // Fields anvil does not model survive, and floats keep their short spelling.
    EXPECT_EQ(written["initializer_range"], 0.1);
    EXPECT_EQ(written["transformers_version"], original.source["transformers_version"]);
    EXPECT_EQ(written["rms_norm_eps"], original.source["rms_norm_eps"]);
  }
}

TEST(HfConfig, AnvilModelsExportAsLlamaOrQwen2) {
  LlamaConfig llama;
  llama.dim = 64;
  llama.n_layers = 2;
  llama.n_heads = 4;
  llama.n_kv_heads = 2;
  llama.ffn_dim = 96;
  llama.vocab_size = 100;
  llama.max_seq_len = 64;
  llama.norm_eps = 1e-5f;
  llama.tie_embeddings = true;
  json written = hf_config_to_json(hf_config_from_llama(llama), "bfloat16");
  EXPECT_EQ(written["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(written["rms_norm_eps"], 1e-5);
  EXPECT_EQ(written["attention_bias"], false);
  EXPECT_EQ(parse_hf_config(written.dump(), "w").llama.summary(), llama.summary());
  llama.attention_bias = true;
  written = hf_config_to_json(hf_config_from_llama(llama), "float32");
  EXPECT_EQ(written["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(written["use_sliding_window"], false);
  EXPECT_EQ(parse_hf_config(written.dump(), "w").llama.summary(), llama.summary());
}

}  // namespace
}  // namespace anvil::test
