// Sharded checkpoint files (see sharded_checkpoint.h). Readers map files (SafetensorsFile is
// zero-copy), so a rank that needs a slice of a tensor touches only that slice's pages; each
// optimizer file is mapped once per load, its metadata (offsets, tp position, step) read then.
#include "parallel/sharded_checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/divergence_error.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/peft_adapter.h"
#include "model/tensor_parallel.h"

namespace anvil {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kShardOffsetsKey = "shard_offsets";
constexpr const char* kTpIndexKey = "tp_index";
constexpr const char* kTpSizeKey = "tp_size";

std::string optimizer_file_name(int fsdp_index, int fsdp_size, int tp_index, int tp_size) {
  const std::string tp =
      tp_size == 1 ? std::string() : fmt::format("-tp{:05}-of-{:05}", tp_index, tp_size);
  if (fsdp_size == 1 && tp_size == 1) return "optimizer.safetensors";
  return fmt::format("optimizer{}-{:05}-of-{:05}.safetensors", tp, fsdp_index, fsdp_size);
}

// Reads an integer metadata value, or `fallback` when the file has none.
int64_t metadata_int(const SafetensorsFile& file, const std::filesystem::path& path,
                     const char* key, int64_t fallback) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return fallback;
  int64_t value = 0;
  const std::string& text = it->second;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  ANVIL_CHECK(ec == std::errc() && ptr == text.data() + text.size(),
              "[checkpoint] {}: metadata '{}' = '{}' is not an integer", path.string(), key, text);
  return value;
}

// One optimizer file of a checkpoint folder, mapped once, with what its metadata says.
struct OptimizerFile {
  SafetensorsFile file;
  nlohmann::json offsets = nlohmann::json::object();  // "<g>" -> first element (absent: 0)
  int64_t tp_size = 1;
  int64_t tp_index = 0;
  int64_t step = 0;
};

// Reads the "step" metadata, which every optimizer file must have.
int64_t step_metadata(const SafetensorsFile& file) {
  const std::string path = file.path().string();
  const auto it = file.metadata().find("step");
  ANVIL_CHECK(it != file.metadata().end(), "[checkpoint] {}: no 'step' metadata", path);
  int64_t value = 0;
  const std::string& text = it->second;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  ANVIL_CHECK(ec == std::errc() && ptr == text.data() + text.size() && value >= 0,
              "[checkpoint] {}: 'step' metadata '{}' is not a step count", path, text);
  return value;
}

// Maps every optimizer*.safetensors file of `dir` (in name order) and reads its metadata.
std::vector<OptimizerFile> open_optimizer_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> paths;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("optimizer") && name.ends_with(".safetensors")) {
      paths.push_back(entry.path());
    }
  }
  ANVIL_CHECK(!error, "[checkpoint] {}: cannot list the folder ({})", dir.string(),
              error.message());
  ANVIL_CHECK(!paths.empty(), "[checkpoint] {}: no optimizer*.safetensors file", dir.string());
  std::sort(paths.begin(), paths.end());
  std::vector<OptimizerFile> files;
  for (const std::filesystem::path& path : paths) {
    OptimizerFile f{SafetensorsFile::open(path)};
    const auto& metadata = f.file.metadata();
    if (const auto it = metadata.find(kShardOffsetsKey); it != metadata.end()) {
      try {
        f.offsets = nlohmann::json::parse(it->second);
      } catch (const nlohmann::json::exception& e) {
        ANVIL_FAIL("[checkpoint] {}: metadata '{}' is not JSON ({})", path.string(),
                   kShardOffsetsKey, e.what());
      }
    }
    // The file holds part of one tp rank's shard, in that tp size's layout.
    f.tp_size = metadata_int(f.file, path, kTpSizeKey, 1);
    f.tp_index = metadata_int(f.file, path, kTpIndexKey, 0);
    ANVIL_CHECK(f.tp_size >= 1 && f.tp_index >= 0 && f.tp_index < f.tp_size,
                "[checkpoint] {}: tp rank {} of {} is not a tensor-parallel position",
                path.string(), f.tp_index, f.tp_size);
    f.step = step_metadata(f.file);
    ANVIL_CHECK(files.empty() || files.front().step == f.step,
                "[checkpoint] {}: optimizer files disagree on the step ({} and {})",
                dir.string(), files.front().step, f.step);
    files.push_back(std::move(f));
  }
  return files;
}

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

// Parses "adamw.m.<g>" / "adamw.v.<g>" into (which, group); false for any other name.
bool parse_moment_name(const std::string& name, int& which, int& group) {
  if (name.size() < 9 || !name.starts_with("adamw.") || name[7] != '.') return false;
  if (name[6] != 'm' && name[6] != 'v') return false;
  which = name[6] == 'm' ? 0 : 1;
  const char* begin = name.data() + 8;
  const char* end = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(begin, end, group);
  return ec == std::errc() && ptr == end && group >= 0;
}

void write_model(DataParallelEngine& engine, const std::filesystem::path& dir) {
  const DeviceMesh& mesh = engine.mesh();
  // The writer's tp group gathers every group with it, and where the f32 masters are sharded
  // (stage 3; stages 1-2 in mixed precision) so do the fsdp groups of those tp ranks.
  const bool sharded = engine.zero_stage() == 3 || engine.compute_replica();
  if (mesh.data_rank() != 0 && !(sharded && mesh.dp_index() == 0)) return;
  const bool writer = mesh.world().rank() == 0;
  const ParameterLayout& layout = engine.model().full_trainable_layout();
  std::vector<std::vector<float>> groups(static_cast<size_t>(layout.group_count()));
  for (int g = 0; g < layout.group_count(); ++g) {
    groups[static_cast<size_t>(g)].resize(static_cast<size_t>(layout.group_numel(g)));
    engine.gather_weights(g, groups[static_cast<size_t>(g)].data());
  }
  if (!writer) return;
  // The engine never applies a step with a non-finite gradient, but a finite gradient at an
  // absurd learning rate can still overflow the weights; such weights are not worth keeping.
  for (int g = 0; g < layout.group_count(); ++g) {
    const std::vector<float>& values = groups[static_cast<size_t>(g)];
    const auto bad = std::find_if(values.begin(), values.end(),
                                  [](float v) { return !std::isfinite(v); });
    if (bad != values.end()) {
      throw DivergenceError(
          fmt::format("[checkpoint] training diverged: parameter group {} holds a non-finite "
                      "weight ({}); not writing it to a checkpoint (lower optimizer.lr or set "
                      "optimizer.grad_clip)",
                      g, *bad),
          __FILE__, __LINE__);
    }
  }
  SafetensorsWriter file;
  file.set_metadata("format", "pt");
  for (const ParameterInfo& p : layout.params()) {
    const float* values = groups[static_cast<size_t>(p.group)].data() + p.offset;
    file.add(p.name, "F32", dims_of(p.shape), values,
             static_cast<uint64_t>(p.numel()) * sizeof(float));
  }
  file.write(dir / kModelFile);
}

}  // namespace

void write_engine_optimizer(DataParallelEngine& engine, const std::filesystem::path& dir) {
  const DeviceMesh& mesh = engine.mesh();
  if (mesh.dp_index() != 0) return;  // dp replicas hold the same shard
  Backend& backend = engine.optimizer_backend();  // the host's when offloaded
  SafetensorsWriter file;
  nlohmann::json offsets = nlohmann::json::object();
  for (int g = 0; g < engine.plan().group_count(); ++g) {
    for (int which = 0; which < 2; ++which) {
      const Tensor moment = engine.moment(g, which);
      if (!moment.defined()) continue;
      const std::string name = fmt::format("adamw.{}.{}", which == 0 ? 'm' : 'v', g);
      if (moment.device.is_cpu()) {
        file.add(name, moment);
      } else {
        std::vector<uint8_t> host(moment.nbytes());
        backend.copy_to_host(host.data(), moment);
        file.add_copy(name, "F32", dims_of(moment.shape), host);
      }
      offsets[std::to_string(g)] = engine.plan().group(g).shard_begin;
    }
  }
  file.set_metadata("step", std::to_string(engine.optimizer_steps()));
  file.set_metadata(kShardOffsetsKey, offsets.dump());
  file.set_metadata("fsdp_index", std::to_string(mesh.fsdp_index()));
  file.set_metadata("fsdp_size", std::to_string(mesh.shard_count()));
  file.set_metadata(kTpIndexKey, std::to_string(mesh.tp_index()));
  file.set_metadata(kTpSizeKey, std::to_string(mesh.shape().tp));
  file.write(dir / optimizer_file_name(mesh.fsdp_index(), mesh.shard_count(), mesh.tp_index(),
                                       mesh.shape().tp));
}

void read_engine_weights(DataParallelEngine& engine, const SafetensorsCollection& tensors) {
  const std::string source = tensors.source().string();
  const ParameterLayout& layout = engine.model().full_trainable_layout();
  std::vector<float> converted;
  for (const ParameterInfo& p : layout.params()) {
    const SafetensorsEntry& entry = tensors.at(p.name);
    ANVIL_CHECK(entry.shape == dims_of(p.shape), "[checkpoint] {}: tensor '{}' has shape {}, "
                "expected {}", source, p.name, format_dims(entry.shape),
                format_dims(dims_of(p.shape)));
    const auto [held_begin, held_end] = engine.weight_range(p.group);
    const int64_t lo = std::max(held_begin, p.offset);
    const int64_t hi = std::min(held_end, p.offset + p.numel());
    if (lo >= hi) continue;
    const float* values = nullptr;
    if (entry.dtype == "F32") {
      values = reinterpret_cast<const float*>(entry.data);
    } else {
      converted.resize(static_cast<size_t>(p.numel()));
      entry.read_f32(converted);
      values = converted.data();
    }
    engine.set_weights(p.group, lo, hi - lo, values + (lo - p.offset));
  }
}

void write_engine_adapter(DataParallelEngine& engine, const std::filesystem::path& dir,
                          const std::string& base_model_name_or_path) {
  LlamaModel& model = engine.model();
  const ParameterLayout& layout = model.full_trainable_layout();
  std::vector<std::vector<float>> groups(static_cast<size_t>(layout.group_count()));
  for (int g = 0; g < layout.group_count(); ++g) {
    groups[g].resize(static_cast<size_t>(layout.group_numel(g)));
    engine.gather_weights(g, groups[g].data());  // collective under stage 3
  }
  if (engine.mesh().world().rank() != 0) return;
  write_peft_adapter(
      dir, model.options().lora, layout,
      [&](int index, float* values) {
        const ParameterInfo& p = layout.params()[static_cast<size_t>(index)];
        std::copy_n(groups[p.group].data() + p.offset, p.numel(), values);
      },
      base_model_name_or_path);
}

void read_engine_adapter(DataParallelEngine& engine, const std::filesystem::path& dir) {
  LlamaModel& model = engine.model();
  ANVIL_CHECK(model.lora_enabled(), "[peft] {}: the model was built without LoRA adapters",
              dir.string());
  const ParameterLayout& layout = model.full_trainable_layout();
  read_peft_adapter_weights(dir, model.options().lora, layout,
                            [&](int index, const float* values) {
                              const ParameterInfo& p = layout.params()[static_cast<size_t>(index)];
                              engine.set_weights(p.group, p.offset, p.numel(), values);
                            });
}

void read_engine_optimizer(DataParallelEngine& engine, const std::filesystem::path& dir) {
  const ShardPlan& plan = engine.plan();
  Backend& backend = engine.optimizer_backend();  // the host's when offloaded
  const ParameterLayout& layout = engine.model().trainable().layout();
  const ParameterLayout& full = engine.model().full_trainable_layout();
  const int tp = engine.tp_size();
  const int tp_rank = engine.mesh().tp_index();
  std::vector<std::vector<size_t>> params_of(static_cast<size_t>(layout.group_count()));
  for (size_t p = 0; p < layout.params().size(); ++p)
    params_of[static_cast<size_t>(layout.params()[p].group)].push_back(p);
  // The elements this rank needs: the parameters' elements inside its shard of each group.
  std::vector<int64_t> needed(static_cast<size_t>(plan.group_count()), 0);
  for (const ParameterInfo& p : layout.params()) {
    const GroupShard& s = plan.group(p.group);
    needed[static_cast<size_t>(p.group)] +=
        std::max<int64_t>(0, std::min(p.offset + p.numel(), s.shard_begin + s.shard_length) -
                                 std::max(p.offset, s.shard_begin));
  }
  std::map<int, std::shared_ptr<const ParameterLayout>> layouts_at_tp;
  std::vector<std::array<int64_t, 2>> found(static_cast<size_t>(plan.group_count()), {0, 0});
  const std::vector<OptimizerFile> files = open_optimizer_files(dir);
  for (const OptimizerFile& f : files) {
    const std::filesystem::path& path = f.file.path();
    std::shared_ptr<const ParameterLayout>& file_layout =
        layouts_at_tp[static_cast<int>(f.tp_size)];
    if (!file_layout) file_layout = engine.trainable_layout_at_tp(static_cast<int>(f.tp_size));
    for (const SafetensorsEntry& entry : f.file.entries()) {
      int which = 0, group = 0;
      if (!parse_moment_name(entry.name, which, group)) continue;
      ANVIL_CHECK(group < plan.group_count(), "[checkpoint] {}: tensor '{}' names group {} but "
                  "the model has {} groups", path.string(), entry.name, group, plan.group_count());
      ANVIL_CHECK(entry.dtype == "F32", "[checkpoint] {}: tensor '{}' is {}, expected F32",
                  path.string(), entry.name, entry.dtype);
      const int64_t offset = f.offsets.value(std::to_string(group), int64_t{0});
      ANVIL_CHECK(offset >= 0 && offset + entry.numel() <= file_layout->group_numel(group),
                  "[checkpoint] {}: tensor '{}' covers elements [{}, {}) of a group of {}",
                  path.string(), entry.name, offset, offset + entry.numel(),
                  file_layout->group_numel(group));
      const GroupShard& s = plan.group(group);
      if (s.shard_length == 0) continue;
      const Tensor moment = engine.moment(group, which);
      for (const size_t p : params_of[static_cast<size_t>(group)]) {
        const ParameterInfo& fp = full.params()[p];
        // Every tp rank holds a replicated parameter; tp rank 0's copy is the one read.
        if (fp.split_dim < 0 && f.tp_index != 0) continue;
        const int64_t mine = layout.params()[p].offset;
        const int64_t theirs = file_layout->params()[p].offset;
        for (const TpOverlap& o :
             tp_overlaps(tp_runs(fp.shape, fp.split_dim, tp, tp_rank),
                         tp_runs(fp.shape, fp.split_dim, static_cast<int>(f.tp_size),
                                 static_cast<int>(f.tp_index)))) {
          // Clip the run to this rank's shard and to the elements the file holds.
          const int64_t first = std::max({int64_t{0}, s.shard_begin - (mine + o.a),
                                          offset - (theirs + o.b)});
          const int64_t last =
              std::min({o.length, s.shard_begin + s.shard_length - (mine + o.a),
                        offset + entry.numel() - (theirs + o.b)});
          if (first >= last) continue;
          backend.copy_from_host(
              moment.flat(mine + o.a + first - s.shard_begin, last - first),
              entry.data + (theirs + o.b + first - offset) * static_cast<int64_t>(sizeof(float)));
          found[static_cast<size_t>(group)][static_cast<size_t>(which)] += last - first;
        }
      }
    }
  }
  for (int g = 0; g < plan.group_count(); ++g) {
    for (int which = 0; which < 2; ++which) {
      const int64_t got = found[static_cast<size_t>(g)][static_cast<size_t>(which)];
      ANVIL_CHECK(got == needed[static_cast<size_t>(g)],
                  "[checkpoint] {}: the optimizer files hold {} of the {} elements of AdamW {} "
                  "for group {} that this rank needs (missing or overlapping shards)",
                  dir.string(), got, needed[static_cast<size_t>(g)], which == 0 ? "m" : "v", g);
    }
  }
  engine.set_optimizer_steps(files.front().step);
}

void write_engine_checkpoint(DataParallelEngine& engine, const std::filesystem::path& dir) {
  write_model(engine, dir);
  write_engine_optimizer(engine, dir);
}

void read_engine_checkpoint(DataParallelEngine& engine, const std::filesystem::path& dir) {
  read_engine_weights(engine, SafetensorsCollection::open(dir / kModelFile));
  read_engine_optimizer(engine, dir);
}

int64_t checkpoint_optimizer_step(const std::filesystem::path& dir) {
  return open_optimizer_files(dir).front().step;
}

}  // namespace anvil
