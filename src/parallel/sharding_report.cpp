// The sharding and memory report (see sharding_report.h). A group's flat buffer is cut into
// fsdp shards; a tensor's part of this rank's shard is the overlap of its [offset, offset +
// numel) with the shard's elements, which is what the rows show.
#include "parallel/sharding_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "model/llama_parameters.h"
#include "parallel/collectives.h"

namespace anvil {
namespace {

// Returns the shape string of `elements` consecutive values of a tensor of `shape` starting
// at element `first`: whole rows as (rows x cols), otherwise a plain element count.
std::string part_shape(const Shape& shape, int64_t first, int64_t elements) {
  if (elements == 0) return "-";
  if (shape.rank() == 2 && first % shape[1] == 0 && elements % shape[1] == 0)
    return fmt::format("{}x{}", elements / shape[1], shape[1]);
  if (shape.rank() == 2 && elements != shape.numel()) return fmt::format("{} el", elements);
  if (shape.rank() == 2) return fmt::format("{}x{}", shape[0], shape[1]);
  return fmt::format("{}", elements);
}

// Returns "model.layers.0.self_attn.q_proj.weight" as "layers.*.self_attn.q_proj" (rows
// describe layer 0; every layer's group has the same layout and hence the same cut), or an
// empty string for a tensor of another layer.
std::string row_name(const std::string& name) {
  std::string shown = name;
  const std::string layer0 = "model.layers.0.";
  if (shown.rfind("model.layers.", 0) == 0) {
    if (shown.rfind(layer0, 0) != 0) return "";
    shown = "layers.*." + shown.substr(layer0.size());
  } else if (shown.rfind("model.", 0) == 0) {
    shown = shown.substr(6);
  }
  const std::string suffix = ".weight";
  if (shown.size() > suffix.size() && shown.ends_with(suffix))
    shown.resize(shown.size() - suffix.size());
  return shown;
}

struct TensorRow {
  std::string name;
  nlohmann::json json;
  std::array<std::string, 6> cells;  // global, here, dtype, kind, fsdp split, tp split
};

// Returns how tensor parallelism cuts a tensor: its rows, its columns, or not at all.
const char* tp_cut(int split_dim) {
  if (split_dim == 0) return "rows";
  if (split_dim == 1) return "cols";
  return "-";
}

// Describes every tensor of `layout` (this tp rank's shards, cut by `plan`; `full` is the
// whole model's layout); `sharded` names the states of these tensors that are split over fsdp
// ("" when none is).
void describe_layout(const ParameterLayout& layout, const ParameterLayout& full,
                     const ShardPlan& plan, bool weights_sharded, DType dtype, bool trainable,
                     const std::string& sharded, int fsdp, int tp, std::vector<TensorRow>& rows) {
  for (size_t index = 0; index < layout.params().size(); ++index) {
    const ParameterInfo& p = layout.params()[index];
    const ParameterInfo& whole = full.params()[index];
    const GroupShard& s = plan.group(p.group);
    int64_t first = p.offset, last = p.offset + p.numel();
    if (weights_sharded) {
      first = std::max(first, s.shard_begin);
      last = std::max(first, std::min(last, s.shard_begin + s.shard_length));
    }
    const int64_t here = last - first;
    std::vector<int64_t> dims, shard_dims;
    for (int i = 0; i < p.shape.rank(); ++i) {
      dims.push_back(whole.shape[i]);
      shard_dims.push_back(p.shape[i]);
    }
    const bool tp_split = tp > 1 && whole.split_dim >= 0;
    TensorRow row;
    row.name = row_name(p.name);
    row.json = {{"name", p.name},
                {"group", p.group},
                {"global_shape", dims},
                {"tp_shard_shape", shard_dims},
                {"split_over_tp", tp_split ? nlohmann::json(whole.split_dim) : nlohmann::json()},
                {"dtype", dtype_name(dtype)},
                {"trainable", trainable},
                {"elements_here", here},
                {"first_element_here", here > 0 ? first - p.offset : 0},
                {"split_over_fsdp", sharded.empty() || fsdp == 1 ? nlohmann::json::array()
                                                                  : nlohmann::json(sharded)},
                {"replicated_over", tp > 1 && !tp_split ? nlohmann::json::array({"dp", "tp"})
                                                        : nlohmann::json::array({"dp"})}};
    row.cells = {part_shape(whole.shape, 0, whole.numel()),
                 part_shape(p.shape, first - p.offset, here), std::string(dtype_name(dtype)),
                 std::string(trainable ? "train" : "frozen"),
                 sharded.empty() || fsdp == 1 ? std::string("-") : sharded + ":fsdp",
                 tp > 1 ? tp_cut(whole.split_dim) : "-"};
    rows.push_back(std::move(row));
  }
}

// Returns `rows` (the first is the header) as lines indented by two spaces, every column as
// wide as its widest cell: the first `left_columns` left-aligned, the rest right-aligned.
std::string aligned_table(const std::vector<std::vector<std::string>>& rows,
                          size_t left_columns) {
  std::vector<size_t> widths;
  for (const std::vector<std::string>& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const std::vector<std::string>& row : rows) {
    text += " ";
    for (size_t c = 0; c < row.size(); ++c) {
      text += c < left_columns ? fmt::format(" {:<{}}", row[c], widths[c])
                               : fmt::format(" {:>{}}", row[c], widths[c]);
    }
    text += "\n";
  }
  return text;
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

ShardingReport sharding_report(DataParallelEngine& engine) {
  const DeviceMesh& mesh = engine.mesh();
  const int stage = engine.zero_stage();
  const int fsdp = mesh.shard_count();
  const int tp = mesh.shape().tp;
  LlamaModel& model = engine.model();
  std::vector<TensorRow> rows;
  if (model.lora_enabled()) {
    describe_layout(model.parameters().layout(), model.full_layout(), engine.frozen_plan(),
                    stage == 3, model.parameters().dtype(), false, stage == 3 ? "w" : "", fsdp,
                    tp, rows);
  }
  // Stages 1-2 in mixed precision shard the f32 master too (the compute-dtype copy is whole).
  static const std::array<const char*, 4> kTrainableSplit = {"", "o", "g,o", "w,g,o"};
  const char* split = engine.compute_replica() ? (stage == 1 ? "w,o" : "w,g,o")
                                               : kTrainableSplit[static_cast<size_t>(stage)];
  describe_layout(model.trainable().layout(), model.full_trainable_layout(), engine.plan(),
                  stage == 3, DType::f32, true, split, fsdp, tp, rows);

  ShardingReport report;
  report.json["mesh"] = {{"world", mesh.world().size()},
                         {"dp", mesh.shape().dp},
                         {"fsdp", fsdp},
                         {"tp", mesh.shape().tp},
                         {"cp", mesh.shape().cp},
                         {"zero_stage", stage}};
  report.json["tensors"] = nlohmann::json::array();
  for (const TensorRow& row : rows) report.json["tensors"].push_back(row.json);
  // As PEFT's print_trainable_parameters: the adapters count towards all parameters.
  const int64_t trainable = model.full_trainable_layout().total_params();
  const int64_t everything =
      model.config().param_count() + (model.lora_enabled() ? trainable : 0);
  report.json["parameters"] = {{"trainable", trainable}, {"all", everything}};
  report.text = fmt::format("trainable parameters: {} of {} ({:.3f}%)\n", trainable, everything,
                            100.0 * static_cast<double>(trainable) / static_cast<double>(everything));
  report.text += fmt::format("sharding: {}\n", mesh.describe());
  report.text += "  (here: rank 0's part; fsdp: w/g/o = weights/gradients/optimizer state\n"
                 "  split over fsdp; tp: the dimension tensor parallelism cuts; - for none)\n";
  std::vector<std::vector<std::string>> tensor_table = {
      {"tensor", "global", "here", "dtype", "kind", "fsdp", "tp"}};
  for (const TensorRow& row : rows) {
    if (row.name.empty()) continue;  // a later layer: the same as layer 0
    tensor_table.push_back({row.name});
    tensor_table.back().insert(tensor_table.back().end(), row.cells.begin(), row.cells.end());
  }
  report.text += aligned_table(tensor_table, 1);

  // Per rank: the current bytes by category, their total, the category peaks and the peak
  // total, as the rank's backend measured them (DataParallelEngine::memory).
  const std::vector<MemorySnapshot> all = all_gather_memory(mesh.world(), engine.memory());
  report.json["memory_per_rank"] = nlohmann::json::array();
  report.text += "memory per rank, MiB (measured: what each rank's backend holds now, and its "
                 "peak so far):\n";
  std::vector<std::vector<std::string>> memory_table = {
      {"rank", "frozen", "train-w", "grads", "optim", "activ", "comm", "work", "total", "peak"}};
  for (size_t r = 0; r < all.size(); ++r) {
    const MemorySnapshot& m = all[r];
    nlohmann::json entry = {{"rank", r}};
    nlohmann::json peak = nlohmann::json::object();
    for (size_t c = 0; c < m.current.size(); ++c) {
      entry[std::string(kMemoryCategoryNames[c])] = m.current[c];
      peak[std::string(kMemoryCategoryNames[c])] = m.peak[c];
    }
    entry["total"] = m.total;
    entry["total_peak"] = m.total_peak;
    entry["peak"] = std::move(peak);
    report.json["memory_per_rank"].push_back(entry);
    const MemoryByCategory& v = m.current;
    memory_table.push_back({std::to_string(r), mib(v[0]), mib(v[1]), mib(v[2]), mib(v[3]),
                            mib(v[4]), mib(v[5]), mib(v[6]), mib(m.total), mib(m.total_peak)});
  }
  report.text += aligned_table(memory_table, 0);
  if (engine.offloaded()) {
    // The offloaded optimizer's host memory (parallel.offload): f32 masters, gradient copies
    // and AdamW moments of each rank's shard, which the device figures above no longer hold.
    const std::vector<MemorySnapshot> host_all =
        all_gather_memory(mesh.world(), engine.host_memory());
    report.json["host_memory_per_rank"] = nlohmann::json::array();
    report.text += "host memory per rank, MiB (optimizer offload):\n";
    std::vector<std::vector<std::string>> host_table = {
        {"rank", "master", "grads", "optim", "total"}};
    for (size_t r = 0; r < host_all.size(); ++r) {
      const MemorySnapshot& m = host_all[r];
      nlohmann::json entry = {{"rank", r}};
      for (size_t c = 0; c < m.current.size(); ++c)
        entry[std::string(kMemoryCategoryNames[c])] = m.current[c];
      entry["total"] = m.total;
      report.json["host_memory_per_rank"].push_back(entry);
      host_table.push_back({std::to_string(r),
                            mib(m.current_of(MemoryCategory::trainable_weights)),
                            mib(m.current_of(MemoryCategory::gradients)),
                            mib(m.current_of(MemoryCategory::optimizer_state)), mib(m.total)});
    }
    report.text += aligned_table(host_table, 0);
  }
  if (!report.text.empty() && report.text.back() == '\n') report.text.pop_back();
  return report;
}

}  // namespace anvil
