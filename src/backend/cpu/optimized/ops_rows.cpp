// OptimizedOps row ops: embedding, rmsnorm, RoPE and the fused cross-entropy, whole and
// vocabulary-sharded. Rows are split across threads. Ids and targets are checked by the
// caller (Backend, op_rules.h); a bad one reads as a zero row or an ignored target, as in
// the reference.
// Reductions across rows (rmsnorm's weight gradient) use one partial per chunk, added in chunk
// order; the embedding scatter is split by columns so each thread adds its column range of
// every row in row order, which is deterministic and needs no atomics.
#include <algorithm>
#include <cstring>

#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/cpu/optimized/parallel.h"
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Rows per chunk such that a chunk holds at least ~16k elements.
int64_t row_grain(int64_t row_length) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_length));
}

void* element(void* base, DType dtype, int64_t index) {
  return static_cast<char*>(base) + index * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

void OptimizedOps::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  embedding_shard_forward(ids, table, out, 0);
}

void OptimizedOps::embedding_backward(const Tensor& ids, const Tensor& dout,
                                      const Tensor& dtable) {
  const int64_t N = ids.shape[0], V = dtable.shape[0], C = dtable.shape[1];
  scatter_rows(EmbeddingBackwardArgs{ids.i32(), dout.data, dtable.f32(), dout.dtype, N, C, 0, V});
}

void OptimizedOps::scatter_rows(const EmbeddingBackwardArgs& args) {
  // Columns in chunks of whole cache lines, each chunk scanning every row.
  const int64_t C = args.C;
  const int64_t lines = (C + 15) / 16;
  parallel_ranges(lines, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, args.N)),
                  [&](int64_t, int64_t begin, int64_t end) {
                    kernels_.embedding_backward(args, begin * 16, std::min(C, end * 16));
                  });
}

void OptimizedOps::embedding_shard_forward(const Tensor& ids, const Tensor& table,
                                           const Tensor& out, int64_t begin) {
  const int64_t N = ids.shape[0], Vs = table.shape[0], C = table.shape[1];
  const int32_t* id = ids.i32();
  const size_t out_row_bytes = static_cast<size_t>(C) * dtype_size(out.dtype);
  parallel_ranges(N, row_grain(C), [&](int64_t, int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const int64_t local = id[n] - begin;
      void* dst = element(out.data, out.dtype, n * C);
      if (local < 0 || local >= Vs) {
        std::memset(dst, 0, out_row_bytes);  // all-zero bits are +0 in f32, bf16 and f16
        continue;
      }
      kernels_.convert(element(table.data, table.dtype, local * C), table.dtype, dst,
                       out.dtype, C);
    }
  });
}

void OptimizedOps::embedding_shard_backward(const Tensor& ids, const Tensor& dout,
                                            const Tensor& dtable, int64_t begin) {
  const int64_t N = ids.shape[0], Vs = dtable.shape[0], C = dtable.shape[1];
  scatter_rows(
      EmbeddingBackwardArgs{ids.i32(), dout.data, dtable.f32(), dout.dtype, N, C, begin, Vs});
}

void OptimizedOps::rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                                   const Tensor& rstd, float eps) {
  const int64_t N = x.shape[0], C = x.shape[1];
  RmsnormArgs args{};
  args.x = x.data;
  args.weight = weight.data;
  args.out = out.data;
  args.rstd = rstd.f32();
  args.x_dtype = x.dtype;
  args.weight_dtype = weight.dtype;
  args.out_dtype = out.dtype;
  args.C = C;
  args.eps = eps;
  parallel_ranges(N, row_grain(C), [&](int64_t, int64_t begin, int64_t end) {
    kernels_.rmsnorm_forward(args, begin, end);
  });
}

void OptimizedOps::add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                                       const Tensor& weight, const Tensor& out,
                                       const Tensor& rstd, float eps) {
  // Two passes: on a CPU the rows are in cache for the second, so fusing gains little.
  add(a, b, sum);
  rmsnorm_forward(sum, weight, out, rstd, eps);
}

void OptimizedOps::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                    const Tensor& rstd, const Tensor& dx,
                                    const Tensor& dweight, const Tensor* dx_copy) {
  const int64_t N = x.shape[0], C = x.shape[1];
  RmsnormArgs args{};
  args.x = x.data;
  args.weight = weight.data;
  args.rstd = rstd.f32();
  args.dout = dout.data;
  args.dx = dx.data;
  args.x_dtype = x.dtype;
  args.weight_dtype = weight.dtype;
  args.dout_dtype = dout.dtype;
  args.dx_dtype = dx.dtype;
  args.C = C;
  const int64_t grain = row_grain(C);
  const int64_t chunks = range_chunks(N, grain);
  float* partials = scratch(dweight_partials_, chunks * C);
  std::fill(partials, partials + chunks * C, 0.0f);
  parallel_ranges(N, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
    kernels_.rmsnorm_backward(args, partials + chunk * C, begin, end);
  });
  for (int64_t chunk = 0; chunk < chunks; ++chunk)
    kernels_.add(dweight.f32(), DType::f32, partials + chunk * C, DType::f32, dweight.f32(),
                 DType::f32, C);
  if (dx_copy) cast(dx, *dx_copy);
}

void OptimizedOps::rotate(const Tensor& in, const Tensor& out,
                          const Tensor& positions, const RopeParams& params, float sin_sign) {
  const bool forward = sin_sign > 0.0f;
  const int64_t D = in.shape[3];
  const int32_t* pos = positions.i32();
  const int64_t rows = in.shape[0] * in.shape[1];
  if (rows == 0) return;
  const auto [lowest, highest] = std::minmax_element(pos, pos + rows);
  if (*lowest < 0 || *highest >= RopeTables::kMaxCachedPosition) {
    if (forward) return cpu_ref::rope_forward(in, out, positions, params);
    return cpu_ref::rope_backward(in, out, positions, params);
  }
  const RopeTables::View table = rope_tables_.get(D, params, *highest);
  const RopeArgs args{in.data,  out.data,  in.dtype,     out.dtype, pos,
                      table.cos, table.sin, in.shape[2], D,         sin_sign};
  parallel_ranges(rows, row_grain(in.shape[2] * D), [&](int64_t, int64_t begin, int64_t end) {
    kernels_.rope(args, begin, end);
  });
}

void OptimizedOps::rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                                const RopeParams& params) {
  rotate(x, out, positions, params, 1.0f);
}

void OptimizedOps::rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                                 const RopeParams& params) {
  rotate(dout, dx, positions, params, -1.0f);
}

void OptimizedOps::cross_entropy(const Tensor& logits, const Tensor& targets,
                                 const Tensor* loss_mask, int ignore_index,
                                 const Tensor& losses, const Tensor* dlogits, float grad_scale) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  const int32_t* target = targets.i32();
  const CrossEntropyArgs args{logits.data,
                              target,
                              loss_mask ? loss_mask->f32() : nullptr,
                              losses.f32(),
                              dlogits ? dlogits->data : nullptr,
                              logits.dtype,
                              dlogits ? dlogits->dtype : DType::f32,
                              V,
                              ignore_index,
                              grad_scale};
  // One f32 row of scratch per chunk, padded to whole vectors.
  const int64_t row_floats = (V + 15) / 16 * 16;
  float* rows = scratch(cross_entropy_rows_, range_chunks(N, row_grain(V)) * row_floats);
  parallel_ranges(N, row_grain(V), [&](int64_t chunk, int64_t begin, int64_t end) {
    kernels_.cross_entropy(args, rows + chunk * row_floats, begin, end);
  });
}

void OptimizedOps::cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets,
                                             int ignore_index, int64_t begin,
                                             const Tensor& stats) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  CrossEntropyShardArgs args{};
  args.logits = logits.data;
  args.targets = targets.i32();
  args.stats = stats.f32();
  args.logits_dtype = logits.dtype;
  args.Vs = Vs;
  args.vocab_begin = begin;
  args.ignore_index = ignore_index;
  parallel_ranges(N, row_grain(Vs), [&](int64_t, int64_t first, int64_t last) {
    kernels_.cross_entropy_shard_stats(args, first, last);
  });
}

void OptimizedOps::cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                                const Tensor* loss_mask, int ignore_index,
                                                int64_t begin, const Tensor& lse,
                                                const Tensor& dlogits, float grad_scale) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  CrossEntropyShardArgs args{};
  args.logits = logits.data;
  args.targets = targets.i32();
  args.loss_mask = loss_mask ? loss_mask->f32() : nullptr;
  args.lse = lse.f32();
  args.dlogits = dlogits.data;
  args.logits_dtype = logits.dtype;
  args.dlogits_dtype = dlogits.dtype;
  args.Vs = Vs;
  args.vocab_begin = begin;
  args.ignore_index = ignore_index;
  args.grad_scale = grad_scale;
  parallel_ranges(N, row_grain(Vs), [&](int64_t, int64_t first, int64_t last) {
    kernels_.cross_entropy_shard_backward(args, first, last);
  });
}

}  // namespace anvil::cpu_opt
