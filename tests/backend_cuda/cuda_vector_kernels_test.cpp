// The CUDA backend's vectorized memory-bound kernels on a real GPU, where the conformance
// suite's small shapes do not reach: add, scale, axpy, cast and dropout over views at every
// alignment (their packs shift to align; odd sizes leave heads and tails) bit for bit equal
// to cpu-ref, SwiGLU within its tolerance; RoPE at head_dim 128, attention_merge at D 128 and
// the embedding at width 2048 (16-byte packs) against cpu-ref; then the backend's bookkeeping:
// after one call of every op, further calls allocate nothing from cudaMalloc; blocking waits
// are counted (synchronize, event and copy-stream waits, readbacks) and queued work is not;
// timing events measure device time. Every test skips with the reason when there is no device.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "core/error.h"
#include "core/exact_square_sum.h"
#include "cuda_reference_fixture.h"
#include "device_tensors.h"

namespace anvil::test {
namespace {

using CudaVectorKernelsTest = CudaReferenceTest;

TEST_F(CudaVectorKernelsTest, ElementwiseOpsAtEveryAlignmentEqualTheReference) {
  const int64_t n = 1001;
  const Shape shape{n};
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const std::vector<float> a = wave(n, 1, -3.0f, 3.0f), b = wave(n, 2, -3.0f, 3.0f);
  struct Dtypes {
    DType a, b, out;
  };
  const Dtypes mixes[] = {{f32, f32, f32}, {bf16, bf16, bf16}, {f32, bf16, bf16}, {f16, f32, f16}};
  for (int64_t offset = 0; offset < 8; ++offset) {
    for (const Dtypes& mix : mixes) {
      SCOPED_TRACE(testing::Message() << "offset " << offset << " " << dtype_name(mix.a) << " "
                                      << dtype_name(mix.b) << " -> " << dtype_name(mix.out));
      // Each view starts at its own offset, so some calls align by shifting and some cannot.
      const int64_t ob = (offset * 3) % 8, oo = (offset * 5 + 1) % 8;
      auto both = [&](auto&& op) {
        const Tensor ga = gpu_->make(mix.a, shape, a, offset);
        const Tensor gb = gpu_->make(mix.b, shape, b, ob);
        const Tensor go = gpu_->make(mix.out, shape, b, oo);
        const Tensor ha = host_->make(mix.a, shape, a), hb = host_->make(mix.b, shape, b);
        const Tensor ho = host_->make(mix.out, shape, b);
        op(*cuda_, ga, gb, go);
        op(*cpu_, ha, hb, ho);
        EXPECT_EQ(gpu_->bytes(go), host_->bytes(ho));
        EXPECT_EQ(gpu_->bytes(gb), host_->bytes(hb));  // in-place ops write b
      };
      both([](Backend& be, const Tensor& x, const Tensor& y, const Tensor& o) {
        be.add(x, y, o);
      });
      both([](Backend& be, const Tensor& x, const Tensor&, const Tensor& o) { be.cast(x, o); });
      both([](Backend& be, const Tensor&, const Tensor& y, const Tensor&) { be.scale(y, 0.37f); });
      both([](Backend& be, const Tensor& x, const Tensor& y, const Tensor&) {
        be.axpy(-1.25f, x, y);
      });
      if (mix.a == mix.out && mix.a != f16) {  // dropout takes activation dtypes
        both([](Backend& be, const Tensor& x, const Tensor&, const Tensor& o) {
          be.dropout(x, o, 0.3f, 1234);
        });
      }
    }
    // SwiGLU (expf: within an ulp or two of the host), f32 and bf16.
    for (const DType d : {f32, bf16}) {
      const Tensor gg = gpu_->make(d, shape, a, offset), gu = gpu_->make(d, shape, b, offset);
      const Tensor go = gpu_->empty(d, shape, (offset + 2) % 8);
      const Tensor hg = host_->make(d, shape, a), hu = host_->make(d, shape, b);
      const Tensor ho = host_->empty(d, shape);
      cuda_->swiglu_forward(gg, gu, go);
      cpu_->swiglu_forward(hg, hu, ho);
      EXPECT_LE(peak_relative_error(gpu_->read(go), host_->read(ho)), d == f32 ? 1e-5 : 2e-2);
    }
  }
}

TEST_F(CudaVectorKernelsTest, RopeMergeAndEmbeddingAtTheModelsWidths) {
  for (const DType d : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(d));
    const double tol = d == DType::f32 ? 1e-5 : 2e-2;
    // RoPE (B=2, T=33, H=4, D=128) in place, forward then backward, positions far apart.
    const Shape qs{2, 33, 4, 128};
    std::vector<float> positions(66);
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<float>(i * 61 % 4096);
    RopeParams rope;
    rope.theta = 500000.0f;
    const std::vector<float> q = wave(qs.numel(), 3);
    const Tensor gq = gpu_->make(d, qs, q), hq = host_->make(d, qs, q);
    const Tensor gp = gpu_->make(DType::i32, Shape{2, 33}, positions);
    const Tensor hp = host_->make(DType::i32, Shape{2, 33}, positions);
    cuda_->rope_forward(gq, gq, gp, rope);
    cpu_->rope_forward(hq, hq, hp, rope);
    EXPECT_LE(peak_relative_error(gpu_->read(gq), host_->read(hq)), tol);
    cuda_->rope_backward(gq, gq, gp, rope);
    cpu_->rope_backward(hq, hq, hp, rope);
    EXPECT_LE(peak_relative_error(gpu_->read(gq), host_->read(hq)), tol);
    // attention_merge at D=128: one row of each lse kind (-inf on either side).
    const Shape os{2, 5, 4, 128}, ls{2, 4, 5};
    std::vector<float> lse = wave(40, 4, -3.0f, 3.0f), part_lse = wave(40, 5, -3.0f, 3.0f);
    lse[3] = -INFINITY, part_lse[7] = -INFINITY;
    const std::vector<float> out = wave(os.numel(), 6), part = wave(os.numel(), 7);
    const Tensor go = gpu_->make(d, os, out), gl = gpu_->make(DType::f32, ls, lse);
    const Tensor ho = host_->make(d, os, out), hl = host_->make(DType::f32, ls, lse);
    cuda_->attention_merge(go, gl, gpu_->make(d, os, part),
                           gpu_->make(DType::f32, ls, part_lse));
    cpu_->attention_merge(ho, hl, host_->make(d, os, part),
                          host_->make(DType::f32, ls, part_lse));
    EXPECT_LE(peak_relative_error(gpu_->read(go), host_->read(ho)), tol);
    EXPECT_LE(peak_relative_error(gpu_->read(gl), host_->read(hl)), 1e-5);
    // Embedding rows of 2048 (copies: exact) and its scatter-add (bit-identical by design).
    const int64_t V = 50, C = 2048, N = 64;
    std::vector<float> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<float>((i * 7) % V);  // repeats
    const std::vector<float> table = wave(V * C, 8), dout = wave(N * C, 9);
    const Tensor gt = gpu_->make(d, Shape{V, C}, table);
    const Tensor gi = gpu_->make(DType::i32, Shape{N}, ids);
    const Tensor ht = host_->make(d, Shape{V, C}, table);
    const Tensor hi = host_->make(DType::i32, Shape{N}, ids);
    const Tensor ge = gpu_->empty(d, Shape{N, C}), he = host_->empty(d, Shape{N, C});
    cuda_->embedding_forward(gi, gt, ge);
    cpu_->embedding_forward(hi, ht, he);
    EXPECT_EQ(gpu_->bytes(ge), host_->bytes(he));
    const Tensor gd = gpu_->make(DType::f32, Shape{V, C}, table);
    const Tensor hd = host_->make(DType::f32, Shape{V, C}, table);
    cuda_->embedding_backward(gi, gpu_->make(d, Shape{N, C}, dout), gd);
    cpu_->embedding_backward(hi, host_->make(d, Shape{N, C}, dout), hd);
    EXPECT_EQ(gpu_->bytes(gd), host_->bytes(hd));
  }
}

// Runs every op once on tensors made beforehand (the step's shapes in miniature).
struct EveryOp {
  explicit EveryOp(CudaBackend& cuda, DeviceTensors& t) : be(cuda) {
    const DType bf16 = DType::bf16, f32 = DType::f32;
    std::vector<float> id_values(N), target_values(N);
    for (int64_t i = 0; i < N; ++i) id_values[i] = target_values[i] = static_cast<float>(i % V);
    ids = t.make(DType::i32, Shape{N}, id_values);
    targets = t.make(DType::i32, Shape{N}, target_values);
    positions = t.make(DType::i32, Shape{B, T}, std::vector<float>(N, 3.0f));
    x = t.make(f32, Shape{N, C}, wave(N * C, 1));
    x2 = t.make(f32, Shape{N, C}, wave(N * C, 2));
    dnorm = t.make(f32, Shape{N, C}, wave(N * C, 17));
    wide = t.make(bf16, Shape{N, C}, wave(N * C, 3));
    w = t.make(bf16, Shape{C}, wave(C, 4, 0.5f, 1.5f));
    table = t.make(bf16, Shape{V, C}, wave(V * C, 5));
    dtable = t.make(f32, Shape{V, C}, wave(V * C, 6));
    dw = t.make(f32, Shape{C}, wave(C, 7));
    rstd = t.empty(f32, Shape{N});
    gate = t.make(bf16, Shape{N, F}, wave(N * F, 8));
    up = t.make(bf16, Shape{N, F}, wave(N * F, 9));
    hidden = t.empty(bf16, Shape{N, F});
    q = t.make(bf16, Shape{B, T, H, D}, wave(N * H * D, 10));
    k = t.make(bf16, Shape{B, T, H, D}, wave(N * H * D, 11));
    v = t.make(bf16, Shape{B, T, H, D}, wave(N * H * D, 12));
    o = t.empty(bf16, Shape{B, T, H, D});
    dq = t.empty(bf16, Shape{B, T, H, D});
    dk = t.empty(bf16, Shape{B, T, H, D});
    dv = t.empty(bf16, Shape{B, T, H, D});
    lse = t.empty(f32, Shape{B, H, T});
    logits = t.make(bf16, Shape{N, V}, wave(N * V, 13));
    logits32 = t.make(f32, Shape{N, V}, wave(N * V, 14));
    losses = t.empty(f32, Shape{N});
    stats = t.empty(f32, Shape{N, 3});
    loss_sum = t.empty(DType::u32, Shape{2});
    counters = t.empty(DType::u32, Shape{2 * kExactCounterCount});
    big_a = t.make(f32, Shape{N, F}, wave(N * F, 15));
    weight32 = t.make(f32, Shape{F, C}, wave(F * C, 16));
    for (int s = 0; s < 3; ++s)
      sets.push_back({t.make(f32, Shape{1000 + s}, wave(1000 + s, s)),
                      t.make(f32, Shape{1000 + s}, wave(1000 + s, s + 1)),
                      t.make(f32, Shape{1000 + s}, wave(1000 + s, s + 2)),
                      t.make(f32, Shape{1000 + s}, wave(1000 + s, s + 3, 0.0f, 1.0f)),
                      t.empty(bf16, Shape{1000 + s}), 0.1f});
  }

  void run() {
    be.fill_zero(counters);
    be.embedding_forward(ids, table, wide);
    be.embedding_backward(ids, wide, dtable);
    be.embedding_shard_forward(ids, table, wide, 0);
    be.embedding_shard_backward(ids, wide, dtable, 0);
    be.rmsnorm_forward(x, w, wide, rstd, 1e-5f);
    be.add_rmsnorm_forward(x, x2, x, w, wide, rstd, 1e-5f);
    be.rmsnorm_backward(dnorm, x, w, rstd, x2, dw, &wide);
    be.rope_forward(q, q, positions, RopeParams{});
    be.rope_backward(q, q, positions, RopeParams{});
    AttentionParams causal;
    be.attention_forward(q, k, v, o, lse, causal);
    be.attention_backward(o, q, k, v, o, lse, dq, dk, dv, causal);
    be.attention_merge(o, lse, dq, lse);
    be.swiglu_forward(gate, up, hidden);
    be.swiglu_backward(hidden, gate, up, gate, up);
    be.add(x, x2, x);
    be.scale(x, 0.5f);
    be.axpy(0.5f, wide, x);
    be.cast(x, wide);
    be.dropout(wide, wide, 0.1f, 7);
    be.matmul(wide, wide, big_a.flat(0, N * N).view(Shape{N, N}), false, true);
    be.matmul(big_a, weight32, wide, false, false);  // f32 operands into bf16: staged
    be.cross_entropy(logits, targets, nullptr, -100, losses, &logits, 1.0f);
    be.cross_entropy_shard_stats(logits32, targets, -100, 0, stats);
    be.cross_entropy_shard_backward(logits32, targets, nullptr, -100, 0, losses, logits32, 1.0f);
    be.sum_to_double(losses, loss_sum);
    AdamWParams params;
    params.step = 1;
    be.adamw_step_many(sets, params);
    be.accumulate_exact_squares(x, counters);
    be.sum_squares(x);
    be.all_finite(x);
    be.synchronize();
  }

  static constexpr int64_t B = 2, T = 64, N = B * T, C = 2048, F = 512, H = 4, D = 128, V = 1000;
  CudaBackend& be;
  Tensor ids, targets, positions, x, x2, dnorm, wide, w, table, dtable, dw, rstd, gate, up, hidden;
  Tensor q, k, v, o, dq, dk, dv, lse, logits, logits32, losses, stats, loss_sum, counters;
  Tensor big_a, weight32;
  std::vector<AdamWTensors> sets;
};

TEST_F(CudaVectorKernelsTest, NothingIsAllocatedAfterTheFirstCallOfEveryOp) {
  EveryOp ops(*cuda_, *gpu_);
  ops.run();  // warm-up: workspaces grow, cuBLASLt plans and workspace, RoPE tables
  const int64_t after_first = cuda_->source_allocations();
  for (int round = 0; round < 3; ++round) ops.run();
  EXPECT_EQ(cuda_->source_allocations(), after_first);
}

TEST_F(CudaVectorKernelsTest, BlockingWaitsAreCountedAndQueuedWorkIsNot) {
  const Tensor x = gpu_->make(DType::f32, Shape{1 << 20}, wave(1 << 20, 1));
  const HostWaits start = cuda_->host_waits();
  for (int i = 0; i < 10; ++i) cuda_->scale(x, 1.01f);
  const Tensor total = gpu_->empty(DType::u32, Shape{2});
  cuda_->sum_to_double(x, total);  // stays on the device
  const std::unique_ptr<Event> event = cuda_->record_event();
  EXPECT_EQ((cuda_->host_waits() - start).waits, 0);
  event->synchronize();
  EXPECT_EQ((cuda_->host_waits() - start).waits, 1);
  cuda_->synchronize();
  EXPECT_EQ((cuda_->host_waits() - start).waits, 2);
  const std::unique_ptr<Stream> copies = cuda_->create_stream();
  copies->synchronize();
  EXPECT_EQ((cuda_->host_waits() - start).waits, 3);
  double sum = 0.0;
  cuda_->copy_to_host(&sum, total);
  const HostWaits after = cuda_->host_waits() - start;
  EXPECT_EQ(after.waits, 4);
  EXPECT_EQ(after.readback_bytes, 8);
  EXPECT_TRUE(event->done());  // a query never blocks and is not counted
  EXPECT_EQ((cuda_->host_waits() - start).waits, 4);
}

TEST_F(CudaVectorKernelsTest, TimingEventsMeasureDeviceTime) {
  const Tensor x = gpu_->make(DType::f32, Shape{1 << 24}, {});
  const std::unique_ptr<cuda::CudaBackendEvent> begin = cuda_->record_timed_event();
  for (int i = 0; i < 20; ++i) cuda_->scale(x, 1.0f);  // 20 x 128 MiB of traffic
  const std::unique_ptr<cuda::CudaBackendEvent> end = cuda_->record_timed_event();
  const HostWaits before = cuda_->host_waits();
  const double seconds = cuda::elapsed_seconds(*begin, *end);
  EXPECT_EQ((cuda_->host_waits() - before).waits, 1);  // it waited for `end`
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 10.0);
  const cuda::CudaBackendEvent plain(cuda_->stream());
  EXPECT_THROW(cuda::elapsed_seconds(*begin, plain), Error);
}

}  // namespace
}  // namespace anvil::test
