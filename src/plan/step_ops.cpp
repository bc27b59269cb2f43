// The per-op step model (see step_ops.h). Shapes follow the model's code: the projections of
// model/attention_block.cpp and model/mlp_block.cpp, the chunked head of model/head_block.cpp,
// the residual stream, norm statistics and weight gradients in f32, GEMM operands in the
// compute dtype; bytes count each operand read once and each output written once (read too
// when it accumulates), as a kernel that streams its operands does.
#include "plan/step_ops.h"

#include <algorithm>
#include <array>
#include <utility>

#include "model/lora.h"
#include "train/model_setup.h"

namespace anvil {
namespace {

constexpr double kF32 = 4.0;
constexpr double kI32 = 4.0;

// Collects the ops in first-run order, merging instances of one name.
class OpList {
 public:
  explicit OpList(const OpCeilings& ceilings) : ceilings_(ceilings) {}

  // Adds `instances` runs of one op of `flops` and `bytes` each, `launches` kernels per run.
  void add(const std::string& name, OpKind kind, double instances, double flops, double bytes,
           int64_t launches = 1) {
    if (instances <= 0) return;
    auto it = std::find_if(ops_.begin(), ops_.end(),
                           [&](const PlannedOp& op) { return op.name == name; });
    if (it == ops_.end()) {
      ops_.push_back(PlannedOp{name, kind});
      it = ops_.end() - 1;
    }
    const double rate = kind == OpKind::gemm        ? ceilings_.gemm_flops
                        : kind == OpKind::attention ? ceilings_.attention_flops
                                                    : ceilings_.vector_flops;
    const double compute = flops / rate, memory = bytes / ceilings_.memory_bytes;
    const double runs = instances * static_cast<double>(launches);
    it->launches += static_cast<int64_t>(runs);
    it->flops += instances * flops;
    it->bytes += instances * bytes;
    it->compute_s += instances * compute;
    it->memory_s += instances * memory;
    it->seconds += instances * std::max(compute, memory) + runs * ceilings_.launch_s;
  }

  // Adds `instances` GEMMs C (m, n) = A (m, k) B (k, n) with operands of `a` and `b` bytes per
  // element and an output of `c` bytes, read as well when it accumulates.
  void gemm(const std::string& name, double instances, double m, double k, double n, double a,
            double b, double c, bool accumulate) {
    add(name, OpKind::gemm, instances, 2 * m * k * n,
        m * k * a + k * n * b + m * n * c * (accumulate ? 2 : 1));
  }

  std::vector<PlannedOp> take() { return std::move(ops_); }

 private:
  OpCeilings ceilings_;
  std::vector<PlannedOp> ops_;
};

// A projection of a layer: its name, (out, in) shape, and the bytes per element of its
// forward output and of its input gradient (f32 where they join the residual stream or the
// f32 norm gradient), and whether its input gradient adds to one written before it.
struct Projection {
  const char* name;
  LoraTarget target;
  double out, in;
  double forward_out;
  double input_grad;
  bool input_grad_accumulates;
};

std::array<Projection, 7> projections(const LlamaConfig& s, double e) {
  const double c = s.dim, q = s.q_dim(), kv = s.kv_dim(), f = s.ffn_dim;
  // Backward order: down, gate, up (mlp), then o, q, k, v (attention); gate and q write the
  // f32 norm gradient, up, k and v add to it.
  return {{{"down_proj", LoraTarget::down_proj, c, f, kF32, e, false},
           {"gate_proj", LoraTarget::gate_proj, f, c, e, kF32, false},
           {"up_proj", LoraTarget::up_proj, f, c, e, kF32, true},
           {"o_proj", LoraTarget::o_proj, c, q, kF32, e, false},
           {"q_proj", LoraTarget::q_proj, q, c, e, kF32, false},
           {"k_proj", LoraTarget::k_proj, kv, c, e, kF32, true},
           {"v_proj", LoraTarget::v_proj, kv, c, e, kF32, true}}};
}

// Returns the projection of `target` (its forward and gradient dtypes).
const Projection& projection_of(const std::array<Projection, 7>& all, LoraTarget target) {
  return *std::find_if(all.begin(), all.end(),
                       [&](const Projection& p) { return p.target == target; });
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
      return "GEMMs";
    case OpKind::attention:
      return "attention";
    case OpKind::memory:
      return "memory-bound kernels";
    case OpKind::optimizer:
      return "optimizer";
  }
  return "";
}

const char* op_kind_key(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
      return "gemm";
    case OpKind::attention:
      return "attention";
    case OpKind::memory:
      return "memory";
    case OpKind::optimizer:
      return "optimizer";
  }
  return "";
}

std::vector<PlannedOp> plan_step_ops(const TrainConfig& config, const LlamaConfig& shard,
                                     const MeshShape& shape, const HeadChunking& head,
                                     const StepStateWork& state, double attention_fraction,
                                     const OpCeilings& ceilings) {
  OpList ops(ceilings);
  const double e = static_cast<double>(dtype_size(model_options_from(config).compute_dtype));
  const bool lora = config.lora.r > 0;
  const bool sequence_parallel = shape.tp > 1 && config.parallel.sequence_parallel;
  const int64_t seq = config.training.seq_len, batch = config.training.batch_size;
  // Rows of a micro-batch on this device, and those of the residual stream and norms.
  const double n = static_cast<double>(batch * seq / shape.cp);
  const double local = sequence_parallel ? n / shape.tp : n;
  const double c = shard.dim, q = shard.q_dim(), kv = shard.kv_dim(), f = shard.ffn_dim;
  const double v = shard.vocab_size, heads = shard.n_heads, d = shard.resolved_head_dim();
  const double layers = shard.n_layers;
  const double micro = static_cast<double>(config.training.grad_accum);
  // Layer forwards per micro-batch: every layer, and again in backward under checkpointing
  // for all but the last (whose activations the shared set still holds).
  const double forwards =
      micro * (layers + (config.training.activation_checkpointing ? layers - 1 : 0));
  const double backwards = micro * layers;
  const std::array<Projection, 7> all = projections(shard, e);

  // Embedding lookup: table rows in f32 (the lookup reads the f32 table), ids.
  ops.add("embedding forward", OpKind::memory, micro, 0,
          n * c * kF32 + local * c * kF32 + n * kI32);

  // ---- forward of a layer (and its recomputation) -----------------------------------------
  // RMSNorm: f32 input and weight in, compute-dtype output and f32 statistics out.
  const double norm_forward_bytes = local * c * kF32 + c * kF32 + local * c * e + local * kF32;
  // The layer's input norm and the final norm; the MLP's norm is fused with the residual add.
  ops.add("RMSNorm forward", OpKind::memory, forwards + micro, 4 * local * c,
          norm_forward_bytes);
  for (LoraTarget t : {LoraTarget::q_proj, LoraTarget::k_proj, LoraTarget::v_proj}) {
    const Projection& p = projection_of(all, t);
    ops.gemm(std::string(p.name) + " forward", forwards, n, p.in, p.out, e, e, p.forward_out,
             false);
  }
  if (config.model.attention_bias)
    ops.add("q/k/v bias add", OpKind::memory, forwards, n * (q + 2 * kv), 2 * n * (q + 2 * kv) * e);
  ops.add("RoPE forward", OpKind::memory, forwards, 6 * n * (q + kv),
          2 * n * (q + kv) * e + n * kI32, 2);
  // Attention: 4 head_dim FLOPs per visible (query, key) pair and head forward, 10 backward
  // (the scores recomputed, then dV, dP, dQ and dK); the pairs of this rank's rows.
  const double causal_pairs = static_cast<double>(seq) * static_cast<double>(seq + 1) / 2.0;
  const double pairs = attention_fraction * causal_pairs * static_cast<double>(batch) / shape.cp;
  ops.add("attention forward", OpKind::attention, forwards, 4 * d * heads * pairs,
          n * (2 * q + 2 * kv) * e + n * heads * kF32);
  {
    const Projection& p = projection_of(all, LoraTarget::o_proj);
    ops.gemm("o_proj forward", forwards, n, p.in, p.out, e, e, p.forward_out, false);
  }
  // The attention half's residual add fused with the MLP's norm of its sum (one pass: both
  // addends read, the sum and the normalized rows written).
  ops.add("residual add + RMSNorm forward (fused)", OpKind::memory, forwards, 5 * local * c,
          3 * local * c * kF32 + c * kF32 + local * c * e + local * kF32);
  ops.add("residual add", OpKind::memory, forwards, local * c, 3 * local * c * kF32);
  for (LoraTarget t : {LoraTarget::gate_proj, LoraTarget::up_proj}) {
    const Projection& p = projection_of(all, t);
    ops.gemm(std::string(p.name) + " forward", forwards, n, p.in, p.out, e, e, p.forward_out,
             false);
  }
  ops.add("SwiGLU forward", OpKind::memory, forwards, 5 * n * f, 3 * n * f * e);
  {
    const Projection& p = projection_of(all, LoraTarget::down_proj);
    ops.gemm("down_proj forward", forwards, n, p.in, p.out, e, e, p.forward_out, false);
  }
  // LoRA: h = x A^T, y += scale h B^T per adapted projection; the base stays frozen.
  std::vector<LoraTarget> adapted;
  for (const std::string& name : config.lora.targets) adapted.push_back(parse_lora_target(name));
  if (!lora) adapted.clear();
  const double r = static_cast<double>(config.lora.r);
  for (LoraTarget t : adapted) {
    const Projection& p = projection_of(all, t);
    if (config.lora.dropout > 0)
      ops.add("LoRA dropout", OpKind::memory, forwards, n * p.in, 2 * n * p.in * e);
    ops.gemm("LoRA adapters forward", forwards, n, p.in, r, e, e, e, false);
    ops.gemm("LoRA adapters forward", forwards, n, r, p.out, e, e, p.forward_out, true);
  }

  // ---- the head: final norm, then per chunk of rows the lm_head GEMM, the fused classifier
  // (one pass over the logits: loss and dlogits) and the two backward GEMMs ---------------
  const double logit_bytes = static_cast<double>(dtype_size(head.logits));
  const double dlogit_bytes = static_cast<double>(dtype_size(head.dlogits));
  const int64_t rows = static_cast<int64_t>(n);
  const int64_t chunk = std::max<int64_t>(1, std::min(head.rows, rows));
  const int64_t full_chunks = rows / chunk, rest = rows % chunk;
  for (const auto& [count, r_rows] : {std::pair<double, double>{static_cast<double>(full_chunks),
                                                                static_cast<double>(chunk)},
                                      std::pair<double, double>{rest > 0 ? 1.0 : 0.0,
                                                                static_cast<double>(rest)}}) {
    const double instances = micro * count;
    ops.gemm("lm_head forward", instances, r_rows, c, v, e, e, logit_bytes, false);
    ops.add("cross-entropy (fused classifier)", OpKind::memory, instances, 5 * r_rows * v,
            r_rows * v * (logit_bytes + dlogit_bytes) + r_rows * (kI32 + 2 * kF32));
    ops.gemm("lm_head backward (input)", instances, r_rows, v, c, dlogit_bytes, e, kF32, false);
    if (!lora)
      ops.gemm("lm_head backward (weight)", instances, v, r_rows, c, dlogit_bytes, e, kF32, true);
  }
  // The residual gradient starts at zero before the final norm's backward adds to it.
  ops.add("residual gradient zero fill", OpKind::memory, micro, 0, local * c * kF32);
  // Without sequence parallelism each norm backward also writes the residual gradient's
  // compute-dtype copy, the next projections' GEMM operand (the cast fused into its pass).
  const double fused_copy_bytes = sequence_parallel || e == kF32 ? 0.0 : local * c * e;
  const double norm_backward_bytes = local * c * kF32 * 2 + c * kF32 + local * kF32 +
                                     2 * local * c * kF32 + 2 * c * kF32 + fused_copy_bytes;
  ops.add("RMSNorm backward", OpKind::memory, 2 * backwards + micro, 8 * local * c,
          norm_backward_bytes);

  // ---- backward of a layer: mlp, then attention --------------------------------------------
  // The residual gradient (f32) becomes the compute-dtype operand of down_proj and o_proj.
  if (e != kF32 && sequence_parallel)  // gathered from the tp ranks, then cast
    ops.add("cast: residual gradient to the compute dtype", OpKind::memory, 2 * backwards, 0,
            n * c * (kF32 + e));
  auto input_grad = [&](LoraTarget t) {
    const Projection& p = projection_of(all, t);
    ops.gemm(std::string(p.name) + " backward (input)", backwards, n, p.out, p.in, e, e,
             p.input_grad, p.input_grad_accumulates);
  };
  auto weight_grad = [&](LoraTarget t) {
    const Projection& p = projection_of(all, t);
    if (!lora) ops.gemm(std::string(p.name) + " backward (weight)", backwards, p.out, n, p.in,
                        e, e, kF32, true);
  };
  auto adapter_backward = [&](LoraTarget t) {
    if (std::find(adapted.begin(), adapted.end(), t) == adapted.end()) return;
    const Projection& p = projection_of(all, t);
    // dB += dy^T h, dh = dy B, dx += dh A, dA += dh^T x (dropout: x dropped again, and dh A
    // goes through the mask before it is added).
    ops.gemm("LoRA adapters backward", backwards, p.out, n, r, e, e, kF32, true);
    ops.gemm("LoRA adapters backward", backwards, n, p.out, r, e, e, e, false);
    ops.gemm("LoRA adapters backward", backwards, n, r, p.in, e, e, p.input_grad, true);
    ops.gemm("LoRA adapters backward", backwards, r, n, p.in, e, e, kF32, true);
    if (config.lora.dropout > 0)
      ops.add("LoRA dropout", OpKind::memory, 3 * backwards, n * p.in, 2 * n * p.in * e);
  };
  input_grad(LoraTarget::down_proj);
  weight_grad(LoraTarget::down_proj);
  adapter_backward(LoraTarget::down_proj);
  ops.add("SwiGLU backward", OpKind::memory, backwards, 10 * n * f, 5 * n * f * e);
  for (LoraTarget t : {LoraTarget::gate_proj, LoraTarget::up_proj}) input_grad(t);
  for (LoraTarget t : {LoraTarget::gate_proj, LoraTarget::up_proj}) weight_grad(t);
  for (LoraTarget t : {LoraTarget::gate_proj, LoraTarget::up_proj}) adapter_backward(t);
  input_grad(LoraTarget::o_proj);
  weight_grad(LoraTarget::o_proj);
  adapter_backward(LoraTarget::o_proj);
  // Attention backward reads dout, q, k, v, out and the logsumexp; writes dq, dk, dv.
  ops.add("attention backward", OpKind::attention, backwards, 10 * d * heads * pairs,
          n * (4 * q + 4 * kv) * e + n * heads * kF32);
  ops.add("RoPE backward", OpKind::memory, backwards, 6 * n * (q + kv),
          2 * n * (q + kv) * e + n * kI32, 2);
  if (config.model.attention_bias && !lora)
    ops.add("q/k/v bias gradient", OpKind::memory, backwards, n * (q + 2 * kv),
            n * (q + 2 * kv) * e);
  for (LoraTarget t : {LoraTarget::q_proj, LoraTarget::k_proj, LoraTarget::v_proj}) input_grad(t);
  for (LoraTarget t : {LoraTarget::q_proj, LoraTarget::k_proj, LoraTarget::v_proj}) weight_grad(t);
  for (LoraTarget t : {LoraTarget::q_proj, LoraTarget::k_proj, LoraTarget::v_proj})
    adapter_backward(t);

  // Embedding gradient: a scatter-add of the residual gradient into the f32 table rows.
  if (!lora)
    ops.add("embedding backward", OpKind::memory, micro, n * c,
            n * c * kF32 + 2 * n * c * kF32 + n * kI32);

  // ---- the optimizer step and its passes over the gradients ------------------------------
  const double groups = static_cast<double>(std::max<int64_t>(1, state.groups));
  if (state.zeroed_elements > 0)
    ops.add("gradient zeroing", OpKind::optimizer, 1, 0,
            static_cast<double>(state.zeroed_elements) * kF32, static_cast<int64_t>(groups));
  if (state.norm_elements > 0)
    ops.add("gradient norm", OpKind::optimizer, 1, 2 * static_cast<double>(state.norm_elements),
            static_cast<double>(state.norm_elements) * kF32, static_cast<int64_t>(groups));
  // AdamW reads the f32 parameter, gradient and both moments and writes the parameter and the
  // moments: 28 bytes per element.
  if (state.optimizer_elements > 0)
    ops.add("AdamW", OpKind::optimizer, 1, 12 * static_cast<double>(state.optimizer_elements),
            28 * static_cast<double>(state.optimizer_elements), static_cast<int64_t>(groups));
  if (state.cast_elements > 0)
    ops.add("cast: f32 masters to compute-dtype weights", OpKind::optimizer, 1, 0,
            static_cast<double>(state.cast_elements) * (kF32 + e),
            std::max<int64_t>(1, state.cast_launches));
  return ops.take();
}

std::vector<OpKindTotal> op_kind_totals(const std::vector<PlannedOp>& ops) {
  std::vector<OpKindTotal> totals(kOpKindCount);
  for (const PlannedOp& op : ops) {
    OpKindTotal& t = totals[static_cast<size_t>(op.kind)];
    t.seconds += op.seconds;
    if (op.compute_bound()) t.compute_bound_s += op.seconds;
    t.flops += op.flops;
    t.bytes += op.bytes;
    t.launches += op.launches;
  }
  return totals;
}

}  // namespace anvil
