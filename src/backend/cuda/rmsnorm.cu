// RMSNorm forward (optionally with the residual add fused in) and backward, one launch each,
// in f32 with the reference's formulas: rstd = 1/sqrt(mean(x^2) + eps), out = weight * (x *
// rstd), dx += rstd * (dout * weight) - x * coeff with coeff = mean(dout * weight * x) *
// rstd^3, dweight += sum over rows of dout * (x * rstd). Every product and sum is an explicit
// intrinsic (__fmul_rn, __fadd_rn, __fmaf_rn), so no instantiation's arithmetic differs from
// another's: add_rmsnorm_forward equals add then rmsnorm_forward bit for bit.
// Rows: thread t of a block owns packs t, t + T, ... of a row (kernel_plan.h's row threads), keeps
// its first pack in registers between the row's reduction and its second use, and reduces in a
// fixed order (per-thread packs, then block_sum's tree): deterministic.
// Backward: a grid of plan.blocks blocks, each taking every blocks-th row; each thread keeps its
// columns' dweight sums, so a block's partial row needs no atomics. The partial rows are summed
// in a fixed order by the last block of each group and then by the last group (threadfence +
// atomic ticket counters, reset by their last user so the next launch finds them zero).
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

struct ForwardArgs {
  ConstArray a;      // x, or the residual add's first term
  ConstArray b;      // the residual add's second term (unused without the add)
  MutableArray sum;  // a + b (unused without the add)
  ConstArray weight;
  MutableArray out;
  float* rstd;
  int64_t cols;
  float eps;
  bool vectorized;
};

// Loads (or, with the add, computes and stores) the row values of pack p: what rmsnorm reads.
template <bool kAdd, class A, class B, class S>
__device__ __forceinline__ void row_values(const ForwardArgs& args, const Pack& p,
                                           float (&v)[kPackElements]) {
  if constexpr (kAdd) {
    float other[kPackElements];
    load_pack<A>(args.a, p, v);
    load_pack<B>(args.b, p, other);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) v[i] = __fadd_rn(v[i], other[i]);
    store_pack<S>(args.sum, p, v);
    round_pack<S>(args.sum.dtype, v);  // the norm reads the sum as stored
  } else {
    load_pack<A>(args.a, p, v);
  }
}

template <bool kAdd, class A, class B, class S, class W, class O>
__global__ void __launch_bounds__(kMaxRowThreads) rmsnorm_forward_kernel(ForwardArgs args) {
  const int64_t row = blockIdx.x, cols = args.cols;
  const int64_t row_first = row * cols;
  const int64_t packs = (cols + kPackElements - 1) / kPackElements;
  const int t = threadIdx.x;
  float cached[kPackElements], cached_w[kPackElements];
  if (t < packs) load_pack<W>(args.weight, row_pack(0, cols, t, args.vectorized), cached_w);
  float sum_sq = 0.0f;
  for (int64_t j = t; j < packs; j += blockDim.x) {
    const Pack p = row_pack(row_first, cols, j, args.vectorized);
    float v[kPackElements];
    row_values<kAdd, A, B, S>(args, p, v);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) {
      sum_sq = __fmaf_rn(v[i], v[i], sum_sq);
      if (j == t) cached[i] = v[i];
    }
  }
  sum_sq = block_sum(sum_sq);
  const float mean_sq = __fdiv_rn(sum_sq, static_cast<float>(cols));
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, args.eps)));
  for (int64_t j = t; j < packs; j += blockDim.x) {
    const Pack p = row_pack(row_first, cols, j, args.vectorized);
    float v[kPackElements], w[kPackElements];
    if (j == t) {
#pragma unroll
      for (int i = 0; i < kPackElements; ++i) v[i] = cached[i], w[i] = cached_w[i];
    } else {
      if constexpr (kAdd)
        load_pack<S>(args.sum, p, v);  // this thread's own store above
      else
        load_pack<A>(args.a, p, v);
      load_pack<W>(args.weight, row_pack(0, cols, j, args.vectorized), w);
    }
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) v[i] = __fmul_rn(w[i], __fmul_rn(v[i], r));
    store_pack<O>(args.out, p, v);
  }
  if (t == 0) args.rstd[row] = r;
}

struct BackwardArgs {
  ConstArray dout, x, weight;
  const float* rstd;
  MutableArray dx;
  MutableArray dx_copy;  // data null: none
  float* dweight;
  int64_t rows, cols;
  bool vectorized;
  int groups;
  float* partials;    // (blocks, cols)
  float* group_sums;  // (groups, cols)
  unsigned* counters;  // groups + 1, zero on entry and on exit
};

// dx += ... for one pack (g, x, w and dx loaded into d) and the pack's dweight terms into acc.
template <class DX>
__device__ __forceinline__ void backward_pack(const BackwardArgs& args, const Pack& p,
                                              const float (&g)[kPackElements],
                                              const float (&x)[kPackElements],
                                              const float (&w)[kPackElements], float r,
                                              float coeff, float (&d)[kPackElements],
                                              float (&acc)[kPackElements]) {
#pragma unroll
  for (int i = 0; i < kPackElements; ++i) {
    const float gw = __fmul_rn(g[i], w[i]);
    d[i] = __fadd_rn(d[i], __fsub_rn(__fmul_rn(r, gw), __fmul_rn(x[i], coeff)));
    acc[i] = __fmaf_rn(g[i], __fmul_rn(x[i], r), acc[i]);
  }
  round_pack<DX>(args.dx.dtype, d);  // the copy rounds dx as stored
  store_pack<DX>(args.dx, p, d);
  if (args.dx_copy.data) store_pack<AnyFloat>(args.dx_copy, p, d);
}

// Adds `count` rows of `cols` floats at `rows_base` column by column in row order into
// `target` (=, or += when accumulate). Reads bypass L1: other blocks wrote them.
__device__ void sum_rows(const float* rows_base, int count, int64_t cols, float* target,
                         bool accumulate) {
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float total = 0.0f;
    for (int k = 0; k < count; ++k) total = __fadd_rn(total, __ldcg(rows_base + k * cols + c));
    target[c] = accumulate ? __fadd_rn(target[c], total) : total;
  }
}

// Returns (to every thread) whether this block drew the last ticket of `counter` among
// `participants`; the last one resets the counter for the next launch. Every thread's global
// writes before the call are visible to the block that returns true.
__device__ bool last_to_arrive(unsigned* counter, unsigned participants) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(counter, 1u);
    last = ticket == participants - 1;
    if (last) *counter = 0;  // every participant has drawn: nobody touches it again
  }
  __syncthreads();
  return last;
}

// kOnePack: every row fits in one pack per thread (cols <= 8 * blockDim), so the loops over
// further packs are compiled out (they would cost registers the common case needs).
template <bool kOnePack, class G, class X, class W, class DX>
__global__ void __launch_bounds__(kMaxRowThreads) rmsnorm_backward_kernel(BackwardArgs args) {
  const int64_t cols = args.cols;
  const int64_t packs = (cols + kPackElements - 1) / kPackElements;
  const int t = threadIdx.x;
  const bool has_first = t < packs;  // pack t of every row stays in registers
  const Pack first_cols = row_pack(0, cols, t, args.vectorized);
  float w0[kPackElements], acc0[kPackElements];
#pragma unroll
  for (int i = 0; i < kPackElements; ++i) acc0[i] = 0.0f;
  if (has_first) load_pack<W>(args.weight, first_cols, w0);
  // Packs beyond a thread's first (rows over 8 * blockDim columns) sum into the partial row.
  float* partial = args.partials + blockIdx.x * cols;
  const int64_t further = kOnePack ? packs : t + blockDim.x;  // this thread's packs past t
  for (int64_t j = further; j < packs; j += blockDim.x) {
    const float zeros[kPackElements] = {};
    store_pack<F32>(partial, DType::f32, row_pack(0, cols, j, false), zeros);
  }
  for (int64_t row = blockIdx.x; row < args.rows; row += gridDim.x) {
    const int64_t row_first = row * cols;
    const float r = args.rstd[row];
    float g0[kPackElements], x0[kPackElements], d0[kPackElements];
    float dot = 0.0f;
    if (has_first) {
      const Pack p = row_pack(row_first, cols, t, args.vectorized);
      load_pack<G>(args.dout, p, g0);
      load_pack<X>(args.x, p, x0);
      load_pack<DX>(args.dx, p, d0);  // in flight during the row's reduction
#pragma unroll
      for (int i = 0; i < kPackElements; ++i) dot = __fmaf_rn(__fmul_rn(g0[i], w0[i]), x0[i], dot);
    }
    for (int64_t j = further; j < packs; j += blockDim.x) {
      const Pack p = row_pack(row_first, cols, j, args.vectorized);
      float g[kPackElements], x[kPackElements], w[kPackElements];
      load_pack<G>(args.dout, p, g);
      load_pack<X>(args.x, p, x);
      load_pack<W>(args.weight, row_pack(0, cols, j, args.vectorized), w);
#pragma unroll
      for (int i = 0; i < kPackElements; ++i) dot = __fmaf_rn(__fmul_rn(g[i], w[i]), x[i], dot);
    }
    dot = block_sum(dot);
    const float coeff =
        __fmul_rn(__fdiv_rn(dot, static_cast<float>(cols)), __fmul_rn(__fmul_rn(r, r), r));
    if (has_first) {
      const Pack p = row_pack(row_first, cols, t, args.vectorized);
      backward_pack<DX>(args, p, g0, x0, w0, r, coeff, d0, acc0);
    }
    for (int64_t j = further; j < packs; j += blockDim.x) {
      const Pack p = row_pack(row_first, cols, j, args.vectorized);
      const Pack at = row_pack(0, cols, j, false);
      float g[kPackElements], x[kPackElements], w[kPackElements], d[kPackElements];
      float acc[kPackElements];
      load_pack<G>(args.dout, p, g);
      load_pack<X>(args.x, p, x);
      load_pack<W>(args.weight, row_pack(0, cols, j, args.vectorized), w);
      load_pack<DX>(args.dx, p, d);
      load_pack<F32>(partial, DType::f32, at, acc);
      backward_pack<DX>(args, p, g, x, w, r, coeff, d, acc);
      store_pack<F32>(partial, DType::f32, at, acc);
    }
  }
  if (has_first) store_pack<F32>(partial, DType::f32, row_pack(0, cols, t, false), acc0);

  // dweight: the group's partial rows in block order, then the group sums in group order.
  const int group = blockIdx.x / kRmsnormGroupBlocks;
  const int group_first = group * kRmsnormGroupBlocks;
  const int group_size = min(kRmsnormGroupBlocks, static_cast<int>(gridDim.x) - group_first);
  if (!last_to_arrive(&args.counters[group], group_size)) return;
  sum_rows(args.partials + group_first * cols, group_size, cols, args.group_sums + group * cols,
           false);
  if (!last_to_arrive(&args.counters[args.groups], args.groups)) return;
  sum_rows(args.group_sums, args.groups, cols, args.dweight, true);
}

using ForwardKernel = void (*)(ForwardArgs);

void launch_forward(ForwardKernel kernel, const ForwardArgs& args, int64_t rows,
                    cudaStream_t stream) {
  if (rows == 0 || args.cols == 0) return;
  kernel<<<static_cast<unsigned>(rows), row_block_threads(args.cols), 0, stream>>>(args);
}

}  // namespace

void launch_rmsnorm_forward(ConstArray x, ConstArray weight, MutableArray out, float* rstd,
                            int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  const ForwardArgs args{x, x, out, weight, out, rstd, cols, eps,
                         rows_vectorized(cols, {accessed(x), accessed(weight), accessed(out)})};
  ForwardKernel kernel = rmsnorm_forward_kernel<false, AnyFloat, AnyFloat, AnyFloat, AnyFloat,
                                                AnyFloat>;
  const DType xd = x.dtype, wd = weight.dtype, od = out.dtype;
  if (xd == DType::f32 && wd == DType::f32 && od == DType::f32)
    kernel = rmsnorm_forward_kernel<false, F32, F32, F32, F32, F32>;
  else if (xd == DType::f32 && wd == DType::bf16 && od == DType::bf16)
    kernel = rmsnorm_forward_kernel<false, F32, F32, F32, Bf16, Bf16>;
  else if (xd == DType::bf16 && wd == DType::bf16 && od == DType::bf16)
    kernel = rmsnorm_forward_kernel<false, Bf16, F32, F32, Bf16, Bf16>;
  launch_forward(kernel, args, rows, stream);
}

void launch_add_rmsnorm_forward(ConstArray a, ConstArray b, MutableArray sum, ConstArray weight,
                                MutableArray out, float* rstd, int64_t rows, int64_t cols,
                                float eps, cudaStream_t stream) {
  const ForwardArgs args{
      a, b, sum, weight, out, rstd, cols, eps,
      rows_vectorized(cols, {accessed(a), accessed(b), accessed(sum), accessed(weight),
                             accessed(out)})};
  ForwardKernel kernel = rmsnorm_forward_kernel<true, AnyFloat, AnyFloat, AnyFloat, AnyFloat,
                                                AnyFloat>;
  const bool f32_residual =
      a.dtype == DType::f32 && b.dtype == DType::f32 && sum.dtype == DType::f32;
  if (f32_residual && weight.dtype == DType::f32 && out.dtype == DType::f32)
    kernel = rmsnorm_forward_kernel<true, F32, F32, F32, F32, F32>;
  else if (f32_residual && weight.dtype == DType::bf16 && out.dtype == DType::bf16)
    kernel = rmsnorm_forward_kernel<true, F32, F32, F32, Bf16, Bf16>;
  launch_forward(kernel, args, rows, stream);
}

void launch_rmsnorm_backward(ConstArray dout, ConstArray x, ConstArray weight, const float* rstd,
                             MutableArray dx, MutableArray dx_copy, float* dweight, int64_t rows,
                             int64_t cols, const RmsnormBackwardPlan& plan, void* workspace,
                             unsigned* counters, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  auto* floats = static_cast<float*>(workspace);
  const BackwardArgs args{
      dout, x, weight, rstd, dx, dx_copy, dweight, rows, cols,
      rows_vectorized(cols, {accessed(dout), accessed(x), accessed(weight), accessed(dx),
                             accessed(dx_copy)}),
      plan.groups, floats, floats + plan.partial_floats, counters};
  const bool one_pack = cols <= int64_t{kPackElements} * plan.threads;
  const bool f32_rows =
      dout.dtype == DType::f32 && x.dtype == DType::f32 && dx.dtype == DType::f32;
  void (*kernel)(BackwardArgs) =
      one_pack ? rmsnorm_backward_kernel<true, AnyFloat, AnyFloat, AnyFloat, AnyFloat>
               : rmsnorm_backward_kernel<false, AnyFloat, AnyFloat, AnyFloat, AnyFloat>;
  if (one_pack && f32_rows && weight.dtype == DType::f32)
    kernel = rmsnorm_backward_kernel<true, F32, F32, F32, F32>;
  else if (one_pack && f32_rows && weight.dtype == DType::bf16)
    kernel = rmsnorm_backward_kernel<true, F32, F32, Bf16, F32>;
  kernel<<<static_cast<unsigned>(plan.blocks), plan.threads, 0, stream>>>(args);
}

}  // namespace anvil::cuda
