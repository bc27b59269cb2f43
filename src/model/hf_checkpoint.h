// Hugging Face model directories <-> anvil weights. A directory holds config.json, the weights
// (model.safetensors, or shards listed by model.safetensors.index.json), generation_config.json
// and the tokenizer files. Reading is strict: every tensor the config implies must be present
// with its exact shape, nothing else may be (old exports' rotary_emb.inv_freq buffers are
// ignored), and with tied embeddings lm_head.weight must be absent or bitwise equal to the
// embedding table. F32, BF16 and F16 tensors are widened to f32 exactly. Writing stages the
// whole directory in "<dir>.partial" and renames it into place, so a failed export leaves no
// partial directory; weights are written in f32 or bf16 (round to nearest even), sharded by the
// Hugging Face rule when larger than the shard limit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_collection.h"
#include "model/hf_config.h"
#include "model/llama.h"

namespace anvil {

// save_pretrained's default max_shard_size, "5GB" = 5 * 10^9 bytes.
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// The tokenizer files an export copies from its source when present.
const std::vector<std::string>& hf_tokenizer_file_names();

// Returns true for tensors a checkpoint may carry that anvil ignores (rotary_emb.inv_freq).
bool is_ignored_hf_tensor(std::string_view name);

// Checks names, shapes and dtypes of `tensors` against the layout of `config` (see header
// comment); throws naming the source file and the first offending tensor.
void check_hf_tensors(const SafetensorsCollection& tensors, const LlamaConfig& config);

// Opens the weights of a Hugging Face directory (model.safetensors or an index), with a clear
// error for a directory that only holds PyTorch .bin weights.
SafetensorsCollection open_hf_tensors(const std::filesystem::path& dir);

// Copies every parameter of `model` from `tensors` (checked first) into its f32 weights.
void load_hf_weights(const SafetensorsCollection& tensors, LlamaModel& model);

// Builds a ready model from a Hugging Face directory: its config (returned through
// `config_out` when given) and weights. options.max_seq = 0 sizes the activations for the
// config's whole context; pass what the caller needs (e.g. prompt + new tokens) to save memory.
std::unique_ptr<LlamaModel> load_hf_model(const std::filesystem::path& dir, Backend& backend,
                                          const ModelOptions& options,
                                          HfModelConfig* config_out = nullptr);

struct HfExportOptions {
  DType dtype = DType::f32;  // f32 or bf16
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  // Files copied into the directory (name in the directory -> source file), e.g. tokenizer
  // files and generation_config.json; a missing source is an error.
  std::map<std::string, std::filesystem::path> copy_files;
  // Files written with the given content (name -> text), e.g. a generated tokenizer_config.json.
  std::map<std::string, std::string> extra_files;
};

// Returns the torch_dtype name of an export dtype ("float32", "bfloat16"); throws for others.
std::string torch_dtype_name(DType dtype);
// Parses a shard size the way transformers does: "5GB" = 5e9, "500MB", "100KB", "2GiB" = 2^31,
// "1MiB", or a plain byte count. Throws naming the text when it is not one of these.
uint64_t parse_shard_size(std::string_view text);

// Writes `model` as a Hugging Face directory `dir` (which must not exist or be empty).
void save_hf_model(LlamaModel& model, const HfModelConfig& config, const std::filesystem::path& dir,
                   const HfExportOptions& options);
// Writes the tensors of a checked source (see check_hf_tensors) as a Hugging Face directory
// without building a model: re-dtype and re-shard a checkpoint. Tied heads are dropped.
void save_hf_tensors(const SafetensorsCollection& tensors, const HfModelConfig& config,
                     const std::filesystem::path& dir, const HfExportOptions& options);

// Creates `dir` through a staging sibling "<dir>.partial": `fill` writes into the staging
// folder, which is then renamed to `dir`. `dir` must be absent or an empty directory; on any
// error the staging folder is removed and `dir` is left as it was.
void write_directory_atomically(const std::filesystem::path& dir,
                                const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace anvil
