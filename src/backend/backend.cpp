// The public ops of Backend: each checks its arguments once, for every backend, and then calls
// the backend's kernel. The messages are the interface's ("[rmsnorm] weight has shape (5),
// expected (8)"), so a bad call fails alike on the CPU, the simulator and an accelerator, and
// a port writes kernels only. Checks here read shapes, dtypes and devices; they read tensor
// data (ids, targets) only where the host can: on a host backend. A device backend's caller
// checks its ids and targets on the host before uploading them (op_rules.h), so no op blocks
// the host to validate. Device backends count the host's blocking waits (host_waits()).
#include "backend/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "backend/op_rules.h"
#include "backend/worker_stream.h"
#include "core/error.h"
#include "core/trace.h"

namespace anvil {
namespace {

// The activation dtypes every op accepts, and with f16 for a backend that has f16 kernels
// (Backend::supports_compute_dtype).
constexpr std::initializer_list<DType> kActivationDtypes = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kActivationDtypesWithF16 = {DType::f32, DType::bf16,
                                                                   DType::f16};
// The float storage dtypes that elementwise ops, casts and reductions accept.
constexpr std::initializer_list<DType> kFloatDtypes = {DType::f32, DType::bf16, DType::f16};

std::string device_name(const Device& d) {
  switch (d.type) {
    case DeviceType::cpu: return "the host";
    case DeviceType::cuda: return fmt::format("cuda:{}", d.index);
    case DeviceType::sim: return fmt::format("sim:{}", d.index);
  }
  return "an unknown device";
}

// The checks of one op call: every tensor must live on the backend's device.
class OpChecks {
 public:
  OpChecks(const Backend& backend, const char* op) : backend_(backend), op_(op) {}

  // Throws unless t lives on the backend's device and has data (or no elements).
  void placed(const Tensor& t, const char* what) const {
    const Device device = backend_.device();
    ANVIL_CHECK(t.device.type == device.type,
                "[{}] {} lives on {}; the {} backend takes {} tensors only", op_, what,
                device_name(t.device), backend_.name(),
                device.is_cpu() ? std::string("host") : device_name(device));
    ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[{}] {} has no data", op_, what);
  }
  // Does placed() and requires one of the dtypes.
  void tensor(const Tensor& t, const char* what, std::initializer_list<DType> dtypes) const {
    placed(t, what);
    for (DType d : dtypes)
      if (d == t.dtype) return;
    // Only a failing check builds the list: ops run this on every call of a training step.
    std::string choices;
    for (DType d : dtypes) choices += (choices.empty() ? "" : " or ") + std::string(dtype_name(d));
    ANVIL_FAIL("[{}] {} has dtype {}, expected {}", op_, what, dtype_name(t.dtype), choices);
  }
  // Does tensor() and requires the exact shape.
  void tensor(const Tensor& t, const char* what, std::initializer_list<DType> dtypes,
              const Shape& shape) const {
    tensor(t, what, dtypes);
    ANVIL_CHECK(t.shape == shape, "[{}] {} has shape {}, expected {}", op_, what, t.shape.str(),
                shape.str());
  }
  void rank(const Tensor& t, const char* what, int rank) const {
    ANVIL_CHECK(t.shape.rank() == rank, "[{}] {} must have rank {}, got shape {}", op_, what,
                rank, t.shape.str());
  }
  void begin(int64_t begin) const {
    ANVIL_CHECK(begin >= 0, "[{}] begin must be >= 0, got {}", op_, begin);
  }
  const char* op() const { return op_; }
  // Returns the activation dtypes this backend's kernels run.
  std::initializer_list<DType> activations() const {
    return backend_.supports_compute_dtype(DType::f16) ? kActivationDtypesWithF16
                                                       : kActivationDtypes;
  }

 private:
  const Backend& backend_;
  const char* op_;
};

// Checks ids (N) i32 and a table (V, C).
void check_ids_and_table(const OpChecks& c, const Tensor& ids, const Tensor& table,
                         const char* table_name, std::initializer_list<DType> table_dtypes) {
  c.tensor(ids, "ids", {DType::i32});
  c.rank(ids, "ids", 1);
  c.tensor(table, table_name, table_dtypes);
  c.rank(table, table_name, 2);
}

// The checks rope_forward and rope_backward share.
void check_rope(const OpChecks& c, const Tensor& in, const char* in_name, const Tensor& out,
                const char* out_name, const Tensor& positions) {
  c.tensor(in, in_name, c.activations());
  c.rank(in, in_name, 4);
  c.tensor(out, out_name, c.activations(), in.shape);
  c.tensor(positions, "positions", {DType::i32}, Shape{in.shape[0], in.shape[1]});
  ANVIL_CHECK(in.shape[3] % 2 == 0, "[{}] head_dim must be even, got {}", c.op(), in.shape[3]);
}

// The checks attention_forward and attention_backward share.
void check_attention(const OpChecks& c, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& out, const Tensor& lse, const AttentionParams& params) {
  const char* op = c.op();
  c.tensor(q, "q", c.activations());
  c.rank(q, "q", 4);
  c.tensor(k, "k", c.activations());
  c.rank(k, "k", 4);
  const int64_t B = q.shape[0], Tq = q.shape[1], Tk = k.shape[1], Hq = q.shape[2],
                Hkv = k.shape[2], D = q.shape[3];
  ANVIL_CHECK(Hkv > 0 && Hq % Hkv == 0, "[{}] query heads ({}) must be a multiple of kv heads ({})",
              op, Hq, Hkv);
  const Shape kv_shape{B, Tk, Hkv, D};
  c.tensor(k, "k", c.activations(), kv_shape);
  c.tensor(v, "v", c.activations(), kv_shape);
  c.tensor(out, "out", c.activations(), q.shape);
  c.tensor(lse, "lse", {DType::f32}, Shape{B, Hq, Tq});
  ANVIL_CHECK(params.q_offset >= 0 && params.k_offset >= 0,
              "[{}] q_offset and k_offset must be >= 0, got {} and {}", op, params.q_offset,
              params.k_offset);
  ANVIL_CHECK(params.window >= 0, "[{}] window must be >= 0, got {}", op, params.window);
  ANVIL_CHECK(params.sinks >= 0, "[{}] sinks must be >= 0, got {}", op, params.sinks);
  if (params.pattern != SparsePattern::dense)
    ANVIL_CHECK(params.segment > 0, "[{}] a sparse pattern needs a segment length > 0, got {}",
                op, params.segment);
  if (params.pattern == SparsePattern::strided)
    ANVIL_CHECK(params.stride > 0, "[{}] the strided pattern needs a stride > 0, got {}", op,
                params.stride);
  if (!params.doc_ids) return;
  const Tensor& doc = *params.doc_ids;
  c.tensor(doc, "doc_ids", {DType::i32});
  const int64_t needed = std::max<int64_t>(params.q_offset + Tq, params.k_offset + Tk);
  ANVIL_CHECK(doc.shape.rank() == 2 && doc.shape[0] == B && doc.shape[1] >= needed,
              "[{}] doc_ids must be i32 (B = {}, L >= {}) to cover every position, got {} {}",
              op, B, needed, dtype_name(doc.dtype), doc.shape.str());
}

// The checks rmsnorm_forward and add_rmsnorm_forward share (x is the normalised input).
void check_rmsnorm_forward(const OpChecks& c, const Tensor& x, const Tensor& weight,
                           const Tensor& out, const Tensor& rstd) {
  c.tensor(x, "x", c.activations());
  c.rank(x, "x", 2);
  const int64_t N = x.shape[0], C = x.shape[1];
  c.tensor(weight, "weight", c.activations(), Shape{C});
  c.tensor(out, "out", c.activations(), Shape{N, C});
  c.tensor(rstd, "rstd", {DType::f32}, Shape{N});
  ANVIL_CHECK(C > 0, "[{}] rows must not be empty", c.op());
}

// The checks of cross_entropy and cross_entropy_shard_backward's logits, targets and mask;
// returns N.
int64_t check_logits(const OpChecks& c, const Tensor& logits, const Tensor& targets,
                     const Tensor* loss_mask) {
  c.tensor(logits, "logits", c.activations());
  c.rank(logits, "logits", 2);
  const int64_t N = logits.shape[0];
  c.tensor(targets, "targets", {DType::i32}, Shape{N});
  if (loss_mask) c.tensor(*loss_mask, "loss_mask", {DType::f32}, Shape{N});
  return N;
}

}  // namespace

void Backend::copy_from_host(const Tensor& dst, const void* src) {
  OpChecks(*this, "copy_from_host").placed(dst, "dst");
  if (dst.nbytes() > 0) copy_from_host_kernel(dst, src);
}

void Backend::copy_to_host(void* dst, const Tensor& src) {
  OpChecks(*this, "copy_to_host").placed(src, "src");
  if (src.nbytes() == 0) return;
  if (!device().is_cpu()) count_host_wait(static_cast<int64_t>(src.nbytes()));
  copy_to_host_kernel(dst, src);
}

std::unique_ptr<Event> Backend::record_event() {
  synchronize();
  return FlagEvent::completed();
}

namespace {

// A timing event stamped when it was made.
class StampedEvent final : public TimingEvent {
 public:
  explicit StampedEvent(int64_t time_ns) : time_ns_(time_ns) {}
  int64_t device_time_ns() override { return time_ns_; }

 private:
  int64_t time_ns_;
};

}  // namespace

std::unique_ptr<TimingEvent> Backend::record_timing_event() {
  return std::make_unique<StampedEvent>(TraceRecorder::now_ns());
}

std::unique_ptr<Stream> Backend::create_stream() { return std::make_unique<WorkerStream>(*this); }

void* Backend::host_address(const void* device_ptr) const {
  ANVIL_CHECK(device().is_cpu(), "[{}] device memory has no host address", name());
  return const_cast<void*>(device_ptr);
}

Tensor Backend::host_view(const Tensor& t) const {
  if (t.device.is_cpu()) return t;
  ANVIL_CHECK(t.device == device(), "[{}] host_view of a tensor on another device", name());
  return Tensor(host_address(t.data), t.dtype, t.shape, Device{});
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  const OpChecks c(*this, "copy");
  c.placed(dst, "dst");
  c.placed(src, "src");
  ANVIL_CHECK(dst.nbytes() == src.nbytes(), "[copy] dst has {} bytes but src has {}",
              dst.nbytes(), src.nbytes());
  if (dst.nbytes() > 0) copy_kernel(dst, src);
}

void Backend::fill_zero(const Tensor& t) {
  OpChecks(*this, "fill_zero").placed(t, "tensor");
  if (t.nbytes() > 0) fill_zero_kernel(t);
}

void Backend::matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                     bool transpose_b, float alpha, float beta) {
  const OpChecks checks(*this, "matmul");
  checks.tensor(a, "a", checks.activations());
  checks.tensor(b, "b", checks.activations());
  checks.tensor(c, "c", checks.activations());
  ANVIL_CHECK(a.dtype == b.dtype, "[matmul] a is {} but b is {}; they must share a dtype",
              dtype_name(a.dtype), dtype_name(b.dtype));
  const int rank = a.shape.rank();
  ANVIL_CHECK(rank == 2 || rank == 3, "[matmul] a must have rank 2 or 3, got shape {}",
              a.shape.str());
  ANVIL_CHECK(b.shape.rank() == 2 || b.shape.rank() == rank,
              "[matmul] b must have rank 2 or the rank of a ({}), got shape {}", rank,
              b.shape.str());
  const int64_t batches = rank == 3 ? a.shape[0] : 1;
  if (b.shape.rank() == 3)
    ANVIL_CHECK(b.shape[0] == batches, "[matmul] a has {} batches but b has {}", batches,
                b.shape[0]);
  const int64_t M = transpose_a ? a.shape.back(0) : a.shape.back(1);
  const int64_t K = transpose_a ? a.shape.back(1) : a.shape.back(0);
  const int64_t K_b = transpose_b ? b.shape.back(0) : b.shape.back(1);
  const int64_t N = transpose_b ? b.shape.back(1) : b.shape.back(0);
  ANVIL_CHECK(K == K_b, "[matmul] inner dimensions differ: op(a) is ({}, {}) and op(b) is ({}, {})",
              M, K, K_b, N);
  const Shape c_shape = rank == 3 ? Shape{batches, M, N} : Shape{M, N};
  ANVIL_CHECK(c.shape == c_shape, "[matmul] c has shape {}, expected {}", c.shape.str(),
              c_shape.str());
  matmul_kernel(a, b, c, transpose_a, transpose_b, alpha, beta);
}

void Backend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const OpChecks c(*this, "embedding");
  check_ids_and_table(c, ids, table, "table", c.activations());
  c.tensor(out, "out", c.activations(), Shape{ids.shape[0], table.shape[1]});
  if (device().is_cpu()) check_token_ids("embedding", ids.i32(), ids.numel(), table.shape[0]);
  embedding_forward_kernel(ids, table, out);
}

void Backend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const OpChecks c(*this, "embedding_backward");
  check_ids_and_table(c, ids, dtable, "dtable", {DType::f32});
  c.tensor(dout, "dout", c.activations(), Shape{ids.shape[0], dtable.shape[1]});
  if (device().is_cpu()) check_token_ids("embedding", ids.i32(), ids.numel(), dtable.shape[0]);
  embedding_backward_kernel(ids, dout, dtable);
}

void Backend::embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                                      int64_t begin) {
  const OpChecks c(*this, "embedding_shard");
  check_ids_and_table(c, ids, table, "table", c.activations());
  c.tensor(out, "out", c.activations(), Shape{ids.shape[0], table.shape[1]});
  c.begin(begin);
  if (device().is_cpu()) check_token_ids_not_negative(c.op(), ids.i32(), ids.numel());
  embedding_shard_forward_kernel(ids, table, out, begin);
}

void Backend::embedding_shard_backward(const Tensor& ids, const Tensor& dout,
                                       const Tensor& dtable, int64_t begin) {
  const OpChecks c(*this, "embedding_shard_backward");
  check_ids_and_table(c, ids, dtable, "dtable", {DType::f32});
  c.tensor(dout, "dout", c.activations(), Shape{ids.shape[0], dtable.shape[1]});
  c.begin(begin);
  if (device().is_cpu()) check_token_ids_not_negative(c.op(), ids.i32(), ids.numel());
  embedding_shard_backward_kernel(ids, dout, dtable, begin);
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                              const Tensor& rstd, float eps) {
  check_rmsnorm_forward(OpChecks(*this, "rmsnorm"), x, weight, out, rstd);
  rmsnorm_forward_kernel(x, weight, out, rstd, eps);
}

void Backend::add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                                  const Tensor& weight, const Tensor& out, const Tensor& rstd,
                                  float eps) {
  const OpChecks c(*this, "add_rmsnorm");
  c.tensor(a, "a", kFloatDtypes);
  c.tensor(b, "b", kFloatDtypes, a.shape);
  check_rmsnorm_forward(c, sum, weight, out, rstd);
  c.tensor(sum, "sum", kFloatDtypes, a.shape);
  add_rmsnorm_forward_kernel(a, b, sum, weight, out, rstd, eps);
}

void Backend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                               const Tensor* dx_copy) {
  const OpChecks c(*this, "rmsnorm_backward");
  c.tensor(x, "x", c.activations());
  c.rank(x, "x", 2);
  const int64_t N = x.shape[0], C = x.shape[1];
  c.tensor(dout, "dout", c.activations(), Shape{N, C});
  c.tensor(weight, "weight", c.activations(), Shape{C});
  c.tensor(rstd, "rstd", {DType::f32}, Shape{N});
  c.tensor(dx, "dx", c.activations(), Shape{N, C});
  c.tensor(dweight, "dweight", {DType::f32}, Shape{C});
  if (dx_copy) c.tensor(*dx_copy, "dx_copy", c.activations(), Shape{N, C});
  rmsnorm_backward_kernel(dout, x, weight, rstd, dx, dweight, dx_copy);
}

void Backend::rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                           const RopeParams& params) {
  check_rope(OpChecks(*this, "rope"), x, "x", out, "out", positions);
  rope_forward_kernel(x, out, positions, params);
}

void Backend::rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                            const RopeParams& params) {
  check_rope(OpChecks(*this, "rope_backward"), dout, "dout", dx, "dx", positions);
  rope_backward_kernel(dout, dx, positions, params);
}

void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse,
                                const AttentionParams& params) {
  check_attention(OpChecks(*this, "attention"), q, k, v, out, lse, params);
  attention_forward_kernel(q, k, v, out, lse, params);
}

void Backend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const AttentionParams& params) {
  const OpChecks c(*this, "attention_backward");
  check_attention(c, q, k, v, out, lse, params);
  c.tensor(dout, "dout", c.activations(), q.shape);
  c.tensor(dq, "dq", c.activations(), q.shape);
  c.tensor(dk, "dk", c.activations(), k.shape);
  c.tensor(dv, "dv", c.activations(), v.shape);
  attention_backward_kernel(dout, q, k, v, out, lse, dq, dk, dv, params);
}

void Backend::attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                              const Tensor& part_lse) {
  const OpChecks c(*this, "attention_merge");
  c.tensor(out, "out", c.activations());
  c.rank(out, "out", 4);
  c.tensor(part_out, "part_out", {out.dtype}, out.shape);
  const Shape lse_shape{out.shape[0], out.shape[2], out.shape[1]};
  c.tensor(lse, "lse", {DType::f32}, lse_shape);
  c.tensor(part_lse, "part_lse", {DType::f32}, lse_shape);
  attention_merge_kernel(out, lse, part_out, part_lse);
}

void Backend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const OpChecks c(*this, "swiglu");
  c.tensor(gate, "gate", c.activations());
  c.rank(gate, "gate", 2);
  c.tensor(up, "up", c.activations(), gate.shape);
  c.tensor(out, "out", c.activations(), gate.shape);
  swiglu_forward_kernel(gate, up, out);
}

void Backend::swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) {
  const OpChecks c(*this, "swiglu_backward");
  c.tensor(gate, "gate", c.activations());
  c.rank(gate, "gate", 2);
  c.tensor(up, "up", c.activations(), gate.shape);
  c.tensor(dout, "dout", c.activations(), gate.shape);
  c.tensor(dgate, "dgate", c.activations(), gate.shape);
  c.tensor(dup, "dup", c.activations(), gate.shape);
  swiglu_backward_kernel(dout, gate, up, dgate, dup);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const OpChecks c(*this, "add");
  c.tensor(a, "a", kFloatDtypes);
  c.tensor(b, "b", kFloatDtypes, a.shape);
  c.tensor(out, "out", kFloatDtypes, a.shape);
  add_kernel(a, b, out);
}

void Backend::scale(const Tensor& x, float alpha) {
  OpChecks(*this, "scale").tensor(x, "x", kFloatDtypes);
  scale_kernel(x, alpha);
}

void Backend::axpy(float alpha, const Tensor& x, const Tensor& y) {
  const OpChecks c(*this, "axpy");
  c.tensor(x, "x", kFloatDtypes);
  c.tensor(y, "y", kFloatDtypes, x.shape);
  axpy_kernel(alpha, x, y);
}

void Backend::cast(const Tensor& src, const Tensor& dst) {
  const OpChecks c(*this, "cast");
  c.tensor(src, "src", kFloatDtypes);
  c.tensor(dst, "dst", kFloatDtypes, src.shape);
  cast_kernel(src, dst);
}

void Backend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                            int ignore_index, const Tensor& losses, const Tensor* dlogits,
                            float grad_scale) {
  const OpChecks c(*this, "cross_entropy");
  const int64_t N = check_logits(c, logits, targets, loss_mask);
  c.tensor(losses, "losses", {DType::f32}, Shape{N});
  if (dlogits) c.tensor(*dlogits, "dlogits", c.activations(), logits.shape);
  if (device().is_cpu())
    check_targets(c.op(), targets.i32(), N, logits.shape[1], ignore_index);
  cross_entropy_kernel(logits, targets, loss_mask, ignore_index, losses, dlogits, grad_scale);
}

void Backend::cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets,
                                        int ignore_index, int64_t begin, const Tensor& stats) {
  const OpChecks c(*this, "cross_entropy_shard_stats");
  const int64_t N = check_logits(c, logits, targets, nullptr);
  c.tensor(stats, "stats", {DType::f32}, Shape{N, 3});
  c.begin(begin);
  if (device().is_cpu()) check_targets_not_negative(c.op(), targets.i32(), N, ignore_index);
  cross_entropy_shard_stats_kernel(logits, targets, ignore_index, begin, stats);
}

void Backend::cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                           const Tensor* loss_mask, int ignore_index,
                                           int64_t begin, const Tensor& lse,
                                           const Tensor& dlogits, float grad_scale) {
  const OpChecks c(*this, "cross_entropy_shard_backward");
  const int64_t N = check_logits(c, logits, targets, loss_mask);
  c.tensor(lse, "lse", {DType::f32}, Shape{N});
  c.tensor(dlogits, "dlogits", c.activations(), logits.shape);
  c.begin(begin);
  if (device().is_cpu()) check_targets_not_negative(c.op(), targets.i32(), N, ignore_index);
  cross_entropy_shard_backward_kernel(logits, targets, loss_mask, ignore_index, begin, lse,
                                      dlogits, grad_scale);
}

void Backend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWParams& params, const Tensor* param_copy) {
  AdamWTensors set{param, grad, m, v, param_copy ? *param_copy : Tensor(), params.weight_decay};
  adamw_step_many({&set, 1}, params);
}

void Backend::adamw_step_many(std::span<const AdamWTensors> sets, const AdamWParams& params) {
  const OpChecks c(*this, "adamw");
  for (const AdamWTensors& set : sets) {
    c.tensor(set.param, "param", {DType::f32});
    c.tensor(set.grad, "grad", {DType::f32});
    c.tensor(set.m, "m", {DType::f32});
    c.tensor(set.v, "v", {DType::f32});
    for (const Tensor* t : {&set.grad, &set.m, &set.v})
      ANVIL_CHECK(t->numel() == set.param.numel(),
                  "[adamw] param has {} elements but a state tensor has {}", set.param.numel(),
                  t->numel());
    if (set.param_copy.defined()) {
      c.tensor(set.param_copy, "param_copy", kFloatDtypes);
      ANVIL_CHECK(set.param_copy.numel() == set.param.numel(),
                  "[adamw] param has {} elements but param_copy has {}", set.param.numel(),
                  set.param_copy.numel());
    }
  }
  ANVIL_CHECK(params.step >= 1, "[adamw] step is 1-based, got {}", params.step);
  if (!sets.empty()) adamw_step_kernel(sets, params);
}

void Backend::dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed) {
  const OpChecks c(*this, "dropout");
  c.tensor(x, "x", c.activations());
  c.tensor(out, "out", c.activations(), x.shape);
  ANVIL_CHECK(p >= 0.0f && p < 1.0f, "[dropout] p must lie in [0, 1), got {}", p);
  dropout_kernel(x, out, p, seed);
}

void Backend::sum_to_double(const Tensor& x, const Tensor& result) {
  const OpChecks c(*this, "sum_to_double");
  c.tensor(x, "x", {DType::f32});
  c.tensor(result, "result", {DType::u32}, Shape{2});
  ANVIL_CHECK(reinterpret_cast<uintptr_t>(result.data) % alignof(double) == 0,
              "[sum_to_double] result must be 8-byte aligned (it holds a double)");
  sum_to_double_kernel(x, result);
}

double Backend::sum_squares(const Tensor& x) {
  OpChecks(*this, "sum_squares").tensor(x, "x", kFloatDtypes);
  if (!device().is_cpu()) count_host_wait(sizeof(double));
  return sum_squares_kernel(x);
}

bool Backend::all_finite(const Tensor& x) {
  OpChecks(*this, "all_finite").tensor(x, "x", kFloatDtypes);
  if (!device().is_cpu()) count_host_wait(sizeof(bool));
  return all_finite_kernel(x);
}

void Backend::accumulate_exact_squares(const Tensor& x, const Tensor& counters) {
  const OpChecks c(*this, "accumulate_exact_squares");
  c.tensor(x, "x", {DType::f32});
  c.tensor(counters, "counters", {DType::u32}, Shape{2 * kExactCounterCount});
  ANVIL_CHECK(reinterpret_cast<uintptr_t>(counters.data) % alignof(uint64_t) == 0,
              "[accumulate_exact_squares] counters must be 8-byte aligned (they are read as "
              "64-bit integers)");
  ANVIL_CHECK(x.numel() <= kExactCounterCapacity,
              "[accumulate_exact_squares] x has {} elements; the counters take at most {} "
              "between foldings",
              x.numel(), kExactCounterCapacity);
  if (x.numel() == 0) return;
  accumulate_exact_squares_kernel(x, counters);
}

}  // namespace anvil
