// Reference embedding lookup and its scatter-add backward, whole-table and vocabulary-sharded
// (tensor parallelism: a shard owns table rows [begin, begin + Vs) and treats every other id
// as a zero row). Every id is validated before any output is touched, so a bad id leaves
// out/dtable unchanged. The backward adds rows in id order, so repeated ids accumulate
// deterministically and a shard's gradient equals its rows of the whole-table gradient.
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {
namespace {

// Throws "[embedding] token id 70000 out of range [0, 32000) at position 3" for a bad id.
void check_ids(const Tensor& ids, int64_t vocab) {
  const int32_t* id = ids.i32();
  for (int64_t n = 0; n < ids.numel(); ++n)
    ANVIL_CHECK(id[n] >= 0 && id[n] < vocab,
                "[embedding] token id {} out of range [0, {}) at position {}", id[n], vocab, n);
}

// Throws "[embedding_shard] token id -1 is negative at position 3"; a shard accepts any
// non-negative id, since ids outside it are simply not its rows.
void check_shard_ids(const Tensor& ids, const char* op) {
  const int32_t* id = ids.i32();
  for (int64_t n = 0; n < ids.numel(); ++n)
    ANVIL_CHECK(id[n] >= 0, "[{}] token id {} is negative at position {}", op, id[n], n);
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t N = ids.shape[0], V = table.shape[0], C = table.shape[1];
  check_ids(ids, V);
  const int32_t* id = ids.i32();
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> row = read_floats(table, id[n] * C, C);
    write_floats(out, n * C, C, row.data());
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const int64_t N = ids.shape[0], V = dtable.shape[0], C = dtable.shape[1];
  check_ids(ids, V);
  const int32_t* id = ids.i32();
  float* table = dtable.f32();
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> row = read_floats(dout, n * C, C);
    for (int64_t c = 0; c < C; ++c) table[id[n] * C + c] += row[c];
  }
}

void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                             int64_t begin) {
  const char* op = "embedding_shard";
  const int64_t N = ids.shape[0], Vs = table.shape[0], C = table.shape[1];
  check_shard_ids(ids, op);
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
  const char* op = "embedding_shard_backward";
  const int64_t N = ids.shape[0], Vs = dtable.shape[0], C = dtable.shape[1];
  check_shard_ids(ids, op);
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
