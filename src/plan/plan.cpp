// The plan's memory and time model, the --fit mesh search and what would make a configuration
// fit (see plan.h). Reports (JSON and text) live in plan_report.cpp.
#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/tensor_parallel.h"
#include "parallel/engine.h"
#include "parallel/engine_plan.h"
#include "train/model_setup.h"

namespace anvil {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The largest micro-batch --fit tries.
constexpr int64_t kMaxMicroBatch = 65536;

int64_t sum(const MemoryByCategory& bytes) {
  int64_t total = 0;
  for (const int64_t b : bytes) total += b;
  return total;
}

// Returns the world ranks an axis's group spans (innermost tp, then cp, dp, fsdp).
int axis_extent(const std::string& axis, const MeshShape& s) {
  if (axis == "tp") return s.tp;
  if (axis == "cp") return s.tp * s.cp;
  if (axis == "dp") return s.tp * s.cp * s.dp;
  return s.tp * s.cp * s.dp * s.fsdp;  // data and fsdp
}

// Returns the bytes a rank sends for a collective of `payload` bytes over `ranks` (ring).
double wire_bytes(const PlannedCollective& c) {
  const double n = c.ranks, payload = static_cast<double>(c.payload_bytes);
  switch (c.kind) {
    case PlannedCollective::Kind::all_reduce:
      return 2.0 * (n - 1) / n * payload;
    case PlannedCollective::Kind::all_gather:
    case PlannedCollective::Kind::reduce_scatter:
      return (n - 1) / n * payload;
    case PlannedCollective::Kind::exchange:
      return payload / 2;  // each block is counted once sent and once received
  }
  return payload;
}

// Returns the FLOPs one token costs as the engine executes it: the model FLOPs of
// LlamaConfig::flops_per_token, less the weight gradients of a frozen base, plus the adapters
// (6 per parameter) and a second forward pass under activation checkpointing.
double executed_flops_per_token(const TrainConfig& config, const LlamaConfig& llama,
                                int64_t adapter_params, double fraction) {
  const int seq = static_cast<int>(config.training.seq_len);
  const double matmul = static_cast<double>(llama.matmul_param_count());
  const double attention_forward =
      4.0 * llama.n_layers * static_cast<double>(seq) * llama.q_dim() * fraction;
  double flops = llama.flops_per_token(seq, fraction);
  const bool lora = config.lora.r > 0;
  if (lora) flops += -2.0 * matmul + 6.0 * static_cast<double>(adapter_params);
  if (config.training.activation_checkpointing) {
    flops += 2.0 * matmul + attention_forward +
             (lora ? 2.0 * static_cast<double>(adapter_params) : 0.0);
  }
  return flops;
}

// Returns the head's chunking as the model a rank of `shape` builds carves its arena (the
// options the engine gives it, rank 0 of tp and cp).
HeadChunking planned_head(const TrainConfig& config, const LlamaConfig& llama,
                          const ModelOptions& options, const MeshShape& shape) {
  ModelOptions model =
      DataParallelEngine::model_options(options, static_cast<int>(config.parallel.zero_stage));
  model.tp.size = shape.tp;
  model.tp.sequence_parallel = config.parallel.sequence_parallel;
  model.cp.size = shape.cp;
  const ModelActivations acts = LlamaModel::planned_activations(llama, model);
  HeadChunking head;
  head.rows = acts.logits.numel() / tp_shard_config(llama, shape.tp).vocab_size;
  head.logits = acts.logits.dtype;
  head.dlogits = acts.logits.dtype;  // the fused classifier writes dlogits over the logits
  return head;
}

// Returns the optimizer's work on the device: AdamW and the norm over the shard the rank
// steps (nothing of it with offload: the host does both), the gradients zeroed at the start
// of a stage 0-1 step, and the f32 masters cast to the compute dtype: stage 0 (and a LoRA
// model's f32 base) casts every weight before each micro-batch's forward, stages 1-2 the
// rank's shard after the step, stage 3 its shard before each gather (with offload the host
// casts).
StepStateWork planned_state_work(const TrainConfig& config, const LlamaConfig& llama,
                                 const ModelOptions& options, const MeshShape& shape,
                                 const MemoryByCategory& buffers, int64_t adapter_params,
                                 const std::vector<PlannedCollective>& collectives) {
  const bool lora = options.lora.enabled();
  const bool offload = config.parallel.offload;
  const int stage = static_cast<int>(config.parallel.zero_stage);
  const int64_t micro = config.training.grad_accum;
  StepStateWork work;
  work.groups = lora ? llama.n_layers : llama.n_layers + 2;
  const int64_t shard =
      buffers[static_cast<size_t>(MemoryCategory::optimizer_state)] / (2 * sizeof(float));
  work.optimizer_elements = offload ? 0 : shard;
  work.norm_elements = offload ? 0 : shard;
  const int64_t base = llama.param_count() / shape.tp;
  if (stage <= 1) work.zeroed_elements = (lora ? adapter_params : llama.param_count()) / shape.tp;
  const size_t compute_bytes = dtype_size(options.compute_dtype);
  if (options.compute_dtype == DType::f32) return work;
  if (lora) {
    if (LlamaModel::frozen_base_dtype(options) == DType::f32) {
      work.cast_elements = micro * base;
      work.cast_launches = micro * (llama.n_layers + 2);
    }
  } else if (stage == 0) {
    work.cast_elements = micro * base;
    work.cast_launches = micro * work.groups;
  } else if (!offload && stage <= 2) {
    work.cast_elements = shard;
    work.cast_launches = work.groups;
  } else if (!offload) {
    for (const PlannedCollective& c : collectives) {
      if (std::string_view(c.what) == "weight all-gather")
        work.cast_elements += c.payload_bytes / c.ranks / static_cast<int64_t>(compute_bytes);
    }
    work.cast_launches = 2 * micro * work.groups;
  }
  return work;
}

StepTimePlan plan_step_time(const TrainConfig& config, const LlamaConfig& llama,
                            const ModelOptions& options, const MeshShape& shape,
                            const PlanSettings& settings, int64_t adapter_params,
                            const MemoryByCategory& buffers, const MemoryByCategory& host) {
  const HardwareProfile& hw = settings.hardware;
  const int world = shape.dp * shape.fsdp * shape.tp * shape.cp;
  const int64_t micro_batch = config.training.batch_size, seq = config.training.seq_len;
  const int micro_batches = static_cast<int>(config.training.grad_accum);
  const std::string& dtype = config.training.dtype;
  StepTimePlan t;
  t.tokens_per_step = micro_batch * seq * micro_batches * shape.dp * shape.fsdp;
  // The share of causal (query, key) pairs the attention masks leave (counted once: a long
  // sparse sequence takes a while).
  const double fraction = attention_schedule_from(config.attention)
                              .mean_visible_fraction(llama.n_layers, static_cast<int>(seq));
  t.flops_per_token = executed_flops_per_token(config, llama, adapter_params, fraction);
  t.flops_per_device = t.flops_per_token * static_cast<double>(t.tokens_per_step) / world;
  const bool half = dtype == "bf16" || dtype == "fp16";
  t.peak_tflops = half ? hw.bf16_tflops : hw.f32_tflops;
  t.efficiency = settings.efficiency > 0 ? settings.efficiency : hw.gemm_efficiency;
  t.ceilings.gemm_flops = settings.efficiency > 0 ? t.peak_tflops * 1e12 * settings.efficiency
                                                  : gemm_flops_per_s(hw, dtype);
  t.ceilings.attention_flops = attention_flops_per_s(hw, dtype);
  t.ceilings.vector_flops = hw.f32_tflops * 1e12;
  t.ceilings.memory_bytes = hw.memory_gbps * 1e9;
  t.ceilings.launch_s = hw.launch_us * 1e-6;

  const std::vector<PlannedCollective> collectives = planned_step_collectives(
      llama, options, config.parallel, world, micro_batches,
      micro_batch * seq / shape.cp);
  const HeadChunking head = planned_head(config, llama, options, shape);
  const StepStateWork state =
      planned_state_work(config, llama, options, shape, buffers, adapter_params, collectives);
  t.ops = plan_step_ops(config, tp_shard_config(llama, shape.tp), shape, head, state, fraction,
                        t.ceilings);
  const int64_t rows = micro_batch * seq / shape.cp;
  t.logits_chunk_rows = std::min(head.rows, rows);
  t.logits_chunks = (rows + t.logits_chunk_rows - 1) / t.logits_chunk_rows;
  for (const PlannedOp& op : t.ops) {
    t.compute_s += op.seconds;
    t.executed_flops += op.flops;
  }

  for (const PlannedCollective& c : collectives) {
    PlannedTransfer transfer;
    transfer.collective = c;
    transfer.inter_node = axis_extent(c.axis, shape) > hw.devices_per_node;
    const double gbps = transfer.inter_node ? hw.network_gbps : hw.link_gbps;
    transfer.seconds = wire_bytes(c) / (gbps * 1e9 * settings.comm_efficiency);
    t.transfers.push_back(transfer);
  }
  if (config.parallel.offload) {
    // Gradient shards down and updated master shards up over the host link (full duplex), and
    // the CPU AdamW step reading and writing 28 bytes per element (p, g, m, v in; p, m, v out)
    // at this device's share of the host memory bandwidth.
    const double shard_bytes =
        static_cast<double>(host[static_cast<size_t>(MemoryCategory::optimizer_state)]) / 2;
    PlannedTransfer transfers;
    transfers.collective = {"host", "offload: gradients down, weights up",
                            PlannedCollective::Kind::exchange, 1,
                            static_cast<int64_t>(2 * shard_bytes), true, false};
    transfers.seconds = shard_bytes / (hw.host_link_gbps * 1e9);
    t.transfers.push_back(transfers);
    PlannedTransfer adamw;
    adamw.collective = {"host", "offload: host AdamW step", PlannedCollective::Kind::exchange,
                        1, 0, false, false};
    adamw.seconds = 7.0 * shard_bytes / (hw.host_memory_gbps * 1e9 / hw.devices_per_node);
    t.transfers.push_back(adamw);
  }
  if (config.parallel.offload_params) {
    // Each weight gather first uploads this rank's part of it: 1/ranks of what it gathers.
    int64_t uploaded = 0;
    for (const PlannedTransfer& transfer : t.transfers) {
      const PlannedCollective& c = transfer.collective;
      if (std::string_view(c.what) == "weight all-gather") uploaded += c.payload_bytes / c.ranks;
    }
    PlannedTransfer upload;
    upload.collective = {"host", "offload: shards up for gathers",
                         PlannedCollective::Kind::exchange, 1, uploaded, true, false};
    upload.seconds = static_cast<double>(uploaded) / (hw.host_link_gbps * 1e9);
    t.transfers.push_back(upload);
  }
  for (const PlannedTransfer& transfer : t.transfers)
    (transfer.collective.overlapped ? t.overlapped_s : t.serial_s) += transfer.seconds;
  t.exposed_comm_s = std::max(0.0, t.overlapped_s - t.compute_s) + t.serial_s;
  t.step_s = t.compute_s + t.exposed_comm_s;  // max(compute, overlapped) + serial
  t.tokens_per_s = static_cast<double>(t.tokens_per_step) / t.step_s;
  t.mfu = t.flops_per_device / t.step_s / (t.peak_tflops * 1e12);
  return t;
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / kGiB);
}

// A configuration with auto dp and fsdp (so a different world size resolves).
TrainConfig with_auto_mesh(TrainConfig config) {
  config.parallel.dp = 0;
  config.parallel.fsdp = 0;
  return config;
}

// Returns the plan, or nothing when a run would refuse the configuration.
std::optional<Plan> try_plan(const TrainConfig& config, const PlanSettings& settings) {
  try {
    return make_plan(config, settings);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Returns the largest micro-batch in [1, kMaxMicroBatch] with which `config` fits, and its
// plan; nothing when even one sequence does not fit. Memory grows with the micro-batch.
std::optional<Plan> largest_fitting_micro_batch(TrainConfig config, const PlanSettings& settings) {
  config.training.batch_size = 1;
  std::optional<Plan> best = try_plan(config, settings);
  if (!best || !best->fits) return std::nullopt;
  int64_t lo = 1, hi = 2;
  while (hi <= kMaxMicroBatch) {
    config.training.batch_size = hi;
    std::optional<Plan> plan = try_plan(config, settings);
    if (!plan || !plan->fits) break;
    best = plan;
    lo = hi;
    hi *= 2;
  }
  hi = std::min(hi, kMaxMicroBatch + 1);  // the first size that does not fit (or the cap)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    config.training.batch_size = mid;
    std::optional<Plan> plan = try_plan(config, settings);
    if (plan && plan->fits) {
      best = plan;
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return best;
}

// Every mesh of `nproc` devices a run of `config` accepts, as configs with dp, fsdp, tp and
// cp set; `first_error` receives why the first rejected one was refused.
std::vector<TrainConfig> candidate_meshes(const TrainConfig& config, int nproc,
                                          std::string& first_error) {
  std::vector<TrainConfig> out;
  for (int tp = 1; tp <= nproc; ++tp) {
    if (nproc % tp != 0) continue;
    for (int cp = 1; cp * tp <= nproc; ++cp) {
      if ((nproc / tp) % cp != 0) continue;
      const int rest = nproc / tp / cp;
      for (int fsdp = 1; fsdp <= rest; ++fsdp) {
        if (rest % fsdp != 0) continue;
        if (config.parallel.zero_stage == 0 && fsdp > 1) continue;
        TrainConfig c = config;
        c.parallel.tp = tp;
        c.parallel.cp = cp;
        c.parallel.fsdp = fsdp;
        c.parallel.dp = rest / fsdp;
        if (tp == 1) c.parallel.sequence_parallel = false;
        try {
          validate_config(c);
          resolve_mesh_shape(c.parallel, nproc);
          out.push_back(c);
        } catch (const Error& e) {
          if (first_error.empty()) first_error = e.what();
        }
      }
    }
  }
  return out;
}

// Returns the smallest plan (by per-device peak) over every mesh at micro-batch 1, or nothing.
std::optional<Plan> leanest_mesh(const TrainConfig& config, const PlanSettings& settings) {
  std::string ignored;
  std::optional<Plan> best;
  TrainConfig one = config;
  one.training.batch_size = 1;
  for (const TrainConfig& c : candidate_meshes(one, settings.nproc, ignored)) {
    std::optional<Plan> plan = try_plan(c, settings);
    if (plan && (!best || plan->device_total < best->device_total)) best = plan;
  }
  return best;
}

}  // namespace

Plan make_plan(const TrainConfig& input, const PlanSettings& settings) {
  ANVIL_CHECK(settings.nproc >= 1, "[plan] --nproc must be >= 1, got {}", settings.nproc);
  ANVIL_CHECK(settings.reserve >= 0 && settings.reserve < 1,
              "[plan] --reserve must be in [0, 1), got {}", settings.reserve);
  Plan plan;
  plan.config = input;
  const TrainConfig& config = plan.config;
  validate_config(config);
  plan.shape = resolve_mesh_shape(config.parallel, settings.nproc);
  plan.world = settings.nproc;
  plan.zero_stage = static_cast<int>(config.parallel.zero_stage);
  plan.offload = config.parallel.offload;
  plan.offload_params = config.parallel.offload_params;
  const LlamaConfig llama = llama_config_from(config.model);
  const ModelOptions options = model_options_from(config);
  const int micro_batches = static_cast<int>(config.training.grad_accum);

  const ParallelSettings parallel = config.parallel;
  const PlannedMemory planned =
      planned_rank_memory(llama, options, parallel, plan.world, micro_batches);
  plan.buffers = planned.by_category();
  plan.device = plan.buffers;
  plan.device[static_cast<size_t>(MemoryCategory::communication)] += planned.collective_staging;
  plan.host = planned.host;  // offload: what the host optimizer holds
  plan.device_total = sum(plan.device);
  plan.host_total = sum(plan.host);
  plan.needed = plan.device_total + (settings.device_is_host ? plan.host_total : 0);
  plan.capacity = static_cast<int64_t>(static_cast<double>(settings.hardware.memory_bytes) *
                                       (1.0 - settings.reserve));
  plan.fits = plan.needed <= plan.capacity;

  const int64_t adapter_params =
      options.lora.enabled() ? make_lora_layout(llama, options.lora)->total_params() : 0;
  plan.trainable = options.lora.enabled() ? adapter_params : llama.param_count();
  plan.parameters = llama.param_count() + adapter_params;
  if (settings.memory_only) return plan;
  plan.time = plan_step_time(config, llama, options, plan.shape, settings, adapter_params,
                             plan.buffers, plan.host);
  return plan;
}

std::vector<FitSuggestion> fit_suggestions(const TrainConfig& config,
                                           const PlanSettings& settings, bool search_meshes) {
  using Kind = FitSuggestion::Kind;
  // A candidate fits: on this mesh at this micro-batch, or (search_meshes) on any mesh of the
  // same devices at micro-batch 1.
  auto attempt = [&](const TrainConfig& c, const PlanSettings& s) -> std::optional<Plan> {
    std::optional<Plan> plan = search_meshes ? leanest_mesh(c, s) : try_plan(c, s);
    if (plan && plan->fits) return plan;
    return std::nullopt;
  };
  std::vector<FitSuggestion> out;
  auto suggest = [&](Kind kind, const std::string& what, const std::string& setting,
                     const TrainConfig& c) {
    if (std::optional<Plan> plan = attempt(c, settings))
      out.push_back({kind, what, setting, plan->needed});
  };
  if (!config.training.activation_checkpointing) {
    TrainConfig c = config;
    c.training.activation_checkpointing = true;
    suggest(Kind::activation_checkpointing, "activation checkpointing",
            "--training.activation_checkpointing=true", c);
  }
  if (config.parallel.zero_stage < 3 && settings.nproc > 1) {
    TrainConfig c = with_auto_mesh(config);
    c.parallel.zero_stage = 3;
    suggest(Kind::zero3, "ZeRO-3", "--parallel.zero_stage=3", c);
  }
  if (!config.parallel.offload) {
    TrainConfig c = config;
    c.parallel.offload = true;
    suggest(Kind::offload, "optimizer offload", "--parallel.offload=true", c);
  }
  if (config.training.dtype == "f32") {
    TrainConfig c = config;
    c.training.dtype = "bf16";
    suggest(Kind::bf16, "bf16 compute", "--training.dtype=bf16", c);
  }
  if (config.lora.r == 0) {
    TrainConfig c = config;
    c.lora.r = 8;
    suggest(Kind::lora, "LoRA adapters instead of full training", "--lora.r=8", c);
  }
  if (!search_meshes && config.training.batch_size > 1) {
    if (std::optional<Plan> plan = largest_fitting_micro_batch(config, settings)) {
      const int64_t micro = plan->config.training.batch_size;
      out.push_back({Kind::micro_batch, fmt::format("micro-batch {}", micro),
                     fmt::format("--training.batch_size={}", micro), plan->needed});
    }
  }
  for (int64_t seq = config.training.seq_len / 2; seq >= 64; seq /= 2) {
    TrainConfig c = config;
    c.training.seq_len = seq;
    if (std::optional<Plan> plan = attempt(c, settings)) {
      out.push_back({Kind::seq_len, fmt::format("sequences of {} tokens", seq),
                     fmt::format("--training.seq_len={}", seq), plan->needed});
      break;
    }
  }
  // More devices shard more (ZeRO-3 when the configuration replicates).
  TrainConfig more = with_auto_mesh(config);
  if (more.parallel.zero_stage == 0) more.parallel.zero_stage = 3;
  for (int nproc = settings.nproc * 2; nproc <= settings.nproc * 1024; nproc *= 2) {
    PlanSettings s = settings;
    s.nproc = nproc;
    if (std::optional<Plan> plan = attempt(more, s)) {
      out.push_back({Kind::devices,
                     fmt::format("{} devices{}", nproc,
                                 config.parallel.zero_stage == 0 ? " with ZeRO-3" : ""),
                     fmt::format("--nproc {}", nproc), plan->needed});
      break;
    }
  }
  return out;
}

std::vector<std::string> what_would_fit(const TrainConfig& config, const PlanSettings& settings,
                                        bool search_meshes) {
  std::vector<std::string> lines;
  for (const FitSuggestion& s : fit_suggestions(config, settings, search_meshes))
    lines.push_back(fmt::format("{} ({}): {} per device", s.what, s.setting, gib(s.needed)));
  return lines;
}

std::vector<Plan> fit_meshes(const TrainConfig& config, const PlanSettings& settings) {
  validate_config(config);
  std::string first_error;
  const std::vector<TrainConfig> meshes = candidate_meshes(config, settings.nproc, first_error);
  ANVIL_CHECK(!meshes.empty(), "[plan] no mesh of {} devices suits this configuration: {}",
              settings.nproc, first_error);
  std::vector<Plan> fitting;
  for (const TrainConfig& mesh : meshes) {
    if (std::optional<Plan> plan = largest_fitting_micro_batch(mesh, settings))
      fitting.push_back(std::move(*plan));
  }
  if (fitting.empty()) {
    const std::optional<Plan> leanest = leanest_mesh(config, settings);
    const std::vector<std::string> remedies = what_would_fit(config, settings, true);
    std::string remedy_text;
    for (const std::string& line : remedies) remedy_text += "; " + line;
    ANVIL_FAIL("[plan] nothing fits on {} x {}: the leanest mesh ({}) needs {} per device at "
               "micro-batch 1, over the {} usable of {}{}",
               settings.nproc, settings.hardware.description,
               leanest ? fmt::format("dp {} x fsdp {} x tp {} x cp {}", leanest->shape.dp,
                                     leanest->shape.fsdp, leanest->shape.tp, leanest->shape.cp)
                       : std::string("none plans"),
               leanest ? gib(leanest->device_total) : std::string("?"),
               gib(static_cast<int64_t>(static_cast<double>(settings.hardware.memory_bytes) *
                                        (1.0 - settings.reserve))),
               gib(settings.hardware.memory_bytes),
               remedies.empty() ? std::string("; no single change tried (activation "
                                              "checkpointing, ZeRO-3, offload, bf16, LoRA, "
                                              "shorter sequences, up to 1024x the devices) "
                                              "would fit either")
                                : "; it would fit with" + remedy_text.substr(1));
  }
  std::stable_sort(fitting.begin(), fitting.end(), [](const Plan& a, const Plan& b) {
    return a.time.tokens_per_s > b.time.tokens_per_s;
  });
  return fitting;
}

}  // namespace anvil
