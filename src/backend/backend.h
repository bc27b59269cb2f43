// The Backend interface: memory plus one method per op the Llama family needs. Each public op
// is non-virtual: it checks its arguments once for every backend (backend.cpp: devices,
// dtypes, shapes, parameter ranges; one wording everywhere) and calls the protected virtual
// <op>_kernel that a backend implements, so a port writes kernels only.
// Every op takes Tensor views that live on this backend's device. Conventions:
//   - activations are row-major; "(N, C)" means N rows of C; (B, T, H, D) is batch, time,
//     heads, head_dim, i.e. exactly the output of a projection viewed per head.
//   - activation dtypes are f32, bf16 or f16 (f16 where supports_compute_dtype says so);
//     statistics, losses, logsumexp and gradients of parameters are always f32; arithmetic
//     is done in f32 whatever the storage dtype.
//   - backward outputs say whether they are overwritten (=) or accumulated (+=).
// A backend that lacks an op throws "[<name>] op <op> is not implemented"; nothing falls back.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/attention_mask.h"
#include "core/buffer.h"
#include "core/exact_square_sum.h"
#include "core/tensor.h"

namespace anvil {

// RoPE in the Hugging Face rotate-half layout: pairs (i, i + D/2) rotate by pos * inv_freq[i].
struct RopeParams {
  float theta = 10000.0f;
  // Llama 3.1 "llama3" frequency scaling; off when factor == 0.
  float scaling_factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// The attention mask and geometry of one call. Positions are absolute: query row i sits at
// position q_offset + i and key row s at k_offset + s, and every mask compares positions
// (backend/attention_mask.h has the rule).
struct AttentionParams {
  bool causal = true;
  // Sliding window: a query at t sees keys in (t - window, t]; 0 disables it.
  int window = 0;
  // Sparse segment pattern (strided or lines; dense by default), its segment length in
  // positions and the strided pattern's stride; and global sink keys [0, sinks).
  SparsePattern pattern = SparsePattern::dense;
  int segment = 0;
  int stride = 0;
  int sinks = 0;
  // Optional (B, L) i32 document ids indexed by absolute position, L >= the last query and
  // key positions + 1: queries attend only to keys of the same document.
  const Tensor* doc_ids = nullptr;
  // Score scale; 0 means 1/sqrt(head_dim).
  float scale = 0.0f;
  // Absolute position of query row 0 (new queries after the cached keys when decoding).
  int q_offset = 0;
  // Absolute position of key row 0: a block of keys from elsewhere in the sequence (context
  // parallelism's ring passes such blocks). Keys outside [k_offset, k_offset + Tk) do not
  // take part, whatever the mask says.
  int k_offset = 0;

  // Returns the position-level part of the mask.
  MaskRule mask_rule() const {
    return MaskRule{causal, window, pattern, segment, stride, sinks};
  }
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; pass 0 for tensors exempt from decay
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping, unscaling)
};

// One tensor set of a multi-tensor AdamW step (Backend::adamw_step_many): a flat f32
// parameter with its f32 gradient and moments, all (n), the weight decay that applies to it,
// and optionally a copy (bf16, f16 or f32, (n)) that receives the updated parameter.
struct AdamWTensors {
  Tensor param;
  Tensor grad;
  Tensor m;
  Tensor v;
  Tensor param_copy;  // undefined: none
  float weight_decay = 0.0f;
};

// How often the host blocked on a device backend and how many bytes it read back
// (Backend::host_waits). A host backend never waits: its ops finish before they return.
struct HostWaits {
  int64_t waits = 0;
  int64_t readback_bytes = 0;
  HostWaits operator-(const HostWaits& earlier) const {
    return {waits - earlier.waits, readback_bytes - earlier.readback_bytes};
  }
};

// Streams and events (DESIGN.md section 12): Backend objects, so engine and communicator code
// orders device work without raw stream pointers. An Event marks a point in one stream's work.
class Event {
 public:
  virtual ~Event() = default;
  // Returns whether the work queued before the event has finished; never blocks.
  virtual bool done() const = 0;
  // Blocks the host until it has.
  virtual void synchronize() const = 0;
};

// A point in the compute stream's work stamped with the time the device reached it (profiling:
// spans of device time, backend/device_trace.h). Recording one never blocks the host.
class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
  // Returns when the device reached the event, on the trace's clock (steady-clock
  // nanoseconds, TraceRecorder::now_ns); blocks until it has.
  virtual int64_t device_time_ns() = 0;
};

// A second queue of device work beside the compute stream every op runs on (a communication
// stream): tasks run in FIFO order, concurrently with the compute stream.
class Stream {
 public:
  virtual ~Stream() = default;
  // Queues host code, e.g. a host collective library's call, behind the stream's earlier work.
  // It may read and write device memory only through Backend::host_view tensors. It must not
  // throw: it reports failures through state of its own.
  virtual void enqueue_host(std::function<void()> task) = 0;
  // Returns an event marking every task queued on this stream so far.
  virtual std::unique_ptr<Event> record_event() = 0;
  // Makes every task queued after this call wait until `event` has completed.
  virtual void wait_event(const Event& event) = 0;
  // Queues a copy of device tensor `src` into host memory `dst` (a copy stream: gradients
  // leaving for a host optimizer while the compute stream goes on). `dst` must stay valid and
  // unread until an event recorded after the copy has completed; on cuda it is asynchronous
  // only from page-locked memory.
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  // Queues a copy of host memory `src` into device tensor `dst` (same rule for `src`).
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  // Blocks the host until every task queued so far has run.
  virtual void synchronize() = 0;
};

class Backend : public Allocator {
 public:
  ~Backend() override = default;

  // Returns the backend's name as given to --backend ("cpu", "cpu-ref", "sim", "cuda").
  virtual std::string name() const = 0;

  // ---- memory -------------------------------------------------------------------------
  // allocate(bytes, category) and memory_snapshot() come from Allocator: every allocation of
  // device memory, the backend's own scratch included, is counted by category there.
  void copy_from_host(const Tensor& dst, const void* src);
  void copy_to_host(void* dst, const Tensor& src);
  // Copies between two tensors of this backend with equal byte size.
  void copy(const Tensor& dst, const Tensor& src);
  void fill_zero(const Tensor& t);
  // Waits until every op issued so far has finished (and rethrows a failure of one).
  virtual void synchronize() = 0;
  // Returns how many allocations have reached the device memory's source so far: cudaMalloc
  // calls on cuda, whose caching allocator serves the rest; every allocation on a backend
  // without a cache. After a training step's warm-up this stops growing.
  virtual int64_t source_allocations() const { return allocation_count(); }
  // Returns the host's blocking waits on this device so far (copy_to_host, synchronize, the
  // ops that return a host value, waits on the device's events) and the bytes they read back.
  // A training step shows its own by difference; metrics.jsonl carries them per step.
  HostWaits host_waits() const {
    return {waits_.load(std::memory_order_relaxed),
            readback_bytes_.load(std::memory_order_relaxed)};
  }

  // ---- streams and events ---------------------------------------------------------------
  // Returns an event marking every op issued so far on the compute stream. The default
  // synchronizes and returns an event that has completed (free where ops finish before they
  // return, as on cpu).
  virtual std::unique_ptr<Event> record_event();
  // Returns a timing event at this point of the compute stream. The default stamps the host
  // clock now: where ops finish before they return (cpu), that is when the device gets there.
  virtual std::unique_ptr<TimingEvent> record_timing_event();
  // Makes every op issued after this call wait until `event` (of any stream of this backend)
  // has completed. The default waits on the host, which is the same for synchronous ops.
  virtual void wait_event(const Event& event) { event.synchronize(); }
  // Returns a new stream beside the compute stream (communication). The default runs each task
  // on a worker thread of its own, which suits backends whose memory is host memory.
  virtual std::unique_ptr<Stream> create_stream();
  // Returns the address at which host code running on one of this backend's streams
  // (Stream::enqueue_host) reaches the device memory at `device_ptr` (null stays null): the
  // address itself where device memory is host memory (the default), the kernel view on sim.
  // Throws where the host cannot reach device memory at all (cuda).
  virtual void* host_address(const void* device_ptr) const;
  // Returns `t` as such host code sees it: a host tensor over host_address(t.data); a host
  // tensor (Device cpu) is returned as it is.
  Tensor host_view(const Tensor& t) const;
  // Returns the vendor stream every op is queued on (a cudaStream_t on cuda), for a vendor
  // collective library's communicator (comm/device_communicator.h) only; null elsewhere.
  virtual void* native_stream() const { return nullptr; }

  // ---- ops ------------------------------------------------------------------------------
  // c = alpha * op(a) @ op(b) + beta * c, op = transpose when asked. a, b: (M,K)/(K,M) and
  // (K,N)/(N,K) or batched (P, ., .) with b optionally shared (rank 2). a and b share a dtype
  // (f32, bf16 or f16); c is f32, bf16 or f16; accumulation is f32.
  void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
              bool transpose_b, float alpha = 1.0f, float beta = 0.0f);

  // Ids and targets are checked where the host can read them: on a host backend (device
  // cpu) these ops throw for an id or target out of range before writing anything. A device
  // backend never reads them back to check (that would block the host on every call): its
  // caller checks them on the host before they are uploaded (LlamaModel does), and a kernel
  // given a bad one anyway writes a zero row or zero loss and adds nothing, never touching
  // memory outside its tensors.
  // out (N, C) = table (V, C)[ids (N) i32]. Throws for an id outside [0, V) (see above).
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
  // dtable (V, C) f32 += scatter of dout (N, C) by ids.
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);
  // Vocabulary-parallel embedding (tensor parallelism): table (Vs, C) holds rows
  // [begin, begin + Vs) of the full table. out (N, C) = table[id - begin] for ids inside the
  // shard, 0 for every other id. Throws for a negative id.
  void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                               int64_t begin);
  // dtable (Vs, C) f32 += scatter of the rows of dout (N, C) whose ids lie inside the shard.
  void embedding_shard_backward(const Tensor& ids, const Tensor& dout,
                                const Tensor& dtable, int64_t begin);

  // out (N, C) = x / rms(x) * weight (C); rstd (N) f32 = 1/sqrt(mean(x^2) + eps).
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                       const Tensor& rstd, float eps);
  // sum (N, C) = a + b (as add computes it; sum may alias a or b), then out and rstd as
  // rmsnorm_forward computes them from sum: the residual add fused into the norm that reads
  // it, one pass over the rows instead of two.
  void add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                           const Tensor& weight, const Tensor& out, const Tensor& rstd,
                           float eps);
  // dx (N, C) +=; dweight (C) f32 +=. When dx_copy is given (N, C), it receives the updated
  // dx in its own dtype: the residual gradient cast to the compute dtype for the next GEMM,
  // fused into the same pass.
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                        const Tensor* dx_copy = nullptr);

  // out (B, T, H, D) = rope(x) with positions (B, T) i32; out may alias x.
  void rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                    const RopeParams& params);
  // dx (B, T, H, D) = inverse rotation of dout; dx may alias dout.
  void rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                     const RopeParams& params);

  // out (B, Tq, Hq, D) = softmax(q k^T * scale + mask) v with Hq a multiple of Hkv (GQA:
  // query head h uses kv head h / (Hq / Hkv)); k, v (B, Tk, Hkv, D) (Tk == Tq in training;
  // params.q_offset places new queries after cached keys when decoding, params.k_offset places
  // a block of keys); lse (B, Hq, Tq) f32 = logsumexp of the scores. A row with no visible key
  // (a window/doc mask excluding itself, or a key block entirely hidden from it) gets out = 0
  // and lse = -inf.
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse,
                         const AttentionParams& params);
  // dq (B, Tq, Hq, D) =, dk and dv (B, Tk, Hkv, D) = (shapes and offsets as in forward). out
  // and lse may be the merged results of several key blocks (attention_merge): each block's
  // backward then gives that block's share of dq and its own dk, dv.
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv,
                          const AttentionParams& params);
  // Folds the attention of the same queries over another block of keys into a running result:
  // lse' = log(exp(lse) + exp(part_lse)), out = out exp(lse - lse') + part_out
  // exp(part_lse - lse'), lse = lse'. out, part_out (B, Tq, Hq, D) f32, bf16 or f16 of one dtype;
  // lse, part_lse (B, Hq, Tq) f32. Rows where both lse are -inf keep out = 0, lse = -inf.
  void attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse);

  // out (N, F) = silu(gate) * up.
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out);
  // dgate (N, F) =, dup (N, F) =.
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                       const Tensor& dgate, const Tensor& dup);

  // out = a + b (same shape; out may alias either).
  void add(const Tensor& a, const Tensor& b, const Tensor& out);
  // x *= alpha.
  void scale(const Tensor& x, float alpha);
  // y += alpha * x (x and y may differ in dtype; y is read and written in its own dtype).
  void axpy(float alpha, const Tensor& x, const Tensor& y);
  // dst = src converted to dst's dtype (f32 <-> bf16 <-> f16), round to nearest even.
  void cast(const Tensor& src, const Tensor& dst);

  // Fused softmax cross-entropy over logits (N, V). targets (N) i32; a target equal to
  // ignore_index, or a row whose loss_mask (N) f32 is 0, contributes no loss and no gradient.
  // losses (N) f32 = per-row loss (0 for ignored rows). When dlogits is defined (it may alias
  // logits): dlogits (N, V) = (softmax - onehot) * mask * grad_scale.
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                     int ignore_index, const Tensor& losses, const Tensor* dlogits,
                     float grad_scale);
  // Vocabulary-parallel cross-entropy, first half: logits (N, Vs) f32, bf16 or f16 hold columns
  // [begin, begin + Vs) of the full logits. stats (N, 3) f32 per row: the row maximum m, the sum
  // of exp(x - m) over the shard (accumulated in double, rounded once), and the logit of the row's
  // target when the target lies inside the shard (0 otherwise, and 0 for target == ignore_index).
  void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets,
                                 int ignore_index, int64_t begin,
                                 const Tensor& stats);
  // Second half, once the caller has combined the shards' stats into each full row's logsumexp
  // lse (N) f32: dlogits (N, Vs) = (exp(x - lse) - onehot(target - begin)) * mask * grad_scale,
  // where a row whose target is ignore_index or whose loss_mask (N) f32 is 0 gets 0. dlogits may
  // alias logits (f32, bf16 or f16, like cross_entropy's dlogits).
  void cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                    const Tensor* loss_mask, int ignore_index,
                                    int64_t begin, const Tensor& lse,
                                    const Tensor& dlogits, float grad_scale);

  // One AdamW step on a flat f32 parameter with its f32 gradient and moments (all (n)).
  // When param_copy is given (bf16 or f32, (n)), it receives the updated parameter.
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                  const Tensor& v, const AdamWParams& params,
                  const Tensor* param_copy);
  // The same step on every set of `sets` at once (one launch on a device: the optimizer's
  // whole step), each set with its own weight decay (params.weight_decay is not used). Equal,
  // bit for bit, to one adamw_step per set.
  void adamw_step_many(std::span<const AdamWTensors> sets, const AdamWParams& params);

  // out = x * keep(i) / (1 - p) with keep(i) = (dropout_hash(seed, i) >> 40) >= p * 2^24, i the
  // flat element index; out may alias x. The mask depends only on (seed, i), so the backward
  // pass re-creates it by calling the op on the gradient with the same seed. p in [0, 1).
  // x and out are f32, bf16 or f16 (core/counter_hash.h has the formula).
  void dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed);

  // Writes the sum of x (n) f32, added in index order in double precision, into result: a
  // u32 (2) tensor holding the double's 8 bytes in the device's (little-endian) byte order,
  // 8-byte aligned. The value stays on the device (a step reads its losses back once).
  void sum_to_double(const Tensor& x, const Tensor& result);
  // Returns sum(x^2) accumulated in double precision (any float dtype).
  double sum_squares(const Tensor& x);
  // Returns false when any element is NaN or infinite.
  bool all_finite(const Tensor& x);
  // Adds the square of every element of x (f32, any shape, at most kExactCounterCapacity
  // elements) exactly into `counters`: the digit counters of core/exact_square_sum.h, 21
  // unsigned 64-bit integers in the device's (little-endian) byte order, held as a u32 (42)
  // tensor since DType has no 64-bit integer, 8-byte aligned. Integer adds only, so the result
  // is the same bits in any order. The caller zeroes the counters, adds at most
  // kExactCounterCapacity elements in all before copying them to the host, and folds them
  // with ExactSquareSum::add_digit_counters.
  void accumulate_exact_squares(const Tensor& x, const Tensor& counters);

  // Returns whether every op runs activations (and GEMM operands) of `dtype`: f32 and bf16
  // everywhere; f16 where the backend has f16 kernels.
  virtual bool supports_compute_dtype(DType dtype) const {
    return dtype == DType::f32 || dtype == DType::bf16;
  }

 protected:
  // The kernels. The public op of the same name has checked every argument the interface
  // defines (devices, dtypes, ranks, shapes, parameter ranges) before calling one, so a kernel
  // only checks what depends on tensor data (token ids, targets), and then before writing.
  virtual void copy_from_host_kernel(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host_kernel(void* dst, const Tensor& src) = 0;
  virtual void copy_kernel(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill_zero_kernel(const Tensor& t) = 0;
  virtual void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                             bool transpose_b, float alpha, float beta) = 0;
  virtual void embedding_forward_kernel(const Tensor& ids, const Tensor& table,
                                        const Tensor& out) = 0;
  virtual void embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                         const Tensor& dtable) = 0;
  virtual void embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table,
                                              const Tensor& out, int64_t begin) = 0;
  virtual void embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout,
                                               const Tensor& dtable, int64_t begin) = 0;
  virtual void rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& out,
                                      const Tensor& rstd, float eps) = 0;
  virtual void add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                          const Tensor& weight, const Tensor& out,
                                          const Tensor& rstd, float eps) = 0;
  virtual void rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                       const Tensor& rstd, const Tensor& dx,
                                       const Tensor& dweight, const Tensor* dx_copy) = 0;
  virtual void rope_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& positions,
                                   const RopeParams& params) = 0;
  virtual void rope_backward_kernel(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                                    const RopeParams& params) = 0;
  virtual void attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse,
                                        const AttentionParams& params) = 0;
  virtual void attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                         const AttentionParams& params) = 0;
  virtual void attention_merge_kernel(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                                      const Tensor& part_lse) = 0;
  virtual void swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                      const Tensor& dgate, const Tensor& dup) = 0;
  virtual void add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void scale_kernel(const Tensor& x, float alpha) = 0;
  virtual void axpy_kernel(float alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void cast_kernel(const Tensor& src, const Tensor& dst) = 0;
  virtual void cross_entropy_kernel(const Tensor& logits, const Tensor& targets,
                                    const Tensor* loss_mask, int ignore_index, const Tensor& losses,
                                    const Tensor* dlogits, float grad_scale) = 0;
  virtual void cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                                int ignore_index, int64_t begin,
                                                const Tensor& stats) = 0;
  virtual void cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                                   const Tensor* loss_mask, int ignore_index,
                                                   int64_t begin, const Tensor& lse,
                                                   const Tensor& dlogits, float grad_scale) = 0;
  // adamw_step is adamw_step_many over one set.
  virtual void adamw_step_kernel(std::span<const AdamWTensors> sets,
                                 const AdamWParams& params) = 0;
  virtual void dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) = 0;
  virtual void sum_to_double_kernel(const Tensor& x, const Tensor& result) = 0;
  virtual double sum_squares_kernel(const Tensor& x) = 0;
  virtual bool all_finite_kernel(const Tensor& x) = 0;
  virtual void accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) = 0;

  // Counts one blocking wait of the host on the device that read back `readback_bytes`
  // (device backends call it wherever they block; thread-safe).
  void count_host_wait(int64_t readback_bytes = 0) {
    waits_.fetch_add(1, std::memory_order_relaxed);
    readback_bytes_.fetch_add(readback_bytes, std::memory_order_relaxed);
  }

  // Returns accumulate_exact_squares' counters as the 64-bit integers they hold, for a kernel
  // that reaches them at a host address (`counters` is a host view of them).
  static std::span<uint64_t, kExactCounterCount> exact_counters(const Tensor& counters) {
    return std::span<uint64_t, kExactCounterCount>(static_cast<uint64_t*>(counters.data),
                                                   kExactCounterCount);
  }

 private:
  std::atomic<int64_t> waits_{0};
  std::atomic<int64_t> readback_bytes_{0};
};

// Creates a backend by name from the registry (backend/registry.h). Throws naming the valid
// choices for an unknown name, or why a known one is unavailable.
std::unique_ptr<Backend> make_backend(const std::string& name);
// Returns the names of the backends compiled into this binary.
std::vector<std::string> compiled_backends();
// Returns one line per compiled backend describing what it sees (for `anvil info`).
std::vector<std::string> describe_backends();

}  // namespace anvil
