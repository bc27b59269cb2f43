// Hugging Face config.json <-> LlamaConfig. Reading accepts LlamaForCausalLM (Llama 2/3/3.1/3.2,
// TinyLlama, SmolLM, DeepSeek-LLM), MistralForCausalLM and Qwen2ForCausalLM. The sizes
// (hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
// max_position_embeddings) are required; other absent fields take the transformers class
// default (rms_norm_eps 1e-6, rope_theta 10000, untied). It rejects anything anvil would compute
// differently (another architecture, activation, rope scaling type, o_proj or MLP biases,
// quantized weights, an impossible head_dim) with one error naming the field and the file.
// Sliding window rule: a window only matters for a sequence longer than the window, so when
// sliding_window < max_position_embeddings anvil caps its context (max_seq_len) at the window;
// any longer sequence is then refused by the model. Writing produces a config.json transformers
// loads as the same model; fields of a source file that anvil does not model are kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_config.h"

namespace anvil {

struct HfModelConfig {
  LlamaConfig llama;             // what anvil builds (validated)
  std::string architecture;      // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"
  std::string torch_dtype;       // as written in the file ("bfloat16"); informational
  int max_position_embeddings = 0;    // as written; llama.max_seq_len may be capped below it
  std::optional<int> sliding_window;  // set when the window capped llama.max_seq_len
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // a single id or the file's list
  std::optional<int32_t> pad_token_id;
  nlohmann::json source = nlohmann::json::object();  // the parsed file ({} when not read)
};

// Returns the architectures anvil loads, for messages and help texts.
const std::vector<std::string>& supported_hf_architectures();

// Parses a config.json document; `file` names it in errors ("[hf-config] <file>: <field>: ...").
HfModelConfig parse_hf_config(std::string_view text, const std::string& file);
// Reads `path`, a config.json file or a directory holding one.
HfModelConfig read_hf_config(const std::filesystem::path& path);
// Returns the LlamaConfig of a config.json file or of the directory holding one.
LlamaConfig llama_config_from_hf_json(const std::filesystem::path& path);

// Returns the Hugging Face description of an anvil model: LlamaForCausalLM, or
// Qwen2ForCausalLM when it has q/k/v biases (Llama's attention_bias would add an o_proj bias).
HfModelConfig hf_config_from_llama(const LlamaConfig& llama);

// Returns the config.json object for `config` stored as `torch_dtype` ("float32", "bfloat16").
nlohmann::json hf_config_to_json(const HfModelConfig& config, std::string_view torch_dtype);
// Writes config.json atomically (see hf_config_to_json).
void write_hf_config_json(const std::filesystem::path& path, const HfModelConfig& config,
                          std::string_view torch_dtype);
// Returns a minimal generation_config.json object (bos/eos/pad ids when known).
nlohmann::json hf_generation_config_json(const HfModelConfig& config);

}  // namespace anvil
