// Helpers shared by the parallel tests (single-process and mpirun tiers): a tiny Llama, a
// synthetic sample stream, and a small training harness that drives DataParallelEngine the
// way the trainer does (rank r's micro-batches of step k come from BatchLayout). Every rank
// can also build a one-process reference over the same global batch in its own memory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/device_communicator.h"
#include "data/cursor.h"
#include "data/synthetic.h"
#include "model/llama.h"
#include "model/llama_parameters.h"
#include "parallel/engine.h"
#include "parallel/engine_plan.h"
#include "parallel/mesh.h"

namespace anvil::ptest {

inline LlamaConfig tiny_config(bool tied) {
  LlamaConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 88;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.tie_embeddings = tied;
  return c;
}

struct RunSpec {
  int zero_stage = 0;
  int dp = 0;  // 0: automatic
  int fsdp = 0;
  int micro_batch = 2;
  int grad_accum = 1;  // micro-batches per rank per step
  bool tied = true;
  double grad_clip = 0.5;
  double lr = 1e-2;
  int seq = 16;
  uint64_t seed = 1234;
  // LoRA adapters (r > 0) on all seven targets of a frozen base, computing in `dtype` (a bf16
  // model holds its base in bf16).
  int lora_r = 0;
  float lora_dropout = 0.1f;
  DType dtype = DType::f32;
  // Tensor parallelism over tp ranks; the model then has 8 heads and 4 kv heads (head_dim 4)
  // so that tp 2 and tp 4 both divide them. A reference run sets wide_heads to match.
  int tp = 1;
  bool sequence_parallel = false;
  bool wide_heads = false;
  bool activation_checkpointing = false;
  // Context parallelism over cp ranks (seq divisible by 2 cp); a reference run sets cp = 1.
  int cp = 1;
  // Document ids that cut each sample into documents of 5 positions, shifted by the sample
  // index so that boundaries fall at different places (and across cp chunks).
  bool doc_mask = false;
  // Each layer's window, sparse pattern and sinks (ModelOptions::attention).
  AttentionSchedule attention;
  // ZeRO-3: groups gathered ahead of the one in use.
  int prefetch = 1;
  // Stage 3 with offload: the weight shard in host memory too (parallel.offload_params).
  bool offload_params = false;
  // ZeRO-3: false keeps every layer gathered from its forward to the end of the step.
  bool reshard_after_forward = true;
  // Optimizer offload (parallel.offload): AdamW state and f32 masters (stage 3: and the
  // gradient shards) in host memory.
  bool offload = false;
  // A model larger than tiny_config (0 keeps its value), for measurements where the
  // parameters must outweigh fixed overheads; synthetic tokens span the whole vocabulary.
  int n_layers = 0;
  int dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  // The backend every rank trains on; on a device backend ("sim") the mesh runs over the
  // device communicator, as the trainer's does.
  std::string backend = "cpu";
  // Gradient reductions: exact, or fast in reduce_dtype (f32 or bf16).
  ReduceMode reduce = ReduceMode::exact;
  DType reduce_dtype = DType::f32;

  ParallelSettings parallel_settings() const {
    ParallelSettings settings;
    settings.dp = dp;
    settings.fsdp = fsdp;
    settings.zero_stage = zero_stage;
    settings.tp = tp;
    settings.sequence_parallel = sequence_parallel;
    settings.cp = cp;
    settings.prefetch = prefetch;
    settings.reshard_after_forward = reshard_after_forward;
    settings.offload_params = offload_params;
    settings.offload = offload;
    settings.reduce = reduce == ReduceMode::fast ? "fast" : "exact";
    settings.reduce_dtype = dtype_name(reduce_dtype);
    return settings;
  }

  LlamaConfig config() const {
    LlamaConfig c = tiny_config(tied);
    if (wide_heads || tp > 1) {
      c.n_heads = 8;
      c.n_kv_heads = 4;
    }
    if (n_layers > 0) c.n_layers = n_layers;
    if (dim > 0) c.dim = dim;
    if (ffn_dim > 0) c.ffn_dim = ffn_dim;
    if (vocab_size > 0) c.vocab_size = vocab_size;
    return c;
  }
};

// One rank's training setup over `comm` (a world of comm.size() data ranks).
class Harness {
 public:
  Harness(Communicator& comm, const RunSpec& spec)
      : spec_(spec),
        backend_(make_backend(spec.backend)),
        data_(spec.config().vocab_size, spec.seq, spec.seed),
        device_world_(make_device_communicator(comm, *backend_)) {
    mesh_ = std::make_unique<DeviceMesh>(device_world_ ? *device_world_ : comm,
                                         spec.parallel_settings());
    ModelOptions options;
    options.max_batch = spec.micro_batch;
    options.max_seq = spec.seq / spec.cp;  // a cp rank holds seq / cp rows of each sample
    options.compute_dtype = spec.dtype;
    options.activation_checkpointing = spec.activation_checkpointing;
    options.attention = spec.attention;
    if (spec.lora_r > 0) {
      options.lora.r = spec.lora_r;
      options.lora.alpha = 2.0f * static_cast<float>(spec.lora_r);
      options.lora.dropout = spec.lora_dropout;
      options.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj",
                              "gate_proj", "up_proj", "down_proj"};
    }
    options_ = options;
    model_ = std::make_unique<LlamaModel>(spec.config(), *backend_,
                                          DataParallelEngine::model_options(options, *mesh_));
    EngineOptions engine_options;
    engine_options.hyper.weight_decay = 0.1;
    engine_options.grad_clip = spec.grad_clip;
    engine_options.micro_batches = spec.grad_accum;
    engine_ = std::make_unique<DataParallelEngine>(*model_, *mesh_, engine_options);
    const size_t rows = static_cast<size_t>(spec.micro_batch) * spec.grad_accum;
    tokens_.resize(rows * spec.seq);
    targets_.resize(rows * spec.seq);
    mask_.resize(rows * spec.seq);
    if (spec.doc_mask) doc_ids_.resize(rows * spec.seq);
    views_.resize(static_cast<size_t>(spec.grad_accum));
    layout_.micro_batch = spec.micro_batch;
    layout_.grad_accum = spec.grad_accum;
    layout_.world_size = mesh_->sample_world();
  }

  // Initialises what trains from `seed` and, with LoRA, the frozen base from seed + 1 (through
  // the engine, so each rank writes the part it holds).
  void init(uint64_t seed) {
    if (spec_.lora_r > 0) {
      const ParameterLayout& base = model_->full_layout();
      for (int g = 0; g < base.group_count(); ++g) {
        std::vector<float> values(static_cast<size_t>(base.group_numel(g)));
        init_llama_group(model_->config(), base, g, seed + 1, values.data());
        for (size_t i = 0; i < base.params().size(); ++i) {
          const ParameterInfo& p = base.params()[i];
          if (p.group == g) engine_->set_frozen_weights(static_cast<int>(i), &values[p.offset]);
        }
      }
    }
    engine_->init_weights(seed);
  }

  DataParallelEngine& engine() { return *engine_; }
  Backend& backend() { return *backend_; }
  // Returns the model options before the engine applied the mesh (what planning takes).
  const ModelOptions& options() const { return options_; }
  LlamaModel& model() { return *model_; }
  DeviceMesh& mesh() { return *mesh_; }
  const DeviceMesh& mesh() const { return *mesh_; }

  // Runs optimizer step `step` (0-based) on this rank's share of the global batch; with
  // `poison`, the first loss-mask value of this rank's first micro-batch is a NaN.
  StepReport step(int64_t step, bool poison = false) {
    const std::vector<Batch> batches = micro_batches(step);
    if (poison) views_[0].mask.f32()[0] = std::numeric_limits<float>::quiet_NaN();
    model_->set_dropout_step(step);  // adapter dropout masks are a function of the step
    return engine_->train_step(batches, spec_.lr);
  }

  // Returns this rank's micro-batches of step `step`: host tensors that stay valid until the
  // next call of step() or micro_batches().
  std::vector<Batch> micro_batches(int64_t step) {
    std::vector<Batch> batches;
    for (int m = 0; m < spec_.grad_accum; ++m) {
      const int64_t first = layout_.first_sample(step, m, mesh_->sample_rank());
      batches.push_back(fill(static_cast<size_t>(m), first, spec_.micro_batch));
    }
    return batches;
  }

  // Returns the loss of `count` evaluation batches of micro_batch samples from sample 10^6.
  LossSum evaluate(int64_t count) {
    return engine_->evaluate(count, [&](int64_t i) {
      return fill(0, 1000000 + i * spec_.micro_batch, spec_.micro_batch);
    });
  }

  // Returns every trainable group's full weights (whole-model layout), concatenated
  // (collective under stage 3 and tensor parallelism).
  std::vector<float> all_weights() { return all_groups(&DataParallelEngine::gather_weights); }
  // The same for the last step's reduced gradients.
  std::vector<float> all_gradients() { return all_groups(&DataParallelEngine::gather_gradients); }

 private:
  std::vector<float> all_groups(void (DataParallelEngine::*gather)(int, float*)) {
    std::vector<float> out;
    const ParameterLayout& layout = model_->full_trainable_layout();
    for (int g = 0; g < layout.group_count(); ++g) {
      std::vector<float> group(static_cast<size_t>(layout.group_numel(g)));
      (engine_.get()->*gather)(g, group.data());
      out.insert(out.end(), group.begin(), group.end());
    }
    return out;
  }

  Batch fill(size_t micro, int64_t first, int count) {
    const size_t offset = micro * static_cast<size_t>(spec_.micro_batch) * spec_.seq;
    const Shape shape{count, spec_.seq};
    View& v = views_[micro];
    v.tokens = Tensor(tokens_.data() + offset, DType::i32, shape);
    v.targets = Tensor(targets_.data() + offset, DType::i32, shape);
    v.mask = Tensor(mask_.data() + offset, DType::f32, shape);
    data_.fill(first, count, v.tokens, v.targets, nullptr, &v.mask);
    if (!spec_.doc_mask) return Batch{v.tokens, v.targets, &v.mask, nullptr};
    v.doc_ids = Tensor(doc_ids_.data() + offset, DType::i32, shape);
    for (int r = 0; r < count; ++r) {
      for (int t = 0; t < spec_.seq; ++t)
        v.doc_ids.i32()[r * spec_.seq + t] = static_cast<int32_t>((t + first + r) / 5);
    }
    return Batch{v.tokens, v.targets, &v.mask, &v.doc_ids};
  }

  struct View {
    Tensor tokens, targets, mask, doc_ids;
  };
  RunSpec spec_;
  std::unique_ptr<Backend> backend_;
  SyntheticData data_;
  ModelOptions options_;
  std::unique_ptr<Communicator> device_world_;  // null on cpu: `comm` moves host memory
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<DataParallelEngine> engine_;
  BatchLayout layout_;
  std::vector<int32_t> tokens_, targets_, doc_ids_;
  std::vector<float> mask_;
  std::vector<View> views_;
};

// Returns the bytes by category one rank's backend must hold once `harness` is set up (no
// step run yet), derived from the parameter shapes alone: a group lays its parameters out one
// after another, each starting at a multiple of 16 elements; f32 weights, gradients and AdamW's
// m and v. Stage 0 replicates them (world rank 0 also keeps a running gradient sum when there
// are several micro-batches); stage 3 pads a group to a multiple of 16 x world elements and
// holds 1/world of its weights and gradients, m and v of the real elements of that shard, and
// three weight and three gradient slots of the largest padded group (communication; one more
// for the running sum with several micro-batches). The activations are the model's arena;
// without offload, the workspace is the gradient norm's digit counters (168 bytes); nothing
// else is allocated before the first step.
inline MemoryByCategory expected_setup_memory(const RunSpec& spec, LlamaModel& model, int world,
                                              int rank) {
  const ParameterLayout& layout = model.trainable().layout();
  std::vector<int64_t> group_elements;
  for (const ParameterInfo& p : layout.params()) {
    if (static_cast<size_t>(p.group) >= group_elements.size())
      group_elements.resize(static_cast<size_t>(p.group) + 1, 0);
    int64_t& end = group_elements[static_cast<size_t>(p.group)];
    end = (end + p.shape.numel() + 15) / 16 * 16;
  }
  int64_t weights = 0, optimizer = 0, largest = 0, largest_layer = 0;
  std::vector<int64_t> outer_groups;  // the embedding's (group 0) and the head's (the last) sizes
  for (size_t g = 0; g < group_elements.size(); ++g) {
    const int64_t elements = group_elements[g];
    const int64_t unit = 16 * static_cast<int64_t>(world);
    const int64_t padded = (elements + unit - 1) / unit * unit;
    const int64_t shard = spec.zero_stage == 3 ? padded / world : elements;
    const int64_t first = spec.zero_stage == 3 ? rank * shard : 0;
    weights += 4 * shard;
    optimizer += 8 * std::clamp<int64_t>(elements - first, 0, shard);
    largest = std::max(largest, padded);
    if (g == 0 || g + 1 == group_elements.size()) {
      outer_groups.push_back(padded);
    } else {
      largest_layer = std::max(largest_layer, padded);
    }
  }
  // The embedding and head share the layer slots when they fit, except a tied embedding, which
  // is pinned for the pass; the rest get slots of their own: one (tied: one each).
  int64_t largest_outer = 0, outer = 0;
  for (size_t i = 0; i < outer_groups.size(); ++i) {
    if (!(spec.tied && i == 0) && outer_groups[i] <= largest_layer) continue;
    largest_outer = std::max(largest_outer, outer_groups[i]);
    ++outer;
  }
  if (!spec.tied) outer = std::min<int64_t>(outer, 1);
  EXPECT_TRUE(spec.zero_stage == 0 || spec.zero_stage == 3) << "stage 0 or 3 only";
  EXPECT_EQ(spec.dtype, DType::f32) << "f32 weight slots only";
  EXPECT_EQ(spec.lora_r, 0) << "no LoRA";
  MemoryByCategory expected{};
  auto at = [&](MemoryCategory c) -> int64_t& { return expected[static_cast<size_t>(c)]; };
  at(MemoryCategory::trainable_weights) = weights;
  at(MemoryCategory::gradients) = weights * (spec.zero_stage == 0 && rank == 0 &&
                                                     spec.grad_accum > 1 ? 2 : 1);
  at(MemoryCategory::optimizer_state) = optimizer;
  at(MemoryCategory::activations) = static_cast<int64_t>(model.activation_bytes());
  // The step's results read back once a step: a double loss sum per micro-batch and, without
  // offload, the gradient norm's 21 digit counters.
  at(MemoryCategory::workspace) = spec.grad_accum * int64_t{sizeof(double)} +
                                  (spec.offload ? 0 : kExactCounterCount * sizeof(uint64_t));
  // Stage 3: weight slots (1 + prefetch of the layers' size, and the outer ones), gradient
  // slots (2 of the layers' size and the outer ones), and with several micro-batches a
  // running-sum slot.
  if (spec.zero_stage == 3)
    at(MemoryCategory::communication) =
        4 * ((1 + spec.prefetch) * largest_layer + outer * largest_outer) +
        4 * (2 * largest_layer + outer * largest_outer) +
        (spec.grad_accum > 1 ? 4 * largest : 0);
  return expected;
}

// Returns "frozen_weights 0, trainable_weights 4096, ..." for a failure message.
inline std::string describe_memory(const MemoryByCategory& bytes) {
  std::string text;
  for (size_t c = 0; c < bytes.size(); ++c)
    text += (c ? ", " : "") + std::string(kMemoryCategoryNames[c]) + " " + std::to_string(bytes[c]);
  return text;
}

// Returns the largest |got - want| / |want| over a loss curve.
inline double max_relative_difference(const std::vector<double>& got,
                                      const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  return worst;
}

// Returns the largest over tensors of max |got - want| / max |want| (whole-model layout).
inline double max_tensor_difference(const ParameterLayout& layout, const std::vector<float>& got,
                                    const std::vector<float>& want, std::string& worst_name) {
  // Harness::all_groups concatenates the groups: group g starts after groups 0..g-1.
  std::vector<int64_t> group_start(1, 0);
  for (int g = 0; g < layout.group_count(); ++g)
    group_start.push_back(group_start.back() + layout.group_numel(g));
  double worst = 0.0;
  for (const ParameterInfo& p : layout.params()) {
    const int64_t at = group_start[static_cast<size_t>(p.group)] + p.offset;
    double diff = 0.0, scale = 0.0;
    for (int64_t i = at; i < at + p.numel(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    }
    const double relative = scale > 0.0 ? diff / scale : diff;
    if (relative >= worst) {
      worst = relative;
      worst_name = p.name;
    }
  }
  return worst;
}

// Returns the bits of a double (so EXPECT_EQ on them means bitwise equality).
inline uint64_t bits(double value) { return std::bit_cast<uint64_t>(value); }

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The per-step outcome of a run, for bitwise comparisons.
struct Curve {
  std::vector<uint64_t> loss_bits;
  std::vector<uint64_t> norm_bits;
  std::vector<double> losses;
};

// Runs steps [first, last) on a harness and records the curve.
inline Curve run_steps(Harness& harness, int64_t first, int64_t last) {
  Curve curve;
  for (int64_t k = first; k < last; ++k) {
    const StepReport report = harness.step(k);
    curve.loss_bits.push_back(bits(report.loss.mean()));
    curve.norm_bits.push_back(bits(report.grad_norm));
    curve.losses.push_back(report.loss.mean());
  }
  return curve;
}

// What an "N ranks train what one process trains" test (tp, cp) compares between its
// distributed harness and the one-process harness over the same global batch.
struct OneProcessComparison {
  double gradient_difference = 0;  // first step: max |difference| / max |reference| per tensor
  std::string worst_gradient;      // the parameter where that is largest
  Curve got, want;                 // the losses of every step, the first included
  double loss_difference = 0;      // max relative difference of a step's loss
};

// Checks that both harnesses start from the same weights, runs the first step and compares
// its gradients, then runs steps 1..steps and compares the loss curves.
inline OneProcessComparison compare_with_one_process(Harness& distributed, Harness& reference,
                                                     int steps) {
  OneProcessComparison c;
  if (!same_bits(distributed.all_weights(), reference.all_weights())) {
    ADD_FAILURE() << "the shards must start from the one-process model's values";
    c.gradient_difference = c.loss_difference = std::numeric_limits<double>::quiet_NaN();
    return c;
  }
  const Curve first_got = run_steps(distributed, 0, 1);
  const Curve first_want = run_steps(reference, 0, 1);
  c.gradient_difference =
      max_tensor_difference(reference.model().full_trainable_layout(), distributed.all_gradients(),
                            reference.all_gradients(), c.worst_gradient);
  c.got = run_steps(distributed, 1, steps);
  c.want = run_steps(reference, 1, steps);
  c.got.losses.insert(c.got.losses.begin(), first_got.losses.front());
  c.want.losses.insert(c.want.losses.begin(), first_want.losses.front());
  c.loss_difference = max_relative_difference(c.got.losses, c.want.losses);
  EXPECT_GT(std::abs(c.want.losses.front() - c.want.losses.back()), 1e-3) << "the run must learn";
  return c;
}

// Expects the bytes the backend measured after setup to equal, category by category, what
// planned_rank_memory predicts for this rank without allocating.
inline void expect_planned_memory(Harness& harness, const RunSpec& spec) {
  const MemorySnapshot measured = harness.engine().memory();
  const PlannedMemory planned = planned_rank_memory(
      spec.config(), harness.options(), spec.parallel_settings(), harness.mesh().world().size(),
      spec.grad_accum, harness.mesh().data_rank());
  const MemoryByCategory predicted = planned.by_category();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    EXPECT_EQ(predicted[static_cast<size_t>(c)], measured.current[static_cast<size_t>(c)])
        << kMemoryCategoryNames[static_cast<size_t>(c)];
  }
  const MemorySnapshot host = harness.engine().host_memory();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    EXPECT_EQ(planned.host[static_cast<size_t>(c)], host.current[static_cast<size_t>(c)])
        << "host " << kMemoryCategoryNames[static_cast<size_t>(c)];
  }
}

// Returns the payload bytes planned_step_collectives predicts for one step, by axis.
inline MeshTraffic planned_traffic(const Harness& harness, const RunSpec& spec,
                                   bool* estimates = nullptr) {
  MeshTraffic t;
  const int64_t rows = int64_t{spec.micro_batch} * spec.seq / spec.cp;
  for (const PlannedCollective& c : planned_step_collectives(
           spec.config(), harness.options(), spec.parallel_settings(),
           harness.mesh().world().size(), spec.grad_accum, rows)) {
    const std::string axis = c.axis;
    int64_t* slot = axis == "tp"     ? &t.tp
                    : axis == "cp"   ? &t.cp
                    : axis == "data" ? &t.data
                    : axis == "dp"   ? &t.dp
                                     : &t.fsdp;
    *slot += c.payload_bytes;
    if (estimates != nullptr && c.estimate) *estimates = true;
  }
  return t;
}

}  // namespace anvil::ptest
