// `anvil plan`: what a training configuration needs per device and how long its step takes,
// predicted without building the model. Memory comes from the engine's own planning functions
// (planned_rank_memory: the shard plans, slot sizes and the model's arena carve
// that a run allocates from), by the categories of core/memory_category.h, on data rank 0
// (which holds the most). Time is compute, the sum over every op the step runs of its roofline
// time against the hardware's achievable ceilings (plan/step_ops.h: FLOPs over the GEMM or
// attention rate, or bytes over the memory bandwidth, plus a launch cost), plus the exposed
// part of the step's collectives (planned_step_collectives) over the hardware's links:
//   step = max(compute, overlapped communication) + serial communication
// where asynchronous collectives (gradient reductions, ZeRO-3 gathers, ring attention,
// offload transfers) overlap compute and blocking ones (tensor-parallel sums, stage 1's weight
// gather, offload's host AdamW step) do not. Offload (parallel.offload) is predicted as the
// engine holds it (planned_rank_memory's host figures): AdamW moments, f32
// master shards and reduced gradient shards in host memory; under stage 3 the device keeps
// only its shard in the gather dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_category.h"
#include "parallel/engine_plan.h"
#include "parallel/mesh.h"
#include "train/config.h"
#include "plan/hardware_profile.h"
#include "plan/step_ops.h"

namespace anvil {

// Everything a plan needs besides the configuration.
struct PlanSettings {
  int nproc = 1;               // devices (ranks) of the job
  HardwareProfile hardware;
  double efficiency = 0;       // share of the dense peak GEMMs reach; 0: the profile's
  double comm_efficiency = 0.8;  // share of the link bandwidth collectives reach
  double reserve = kDefaultMemoryReserve;  // share of device memory kept free
  // The device's memory is the host's (the cpu backends): what a rank needs there is its
  // device figures plus its host ones (offload moves nothing off it).
  bool device_is_host = false;
  bool memory_only = false;    // leave Plan::time out (the pre-flight check needs memory only)
};

// One collective of the step with its predicted time.
struct PlannedTransfer {
  PlannedCollective collective;
  double seconds = 0;
  bool inter_node = false;  // its group spans nodes (network bandwidth)
};

struct StepTimePlan {
  // Model FLOPs per token as a run's metrics count them (6 per matmul parameter and 12 x
  // layers x seq_len x q_dim of attention), adjusted for what the engine executes beyond that
  // convention: a frozen base's weight gradients dropped, the adapters and the recomputation
  // of activation checkpointing added. MFU divides these by the step time and the peak.
  double flops_per_token = 0;
  double flops_per_device = 0;  // of one step
  double peak_tflops = 0;       // dense peak of the run's dtype
  double efficiency = 0;        // the GEMM ceiling's share of the peak
  OpCeilings ceilings;          // what the ops were timed against
  std::vector<PlannedOp> ops;   // every op of the step (plan/step_ops.h), first-run order
  double executed_flops = 0;    // the ops' FLOPs (causal attention counts visible pairs)
  int64_t logits_chunk_rows = 0;  // rows of the head's chunks (the model's arena carve)
  int64_t logits_chunks = 0;      // chunks per micro-batch
  double mfu = 0;               // flops_per_device / step_s / peak
  double compute_s = 0;         // the ops' seconds
  double overlapped_s = 0;      // asynchronous communication and offload transfers
  double serial_s = 0;          // blocking communication and offload's host AdamW step
  double step_s = 0;
  double exposed_comm_s = 0;    // step_s - compute_s
  int64_t tokens_per_step = 0;  // the global batch
  double tokens_per_s = 0;
  std::vector<PlannedTransfer> transfers;
};

struct Plan {
  TrainConfig config;  // as planned
  MeshShape shape;
  int world = 1;
  int zero_stage = 0;
  bool offload = false;
  bool offload_params = false;  // parallel.offload_params
  int64_t parameters = 0;  // the whole model (adapters included with LoRA)
  int64_t trainable = 0;
  MemoryByCategory buffers{};  // per device: what a run allocates at setup (sharding.json)
  MemoryByCategory device{};   // per device at the step's peak: buffers + collective staging
  MemoryByCategory host{};    // per device's share of host memory (offload)
  int64_t device_total = 0;
  int64_t host_total = 0;
  int64_t needed = 0;    // what must fit in capacity: device_total (+ host_total on the host)
  int64_t capacity = 0;  // device memory less the reserve
  bool fits = false;
  StepTimePlan time;
};

// Predicts `config` (validated here) on settings.nproc devices; throws "[config] ..." or
// "[parallel] ..." naming the problem for a configuration or mesh a run would refuse (heads
// not divisible by tp, a world size the mesh does not describe, ...).
Plan make_plan(const TrainConfig& config, const PlanSettings& settings);

// One change that makes a configuration fit, with its predicted need per device (Plan::needed).
struct FitSuggestion {
  enum class Kind {
    activation_checkpointing, zero3, offload, bf16, lora, micro_batch, seq_len, devices
  };
  Kind kind;
  std::string what;     // "activation checkpointing"
  std::string setting;  // "--training.activation_checkpointing=true"
  int64_t needed = 0;
};

// The changes what_would_fit describes, in its order.
std::vector<FitSuggestion> fit_suggestions(const TrainConfig& config,
                                           const PlanSettings& settings,
                                           bool search_meshes = false);

// What would make a configuration that does not fit fit: one line per change that would
// (activation checkpointing, ZeRO-3, offload, bf16, LoRA, a smaller micro-batch, a shorter
// sequence, more devices), each with its predicted per-device peak; empty when nothing tried
// fits. A change fits on the configured mesh, or with `search_meshes` on any mesh of the
// devices at micro-batch 1 (what --fit needs).
std::vector<std::string> what_would_fit(const TrainConfig& config, const PlanSettings& settings,
                                        bool search_meshes = false);

// For every mesh dp x fsdp x tp x cp of settings.nproc devices that the model allows (tp
// dividing the heads, FFN and vocabulary, cp the sequence; fsdp 1 under ZeRO stage 0), the
// largest micro-batch that fits, ranked by predicted tokens/s (step time per token; the
// micro-batches differ). Throws "[plan] nothing fits ..." with what_would_fit's lines when no
// mesh fits even one sequence.
std::vector<Plan> fit_meshes(const TrainConfig& config, const PlanSettings& settings);

// Returns the plan as one JSON object (keys in docs/plan.md); `suggestions` are
// what_would_fit's lines for a plan that does not fit.
std::string plan_json(const Plan& plan, const PlanSettings& settings,
                      const std::vector<std::string>& suggestions);
// Returns the plan as text: memory by category, step time, communication.
std::string plan_text(const Plan& plan, const PlanSettings& settings,
                      const std::vector<std::string>& suggestions);
// Returns --fit's ranking as one JSON object ({"hardware", "settings", "fits": [plans]}) and
// as a table.
std::string fit_json(const std::vector<Plan>& plans, const PlanSettings& settings);
std::string fit_text(const std::vector<Plan>& plans, const PlanSettings& settings);

}  // namespace anvil
