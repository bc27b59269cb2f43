// `anvil plan`'s step time (plan/step_ops.h): every op's FLOPs and bytes recomputed here by
// arithmetic for a small model (each projection 2 x rows x in x out per GEMM, three GEMMs for
// forward and backward; attention over the visible pairs; the head per chunk of the model's
// own chunk rows; AdamW's 28 bytes per element of the shard), the breakdown adding up to the
// step, the roofline's compute- and bandwidth-bound cases, LoRA's adapters, the model FLOPs
// that MFU divides, the JSON breakdown, and the 1.5B benchmark preset on an H200.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/llama.h"
#include "plan/plan.h"
#include "train/config.h"
#include "train/model_setup.h"

namespace anvil {
namespace {

TrainConfig load_preset(const std::string& name) {
  TrainConfig config;
  apply_config_file(config, std::string(ANVIL_TEST_DATA) + "/../configs/" + name + ".toml");
  return config;
}

PlanSettings settings_for(const std::string& hardware, int nproc) {
  PlanSettings settings;
  settings.nproc = nproc;
  settings.hardware = find_hardware_profile(hardware, CpuProfileOptions{});
  return settings;
}

// A small bf16 model: C 256, 2 layers, 8 heads of 32 (4 kv heads), FFN 704, an untied 32768
// vocabulary; micro-batch 2 x 256 tokens, so 512 rows.
TrainConfig small_config() {
  TrainConfig c;
  c.model.dim = 256;
  c.model.n_layers = 2;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.model.ffn_dim = 704;
  c.model.vocab_size = 32768;
  c.model.max_seq_len = 256;
  c.model.tie_embeddings = false;
  c.training.batch_size = 2;
  c.training.seq_len = 256;
  c.training.dtype = "bf16";
  return c;
}
constexpr double kRows = 512, kC = 256, kQ = 256, kKV = 128, kF = 704, kV = 32768, kL = 2;
constexpr double kHeads = 8, kHeadDim = 32, kSeq = 256, kBatch = 2;

// Returns the op named `name`, or null.
const PlannedOp* find_op(const Plan& plan, const std::string& name) {
  for (const PlannedOp& op : plan.time.ops)
    if (op.name == name) return &op;
  return nullptr;
}

// Returns the op named `name`; fails the test when the plan has none.
const PlannedOp& op(const Plan& plan, const std::string& name) {
  const PlannedOp* found = find_op(plan, name);
  EXPECT_NE(found, nullptr) << name;
  static const PlannedOp none;
  return found ? *found : none;
}

// The roofline time of an op whose launches all do the same work.
double roofline_seconds(const PlannedOp& op, double rate, const OpCeilings& c) {
  return std::max(op.flops / rate, op.bytes / c.memory_bytes) +
         static_cast<double>(op.launches) * c.launch_s;
}

struct ProjectionShape {
  const char* name;
  double out, in;
  double forward_out_bytes;  // f32 where the output joins the residual stream
};
const std::vector<ProjectionShape> kProjections = {
    {"q_proj", kQ, kC, 2}, {"k_proj", kKV, kC, 2},  {"v_proj", kKV, kC, 2},   {"o_proj", kC, kQ, 4},
    {"gate_proj", kF, kC, 2}, {"up_proj", kF, kC, 2}, {"down_proj", kC, kF, 4}};

TEST(PlanStepOps, ProjectionGemmsAreTwoRowsInOutThreeTimes) {
  const Plan plan = make_plan(small_config(), settings_for("h100", 1));
  const OpCeilings& c = plan.time.ceilings;
  for (const ProjectionShape& p : kProjections) {
    const std::string name = p.name;
    const PlannedOp& forward = op(plan, name + " forward");
    const PlannedOp& input = op(plan, name + " backward (input)");
    const PlannedOp& weight = op(plan, name + " backward (weight)");
    const double gemm = 2 * kRows * p.in * p.out;
    EXPECT_DOUBLE_EQ(forward.flops, kL * gemm) << name;
    EXPECT_DOUBLE_EQ(forward.flops + input.flops + weight.flops, 3 * kL * gemm) << name;
    EXPECT_EQ(forward.launches, 2) << name;
    EXPECT_EQ(forward.kind, OpKind::gemm);
    // x (rows, in) and W (out, in) in bf16 in, y out; the weight gradient (out, in) f32 is
    // read and written.
    EXPECT_DOUBLE_EQ(forward.bytes, kL * (kRows * p.in * 2 + p.in * p.out * 2 +
                                          kRows * p.out * p.forward_out_bytes))
        << name;
    EXPECT_DOUBLE_EQ(weight.bytes,
                     kL * (kRows * p.out * 2 + kRows * p.in * 2 + 2 * p.out * p.in * 4))
        << name;
    for (const PlannedOp* o : {&forward, &input, &weight})
      EXPECT_NEAR(o->seconds, roofline_seconds(*o, c.gemm_flops, c), 1e-15) << o->name;
  }
  // Input gradients: down and o write a bf16 operand; gate and q write the f32 norm gradient,
  // up, k and v add to it (read and written).
  EXPECT_DOUBLE_EQ(op(plan, "down_proj backward (input)").bytes,
                   kL * (kRows * kC * 2 + kC * kF * 2 + kRows * kF * 2));
  EXPECT_DOUBLE_EQ(op(plan, "gate_proj backward (input)").bytes,
                   kL * (kRows * kF * 2 + kF * kC * 2 + kRows * kC * 4));
  EXPECT_DOUBLE_EQ(op(plan, "up_proj backward (input)").bytes,
                   kL * (kRows * kF * 2 + kF * kC * 2 + 2 * kRows * kC * 4));
  EXPECT_DOUBLE_EQ(op(plan, "k_proj backward (input)").bytes,
                   kL * (kRows * kKV * 2 + kKV * kC * 2 + 2 * kRows * kC * 4));
}

TEST(PlanStepOps, AttentionCountsTheVisiblePairs) {
  TrainConfig config = small_config();
  Plan plan = make_plan(config, settings_for("h100", 1));
  // Causal: T (T + 1) / 2 pairs per sequence and head; 4 head_dim FLOPs forward, 10 backward.
  const double causal = kSeq * (kSeq + 1) / 2 * kBatch;
  EXPECT_DOUBLE_EQ(op(plan, "attention forward").flops, kL * 4 * kHeadDim * kHeads * causal);
  EXPECT_DOUBLE_EQ(op(plan, "attention backward").flops, kL * 10 * kHeadDim * kHeads * causal);
  // q, k, v in, out and the f32 logsumexp out.
  EXPECT_DOUBLE_EQ(op(plan, "attention forward").bytes,
                   kL * (kRows * (2 * kQ + 2 * kKV) * 2 + kRows * kHeads * 4));
  // A 64-position window: position t sees min(t + 1, 64) keys.
  config.attention.window = 64;
  plan = make_plan(config, settings_for("h100", 1));
  const double windowed = (64.0 * 65 / 2 + (kSeq - 64) * 64) * kBatch;
  EXPECT_NEAR(op(plan, "attention forward").flops / (kL * 4 * kHeadDim * kHeads * windowed), 1.0,
              1e-12);
  // Checkpointing recomputes every layer's forward but the last's; micro-batches repeat all.
  config = small_config();
  config.training.activation_checkpointing = true;
  config.training.grad_accum = 3;
  plan = make_plan(config, settings_for("h100", 1));
  EXPECT_EQ(op(plan, "attention forward").launches, 3 * (2 * 2 - 1));
  EXPECT_EQ(op(plan, "q_proj forward").launches, 3 * (2 * 2 - 1));
  EXPECT_EQ(op(plan, "attention backward").launches, 3 * 2);
  // The input norm of every layer forward and the final norm; the MLP's norm is fused with
  // the attention half's residual add.
  EXPECT_EQ(op(plan, "RMSNorm forward").launches, 3 * ((2 * 2 - 1) + 1));
  EXPECT_EQ(op(plan, "residual add + RMSNorm forward (fused)").launches, 3 * (2 * 2 - 1));
}

TEST(PlanStepOps, TheHeadRunsPerChunkOfTheModelsChunkRows) {
  const TrainConfig config = small_config();
  const Plan plan = make_plan(config, settings_for("h100", 1));
  // The chunk rows and logits dtypes the model's own arena carve gives.
  const ModelActivations acts =
      LlamaModel::planned_activations(llama_config_from(config.model), model_options_from(config));
  const int64_t rows = std::min<int64_t>(acts.logits.numel() / 32768, 512);
  ASSERT_GT(rows, 0);
  const int64_t chunks = (512 + rows - 1) / rows;
  EXPECT_EQ(plan.time.logits_chunk_rows, rows);
  EXPECT_EQ(plan.time.logits_chunks, chunks);
  const double logits = static_cast<double>(dtype_size(acts.logits.dtype));
  const double dlogits = logits;  // written over the logits, in place
  const PlannedOp& forward = op(plan, "lm_head forward");
  EXPECT_DOUBLE_EQ(forward.flops, 2 * kRows * kC * kV);
  EXPECT_EQ(forward.launches, chunks);
  // The rows once, the (V, C) weight once per chunk, the logits written.
  EXPECT_DOUBLE_EQ(forward.bytes, kRows * kC * 2 + chunks * kV * kC * 2 + kRows * kV * logits);
  // The weight gradient (V, C) f32 is read and written once per chunk.
  const PlannedOp& weight = op(plan, "lm_head backward (weight)");
  EXPECT_DOUBLE_EQ(weight.flops, 2 * kRows * kC * kV);
  EXPECT_DOUBLE_EQ(weight.bytes, kRows * kV * dlogits + kRows * kC * 2 + chunks * 2 * kV * kC * 4);
  EXPECT_DOUBLE_EQ(op(plan, "lm_head backward (input)").bytes,
                   kRows * kV * dlogits + chunks * kV * kC * 2 + kRows * kC * 4);
  // The fused classifier reads the logits once and writes dlogits once (plus targets, mask and
  // losses per row).
  const PlannedOp& classifier = op(plan, "cross-entropy (fused classifier)");
  EXPECT_DOUBLE_EQ(classifier.bytes, kRows * kV * (logits + dlogits) + kRows * 12);
  EXPECT_EQ(classifier.kind, OpKind::memory);
}

TEST(PlanStepOps, TheOptimizerMovesItsShard) {
  const TrainConfig config = small_config();
  const Plan plan = make_plan(config, settings_for("h100", 1));
  const double shard =
      static_cast<double>(plan.device[static_cast<size_t>(MemoryCategory::optimizer_state)]) / 8;
  const double params = static_cast<double>(plan.parameters);
  EXPECT_DOUBLE_EQ(op(plan, "AdamW").bytes, 28 * shard);
  EXPECT_DOUBLE_EQ(op(plan, "gradient norm").bytes, 4 * shard);
  EXPECT_DOUBLE_EQ(op(plan, "gradient zeroing").bytes, 4 * params);
  // Stage 0 casts every f32 master to bf16 before each micro-batch's forward.
  EXPECT_DOUBLE_EQ(op(plan, "cast: f32 masters to compute-dtype weights").bytes, 6 * params);
  for (const char* name : {"AdamW", "gradient norm", "gradient zeroing"})
    EXPECT_EQ(op(plan, name).kind, OpKind::optimizer);

  // ZeRO-3 on 2 devices: AdamW steps this rank's half; nothing is zeroed up front.
  TrainConfig sharded = config;
  sharded.parallel.zero_stage = 3;
  const Plan half = make_plan(sharded, settings_for("h100", 2));
  const double half_shard =
      static_cast<double>(half.device[static_cast<size_t>(MemoryCategory::optimizer_state)]) / 8;
  EXPECT_LT(half_shard, shard);
  EXPECT_DOUBLE_EQ(op(half, "AdamW").bytes, 28 * half_shard);
  EXPECT_EQ(find_op(half, "gradient zeroing"), nullptr);
  // Offload: the host steps AdamW (a serial transfer entry), not the device.
  sharded.parallel.offload = true;
  EXPECT_EQ(find_op(make_plan(sharded, settings_for("h100", 2)), "AdamW"), nullptr);
}

TEST(PlanStepOps, LoraAddsAdapterGemmsAndDropsTheBaseWeightGradients) {
  TrainConfig config = small_config();
  config.lora.r = 8;  // q, k, v, o by default
  const Plan plan = make_plan(config, settings_for("h100", 1));
  for (const ProjectionShape& p : kProjections) {
    EXPECT_EQ(find_op(plan, std::string(p.name) + " backward (weight)"), nullptr) << p.name;
    EXPECT_NE(find_op(plan, std::string(p.name) + " backward (input)"), nullptr) << p.name;
  }
  EXPECT_EQ(find_op(plan, "lm_head backward (weight)"), nullptr);
  EXPECT_EQ(find_op(plan, "embedding backward"), nullptr);
  // Per adapted projection: h = x A^T (2 rows in r), y += h B^T (2 rows r out) forward; dB,
  // dh, dx, dA backward (2 rows r each of out, out, in, in).
  double in_plus_out = 0;
  for (const ProjectionShape& p : kProjections) {
    const std::string name = p.name;
    if (name == "q_proj" || name == "k_proj" || name == "v_proj" || name == "o_proj")
      in_plus_out += p.in + p.out;
  }
  EXPECT_DOUBLE_EQ(op(plan, "LoRA adapters forward").flops, kL * 2 * kRows * 8 * in_plus_out);
  EXPECT_DOUBLE_EQ(op(plan, "LoRA adapters backward").flops, kL * 4 * kRows * 8 * in_plus_out);
  EXPECT_EQ(op(plan, "LoRA adapters forward").launches, 2 * 4 * 2);  // layers, targets, GEMMs
  EXPECT_DOUBLE_EQ(op(plan, "AdamW").bytes,
                   28.0 * static_cast<double>(plan.device[static_cast<size_t>(
                              MemoryCategory::optimizer_state)]) / 8);
}

TEST(PlanStepTime, TheBreakdownAddsUpToTheComputeTimeAndTheStep) {
  TrainConfig sharded = small_config();
  sharded.parallel.zero_stage = 3;
  for (const auto& [config, nproc] :
       {std::pair<TrainConfig, int>{small_config(), 1}, std::pair<TrainConfig, int>{sharded, 4},
        std::pair<TrainConfig, int>{load_preset("bench-1.5b"), 1}}) {
    const Plan plan = make_plan(config, settings_for("h200", nproc));
    const StepTimePlan& t = plan.time;
    double ops = 0, flops = 0;
    for (const PlannedOp& o : t.ops) {
      ops += o.seconds;
      flops += o.flops;
      EXPECT_GE(o.seconds, std::max(o.compute_s, o.memory_s)) << o.name;
    }
    EXPECT_NEAR(ops / t.compute_s, 1.0, 1e-12);
    EXPECT_NEAR(flops / t.executed_flops, 1.0, 1e-12);
    double kinds = 0;
    for (const OpKindTotal& k : op_kind_totals(t.ops)) kinds += k.seconds;
    EXPECT_NEAR(kinds / t.compute_s, 1.0, 1e-12);
    EXPECT_NEAR((t.compute_s + t.exposed_comm_s) / t.step_s, 1.0, 1e-12);
    EXPECT_GE(t.exposed_comm_s, 0);
    if (nproc > 1) {
      EXPECT_GT(t.overlapped_s, 0);
    }
  }
}

TEST(PlanStepTime, OpsAreComputeOrBandwidthBoundByTheirArithmetic) {
  const TrainConfig bench = load_preset("bench-1.5b");
  const Plan plan = make_plan(bench, settings_for("h200", 1));
  const OpCeilings& c = plan.time.ceilings;
  // 8192 rows x 2048 x 2048: 68.7 GFLOP against 25 MB of operands.
  const PlannedOp& q = op(plan, "q_proj forward");
  EXPECT_GT(q.flops / c.gemm_flops, q.bytes / c.memory_bytes);
  EXPECT_TRUE(q.compute_bound());
  // RMSNorm: a few FLOPs per element moved.
  const PlannedOp& norm = op(plan, "RMSNorm forward");
  EXPECT_LT(norm.flops / c.vector_flops, norm.bytes / c.memory_bytes);
  EXPECT_FALSE(norm.compute_bound());
  // The same projection over 16 rows reads its 8 MB weight for 134 MFLOP: bandwidth-bound.
  TrainConfig short_rows = bench;
  short_rows.training.batch_size = 1;
  short_rows.training.seq_len = 16;
  const Plan few = make_plan(short_rows, settings_for("h200", 1));
  const PlannedOp& q16 = op(few, "q_proj forward");
  EXPECT_LT(q16.flops / c.gemm_flops, q16.bytes / c.memory_bytes);
  EXPECT_FALSE(q16.compute_bound());
  // By kind: the benchmark's attention is compute-bound, its elementwise kernels and optimizer
  // bandwidth-bound (its GEMMs depend on the head's chunk rows: a few rows per chunk make the
  // head's GEMMs re-read the weight and its f32 gradient for little arithmetic).
  const std::vector<OpKindTotal> kinds = op_kind_totals(plan.time.ops);
  EXPECT_TRUE(kinds[static_cast<size_t>(OpKind::attention)].compute_bound());
  EXPECT_FALSE(kinds[static_cast<size_t>(OpKind::memory)].compute_bound());
  EXPECT_FALSE(kinds[static_cast<size_t>(OpKind::optimizer)].compute_bound());
}

TEST(PlanStepTime, ModelFlopsFollowTheRunsConventionAndEfficiencySetsTheGemmCeiling) {
  TrainConfig config = load_preset("llama3-8b");
  PlanSettings settings = settings_for("h100", 8);
  settings.efficiency = 0.5;
  const Plan plan = make_plan(config, settings);
  // Matmul parameters: all but the embedding table (a lookup) and the norms.
  const double n = 8'030'261'248.0 - 128256.0 * 4096 - (2 * 32 + 1) * 4096.0;
  const double per_token = 6 * n + 12.0 * 32 * 4096 * 4096;
  EXPECT_NEAR(plan.time.flops_per_token / per_token, 1.0, 1e-9);
  EXPECT_EQ(plan.time.tokens_per_step, 8 * 4096);
  EXPECT_NEAR(plan.time.ceilings.gemm_flops, 0.5 * 989.4e12, 1e3);
  EXPECT_NEAR(plan.time.mfu, per_token * 4096 / plan.time.step_s / 989.4e12, 1e-9);
  EXPECT_GE(plan.time.step_s, plan.time.compute_s);
  EXPECT_NEAR(plan.time.tokens_per_s, 8 * 4096 / plan.time.step_s, 1e-6);
  // A GEMM ceiling twice as high halves the compute-bound GEMMs' time.
  settings.efficiency = 1.0;
  const Plan faster = make_plan(config, settings);
  const PlannedOp& slow_q = op(plan, "q_proj forward");
  const PlannedOp& fast_q = op(faster, "q_proj forward");
  ASSERT_TRUE(slow_q.compute_bound() && fast_q.compute_bound());
  EXPECT_NEAR(slow_q.compute_s / fast_q.compute_s, 2.0, 1e-9);
  // Activation checkpointing adds one forward pass (a third of 6N and of the attention term).
  config.training.activation_checkpointing = true;
  EXPECT_NEAR(make_plan(config, settings).time.flops_per_token / per_token, 4.0 / 3.0, 1e-9);
}

TEST(PlanStepTime, TheBenchmarkPresetOnAnH200) {
  const TrainConfig bench = load_preset("bench-1.5b");
  const Plan plan = make_plan(bench, settings_for("h200", 1));
  EXPECT_EQ(plan.parameters, 1'532'037'120);  // configs/README.md
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.time.tokens_per_step, 4 * 2048);
  // No step beats the dense peak: the model FLOPs take at least their time at 989.4 TFLOP/s.
  EXPECT_GE(plan.time.step_s, plan.time.flops_per_device / 989.4e12);
  EXPECT_LT(plan.time.mfu, 1.0);
  for (const OpKindTotal& k : op_kind_totals(plan.time.ops)) EXPECT_GT(k.seconds, 0);
  // One device: nothing to communicate.
  EXPECT_EQ(plan.time.exposed_comm_s, 0);
}

TEST(PlanJson, CarriesTheStepBreakdownByKindAndByOp) {
  TrainConfig config = small_config();
  config.parallel.zero_stage = 3;
  const PlanSettings settings = settings_for("h200", 2);
  const Plan plan = make_plan(config, settings);
  const auto j = nlohmann::json::parse(plan_json(plan, settings, {}));
  for (const char* key : {"gemm_bf16_tflops", "attention_bf16_tflops", "memory_peak_gbps",
                          "memory_gbps", "launch_us"})
    EXPECT_TRUE(j["hardware"].contains(key)) << key;
  const auto& time = j["time"];
  for (const char* key : {"mfu", "executed_flops", "ceilings", "logits_chunk_rows",
                          "logits_chunks", "breakdown", "ops"})
    EXPECT_TRUE(time.contains(key)) << key;
  double shares = 0, seconds = 0;
  for (const char* kind : {"gemm", "attention", "memory", "optimizer", "communication"}) {
    ASSERT_TRUE(time["breakdown"].contains(kind)) << kind;
    const auto& k = time["breakdown"][kind];
    for (const char* key : {"seconds", "share", "bound"}) EXPECT_TRUE(k.contains(key)) << key;
    shares += k["share"].get<double>();
    seconds += k["seconds"].get<double>();
  }
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(seconds / j["step_seconds"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(time["breakdown"]["gemm"]["bound"].get<std::string>(),
            op_kind_totals(plan.time.ops)[0].compute_bound() ? "compute" : "bandwidth");
  ASSERT_EQ(time["ops"].size(), plan.time.ops.size());
  double op_seconds = 0;
  for (const auto& o : time["ops"]) {
    for (const char* key : {"name", "kind", "launches", "flops", "bytes", "seconds", "bound"})
      EXPECT_TRUE(o.contains(key)) << key;
    op_seconds += o["seconds"].get<double>();
  }
  EXPECT_NEAR(op_seconds / time["compute_seconds"].get<double>(), 1.0, 1e-9);
}

}  // namespace
}  // namespace anvil
