// CudaBackend on a real GPU: pinned host<->device copies, allocator reuse and statistics,
// cuBLASLt matmul over shapes/transposes/batches/dtypes against cpu-ref, and the ops whose
// result must equal the CPU's bit for bit (embedding backward and its vocabulary shards, AdamW,
// dropout) or that must throw like it (bad ids/targets), and the vocabulary-parallel
// cross-entropy against cpu-ref. Every test skips with the reason when there is no device;
// the full op-by-op conformance run is tests/backend's driver, which includes cuda then.
#include "backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_stream.h"
#include "core/buffer.h"
#include "core/error.h"
#include "cuda_reference_fixture.h"

namespace anvil {
namespace {

class CudaBackendTest : public test::CudaReferenceTest {
 protected:
  // Returns a tensor on `backend` holding `values` stored as `dtype` (rounded to it).
  Tensor make(Backend& backend, DType dtype, Shape shape, const std::vector<float>& values) {
    buffers_.push_back(std::make_unique<Buffer>(backend, std::max<size_t>(1, values.size() * 4),
                                                MemoryCategory::workspace));
    const Tensor t = buffers_.back()->as(dtype, shape);
    std::vector<unsigned char> bytes(t.nbytes());
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == DType::bf16) {
        const uint16_t h = float_to_bf16(values[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      } else {
        std::memcpy(&bytes[4 * i], &values[i], 4);
      }
    }
    backend.copy_from_host(t, bytes.data());
    return t;
  }

  Tensor make_ids(Backend& backend, const std::vector<int32_t>& ids) {
    buffers_.push_back(
        std::make_unique<Buffer>(backend, ids.size() * 4, MemoryCategory::workspace));
    const Tensor t = buffers_.back()->as(DType::i32, Shape{static_cast<int64_t>(ids.size())});
    backend.copy_from_host(t, ids.data());
    return t;
  }

  std::vector<float> read(Backend& backend, const Tensor& t) {
    std::vector<unsigned char> bytes(t.nbytes());
    backend.copy_to_host(bytes.data(), t);
    std::vector<float> values(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (t.dtype == DType::bf16) {
        uint16_t h;
        std::memcpy(&h, &bytes[2 * i], 2);
        values[i] = bf16_to_float(h);
      } else {
        std::memcpy(&values[i], &bytes[4 * i], 4);
      }
    }
    return values;
  }

  static std::vector<float> pattern(int64_t count, int seed) {
    std::vector<float> values(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      values[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
    return values;
  }

  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(CudaBackendTest, PinnedCopiesRoundTripAcrossChunkBoundaries) {
  for (int64_t count : {int64_t{1}, int64_t{1001}, int64_t{(8 << 20) / 4}, int64_t{4200003}}) {
    const std::vector<float> values = pattern(count, 1);
    const Tensor device = make(*cuda_, DType::f32, Shape{count}, values);
    buffers_.push_back(
        std::make_unique<Buffer>(*cuda_, device.nbytes(), MemoryCategory::workspace));
    const Tensor copy = buffers_.back()->as(DType::f32, Shape{count});
    cuda_->copy(copy, device);
    EXPECT_EQ(read(*cuda_, copy), values) << count << " elements";
  }
}

// Real cudaEvents and a copy stream: a download on the copy stream sees the kernels the
// compute stream ran before its event, and the compute stream's next kernel sees the upload
// it waited for; page-locked host memory makes both copies asynchronous.
TEST_F(CudaBackendTest, CopyStreamIsOrderedByEvents) {
  const int64_t n = 1 << 20;
  const Tensor t = make(*cuda_, DType::f32, Shape{n}, pattern(n, 3));
  for (int i = 0; i < 8; ++i) cuda_->scale(t, 2.0f);  // queued work the copy must wait for
  std::unique_ptr<Event> computed = cuda_->record_event();
  std::unique_ptr<Stream> copies = cuda_->create_stream();
  copies->wait_event(*computed);
  cuda::PinnedBuffer down(static_cast<size_t>(n) * 4), up(static_cast<size_t>(n) * 4);
  copies->copy_to_host(down.data(), t);
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  std::memcpy(up.data(), ones.data(), up.bytes());
  copies->copy_from_host(t, up.data());
  bool ran = false;
  copies->enqueue_host([&ran] { ran = true; });
  std::unique_ptr<Event> uploaded = copies->record_event();
  cuda_->wait_event(*uploaded);
  cuda_->scale(t, 5.0f);
  uploaded->synchronize();
  EXPECT_TRUE(uploaded->done());
  EXPECT_TRUE(ran);
  const std::vector<float> expected = pattern(n, 3);
  const auto* got = static_cast<const float*>(down.data());
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(got[i], expected[i] * 256.0f) << i;
  const std::vector<float> after = read(*cuda_, t);
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(after[i], 5.0f) << i;
}

TEST_F(CudaBackendTest, AllocatorReusesFreedBlocksAndTracksPeak) {
  const cuda::AllocatorStats before = cuda_->memory_stats();
  { Buffer first(*cuda_, 3 << 20, MemoryCategory::workspace); }
  { Buffer second(*cuda_, 3 << 20, MemoryCategory::workspace); }
  const cuda::AllocatorStats after = cuda_->memory_stats();
  EXPECT_LE(after.source_allocations - before.source_allocations, 1);
  EXPECT_GE(after.cache_hits - before.cache_hits, 1);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + (4u << 20));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

struct MatmulCase {
  Shape a, b;
  bool ta, tb;
  DType in, out;
  float alpha, beta;
};

TEST_F(CudaBackendTest, MatmulMatchesTheReferenceOverShapesAndDtypes) {
  const std::vector<MatmulCase> cases = {
      {{37, 19}, {19, 23}, false, false, DType::f32, DType::f32, 1.0f, 0.0f},
      {{19, 37}, {23, 19}, true, true, DType::f32, DType::f32, 0.5f, 1.0f},
      {{1, 64}, {64, 1}, false, false, DType::bf16, DType::bf16, 1.0f, 0.0f},
      {{64, 96}, {80, 96}, false, true, DType::bf16, DType::f32, 1.0f, 1.0f},
      {{3, 17, 33}, {3, 33, 9}, false, false, DType::bf16, DType::bf16, 1.0f, 0.0f},
      {{3, 33, 17}, {3, 9, 33}, true, true, DType::f32, DType::f32, 2.0f, 0.5f},
      {{4, 16, 32}, {32, 48}, false, false, DType::bf16, DType::f32, 1.0f, 0.0f},
      {{4, 32, 16}, {48, 32}, true, true, DType::bf16, DType::bf16, 1.0f, 0.0f},
      {{31, 45}, {45, 7}, false, false, DType::f32, DType::bf16, 1.0f, 1.0f},
  };
  for (const MatmulCase& mc : cases) {
    const int64_t M = mc.ta ? mc.a.back(0) : mc.a.back(1);
    const int64_t N = mc.tb ? mc.b.back(1) : mc.b.back(0);
    const Shape c_shape = mc.a.rank() == 3 ? Shape{mc.a[0], M, N} : Shape{M, N};
    const std::vector<float> a = pattern(mc.a.numel(), 2), b = pattern(mc.b.numel(), 3);
    const std::vector<float> c0 = pattern(c_shape.numel(), 4);
    std::vector<std::vector<float>> results;
    for (Backend* backend : {static_cast<Backend*>(cuda_.get()), cpu_.get()}) {
      const Tensor ta = make(*backend, mc.in, mc.a, a), tb = make(*backend, mc.in, mc.b, b);
      const Tensor tc = make(*backend, mc.out, c_shape, c0);
      backend->matmul(ta, tb, tc, mc.ta, mc.tb, mc.alpha, mc.beta);
      results.push_back(read(*backend, tc));
    }
    double peak = 0.0, worst = 0.0;
    for (size_t i = 0; i < results[1].size(); ++i) {
      peak = std::max(peak, std::fabs(double{results[1][i]}));
      worst = std::max(worst, std::fabs(double{results[0][i]} - results[1][i]));
    }
    const double tol = mc.out == DType::bf16 ? 1e-2 : 1e-5;
    EXPECT_LE(worst / peak, tol) << "a " << mc.a.str() << " b " << mc.b.str() << " ta " << mc.ta
                                 << " tb " << mc.tb << " in " << dtype_name(mc.in) << " out "
                                 << dtype_name(mc.out);
  }
}

TEST_F(CudaBackendTest, EmbeddingBackwardWithRepeatedIdsEqualsTheCpuBitForBit) {
  const std::vector<int32_t> ids = {3, 1, 3, 0, 3, 1, 6, 3};
  const int64_t C = 37;
  const std::vector<float> dout = pattern(8 * C, 5), table = pattern(7 * C, 6);
  std::vector<std::vector<float>> results;
  for (Backend* backend : {static_cast<Backend*>(cuda_.get()), cpu_.get()}) {
    const Tensor dtable = make(*backend, DType::f32, Shape{7, C}, table);
    const Tensor gradient = make(*backend, DType::bf16, Shape{8, C}, dout);
    backend->embedding_backward(make_ids(*backend, ids), gradient, dtable);
    results.push_back(read(*backend, dtable));
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(CudaBackendTest, EmbeddingShardsEqualTheCpuBitForBit) {
  // Three shards of a (9, C) table; ids repeat and reach every shard.
  const std::vector<int32_t> ids = {3, 1, 8, 0, 3, 5, 6, 3, 8, 2};
  const int64_t N = 10, Vs = 3, C = 37;
  const std::vector<float> dout = pattern(N * C, 5);
  for (int64_t begin : {0, 3, 6}) {
    std::vector<std::vector<float>> outs, grads;
    for (Backend* backend : {static_cast<Backend*>(cuda_.get()), cpu_.get()}) {
      const Tensor ids_t = make_ids(*backend, ids);
      const Tensor table = make(*backend, DType::bf16, Shape{Vs, C}, pattern(Vs * C, 6));
      const Tensor out = make(*backend, DType::f32, Shape{N, C}, pattern(N * C, 7));
      backend->embedding_shard_forward(ids_t, table, out, begin);
      outs.push_back(read(*backend, out));
      const Tensor dtable = make(*backend, DType::f32, Shape{Vs, C}, pattern(Vs * C, 8));
      backend->embedding_shard_backward(ids_t, make(*backend, DType::bf16, Shape{N, C}, dout),
                                        dtable, begin);
      grads.push_back(read(*backend, dtable));
    }
    EXPECT_EQ(outs[0], outs[1]) << "shard at " << begin;
    EXPECT_EQ(grads[0], grads[1]) << "shard at " << begin;
  }
}

TEST_F(CudaBackendTest, CrossEntropyShardsMatchTheReference) {
  // Two column shards of (6, 2 * 700) logits; targets in both shards, one ignored, one masked.
  const std::vector<int32_t> targets = {0, 699, 700, -100, 1399, 5};
  const std::vector<float> mask = {1, 1, 0.5f, 1, 1, 0};
  const int64_t N = 6, Vs = 700;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t begin : {0, 700}) {
      std::vector<std::vector<float>> stats, grads;
      for (Backend* backend : {static_cast<Backend*>(cuda_.get()), cpu_.get()}) {
        std::vector<float> logits = pattern(N * Vs, static_cast<int>(begin));
        for (float& x : logits) x *= 6.0f;
        const Tensor logits_t = make(*backend, dtype, Shape{N, Vs}, logits);
        const Tensor targets_t = make_ids(*backend, targets);
        const Tensor stats_t = make(*backend, DType::f32, Shape{N, 3}, pattern(N * 3, 1));
        backend->cross_entropy_shard_stats(logits_t, targets_t, -100, begin, stats_t);
        stats.push_back(read(*backend, stats_t));
        const Tensor mask_t = make(*backend, DType::f32, Shape{N}, mask);
        const Tensor lse =
            make(*backend, DType::f32, Shape{N}, {7.5f, 7.0f, 8.0f, 7.0f, 7.25f, 7.0f});
        // In place: dlogits aliases logits.
        backend->cross_entropy_shard_backward(logits_t, targets_t, &mask_t, -100, begin, lse,
                                              logits_t, 0.5f);
        grads.push_back(read(*backend, logits_t));
      }
      for (int64_t n = 0; n < N; ++n) {
        EXPECT_EQ(stats[0][n * 3], stats[1][n * 3]) << "max of row " << n;
        EXPECT_NEAR(stats[0][n * 3 + 1], stats[1][n * 3 + 1], 1e-6 * stats[1][n * 3 + 1]);
        EXPECT_EQ(stats[0][n * 3 + 2], stats[1][n * 3 + 2]) << "target logit of row " << n;
      }
      double worst = 0.0, peak = 0.0;
      for (size_t i = 0; i < grads[1].size(); ++i) {
        worst = std::max(worst, std::fabs(double{grads[0][i]} - grads[1][i]));
        peak = std::max(peak, std::fabs(double{grads[1][i]}));
      }
      EXPECT_LE(worst / peak, dtype == DType::bf16 ? 2e-2 : 1e-5)
          << dtype_name(dtype) << " shard at " << begin;
    }
  }
}

TEST_F(CudaBackendTest, BadShardIdsAndTargetsThrowLikeTheReference) {
  const Tensor table = make(*cuda_, DType::f32, Shape{5, 4}, pattern(20, 1));
  const Tensor out = make(*cuda_, DType::f32, Shape{3, 4}, pattern(12, 2));
  EXPECT_NO_THROW(cuda_->embedding_shard_forward(make_ids(*cuda_, {0, 70000, 11}), table, out, 10));
  try {
    cuda_->embedding_shard_forward(make_ids(*cuda_, {0, -7, 1}), table, out, 10);
    FAIL() << "expected a bad-id error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[embedding_shard] token id -7 is negative at position 1");
  }
  const Tensor logits = make(*cuda_, DType::f32, Shape{3, 5}, pattern(15, 3));
  const Tensor stats = make(*cuda_, DType::f32, Shape{3, 3}, pattern(9, 4));
  EXPECT_NO_THROW(
      cuda_->cross_entropy_shard_stats(logits, make_ids(*cuda_, {-100, 4, 9000}), -100, 5, stats));
  try {
    cuda_->cross_entropy_shard_stats(logits, make_ids(*cuda_, {1, -100, -5}), -100, 5, stats);
    FAIL() << "expected a bad-target error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[cross_entropy_shard_stats] target -5 is negative at row 2 (ignore_index is "
                 "-100)");
  }
}

// Ids and targets are checked on the host before upload (backend.h); the kernels never read
// them back, and must treat a bad one safely: a zero row, an ignored target.
TEST_F(CudaBackendTest, BadIdsAndTargetsAreZeroRowsAndIgnoredTargets) {
  const Tensor table = make(*cuda_, DType::f32, Shape{5, 4}, pattern(20, 1));
  const Tensor out = make(*cuda_, DType::f32, Shape{3, 4}, pattern(12, 2));
  const HostWaits before = cuda_->host_waits();
  cuda_->embedding_forward(make_ids(*cuda_, {0, 7, 1}), table, out);
  EXPECT_EQ((cuda_->host_waits() - before).waits, 0) << "no readback to validate ids";
  const std::vector<float> rows = read(*cuda_, out);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(rows[4 + c], 0.0f);
  const Tensor logits = make(*cuda_, DType::f32, Shape{3, 5}, pattern(15, 3));
  const Tensor losses = make(*cuda_, DType::f32, Shape{3}, {1, 1, 1});
  cuda_->cross_entropy(logits, make_ids(*cuda_, {1, -100, 5}), nullptr, -100, losses, nullptr,
                       1.0f);
  EXPECT_EQ(read(*cuda_, losses)[2], 0.0f) << "a bad target counts as ignored";
}

TEST_F(CudaBackendTest, AdamWAndDropoutEqualTheCpuBitForBit) {
  const int64_t n = 1000;
  AdamWParams params;
  params.lr = 3e-3f;
  params.weight_decay = 0.1f;
  params.step = 7;
  params.grad_scale = 0.5f;
  std::vector<std::vector<float>> adam, drop;
  for (Backend* backend : {static_cast<Backend*>(cuda_.get()), cpu_.get()}) {
    const Tensor p = make(*backend, DType::f32, Shape{n}, pattern(n, 1));
    const Tensor g = make(*backend, DType::f32, Shape{n}, pattern(n, 2));
    const Tensor m = make(*backend, DType::f32, Shape{n}, pattern(n, 3));
    std::vector<float> v0 = pattern(n, 4);
    for (float& x : v0) x = x * x;
    const Tensor v = make(*backend, DType::f32, Shape{n}, v0);
    const Tensor copy = make(*backend, DType::bf16, Shape{n}, std::vector<float>(n, 0.0f));
    backend->adamw_step(p, g, m, v, params, &copy);
    std::vector<float> all = read(*backend, p);
    for (const Tensor* t : {&m, &v, &copy}) {
      const std::vector<float> part = read(*backend, *t);
      all.insert(all.end(), part.begin(), part.end());
    }
    adam.push_back(all);
    const Tensor x = make(*backend, DType::bf16, Shape{n}, pattern(n, 5));
    backend->dropout(x, x, 0.3f, 12345);
    drop.push_back(read(*backend, x));
  }
  EXPECT_EQ(adam[0], adam[1]);
  EXPECT_EQ(drop[0], drop[1]);
}

TEST_F(CudaBackendTest, SumSquaresAndAllFinite) {
  const int64_t n = 300001;
  std::vector<float> values = pattern(n, 7);
  const Tensor x = make(*cuda_, DType::f32, Shape{n}, values);
  double want = 0.0;
  for (float v : values) want += static_cast<double>(v) * v;
  EXPECT_NEAR(cuda_->sum_squares(x), want, 1e-9 * want);
  EXPECT_TRUE(cuda_->all_finite(x));
  values[n - 1] = INFINITY;
  EXPECT_FALSE(cuda_->all_finite(make(*cuda_, DType::f32, Shape{n}, values)));
}

}  // namespace
}  // namespace anvil
