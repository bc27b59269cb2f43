// `anvil convert` and `anvil eval` end to end, run as the built binary: HF -> HF re-dtype and
// re-shard with the tokenizer files carried along, HF <-> anvil format (a rope-scaled model
// bit for bit too), a trained run exported to HF (with a generated tokenizer_config.json)
// evaluating to the same loss as the run itself, the eval numbers against transformers' on
// the llama3 fixture, and one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "../eval_test_util.h"
#include "cli_test_util.h"
#include "io/safetensors_collection.h"

namespace anvil::test {
namespace {

namespace fs = std::filesystem;

// Returns name -> raw bytes of every tensor of a checkpoint.
std::map<std::string, std::vector<uint8_t>> tensor_bytes(const fs::path& path) {
  const SafetensorsCollection collection = SafetensorsCollection::open(path);
  std::map<std::string, std::vector<uint8_t>> out;
  for (const std::string& name : collection.names()) {
    const auto bytes = collection.at(name).bytes();
    out[name] = {bytes.begin(), bytes.end()};
  }
  return out;
}

const fs::path kEvalText = fs::path(ANVIL_HF_GOLDEN_DIR) / "eval_text.txt";

TEST(ConvertCli, HfToHfRedtypesReshardsAndKeepsTokenizerFiles) {
  TempDir tmp;
  const fs::path source = golden_dir("llama3");
  run_ok("convert --from " + quoted(source) + " --to " + quoted(tmp / "f32") +
         " --dtype f32 --max-shard-size 60KB");
  EXPECT_TRUE(fs::exists(tmp / "f32" / "model.safetensors.index.json"));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_EQ(read_file(tmp / "f32" / name), read_file(source / name)) << name;
  }
  // Back to bf16: every tensor is byte-identical to what transformers saved.
  run_ok("convert --from " + quoted(tmp / "f32") + " --to " + quoted(tmp / "bf16") +
         " --dtype bf16");
  EXPECT_TRUE(fs::exists(tmp / "bf16" / "model.safetensors"));
  EXPECT_EQ(tensor_bytes(tmp / "bf16"), tensor_bytes(source));
  const nlohmann::json config = nlohmann::json::parse(read_file(tmp / "bf16" / "config.json"));
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
}

TEST(ConvertCli, HfToAnvilFormatAndBack) {
  TempDir tmp;
  const fs::path source = golden_dir("llama2");
  run_ok("convert --from " + quoted(source) + " --to " + quoted(tmp / "anvil") +
         " --format anvil");
  const std::string toml = read_file(tmp / "anvil" / "config.toml");
  EXPECT_NE(toml.find("dim = 32"), std::string::npos) << toml;
  EXPECT_NE(toml.find("init_from = \"" + (tmp / "anvil").string() + "\""), std::string::npos)
      << toml;
  EXPECT_FALSE(fs::exists(tmp / "anvil" / "model.safetensors.index.json"));
  run_ok("convert --from " + quoted(tmp / "anvil") + " --to " + quoted(tmp / "hf"));
  EXPECT_EQ(tensor_bytes(tmp / "hf"), tensor_bytes(source));
}

// A Llama 3.1 model (llama3 rope scaling, bf16 weights) goes HF -> anvil (f32 weights and a
// [model] section with the scaling) -> HF bf16 with every tensor byte and every rope field of
// config.json as transformers wrote them.
TEST(ConvertCli, RopeScaledModelRoundTripsBitForBit) {
  TempDir tmp;
  const fs::path source = golden_dir("llama31");
  const nlohmann::json source_config = nlohmann::json::parse(read_file(source / "config.json"));
  ASSERT_EQ(source_config["rope_scaling"]["rope_type"], "llama3");
  run_ok("convert --from " + quoted(source) + " --to " + quoted(tmp / "anvil") +
         " --format anvil");
  const std::string toml = read_file(tmp / "anvil" / "config.toml");
  for (const char* key : {"rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                          "rope_original_max_position"}) {
    EXPECT_NE(toml.find(key), std::string::npos) << key << "\n" << toml;
  }
  run_ok("convert --from " + quoted(tmp / "anvil") + " --to " + quoted(tmp / "hf") +
         " --dtype bf16");
  EXPECT_EQ(tensor_bytes(tmp / "hf"), tensor_bytes(source));
  const nlohmann::json config = nlohmann::json::parse(read_file(tmp / "hf" / "config.json"));
  for (const char* key : {"rope_scaling", "rope_theta", "max_position_embeddings"}) {
    EXPECT_EQ(config[key], source_config[key]) << key;
  }
}

TEST(EvalCli, TextFileLossMatchesTransformers) {
  const nlohmann::json golden = golden_json("llama3");
  for (const auto& reference : golden["perplexity"]) {
    const int seq_len = reference["seq_len"], stride = reference["stride"];
    const std::string output =
        run_ok("eval --threads 1 --model " + quoted(golden_dir("llama3")) + " --text-file " +
               quoted(kEvalText) + " --seq-len " + std::to_string(seq_len) + " --stride " +
               std::to_string(stride) + " --batch-size 3 --json");
    const nlohmann::json summary = last_json_line(output);
    EXPECT_EQ(summary["tokens"], reference["tokens"]);
    EXPECT_EQ(summary["input_tokens"], golden["eval_text_ids"].size());
    EXPECT_NEAR(summary["loss"].get<double>(), reference["loss"].get<double>(), 1e-5);
  }
}

TEST(EvalCli, TrainedRunExportsToHfWithTheSameLoss) {
  TempDir tmp;
  run_ok("tokenizer train --input " + quoted(kEvalText) + " --vocab-size 300 --out " +
         quoted(tmp / "tok.json"));
  run_ok("prepare --threads 1 --input " + quoted(kEvalText) + " --tokenizer " +
         quoted(tmp / "tok.json") + " --out " + quoted(tmp / "data") + " --split 1,0,0");
  run_ok("train --threads 1 --run-dir " + quoted(tmp / "run") + " --data.path=" +
         (tmp / "data").string() + " --data.tokenizer=" + (tmp / "tok.json").string() +
         " --model.dim=32 --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2 "
         "--model.ffn_dim=64 --model.vocab_size=320 --model.max_seq_len=32 "
         "--training.batch_size=2 --training.seq_len=16 --training.steps=2 "
         "--training.eval_every=0 --training.eval_steps=0 --optimizer.warmup_steps=1");
  run_ok("convert --from " + quoted(tmp / "run") + " --to " + quoted(tmp / "hf"));
  const nlohmann::json tokenizer_config =
      nlohmann::json::parse(read_file(tmp / "hf" / "tokenizer_config.json"));
  EXPECT_EQ(tokenizer_config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(tokenizer_config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(tokenizer_config["bos_token"], "<|endoftext|>");
  EXPECT_EQ(read_file(tmp / "hf" / "tokenizer.json"), read_file(tmp / "tok.json"));

  const std::string args = " --threads 1 --text-file " + quoted(kEvalText) + " --seq-len 16 --json";
  const nlohmann::json from_run = last_json_line(run_ok("eval --model " + quoted(tmp / "run") + args));
  const nlohmann::json from_hf = last_json_line(run_ok("eval --model " + quoted(tmp / "hf") + args));
  EXPECT_EQ(from_run["loss"], from_hf["loss"]);
  EXPECT_EQ(from_run["tokens"], from_hf["tokens"]);
  const fs::path checkpoint = tmp / "run" / "checkpoints" / "step-0000002";
  const nlohmann::json from_checkpoint =
      last_json_line(run_ok("eval --model " + quoted(checkpoint) + args));
  EXPECT_EQ(from_checkpoint["loss"], from_run["loss"]);

  const nlohmann::json on_split = last_json_line(
      run_ok("eval --threads 1 --model " + quoted(tmp / "hf") + " --data " +
             quoted(tmp / "data") + " --split train --seq-len 16 --json"));
  const nlohmann::json meta = nlohmann::json::parse(read_file(tmp / "data" / "meta.json"));
  EXPECT_EQ(on_split["input_tokens"], meta["splits"]["train"]["tokens"]);
  EXPECT_GT(on_split["tokens"].get<int64_t>(), 0);
  EXPECT_TRUE(std::isfinite(on_split["loss"].get<double>()));
}

TEST(ConvertCli, ErrorsAreOneLine) {
  TempDir tmp;
  struct Case {
    std::string args, fragment;
  };
  const std::vector<Case> cases = {
      {"convert --from " + quoted(tmp / "nothing") + " --to " + quoted(tmp / "o"),
       "no such directory"},
      {"convert --from " + quoted(tmp.path()) + " --to " + quoted(tmp / "o"),
       "not a Hugging Face model directory"},
      {"convert --from " + quoted(golden_dir("llama2")) + " --to " + quoted(tmp / "o") +
           " --max-shard-size 5TB",
       "shard size '5TB'"},
      {"eval --model " + quoted(golden_dir("llama2")) + " --text-file " + quoted(kEvalText),
       "no tokenizer of its own"},
      {"eval --model " + quoted(golden_dir("llama3")) + " --text-file " + quoted(kEvalText) +
           " --seq-len 300",
       "exceeds the model's context of 256"},
  };
  for (const Case& c : cases) {
    const CommandResult result = run_anvil(c.args);
    EXPECT_EQ(result.exit_code, 1) << c.args << "\n" << result.output;
    EXPECT_NE(result.output.find("anvil: error: "), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(c.fragment), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(tmp / "o"));
  }
}

}  // namespace
}  // namespace anvil::test
