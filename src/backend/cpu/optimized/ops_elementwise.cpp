// OptimizedOps elementwise ops, reductions, SwiGLU and AdamW: the SIMD kernels over
// per-thread element ranges, for f32, bf16 and f16 storage alike. Mixed-dtype SwiGLU runs the
// reference loops.
#include <cmath>
#include <vector>

#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/cpu/optimized/parallel.h"
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Elements per thread below which splitting costs more than it saves.
constexpr int64_t kElementGrain = 16384;

// Returns `base` advanced by `elements` elements of `dtype`.
void* offset(void* base, DType dtype, int64_t elements) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

void OptimizedOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  parallel_ranges(a.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.add(offset(a.data, a.dtype, begin), a.dtype, offset(b.data, b.dtype, begin), b.dtype,
                 offset(out.data, out.dtype, begin), out.dtype, end - begin);
  });
}

void OptimizedOps::scale(const Tensor& x, float alpha) {
  parallel_ranges(x.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.scale(offset(x.data, x.dtype, begin), x.dtype, alpha, end - begin);
  });
}

void OptimizedOps::axpy(float alpha, const Tensor& x, const Tensor& y) {
  parallel_ranges(x.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.axpy(alpha, offset(x.data, x.dtype, begin), x.dtype, offset(y.data, y.dtype, begin),
                  y.dtype, end - begin);
  });
}

void OptimizedOps::cast(const Tensor& src, const Tensor& dst) {
  parallel_ranges(src.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.convert(offset(src.data, src.dtype, begin), src.dtype,
                     offset(dst.data, dst.dtype, begin), dst.dtype, end - begin);
  });
}

double OptimizedOps::sum_squares(const Tensor& x) {
  // One partial per chunk, added in chunk order: the same thread count gives the same bits.
  constexpr int kMaxChunks = 1024;
  double partials[kMaxChunks] = {};
  const int64_t grain = std::max<int64_t>(kElementGrain, (x.numel() + kMaxChunks - 1) / kMaxChunks);
  parallel_ranges(x.numel(), grain, [&](int64_t chunk, int64_t begin, int64_t end) {
    partials[chunk] = kernels_.sum_squares(offset(x.data, x.dtype, begin), x.dtype, end - begin);
  });
  double total = 0.0;
  for (int64_t c = 0; c < range_chunks(x.numel(), grain); ++c) total += partials[c];
  return total;
}

bool OptimizedOps::all_finite(const Tensor& x) {
  bool finite = true;
  parallel_ranges(x.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    if (!kernels_.all_finite(offset(x.data, x.dtype, begin), x.dtype, end - begin)) {
#pragma omp atomic write
      finite = false;
    }
  });
  return finite;
}

void OptimizedOps::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (up.dtype != gate.dtype || out.dtype != gate.dtype)
    return cpu_ref::swiglu_forward(gate, up, out);
  const DType dt = gate.dtype;
  parallel_ranges(gate.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.swiglu_forward(offset(gate.data, dt, begin), offset(up.data, dt, begin),
                            offset(out.data, dt, begin), dt, end - begin);
  });
}

void OptimizedOps::swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                   const Tensor& dgate, const Tensor& dup) {
  const DType dt = gate.dtype;
  if (up.dtype != dt || dout.dtype != dt || dgate.dtype != dt || dup.dtype != dt)
    return cpu_ref::swiglu_backward(dout, gate, up, dgate, dup);
  parallel_ranges(gate.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.swiglu_backward(offset(dout.data, dt, begin), offset(gate.data, dt, begin),
                             offset(up.data, dt, begin), offset(dgate.data, dt, begin),
                             offset(dup.data, dt, begin), dt, end - begin);
  });
}

void OptimizedOps::adamw_step(std::span<const AdamWTensors> sets, const AdamWParams& params) {
  for (const AdamWTensors& set : sets) {
    const AdamWScalars k = adamw_scalars(params, set.weight_decay);
    const bool has_copy = set.param_copy.defined();
    const DType copy_dtype = has_copy ? set.param_copy.dtype : DType::f32;
    parallel_ranges(set.param.numel(), kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
      kernels_.adamw(set.param.f32() + begin, set.grad.f32() + begin, set.m.f32() + begin,
                     set.v.f32() + begin, k,
                     has_copy ? offset(set.param_copy.data, copy_dtype, begin) : nullptr,
                     copy_dtype, end - begin);
    });
  }
}

void OptimizedOps::sum_to_double(const Tensor& x, const Tensor& result) {
  cpu_ref::sum_to_double(x, result);  // a serial sum in element order is the definition
}

}  // namespace anvil::cpu_opt
