// Reference embedding lookup and its scatter-add backward, whole-table and vocabulary-sharded
// (tensor parallelism: a shard owns table rows [begin, begin + Vs) and treats every other id
// as a zero row). Ids are checked by the caller (Backend, op_rules.h); an id outside the
// table reads as a zero row and adds nothing, the rule every backend's kernel follows. The
// backward adds rows in id order, so repeated ids accumulate deterministically and a shard's
// gradient equals its rows of the whole-table gradient.
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  embedding_shard_forward(ids, table, out, 0);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  embedding_shard_backward(ids, dout, dtable, 0);
}

void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                             int64_t begin) {
  const int64_t N = ids.shape[0], Vs = table.shape[0], C = table.shape[1];
  const int32_t* id = ids.i32();
  const std::vector<float> zeros(static_cast<size_t>(C), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t local = id[n] - begin;
    if (local < 0 || local >= Vs) {
      write_floats(out, n * C, C, zeros.data());
      continue;
    }
    const std::vector<float> row = read_floats(table, local * C, C);
    write_floats(out, n * C, C, row.data());
  }
}

void embedding_shard_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                              int64_t begin) {
  const int64_t N = ids.shape[0], Vs = dtable.shape[0], C = dtable.shape[1];
  const int32_t* id = ids.i32();
  float* table = dtable.f32();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t local = id[n] - begin;
    if (local < 0 || local >= Vs) continue;
    const std::vector<float> row = read_floats(dout, n * C, C);
    for (int64_t c = 0; c < C; ++c) table[local * C + c] += row[c];
  }
}

}  // namespace anvil::cpu_ref
