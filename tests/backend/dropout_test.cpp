// Conformance of the dropout op: the optimized CPU op equals the reference bit for bit (f32,
// bf16 and f16, in place and out of place), the reference equals the formula of core/counter_hash.h
// computed here independently, backward is the same op on the cotangent (so the gradient of
// sum(w * dropout(x)) is dropout(w)), and the keep rate is within 1% of 1 - p on 1e5 elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/counter_hash.h"
#include "core/dtype.h"

namespace anvil::test {
namespace {

// Returns n deterministic values in [-2, 2) that are exact in bf16 (and so in f16: none is
// below 2^-10, inside f16's normal range).
std::vector<float> inputs(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] =
        round_to_bf16(static_cast<float>((i * 7919 % 4001) - 2000) / 1000.0f);
  return x;
}

// Runs the op on `backend` over x stored as `dtype`; returns the f32 result.
std::vector<float> run(Backend& backend, const std::vector<float>& x, DType dtype, float p,
                       uint64_t seed, bool in_place) {
  const int64_t n = static_cast<int64_t>(x.size());
  Buffer in(backend, static_cast<size_t>(n) * dtype_size(dtype), MemoryCategory::workspace);
  Buffer out(backend, static_cast<size_t>(n) * dtype_size(dtype), MemoryCategory::workspace);
  const Tensor tin = in.as(dtype, Shape{n});
  const Tensor tout = in_place ? tin : out.as(dtype, Shape{n});
  std::vector<float> result(static_cast<size_t>(n));
  if (dtype == DType::f32) {
    backend.copy_from_host(tin, x.data());
    backend.dropout(tin, tout, p, seed);
    backend.copy_to_host(result.data(), tout);
    return result;
  }
  const bool bf16 = dtype == DType::bf16;
  std::vector<uint16_t> halves(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) halves[i] = bf16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
  backend.copy_from_host(tin, halves.data());
  backend.dropout(tin, tout, p, seed);
  backend.copy_to_host(halves.data(), tout);
  for (int64_t i = 0; i < n; ++i)
    result[i] = bf16 ? bf16_to_float(halves[i]) : f16_to_float(halves[i]);
  return result;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DropoutTest, OptimizedEqualsReferenceAndTheFormula) {
  auto reference = make_backend("cpu-ref");
  auto optimized = make_backend("cpu");
  const std::vector<float> x = inputs(70001);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      const uint64_t seed = 0xABCDEF12345ull;
      const std::vector<float> ref = run(*reference, x, dtype, p, seed, false);
      EXPECT_TRUE(same_bits(ref, run(*optimized, x, dtype, p, seed, false)));
      EXPECT_TRUE(same_bits(ref, run(*optimized, x, dtype, p, seed, true)));
      EXPECT_TRUE(same_bits(ref, run(*reference, x, dtype, p, seed, true)));
      const float keep_scale = 1.0f / (1.0f - p);
      for (size_t i = 0; i < x.size(); ++i) {
        const bool keep = (dropout_hash(seed, i) >> 40) >= static_cast<uint64_t>(p * 16777216.0);
        float expected = keep ? x[i] * keep_scale : 0.0f;
        if (dtype == DType::bf16) expected = round_to_bf16(expected);
        if (dtype == DType::f16) expected = f16_to_float(float_to_f16(expected));
        ASSERT_EQ(ref[i], expected) << "element " << i;
      }
    }
  }
}

TEST(DropoutTest, BackwardIsTheSameOpOnTheCotangent) {
  // L = sum_i w_i * dropout(x)_i, so dL/dx_i = keep_i * w_i / (1 - p) = dropout(w)_i.
  auto backend = make_backend("cpu");
  const float p = 0.3f;
  const uint64_t seed = 77;
  const std::vector<float> x = inputs(5000);
  std::vector<float> w(x.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + static_cast<float>(i % 13) / 8.0f;
  const std::vector<float> grad = run(*backend, w, DType::f32, p, seed, false);
  const std::vector<float> forward = run(*backend, x, DType::f32, p, seed, false);
  for (size_t i = 0; i < x.size(); ++i) {
    // A dropped input has zero gradient; a kept one has w / (1 - p).
    const bool kept = forward[i] != 0.0f || x[i] == 0.0f;
    if (x[i] == 0.0f) continue;
    EXPECT_EQ(grad[i], kept ? w[i] * (1.0f / (1.0f - p)) : 0.0f) << i;
  }
}

TEST(DropoutTest, KeepRateIsOneMinusP) {
  auto backend = make_backend("cpu");
  const int64_t n = 100000;
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  for (float p : {0.05f, 0.1f, 0.5f, 0.9f}) {
    for (uint64_t seed : {1ull, 12345ull}) {
      const std::vector<float> out = run(*backend, ones, DType::f32, p, seed, false);
      int64_t kept = 0;
      for (float v : out) kept += v != 0.0f;
      EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01) << "p " << p;
    }
  }
  // Different seeds give different masks.
  EXPECT_FALSE(same_bits(run(*backend, ones, DType::f32, 0.5f, 1, false),
                         run(*backend, ones, DType::f32, 0.5f, 2, false)));
}

TEST(DropoutTest, RejectsBadArguments) {
  auto backend = make_backend("cpu");
  for (const char* name : {"cpu", "cpu-ref"}) {
    auto b = make_backend(name);
    Buffer buffer(*b, 64 * sizeof(float), MemoryCategory::workspace);
    const Tensor t = buffer.as(DType::f32, Shape{16});
    EXPECT_THROW(b->dropout(t, t, 1.0f, 0), Error);
    EXPECT_THROW(b->dropout(t, t, -0.1f, 0), Error);
    EXPECT_THROW(b->dropout(t, buffer.as(DType::f32, Shape{8}), 0.1f, 0), Error);
  }
}

}  // namespace
}  // namespace anvil::test
