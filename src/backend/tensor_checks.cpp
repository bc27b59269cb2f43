// The shared op argument checks (see tensor_checks.h).
#include "backend/tensor_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace anvil {

namespace {

std::string device_name(const Device& d) {
  return d.type == DeviceType::cpu ? std::string("the host") : fmt::format("cuda:{}", d.index);
}

}  // namespace

void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes) {
  ANVIL_CHECK(t.device.type == device, "[{}] {} lives on {}; the {} backend takes {} tensors only",
              op, what, device_name(t.device), backend,
              device == DeviceType::cpu ? "host" : "device");
  ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[{}] {} has no data", op, what);
  for (DType d : dtypes) {
    if (d == t.dtype) return;
  }
  // Only a failing check builds the list: ops run this on every call of a training step.
  std::string choices;
  for (DType d : dtypes) choices += (choices.empty() ? "" : " or ") + std::string(dtype_name(d));
  ANVIL_FAIL("[{}] {} has dtype {}, expected {}", op, what, dtype_name(t.dtype), choices);
}

void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes, const Shape& shape) {
  check_op_tensor(t, device, backend, op, what, dtypes);
  ANVIL_CHECK(t.shape == shape, "[{}] {} has shape {}, expected {}", op, what, t.shape.str(),
              shape.str());
}

void check_op_rank(const Tensor& t, const char* op, const char* what, int rank) {
  ANVIL_CHECK(t.shape.rank() == rank, "[{}] {} must have rank {}, got shape {}", op, what, rank,
              t.shape.str());
}

void check_attention_merge_args(DeviceType device, const char* backend, const Tensor& out,
                                const Tensor& lse, const Tensor& part_out,
                                const Tensor& part_lse) {
  const char* op = "attention_merge";
  check_op_tensor(out, device, backend, op, "out", {DType::f32, DType::bf16, DType::f16});
  check_op_rank(out, op, "out", 4);
  check_op_tensor(part_out, device, backend, op, "part_out", {out.dtype}, out.shape);
  const Shape lse_shape{out.shape[0], out.shape[2], out.shape[1]};
  check_op_tensor(lse, device, backend, op, "lse", {DType::f32}, lse_shape);
  check_op_tensor(part_lse, device, backend, op, "part_lse", {DType::f32}, lse_shape);
}

void check_attention_params(const char* op, const AttentionParams& params, int64_t B,
                            int64_t Tq, int64_t Tk) {
  ANVIL_CHECK(params.q_offset >= 0 && params.k_offset >= 0,
              "[{}] q_offset and k_offset must be >= 0, got {} and {}", op, params.q_offset,
              params.k_offset);
  ANVIL_CHECK(params.window >= 0, "[{}] window must be >= 0, got {}", op, params.window);
  ANVIL_CHECK(params.sinks >= 0, "[{}] sinks must be >= 0, got {}", op, params.sinks);
  if (params.pattern != SparsePattern::dense)
    ANVIL_CHECK(params.segment > 0, "[{}] a sparse pattern needs a segment length > 0, got {}",
                op, params.segment);
  if (params.pattern == SparsePattern::strided)
    ANVIL_CHECK(params.stride > 0, "[{}] the strided pattern needs a stride > 0, got {}", op,
                params.stride);
  if (!params.doc_ids) return;
  const Tensor& doc = *params.doc_ids;
  const int64_t needed = std::max<int64_t>(params.q_offset + Tq, params.k_offset + Tk);
  ANVIL_CHECK(doc.dtype == DType::i32 && doc.shape.rank() == 2 && doc.shape[0] == B &&
                  doc.shape[1] >= needed,
              "[{}] doc_ids must be i32 (B = {}, L >= {}) to cover every position, got {} {}",
              op, B, needed, dtype_name(doc.dtype), doc.shape.str());
}

}  // namespace anvil
