// `anvil plan`'s reports: one JSON object per plan (the keys docs/plan.md lists) and the same
// content as text, plus --fit's ranking. The step's breakdown is by op kind (GEMMs, attention,
// memory-bound kernels, optimizer) and the exposed communication; its shares add up to the
// step time.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "plan/plan.h"

namespace anvil {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double in_gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

const char* kind_name(PlannedCollective::Kind kind) {
  switch (kind) {
    case PlannedCollective::Kind::all_reduce:
      return "all_reduce";
    case PlannedCollective::Kind::all_gather:
      return "all_gather";
    case PlannedCollective::Kind::reduce_scatter:
      return "reduce_scatter";
    case PlannedCollective::Kind::exchange:
      return "exchange";
  }
  return "";
}

nlohmann::ordered_json categories_json(const MemoryByCategory& bytes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (int c = 0; c < kMemoryCategoryCount; ++c)
    out[std::string(kMemoryCategoryNames[static_cast<size_t>(c)])] = bytes[static_cast<size_t>(c)];
  return out;
}

// Returns "compute-bound" or "bandwidth-bound" for a kind, with the share of its time spent
// in ops of that bound when not all of it.
std::string bound_text(const OpKindTotal& k) {
  if (k.launches == 0) return "-";
  const bool compute = k.compute_bound();
  const double bound_s = compute ? k.compute_bound_s : k.seconds - k.compute_bound_s;
  const double share = k.seconds > 0 ? bound_s / k.seconds : 1.0;
  std::string text = compute ? "compute-bound" : "bandwidth-bound";
  if (share < 0.995) text += fmt::format(" ({:.0f}% of its time)", 100 * share);
  return text;
}

nlohmann::ordered_json breakdown_json(const StepTimePlan& t) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const std::vector<OpKindTotal> totals = op_kind_totals(t.ops);
  for (int k = 0; k < kOpKindCount; ++k) {
    const OpKindTotal& total = totals[static_cast<size_t>(k)];
    out[op_kind_key(static_cast<OpKind>(k))] = {
        {"seconds", total.seconds},
        {"share", total.seconds / t.step_s},
        {"bound", total.launches == 0   ? "none"
                  : total.compute_bound() ? "compute"
                                          : "bandwidth"},
        {"compute_bound_seconds", total.compute_bound_s},
        {"flops", total.flops},
        {"bytes", total.bytes},
        {"launches", total.launches}};
  }
  out["communication"] = {{"seconds", t.exposed_comm_s},
                          {"share", t.exposed_comm_s / t.step_s},
                          {"bound", "link"},
                          {"overlapped_seconds", t.overlapped_s},
                          {"serial_seconds", t.serial_s}};
  return out;
}

nlohmann::ordered_json ops_json(const StepTimePlan& t) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PlannedOp& op : t.ops) {
    out.push_back({{"name", op.name},
                   {"kind", op_kind_key(op.kind)},
                   {"launches", op.launches},
                   {"flops", op.flops},
                   {"bytes", op.bytes},
                   {"seconds", op.seconds},
                   {"compute_seconds", op.compute_s},
                   {"memory_seconds", op.memory_s},
                   {"bound", op.compute_bound() ? "compute" : "bandwidth"}});
  }
  return out;
}

nlohmann::ordered_json plan_object(const Plan& plan, const std::vector<std::string>& suggestions) {
  const TrainConfig& c = plan.config;
  nlohmann::ordered_json j;
  j["model"] = {{"parameters", plan.parameters},
                {"trainable", plan.trainable},
                {"dim", c.model.dim},
                {"n_layers", c.model.n_layers},
                {"n_heads", c.model.n_heads},
                {"n_kv_heads", c.model.n_kv_heads},
                {"ffn_dim", c.model.ffn_dim},
                {"vocab_size", c.model.vocab_size}};
  j["training"] = {{"micro_batch", c.training.batch_size},
                   {"seq_len", c.training.seq_len},
                   {"grad_accum", c.training.grad_accum},
                   {"dtype", c.training.dtype},
                   {"activation_checkpointing", c.training.activation_checkpointing},
                   {"lora_r", c.lora.r},
                   {"tokens_per_step", plan.time.tokens_per_step}};
  j["mesh"] = {{"world", plan.world},
               {"dp", plan.shape.dp},
               {"fsdp", plan.shape.fsdp},
               {"tp", plan.shape.tp},
               {"cp", plan.shape.cp},
               {"sequence_parallel", c.parallel.sequence_parallel},
               {"zero_stage", plan.zero_stage},
               {"offload", plan.offload}};
  j["peak_bytes"] = categories_json(plan.device);
  j["buffer_bytes"] = categories_json(plan.buffers);
  j["peak_bytes_total"] = plan.device_total;
  j["host_bytes"] = categories_json(plan.host);
  j["host_bytes_total"] = plan.host_total;
  j["capacity_bytes"] = plan.capacity;
  j["fits"] = plan.fits;
  j["step_seconds"] = plan.time.step_s;
  j["tokens_per_s"] = plan.time.tokens_per_s;
  const StepTimePlan& t = plan.time;
  j["time"] = {{"flops_per_token", t.flops_per_token},
               {"flops_per_device", t.flops_per_device},
               {"peak_tflops", t.peak_tflops},
               {"efficiency", t.efficiency},
               {"mfu", t.mfu},
               {"executed_flops", t.executed_flops},
               {"ceilings",
                {{"gemm_tflops", t.ceilings.gemm_flops / 1e12},
                 {"attention_tflops", t.ceilings.attention_flops / 1e12},
                 {"vector_tflops", t.ceilings.vector_flops / 1e12},
                 {"memory_gbps", t.ceilings.memory_bytes / 1e9},
                 {"launch_us", t.ceilings.launch_s * 1e6}}},
               {"logits_chunk_rows", t.logits_chunk_rows},
               {"logits_chunks", t.logits_chunks},
               {"compute_seconds", t.compute_s},
               {"overlapped_seconds", t.overlapped_s},
               {"serial_seconds", t.serial_s},
               {"exposed_comm_seconds", t.exposed_comm_s},
               {"breakdown", breakdown_json(t)},
               {"ops", ops_json(t)}};
  nlohmann::ordered_json per_axis = {{"tp", 0}, {"cp", 0}, {"data", 0}, {"dp", 0}, {"fsdp", 0}};
  j["communication"] = nlohmann::ordered_json::array();
  for (const PlannedTransfer& t : plan.time.transfers) {
    const PlannedCollective& k = t.collective;
    j["communication"].push_back({{"axis", k.axis},
                                  {"what", k.what},
                                  {"kind", kind_name(k.kind)},
                                  {"ranks", k.ranks},
                                  {"payload_bytes", k.payload_bytes},
                                  {"seconds", t.seconds},
                                  {"overlapped", k.overlapped},
                                  {"inter_node", t.inter_node},
                                  {"estimate", k.estimate}});
    if (per_axis.contains(k.axis))
      per_axis[k.axis] = per_axis[k.axis].get<int64_t>() + k.payload_bytes;
  }
  j["comm_bytes_per_step"] = per_axis;
  j["would_fit_with"] = suggestions;
  return j;
}

nlohmann::ordered_json hardware_object(const PlanSettings& settings) {
  const HardwareProfile& h = settings.hardware;
  return {{"name", h.name},
          {"description", h.description},
          {"memory_bytes", h.memory_bytes},
          {"bf16_tflops", h.bf16_tflops},
          {"f32_tflops", h.f32_tflops},
          {"gemm_bf16_tflops", h.gemm_bf16_tflops},
          {"gemm_f32_tflops", h.gemm_f32_tflops},
          {"attention_bf16_tflops", h.attention_bf16_tflops},
          {"attention_f32_tflops", h.attention_f32_tflops},
          {"memory_peak_gbps", h.memory_peak_gbps},
          {"memory_gbps", h.memory_gbps},
          {"launch_us", h.launch_us},
          {"link_gbps", h.link_gbps},
          {"network_gbps", h.network_gbps},
          {"devices_per_node", h.devices_per_node},
          {"host_link_gbps", h.host_link_gbps},
          {"measured", h.measured},
          {"notes", h.notes}};
}

std::string mesh_text(const Plan& plan) {
  return fmt::format("dp {} x fsdp {} x tp {} x cp {}{}", plan.shape.dp, plan.shape.fsdp,
                     plan.shape.tp, plan.shape.cp,
                     plan.config.parallel.sequence_parallel ? " (sequence parallel)" : "");
}

std::string count_text(int64_t count) {
  const double n = static_cast<double>(count);
  return n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.2f}M", n / 1e6);
}

std::string rate_text(double tflops) {
  return tflops >= 1 ? fmt::format("{:.1f} TFLOP/s", tflops)
                     : fmt::format("{:.1f} GFLOP/s", tflops * 1e3);
}

// The unit a plan's memory table is printed in: GiB, or MiB for a small model.
struct MemoryUnit {
  const char* name;
  double bytes;
};
MemoryUnit unit_for(int64_t total) {
  if (static_cast<double>(total) >= kGiB) return {"GiB", kGiB};
  return {"MiB", 1024.0 * 1024.0};
}

// The step's breakdown by kind and its costliest ops, as text.
std::string breakdown_text(const StepTimePlan& t) {
  std::string out = fmt::format("step breakdown per device ({} executed TFLOP; the head in {} "
                                "chunk{} of {} rows per micro-batch):\n",
                                fmt::format("{:.3g}", t.executed_flops / 1e12), t.logits_chunks,
                                t.logits_chunks == 1 ? "" : "s", t.logits_chunk_rows);
  out += fmt::format("  {:<24} {:>11} {:>7}  {:<34} {:>8}\n", "kind", "ms", "share", "bound",
                     "kernels");
  const std::vector<OpKindTotal> totals = op_kind_totals(t.ops);
  for (int k = 0; k < kOpKindCount; ++k) {
    const OpKindTotal& total = totals[static_cast<size_t>(k)];
    out += fmt::format("  {:<24} {:>11.3f} {:>6.1f}%  {:<34} {:>8}\n",
                       op_kind_name(static_cast<OpKind>(k)), 1e3 * total.seconds,
                       100 * total.seconds / t.step_s, bound_text(total), total.launches);
  }
  out += fmt::format("  {:<24} {:>11.3f} {:>6.1f}%  {:<34}\n", "communication (exposed)",
                     1e3 * t.exposed_comm_s, 100 * t.exposed_comm_s / t.step_s,
                     fmt::format("links ({:.3f} ms overlapped)", 1e3 * t.overlapped_s));
  std::vector<const PlannedOp*> costliest;
  for (const PlannedOp& op : t.ops) costliest.push_back(&op);
  std::stable_sort(costliest.begin(), costliest.end(),
                   [](const PlannedOp* a, const PlannedOp* b) { return a->seconds > b->seconds; });
  costliest.resize(std::min<size_t>(costliest.size(), 8));
  out += "costliest ops (ms per step, share, bound, launches, TFLOP, GB moved):\n";
  for (const PlannedOp* op : costliest) {
    out += fmt::format("  {:<44} {:>11.3f} {:>6.1f}%  {:<9} {:>7} {:>9.3g} {:>9.3g}\n", op->name,
                       1e3 * op->seconds, 100 * op->seconds / t.step_s,
                       op->compute_bound() ? "compute" : "bandwidth", op->launches,
                       op->flops / 1e12, op->bytes / 1e9);
  }
  return out;
}

}  // namespace

std::string plan_json(const Plan& plan, const PlanSettings& settings,
                      const std::vector<std::string>& suggestions) {
  nlohmann::ordered_json j;
  j["hardware"] = hardware_object(settings);
  j["settings"] = {{"nproc", settings.nproc},
                   {"comm_efficiency", settings.comm_efficiency},
                   {"reserve", settings.reserve}};
  const nlohmann::ordered_json body = plan_object(plan, suggestions);
  for (const auto& [key, value] : body.items()) j[key] = value;
  return j.dump();
}

std::string plan_text(const Plan& plan, const PlanSettings& settings,
                      const std::vector<std::string>& suggestions) {
  const TrainConfig& c = plan.config;
  const HardwareProfile& hw = settings.hardware;
  std::string out;
  const MemoryUnit unit = unit_for(std::max(plan.device_total, plan.host_total));
  auto in_unit = [&](int64_t bytes) { return static_cast<double>(bytes) / unit.bytes; };
  out += fmt::format("hardware: {} x {} ({:.1f} GiB, {} {} per device)\n", plan.world,
                     hw.description, in_gib(hw.memory_bytes), rate_text(plan.time.peak_tflops),
                     c.training.dtype);
  out += fmt::format("model: {} parameters, {} trainable{}; {} compute\n",
                     count_text(plan.parameters), count_text(plan.trainable),
                     c.lora.r > 0 ? fmt::format(" (LoRA r {} on a frozen {} base)", c.lora.r,
                                                c.lora.base_dtype == "auto" ? c.training.dtype
                                                                            : c.lora.base_dtype)
                                  : std::string(),
                     c.training.dtype);
  out += fmt::format("step: micro-batch {} x {} tokens x grad_accum {} on {} data ranks = {} "
                     "tokens; activation checkpointing {}\n",
                     c.training.batch_size, c.training.seq_len, c.training.grad_accum,
                     plan.shape.dp * plan.shape.fsdp, plan.time.tokens_per_step,
                     c.training.activation_checkpointing ? "on" : "off");
  const std::string cp_shards =
      plan.shape.cp > 1 && plan.zero_stage > 0
          ? fmt::format(" (sharded over fsdp x cp = {})", plan.shape.fsdp * plan.shape.cp)
          : std::string();
  out += fmt::format("mesh: world {} = {}, ZeRO stage {}{}{}\n", plan.world, mesh_text(plan),
                     plan.zero_stage, cp_shards, plan.offload_params ? ", optimizer and parameter offload"
                     : plan.offload      ? ", optimizer offload"
                                         : "");
  out += fmt::format("memory per device, {}{}:\n", unit.name,
                     plan.offload ? " (device | host)" : "");
  for (int k = 0; k < kMemoryCategoryCount; ++k) {
    const size_t i = static_cast<size_t>(k);
    out += fmt::format("  {:<18} {:>9.2f}", kMemoryCategoryNames[i], in_unit(plan.device[i]));
    if (plan.offload) out += fmt::format(" | {:>9.2f}", in_unit(plan.host[i]));
    out += "\n";
  }
  out += fmt::format("  {:<18} {:>9.2f}", "total", in_unit(plan.device_total));
  if (plan.offload) out += fmt::format(" | {:>9.2f}", in_unit(plan.host_total));
  out += fmt::format("\n  {:.2f} {} of {:.1f} GiB ({:.1f}%): {}\n", in_unit(plan.device_total),
                     unit.name, in_gib(hw.memory_bytes),
                     100.0 * static_cast<double>(plan.device_total) /
                         static_cast<double>(hw.memory_bytes),
                     plan.fits ? fmt::format("fits ({:.0f}% kept free)", 100 * settings.reserve)
                               : fmt::format("DOES NOT FIT (limit {:.2f} GiB with {:.0f}% kept "
                                             "free)",
                                             in_gib(plan.capacity), 100 * settings.reserve));
  for (const std::string& line : suggestions) out += "  would fit with " + line + "\n";
  const StepTimePlan& t = plan.time;
  out += fmt::format("step time: {:.3g} s = compute {:.3g} s + exposed communication {:.3g} s; "
                     "{:.0f} tokens/s, MFU {:.1f}% ({:.3g} TFLOP of model FLOPs per device at "
                     "the {} peak)\n",
                     t.step_s, t.compute_s, t.exposed_comm_s, t.tokens_per_s, 100 * t.mfu,
                     t.flops_per_device / 1e12, rate_text(t.peak_tflops));
  out += fmt::format("ceilings: GEMMs {} ({:.0f}% of the peak), attention {}, memory-bound "
                     "kernels {:.0f} GB/s, {:.1f} us per kernel launch\n",
                     rate_text(t.ceilings.gemm_flops / 1e12), 100 * t.efficiency,
                     rate_text(t.ceilings.attention_flops / 1e12), t.ceilings.memory_bytes / 1e9,
                     t.ceilings.launch_s * 1e6);
  out += breakdown_text(t);
  if (!t.transfers.empty()) {
    out += fmt::format("communication per step (payload per device; {} of the link speed):\n",
                       fmt::format("{:.0f}%", 100 * settings.comm_efficiency));
    for (const PlannedTransfer& tr : t.transfers) {
      const PlannedCollective& k = tr.collective;
      out += fmt::format("  {:<5} {:<38} {:>10.3f} {} {:>9.3g} s  {}{}{}\n", k.axis, k.what,
                         in_unit(k.payload_bytes), unit.name, tr.seconds,
                         k.overlapped ? "overlapped" : "serial", tr.inter_node ? ", network" : "",
                         k.estimate ? ", estimate" : "");
    }
  }
  if (!out.empty()) out.pop_back();
  return out;
}

std::string fit_json(const std::vector<Plan>& plans, const PlanSettings& settings) {
  nlohmann::ordered_json j;
  j["hardware"] = hardware_object(settings);
  j["settings"] = {{"nproc", settings.nproc},
                   {"comm_efficiency", settings.comm_efficiency},
                   {"reserve", settings.reserve}};
  j["fits"] = nlohmann::ordered_json::array();
  for (const Plan& plan : plans) j["fits"].push_back(plan_object(plan, {}));
  return j.dump();
}

std::string fit_text(const std::vector<Plan>& plans, const PlanSettings& settings) {
  std::string out = fmt::format(
      "meshes of {} x {} that fit, fastest first (each at its largest micro-batch):\n",
      settings.nproc, settings.hardware.description);
  out += fmt::format("  {:>4}  {:<36} {:>5} {:>11} {:>10} {:>10} {:>12}\n", "rank", "mesh",
                     "ZeRO", "micro-batch", "peak GiB", "step s", "tokens/s");
  int rank = 1;
  for (const Plan& plan : plans) {
    out += fmt::format("  {:>4}  {:<36} {:>5} {:>11} {:>10.2f} {:>10.3g} {:>12.0f}\n", rank++,
                       mesh_text(plan), plan.zero_stage, plan.config.training.batch_size,
                       in_gib(plan.device_total), plan.time.step_s, plan.time.tokens_per_s);
  }
  if (!out.empty()) out.pop_back();
  return out;
}

}  // namespace anvil
