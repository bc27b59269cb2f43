// Ring attention over the cp ranks (see context_parallel.h for the layout). Forward: the
// key/value block of every rank visits every rank once (cp - 1 hops, each started before the
// held block is computed, so the transfer overlaps the work); each (query half, key half)
// pair that the mask does not hide entirely is one attention call at its absolute offsets,
// and the partial outputs are merged with their logsumexps in f32. Backward: the same walk,
// each block's gradients computed from the FINAL merged out and lse; dQ accumulates locally,
// while a dK/dV accumulator follows the key/value block one step behind (it can be sent only
// after the block's work) and reaches its owner after cp hops. Key/value blocks always travel
// whole: under the causal layout every block holds a chunk some local chunk sees, and the
// pairs that are hidden are skipped in compute only.
#include "model/context_parallel.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

// Carves consecutive views out of one Buffer.
class Carver {
 public:
  Carver(const Buffer& buffer, DType dtype)
      : whole_(buffer.as(dtype, Shape{static_cast<int64_t>(buffer.bytes() / dtype_size(dtype))})) {}
  Tensor take(Shape shape) {
    const Tensor t = whole_.flat(used_, shape.numel()).view(shape);
    used_ += shape.numel();
    return t;
  }

 private:
  Tensor whole_;
  int64_t used_ = 0;
};

Buffer buffer_of(Backend& backend, int64_t elements, DType dtype, MemoryCategory category) {
  return Buffer(backend, static_cast<size_t>(elements) * dtype_size(dtype), category);
}

// Shapes of one call: rows per sample (local), half of them, heads and head width.
struct RingDims {
  int64_t batch, local_seq, half, q_heads, kv_heads, head_dim;
  int64_t q_row() const { return q_heads * head_dim; }
  int64_t kv_row() const { return kv_heads * head_dim; }
  Shape q_half() const { return Shape{batch, half, q_heads, head_dim}; }
  Shape kv_half() const { return Shape{batch, half, kv_heads, head_dim}; }
  Shape kv_all() const { return Shape{batch, local_seq, kv_heads, head_dim}; }
  Shape lse_half() const { return Shape{batch, q_heads, half}; }
};

RingDims ring_dims(const Tensor& q, const Tensor& k) {
  ANVIL_CHECK(q.shape.rank() == 4 && k.shape.rank() == 4 && q.shape[1] % 2 == 0,
              "[parallel] ring attention takes (B, T/cp, H, D) tensors with an even T/cp, got "
              "q {} and k {}",
              q.shape.str(), k.shape.str());
  return RingDims{q.shape[0], q.shape[1], q.shape[1] / 2, q.shape[2], k.shape[2], q.shape[3]};
}

// Returns rows [half * c, (half + 1) * c) of every sample of x (B, T/cp, H, D) as (B, c, H, D):
// a view when B is 1, else copied into `staging`.
Tensor half_rows(Backend& backend, const Tensor& x, int half, const Tensor& staging) {
  const int64_t batch = x.shape[0], seq = x.shape[1], c = seq / 2;
  const int64_t row = x.shape[2] * x.shape[3];
  const Shape shape{batch, c, x.shape[2], x.shape[3]};
  if (batch == 1) return x.flat(half * c * row, c * row).view(shape);
  for (int64_t b = 0; b < batch; ++b)
    backend.copy(staging.flat(b * c * row, c * row), x.flat((b * seq + half * c) * row, c * row));
  return staging.view(shape);
}

// x's rows of half `half` op= part (B, c, H, D): op is "=" (copy or cast to x's dtype) or
// "+=" (axpy, any dtypes).
enum class Put { assign, add };
void put_half_rows(Backend& backend, const Tensor& part, int half, const Tensor& x, Put put) {
  const int64_t batch = x.shape[0], seq = x.shape[1], c = seq / 2;
  const int64_t row = x.shape[2] * x.shape[3];
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor from = part.flat(b * c * row, c * row);
    const Tensor to = x.flat((b * seq + half * c) * row, c * row);
    if (put == Put::add) {
      backend.axpy(1.0f, from, to);
    } else if (from.dtype == to.dtype) {
      backend.copy(to, from);
    } else {
      backend.cast(from, to);
    }
  }
}

// Returns (key, value) views of slot `slot` of the key/value ring buffers.
std::vector<Tensor> kv_slot(const ContextParallelScratch& scratch, int slot, const RingDims& d,
                            DType dtype) {
  Carver carve(scratch.kv[slot], dtype);
  return {carve.take(d.kv_all()), carve.take(d.kv_all())};
}

std::vector<Tensor> grad_slot(const Buffer& buffer, const RingDims& d) {
  Carver carve(buffer, DType::f32);
  return {carve.take(d.kv_all()), carve.take(d.kv_all())};
}

// Returns `base` for the block of queries at [q_begin, ...) and keys at [k_begin, ...).
AttentionParams block_params(const AttentionParams& base, int64_t q_begin, int64_t k_begin) {
  AttentionParams params = base;
  params.q_offset = static_cast<int>(q_begin);
  params.k_offset = static_cast<int>(k_begin);
  return params;
}

// Staging views of the per-half inputs, carved in the same order by forward and backward.
struct HalfStaging {
  Tensor q[2], dout[2], out[2], k, v;
};

HalfStaging half_staging(const ContextParallelScratch& scratch, const RingDims& d, DType dtype) {
  Carver carve(scratch.chunks, dtype);
  HalfStaging s;
  for (Tensor& t : s.q) t = carve.take(d.q_half());
  for (Tensor& t : s.dout) t = carve.take(d.q_half());
  for (Tensor& t : s.out) t = carve.take(d.q_half());
  s.k = carve.take(d.kv_half());
  s.v = carve.take(d.kv_half());
  return s;
}

// One (query half, key half) pair of a ring step that the mask may show: the query half `qh`
// of this rank against the key half `kh` of the held block, whose rows are `keys`/`values`.
struct RingPair {
  int qh = 0;
  int kh = 0;
  Tensor keys, values;
  AttentionParams block;  // the pair's absolute offsets
};

// What a ring walk does besides moving the key/value blocks: before a step's pairs, at each
// visible pair, and after the step's pairs (before the travelling block is awaited).
struct RingVisitor {
  std::function<void(int step)> begin_step = [](int) {};
  std::function<void(const RingPair& pair)> visit;
  std::function<void(int step)> end_step = [](int) {};
};

// Walks the ring, the structure forward and backward share: at step s the block of rank
// (rank - s) is held (this rank's own at step 0), the next one travels in while the held one
// is used, every pair the mask may show is visited once, and transfers are advanced after
// each pair (`progress_extra` advances the caller's own, e.g. the gradient accumulator's).
void walk_ring(Backend& backend, const ContextParallel& cp, ContextParallelScratch& scratch,
               const RingDims& d, HalfStaging& stage, const Tensor& k, const Tensor& v,
               const AttentionParams& params, const RingVisitor& visitor,
               const std::function<void()>& progress_extra) {
  const int ranks = cp.size;
  std::vector<Tensor> held = {k, v};
  for (int step = 0; step < ranks; ++step) {
    const ContextParallel source_rank{ranks, (cp.rank - step + ranks) % ranks, nullptr};
    std::vector<Tensor> arriving;
    std::unique_ptr<RingExchange> exchange;
    if (step + 1 < ranks) {
      arriving = kv_slot(scratch, step % 2, d, k.dtype);
      exchange = cp.ops->ring_shift(held, arriving);
    }
    visitor.begin_step(step);
    for (int kh = 0; kh < 2; ++kh) {
      const int64_t k_begin = int64_t{source_rank.chunk_of_half(kh)} * d.half;
      RingPair pair;
      pair.kh = kh;
      for (int qh = 0; qh < 2; ++qh) {
        const int64_t q_begin = int64_t{cp.chunk_of_half(qh)} * d.half;
        if (!cp_block_may_be_visible(params, q_begin, k_begin, d.half)) continue;
        if (!pair.keys.defined()) {
          pair.keys = half_rows(backend, held[0], kh, stage.k);
          pair.values = half_rows(backend, held[1], kh, stage.v);
        }
        pair.qh = qh;
        pair.block = block_params(params, q_begin, k_begin);
        visitor.visit(pair);
        if (exchange) exchange->progress();
        progress_extra();
      }
    }
    visitor.end_step(step);
    if (exchange) {
      exchange->wait();
      held = arriving;
    }
  }
}

void check_ring(const ContextParallel& cp, const ContextParallelScratch& scratch,
                const RingDims& d) {
  ANVIL_CHECK(cp.enabled() && cp.ops != nullptr,
              "[parallel] ring attention needs cp > 1 and the ring exchange (ModelOptions::cp)");
  const size_t needed = static_cast<size_t>(d.batch * d.local_seq * d.kv_row()) * sizeof(float) * 2;
  ANVIL_CHECK(scratch.grad_kv[0].bytes() >= needed,
              "[parallel] ring attention buffers hold {} bytes per block but (B, T/cp) = ({}, {}) "
              "needs {}",
              scratch.grad_kv[0].bytes(), d.batch, d.local_seq, needed);
}

}  // namespace

void check_cp_seq_len(int64_t seq_len, int cp) {
  ANVIL_CHECK(cp >= 1, "[parallel] cp must be at least 1, got {}", cp);
  ANVIL_CHECK(seq_len % (2 * int64_t{cp}) == 0,
              "[parallel] seq_len {} is not divisible by 2 x cp = {}: context parallelism cuts "
              "each sequence into 2 x cp chunks of equal length",
              seq_len, 2 * cp);
}

int64_t cp_global_position(const ContextParallel& cp, int64_t local_t, int64_t local_seq) {
  const int64_t c = local_seq / 2;
  const int half = local_t < c ? 0 : 1;
  return int64_t{cp.chunk_of_half(half)} * c + (local_t - half * c);
}

namespace {

// Copies this rank's rows of full (B, T) into local (B, T / cp), both host memory.
template <typename T>
void take_local_rows(const ContextParallel& cp, const Tensor& full, std::vector<T>& local,
                     Tensor& view) {
  ANVIL_CHECK(full.device.is_cpu() && full.shape.rank() == 2,
              "[parallel] context parallelism slices host (B, T) batches, got {} on another device "
              "or of another rank",
              full.shape.str());
  const int64_t batch = full.shape[0], seq = full.shape[1];
  check_cp_seq_len(seq, cp.size);
  const int64_t local_seq = seq / cp.size, c = local_seq / 2;
  local.resize(static_cast<size_t>(batch * local_seq));
  const T* from = static_cast<const T*>(full.data);
  for (int64_t b = 0; b < batch; ++b) {
    for (int half = 0; half < 2; ++half) {
      const T* chunk = from + b * seq + int64_t{cp.chunk_of_half(half)} * c;
      std::copy(chunk, chunk + c, local.begin() + b * local_seq + half * c);
    }
  }
  view = Tensor(local.data(), full.dtype, Shape{batch, local_seq});
}

}  // namespace

Batch cp_local_batch(const ContextParallel& cp, const Batch& full, CpLocalBatch& storage) {
  take_local_rows(cp, full.tokens, storage.tokens, storage.tokens_view);
  take_local_rows(cp, full.targets, storage.targets, storage.targets_view);
  Batch local{storage.tokens_view, storage.targets_view, nullptr, full.doc_ids};
  if (full.loss_mask != nullptr) {
    take_local_rows(cp, *full.loss_mask, storage.loss_mask, storage.loss_mask_view);
    local.loss_mask = &storage.loss_mask_view;
  }
  return local;
}

bool cp_block_may_be_visible(const AttentionParams& params, int64_t q_begin, int64_t k_begin,
                             int64_t length) {
  const int64_t q_last = q_begin + length - 1, k_last = k_begin + length - 1;
  if (params.causal && k_begin > q_last) return false;  // every key is in every query's future
  // Sink keys are seen whatever the window and pattern say (backend/attention_mask.h).
  if (k_begin < params.sinks || params.window <= 0) return true;
  // A query at t sees keys with |t - s| < window: every key is out of every query's reach.
  return k_last > q_begin - params.window && k_begin < q_last + params.window;
}

namespace {

// Element counts of the scratch buffers (ContextParallelScratch's members, in order).
struct ScratchElements {
  int64_t kv, grad_kv, grad_kv_step, chunks, partial, partial_f32, partial_lse, accum, doc_ids;
};

ScratchElements scratch_elements(const LlamaConfig& shard_config, int cp, int max_batch,
                                 int64_t max_local_seq) {
  const int64_t head_dim = shard_config.resolved_head_dim();
  const int64_t q_row = int64_t{shard_config.n_heads} * head_dim;
  const int64_t kv_row = int64_t{shard_config.n_kv_heads} * head_dim;
  const int64_t rows = int64_t{max_batch} * max_local_seq, half_rows = rows / 2;
  return {2 * rows * kv_row,
          2 * rows * kv_row,
          2 * rows * kv_row,
          half_rows * (6 * q_row + 2 * kv_row),
          half_rows * (q_row + 2 * kv_row),
          half_rows * q_row,
          half_rows * shard_config.n_heads,
          2 * half_rows * q_row,
          rows * cp};
}

}  // namespace

ContextParallelScratch::ContextParallelScratch(Backend& backend, const LlamaConfig& shard_config,
                                               int cp, int max_batch, int64_t max_local_seq,
                                               DType compute_dtype) {
  const ScratchElements e = scratch_elements(shard_config, cp, max_batch, max_local_seq);
  // The blocks that travel the ring are communication buffers; the rest is workspace.
  constexpr MemoryCategory comm = MemoryCategory::communication;
  constexpr MemoryCategory work = MemoryCategory::workspace;
  for (Buffer& b : kv) b = buffer_of(backend, e.kv, compute_dtype, comm);
  for (Buffer& b : grad_kv) b = buffer_of(backend, e.grad_kv, DType::f32, comm);
  grad_kv_step = buffer_of(backend, e.grad_kv_step, DType::f32, work);
  chunks = buffer_of(backend, e.chunks, compute_dtype, work);
  partial = buffer_of(backend, e.partial, compute_dtype, work);
  partial_f32 = buffer_of(backend, e.partial_f32, DType::f32, work);
  partial_lse = buffer_of(backend, e.partial_lse, DType::f32, work);
  accum = buffer_of(backend, e.accum, DType::f32, work);
  doc_ids = buffer_of(backend, e.doc_ids, DType::i32, work);
}

ContextParallelScratch::Bytes ContextParallelScratch::planned_bytes(
    const LlamaConfig& shard_config, int cp, int max_batch, int64_t max_local_seq,
    DType compute_dtype) {
  const ScratchElements e = scratch_elements(shard_config, cp, max_batch, max_local_seq);
  const size_t compute = dtype_size(compute_dtype), f32 = sizeof(float);
  Bytes bytes;
  bytes.communication = static_cast<size_t>(2 * e.kv) * compute +
                        static_cast<size_t>(2 * e.grad_kv) * f32;
  bytes.workspace =
      static_cast<size_t>(e.chunks + e.partial) * compute +
      static_cast<size_t>(e.grad_kv_step + e.partial_f32 + e.partial_lse + e.accum) * f32 +
      static_cast<size_t>(e.doc_ids) * dtype_size(DType::i32);
  return bytes;
}

ContextParallelScratch::Bytes ContextParallelScratch::bytes() const {
  Bytes bytes;
  bytes.workspace = grad_kv_step.bytes() + chunks.bytes() + partial.bytes() +
                    partial_f32.bytes() + partial_lse.bytes() + accum.bytes() + doc_ids.bytes();
  for (const Buffer& b : kv) bytes.communication += b.bytes();
  for (const Buffer& b : grad_kv) bytes.communication += b.bytes();
  return bytes;
}

void cp_attention_forward(Backend& backend, const ContextParallel& cp,
                          ContextParallelScratch& scratch, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse,
                          const AttentionParams& params) {
  const RingDims d = ring_dims(q, k);
  check_ring(cp, scratch, d);
  const DType dtype = q.dtype;
  HalfStaging stage = half_staging(scratch, d, dtype);
  Carver accum(scratch.accum, DType::f32);
  Tensor merged_out[2], merged_lse[2], queries[2];
  for (int h = 0; h < 2; ++h) {
    merged_out[h] = accum.take(d.q_half());
    merged_lse[h] = lse.flat(h * d.batch * d.q_heads * d.half, d.batch * d.q_heads * d.half)
                        .view(d.lse_half());
    queries[h] = half_rows(backend, q, h, stage.q[h]);
  }
  const Tensor part_out = Carver(scratch.partial, dtype).take(d.q_half());
  const Tensor part_wide =
      dtype == DType::f32 ? part_out : Carver(scratch.partial_f32, DType::f32).take(d.q_half());
  const Tensor part_lse = Carver(scratch.partial_lse, DType::f32).take(d.lse_half());
  bool started[2] = {false, false};
  RingVisitor visitor;
  visitor.visit = [&](const RingPair& pair) {
    const int qh = pair.qh;
    if (!started[qh]) {
      // The first block of a half writes the running lse directly.
      backend.attention_forward(queries[qh], pair.keys, pair.values, part_out, merged_lse[qh],
                                pair.block);
      if (dtype == DType::f32) {
        backend.copy(merged_out[qh], part_out);
      } else {
        backend.cast(part_out, merged_out[qh]);
      }
      started[qh] = true;
      return;
    }
    backend.attention_forward(queries[qh], pair.keys, pair.values, part_out, part_lse,
                              pair.block);
    if (dtype != DType::f32) backend.cast(part_out, part_wide);
    backend.attention_merge(merged_out[qh], merged_lse[qh], part_wide, part_lse);
  };
  walk_ring(backend, cp, scratch, d, stage, k, v, params, visitor, [] {});
  for (int h = 0; h < 2; ++h) {
    ANVIL_CHECK(started[h], "[parallel] ring attention: local half {} saw no key block", h);
    put_half_rows(backend, merged_out[h], h, out, Put::assign);
  }
}

void cp_attention_backward(Backend& backend, const ContextParallel& cp,
                           ContextParallelScratch& scratch, const Tensor& dout, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           const AttentionParams& params) {
  const RingDims d = ring_dims(q, k);
  check_ring(cp, scratch, d);
  const DType dtype = q.dtype;
  const int ranks = cp.size;
  HalfStaging stage = half_staging(scratch, d, dtype);
  Carver accum(scratch.accum, DType::f32);
  Tensor dq_sum[2], queries[2], grads[2], outs[2], lses[2];
  for (int h = 0; h < 2; ++h) {
    dq_sum[h] = accum.take(d.q_half());
    backend.fill_zero(dq_sum[h]);
    queries[h] = half_rows(backend, q, h, stage.q[h]);
    grads[h] = half_rows(backend, dout, h, stage.dout[h]);
    outs[h] = half_rows(backend, out, h, stage.out[h]);
    lses[h] = lse.flat(h * d.batch * d.q_heads * d.half, d.batch * d.q_heads * d.half)
                  .view(d.lse_half());
  }
  Carver partial(scratch.partial, dtype);
  const Tensor dq_part = partial.take(d.q_half());
  const Tensor dk_part = partial.take(d.kv_half());
  const Tensor dv_part = partial.take(d.kv_half());
  const std::vector<Tensor> step_grad = grad_slot(scratch.grad_kv_step, d);

  std::unique_ptr<RingExchange> grad_exchange;  // the held block's accumulator arriving
  std::vector<Tensor> accumulator, contribution;
  RingVisitor visitor;
  visitor.begin_step = [&](int step) {
    // Step 0's block is this rank's own: nothing has accumulated for it elsewhere yet, so its
    // contribution goes straight into the accumulator that starts travelling.
    accumulator = grad_slot(scratch.grad_kv[step % 2], d);
    contribution = step == 0 ? accumulator : step_grad;
    backend.fill_zero(contribution[0]);
    backend.fill_zero(contribution[1]);
  };
  visitor.visit = [&](const RingPair& pair) {
    backend.attention_backward(grads[pair.qh], queries[pair.qh], pair.keys, pair.values,
                               outs[pair.qh], lses[pair.qh], dq_part, dk_part, dv_part,
                               pair.block);
    backend.axpy(1.0f, dq_part, dq_sum[pair.qh]);
    put_half_rows(backend, dk_part, pair.kh, contribution[0], Put::add);
    put_half_rows(backend, dv_part, pair.kh, contribution[1], Put::add);
  };
  visitor.end_step = [&](int step) {
    if (step > 0) {
      grad_exchange->wait();  // the accumulator has arrived and the previous one has left
      backend.add(accumulator[0], step_grad[0], accumulator[0]);
      backend.add(accumulator[1], step_grad[1], accumulator[1]);
    }
    // Pass the accumulator on; after the last step what arrives is this rank's own block's.
    grad_exchange =
        cp.ops->ring_shift(accumulator, grad_slot(scratch.grad_kv[(step + 1) % 2], d));
  };
  walk_ring(backend, cp, scratch, d, stage, k, v, params, visitor, [&] {
    if (grad_exchange) grad_exchange->progress();
  });
  grad_exchange->wait();
  const std::vector<Tensor> total = grad_slot(scratch.grad_kv[ranks % 2], d);
  for (int h = 0; h < 2; ++h) put_half_rows(backend, dq_sum[h], h, dq, Put::assign);
  for (int which = 0; which < 2; ++which) {
    const Tensor& target = which == 0 ? dk : dv;
    if (target.dtype == DType::f32) {
      backend.copy(target, total[which]);
    } else {
      backend.cast(total[which], target);
    }
  }
}

}  // namespace anvil
