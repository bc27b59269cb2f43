// Reading and writing Hugging Face model directories (contract in hf_checkpoint.h). Tensors are
// widened or narrowed one at a time; a source tensor already in the target dtype is written
// straight from the memory-mapped file, so re-sharding copies no bytes through the heap.
#include "model/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <system_error>

#include "core/error.h"
#include "io/file_util.h"
#include "model/parameter_table.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool is_float_dtype(std::string_view dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

std::vector<float> read_entry_f32(const SafetensorsEntry& entry) {
  std::vector<float> values(static_cast<size_t>(entry.numel()));
  entry.read_f32(values);
  return values;
}

// Checks that a tied checkpoint's lm head tensor is the embedding table itself.
void check_tied_head(const SafetensorsCollection& tensors, const SafetensorsEntry& head,
                     const LlamaConfig& config) {
  const ParamRow& embedding = param_row(ParamRole::embedding);
  const std::vector<int64_t> expected = dims_of(param_shape(param_row(ParamRole::head), config));
  ANVIL_CHECK(head.shape == expected && is_float_dtype(head.dtype),
              "[hf-checkpoint] {}: tensor '{}' ({} {}) cannot be the tied embedding table ({})",
              head.file, head.name, head.dtype, format_dims(head.shape), format_dims(expected));
  const std::vector<float> head_values = read_entry_f32(head);
  const std::vector<float> table = read_entry_f32(tensors.at(hf_param_name(embedding, 0)));
  ANVIL_CHECK(std::memcmp(head_values.data(), table.data(), table.size() * sizeof(float)) == 0,
              "[hf-checkpoint] {}: tie_word_embeddings is true but '{}' differs from '{}'",
              head.file, head.name, hf_param_name(embedding, 0));
}

// Copies one checked entry into an f32 tensor on the model's backend.
void copy_entry(const SafetensorsEntry& entry, const Tensor& dst, Backend& backend) {
  if (entry.dtype == "F32") {
    backend.copy_from_host(dst, entry.data);
    return;
  }
  const std::vector<float> values = read_entry_f32(entry);
  backend.copy_from_host(dst, values.data());
}

// Adds f32 values to a writer in the export dtype (bf16: round to nearest even).
void add_converted(SafetensorsWriter& writer, const std::string& name, std::vector<int64_t> shape,
                   const float* values, size_t count, DType dtype) {
  if (dtype == DType::f32) {
    writer.add_copy(name, "F32", std::move(shape),
                    {reinterpret_cast<const uint8_t*>(values), count * sizeof(float)});
    return;
  }
  std::vector<uint16_t> halves(count);
  for (size_t i = 0; i < count; ++i) halves[i] = float_to_bf16(values[i]);
  writer.add_copy(name, "BF16", std::move(shape),
                  {reinterpret_cast<const uint8_t*>(halves.data()), count * sizeof(uint16_t)});
}

void check_export_dtype(DType dtype) {
  ANVIL_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "[hf-export] dtype {} is not supported for export (use f32 or bf16)",
              dtype_name(dtype));
}

// Writes the tensors, config.json, generation_config.json and the extra files into `dir`.
void write_hf_directory(const SafetensorsWriter& writer, const HfModelConfig& config,
                        const fs::path& dir, const HfExportOptions& options) {
  write_directory_atomically(dir, [&](const fs::path& staging) {
    write_safetensors_sharded(writer, staging, options.max_shard_bytes);
    write_hf_config_json(staging / "config.json", config, torch_dtype_name(options.dtype));
    const bool has_generation_config =
        options.extra_files.count("generation_config.json") > 0 ||
        options.copy_files.count("generation_config.json") > 0;
    for (const auto& [name, source] : options.copy_files) {
      ANVIL_CHECK(fs::is_regular_file(source), "[hf-export] {}: not found", source.string());
      const fs::path target = staging / name;
      std::error_code error;
      fs::copy_file(source, target, fs::copy_options::overwrite_existing, error);
      ANVIL_CHECK(!error, "[hf-export] cannot copy {} to {}: {}", source.string(),
                  target.string(), error.message());
      fsync_file(target);
    }
    for (const auto& [name, text] : options.extra_files) write_file_atomic(staging / name, text);
    if (!has_generation_config) {
      write_file_atomic(staging / "generation_config.json",
                        hf_generation_config_json(config).dump(2) + "\n");
    }
  });
}

// Removes a staging folder unless released (the export failed before its rename).
class StagingGuard {
 public:
  explicit StagingGuard(fs::path path) : path_(std::move(path)) {}
  ~StagingGuard() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  StagingGuard(const StagingGuard&) = delete;
  StagingGuard& operator=(const StagingGuard&) = delete;
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

}  // namespace

const std::vector<std::string>& hf_tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "tokenizer.model"};
  return names;
}

bool is_ignored_hf_tensor(std::string_view name) {
  return ends_with(name, "rotary_emb.inv_freq");
}

void check_hf_tensors(const SafetensorsCollection& tensors, const LlamaConfig& config) {
  const std::shared_ptr<const ParameterLayout> layout = make_llama_layout(config, true);
  const std::string source = tensors.source().string();
  for (const ParameterInfo& info : layout->params()) {
    const SafetensorsEntry* entry = tensors.find(info.name);
    ANVIL_CHECK(entry != nullptr,
                "[hf-checkpoint] {}: missing tensor '{}' (shape {} expected from the config: "
                "{})",
                source, info.name, format_dims(dims_of(info.shape)), config.summary());
    ANVIL_CHECK(entry->shape == dims_of(info.shape),
                "[hf-checkpoint] {}: tensor '{}' has shape {}, expected {} from the config",
                entry->file, info.name, format_dims(entry->shape),
                format_dims(dims_of(info.shape)));
    ANVIL_CHECK(is_float_dtype(entry->dtype),
                "[hf-checkpoint] {}: tensor '{}' is {}; anvil reads F32, BF16 and F16 weights",
                entry->file, info.name, entry->dtype);
  }
  for (const std::string& name : tensors.names()) {
    if (layout->find(name) >= 0 || is_ignored_hf_tensor(name)) continue;
    if (config.tie_embeddings && name == hf_param_name(param_row(ParamRole::head), 0)) {
      check_tied_head(tensors, tensors.at(name), config);
      continue;
    }
    ANVIL_FAIL("[hf-checkpoint] {}: unexpected tensor '{}' (not part of the model the config "
               "describes: {})",
               tensors.at(name).file, name, config.summary());
  }
}

SafetensorsCollection open_hf_tensors(const fs::path& dir) {
  const bool has_safetensors = fs::exists(dir / kSafetensorsSingleName) ||
                               fs::exists(dir / kSafetensorsIndexName);
  const bool has_bin = fs::exists(dir / "pytorch_model.bin") ||
                       fs::exists(dir / "pytorch_model.bin.index.json");
  ANVIL_CHECK(has_safetensors || !has_bin,
              "[hf-checkpoint] {}: only PyTorch .bin weights found; anvil reads safetensors "
              "(re-save with save_pretrained(..., safe_serialization=True))",
              dir.string());
  return SafetensorsCollection::open(dir);
}

void load_hf_weights(const SafetensorsCollection& tensors, LlamaModel& model) {
  check_hf_tensors(tensors, model.config());
  const ParameterSet& params = model.parameters();
  const std::vector<ParameterInfo>& infos = params.layout().params();
  for (size_t i = 0; i < infos.size(); ++i) {
    const SafetensorsEntry& entry = tensors.at(infos[i].name);
    // A frozen bf16 base (LoRA) has no f32 masters: the model stores the values itself.
    if (params.has_storage(infos[i].group)) {
      copy_entry(entry, params.tensor(static_cast<int>(i)), model.backend());
    } else {
      model.set_parameter(static_cast<int>(i), read_entry_f32(entry).data());
    }
  }
}

std::unique_ptr<LlamaModel> load_hf_model(const fs::path& dir, Backend& backend,
                                          const ModelOptions& options,
                                          HfModelConfig* config_out) {
  HfModelConfig config = read_hf_config(dir);
  const SafetensorsCollection tensors = open_hf_tensors(dir);
  check_hf_tensors(tensors, config.llama);
  auto model = std::make_unique<LlamaModel>(config.llama, backend, options);
  load_hf_weights(tensors, *model);
  if (config_out != nullptr) *config_out = std::move(config);
  return model;
}

std::string torch_dtype_name(DType dtype) {
  check_export_dtype(dtype);
  return dtype == DType::f32 ? "float32" : "bfloat16";
}

uint64_t parse_shard_size(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    uint64_t bytes;
  };
  // Longest suffixes first so "GiB" is not read as "...B".
  constexpr Unit kUnits[] = {{"GIB", 1ull << 30}, {"MIB", 1ull << 20}, {"KIB", 1ull << 10},
                             {"GB", 1'000'000'000}, {"MB", 1'000'000}, {"KB", 1'000},
                             {"", 1}};
  std::string upper(text);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Unit& unit : kUnits) {
    if (!ends_with(upper, unit.suffix)) continue;
    const std::string digits = upper.substr(0, upper.size() - unit.suffix.size());
    const bool numeric = !digits.empty() && digits.size() <= 12 &&
                         std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!numeric) continue;
    const uint64_t bytes = std::stoull(digits) * unit.bytes;
    ANVIL_CHECK(bytes > 0, "[hf-export] shard size '{}' must be positive", text);
    return bytes;
  }
  ANVIL_FAIL("[hf-export] shard size '{}' is not understood (use e.g. 5GB, 500MB, 2GiB or a "
             "byte count)",
             text);
}

void save_hf_model(LlamaModel& model, const HfModelConfig& config, const fs::path& dir,
                   const HfExportOptions& options) {
  check_export_dtype(options.dtype);
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  const ParameterSet& params = model.parameters();
  const std::vector<ParameterInfo>& infos = params.layout().params();
  for (size_t i = 0; i < infos.size(); ++i) {
    std::vector<float> host(static_cast<size_t>(infos[i].numel()));
    model.get_parameter(static_cast<int>(i), host.data());
    add_converted(writer, infos[i].name, dims_of(infos[i].shape), host.data(), host.size(),
                  options.dtype);
  }
  write_hf_directory(writer, config, dir, options);
}

void save_hf_tensors(const SafetensorsCollection& tensors, const HfModelConfig& config,
                     const fs::path& dir, const HfExportOptions& options) {
  check_export_dtype(options.dtype);
  check_hf_tensors(tensors, config.llama);
  const std::string target = options.dtype == DType::f32 ? "F32" : "BF16";
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  const std::shared_ptr<const ParameterLayout> layout = make_llama_layout(config.llama, true);
  for (const ParameterInfo& info : layout->params()) {
    const SafetensorsEntry& entry = tensors.at(info.name);
    if (entry.dtype == target) {
      writer.add(info.name, entry.dtype, entry.shape, entry.data, entry.nbytes());
      continue;
    }
    const std::vector<float> values = read_entry_f32(entry);
    add_converted(writer, info.name, entry.shape, values.data(), values.size(), options.dtype);
  }
  write_hf_directory(writer, config, dir, options);
}

void write_directory_atomically(const fs::path& dir,
                                const std::function<void(const fs::path&)>& fill) {
  fs::path target = dir.lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  ANVIL_CHECK(!target.empty(), "[export] no output directory given");
  std::error_code error;
  if (fs::exists(target)) {
    ANVIL_CHECK(fs::is_directory(target) && fs::is_empty(target),
                "[export] {}: already exists and is not an empty directory; choose a new one",
                target.string());
  }
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, error);
  ANVIL_CHECK(!error, "[export] cannot create {}: {}", parent.string(), error.message());
  fs::path staging = target;
  staging += ".partial";
  fs::remove_all(staging, error);  // the leftover of an interrupted export
  ANVIL_CHECK(!error, "[export] cannot remove stale {}: {}", staging.string(), error.message());
  fs::create_directory(staging, error);
  ANVIL_CHECK(!error, "[export] cannot create {}: {}", staging.string(), error.message());
  StagingGuard guard(staging);
  fill(staging);
  fsync_dir(staging);
  if (fs::exists(target)) fs::remove(target, error);
  ANVIL_CHECK(!error, "[export] cannot replace empty {}: {}", target.string(), error.message());
  fs::rename(staging, target, error);
  ANVIL_CHECK(!error, "[export] cannot rename {} to {}: {}", staging.string(), target.string(),
              error.message());
  guard.release();
  fsync_dir(parent);
}

}  // namespace anvil
