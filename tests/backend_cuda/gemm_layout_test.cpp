// plan_gemm_layout, checked without a GPU: a plain column-major, cuBLAS-semantics GEMM (transa,
// transb, leading dimensions, strided batches) runs on the planned layout over the row-major
// bytes of a and b, and must reproduce the row-major product c = op(a) @ op(b) exactly (small
// integers, so sums are exact). Covers every transpose pair, batching and a shared b.
#include "backend/cuda/gemm_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace anvil::cuda {
namespace {

std::vector<double> counting(int64_t count, int64_t seed) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<double>((i * 7 + seed) % 11) - 5.0;
  return values;
}

// Column-major D = op(A) op(B) as cuBLAS defines it, per batch item.
std::vector<double> column_major_gemm(const GemmLayout& l, const std::vector<double>& first,
                                      const std::vector<double>& second) {
  std::vector<double> d(static_cast<size_t>(l.batch * (l.c_stride ? l.c_stride : l.m * l.n)));
  for (int64_t p = 0; p < l.batch; ++p) {
    for (int64_t i = 0; i < l.m; ++i) {
      for (int64_t j = 0; j < l.n; ++j) {
        double sum = 0.0;
        for (int64_t k = 0; k < l.k; ++k) {
          const int64_t a_index = l.transpose_first ? k + i * l.first_ld : i + k * l.first_ld;
          const int64_t b_index = l.transpose_second ? j + k * l.second_ld : k + j * l.second_ld;
          sum += first[p * l.first_stride + a_index] * second[p * l.second_stride + b_index];
        }
        d[p * l.c_stride + i + j * l.c_ld] = sum;
      }
    }
  }
  return d;
}

// Row-major c = op(a) @ op(b) over the batch, b shared when rank 2.
std::vector<double> row_major_product(const Shape& a_shape, const Shape& b_shape, bool ta,
                                      bool tb, const std::vector<double>& a,
                                      const std::vector<double>& b) {
  const int64_t P = a_shape.rank() == 3 ? a_shape[0] : 1;
  const int64_t ar = a_shape.back(1), ac = a_shape.back(0);
  const int64_t br = b_shape.back(1), bc = b_shape.back(0);
  const int64_t M = ta ? ac : ar, K = ta ? ar : ac, N = tb ? br : bc;
  const bool shared = b_shape.rank() == 2;
  std::vector<double> c(static_cast<size_t>(P * M * N));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = a[p * ar * ac + (ta ? k * ac + i : i * ac + k)];
          const double bv = b[(shared ? 0 : p * br * bc) + (tb ? j * bc + k : k * bc + j)];
          sum += av * bv;
        }
        c[p * M * N + i * N + j] = sum;
      }
  return c;
}

void expect_layout_reproduces_product(const Shape& a_shape, const Shape& b_shape, bool ta,
                                      bool tb) {
  const std::vector<double> a = counting(a_shape.numel(), 3);
  const std::vector<double> b = counting(b_shape.numel(), 5);
  const GemmLayout layout = plan_gemm_layout(a_shape, b_shape, ta, tb);
  // cuBLAS's first operand is b's bytes, its second a's; D's bytes are row-major c.
  EXPECT_EQ(column_major_gemm(layout, b, a), row_major_product(a_shape, b_shape, ta, tb, a, b))
      << "a " << a_shape.str() << " b " << b_shape.str() << " ta " << ta << " tb " << tb;
}

TEST(GemmLayout, TwoDimensionalProductsForEveryTransposePair) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{5, 3} : Shape{3, 5};  // M = 3, K = 5
      const Shape b = tb ? Shape{7, 5} : Shape{5, 7};  // N = 7
      expect_layout_reproduces_product(a, b, ta, tb);
    }
}

TEST(GemmLayout, BatchedProductsUseStridedBatches) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{4, 5, 3} : Shape{4, 3, 5};
      const Shape b = tb ? Shape{4, 2, 5} : Shape{4, 5, 2};
      const GemmLayout layout = plan_gemm_layout(a, b, ta, tb);
      EXPECT_EQ(layout.batch, 4);
      EXPECT_EQ(layout.first_stride, 10);
      EXPECT_EQ(layout.second_stride, 15);
      EXPECT_EQ(layout.c_stride, 6);
      expect_layout_reproduces_product(a, b, ta, tb);
    }
}

TEST(GemmLayout, SharedBFoldsTheBatchIntoRowsUnlessAIsTransposed) {
  const GemmLayout folded = plan_gemm_layout(Shape{4, 3, 5}, Shape{5, 2}, false, false);
  EXPECT_EQ(folded.batch, 1);
  EXPECT_EQ(folded.n, 12);  // P * M rows of c
  EXPECT_EQ(folded.m, 2);
  const GemmLayout strided = plan_gemm_layout(Shape{4, 5, 3}, Shape{2, 5}, true, true);
  EXPECT_EQ(strided.batch, 4);
  EXPECT_EQ(strided.first_stride, 0);  // the shared b is re-read for every batch item
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      expect_layout_reproduces_product(ta ? Shape{4, 5, 3} : Shape{4, 3, 5},
                                       tb ? Shape{2, 5} : Shape{5, 2}, ta, tb);
}

TEST(GemmLayout, EdgeSizesOfOne) {
  expect_layout_reproduces_product(Shape{1, 1}, Shape{1, 1}, false, false);
  expect_layout_reproduces_product(Shape{1, 37}, Shape{37, 1}, false, false);
  expect_layout_reproduces_product(Shape{37, 1}, Shape{1, 37}, true, true);
  expect_layout_reproduces_product(Shape{1, 1, 9}, Shape{9, 3}, false, false);
}

TEST(GemmLayout, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  alignas(256) static unsigned char bytes[1024];
  EXPECT_EQ(pointer_alignment(bytes), 256);
  EXPECT_EQ(pointer_alignment(bytes + 512), 256);
  EXPECT_EQ(pointer_alignment(bytes + 2), 2);
  EXPECT_EQ(pointer_alignment(bytes + 1), 1);
  EXPECT_EQ(pointer_alignment(bytes + 48), 16);
  EXPECT_EQ(pointer_alignment(bytes + 128), 128);
}

}  // namespace
}  // namespace anvil::cuda
