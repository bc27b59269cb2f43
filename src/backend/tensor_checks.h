// Argument checks every backend runs before an op touches memory, with one wording for all of
// them ("[rmsnorm] weight has shape (5), expected (8)"), so a bad call fails alike on the CPU
// and on an accelerator. Each backend wraps these with its own device type.
#pragma once

#include <initializer_list>

#include "backend/backend.h"
#include "core/tensor.h"

namespace anvil {

// Throws unless t lives on a device of type `device`, has data (or no elements) and one of
// the dtypes; `backend` names the backend in the message ("CPU", "CUDA").
void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes);
// Does check_op_tensor and also requires the exact shape.
void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes, const Shape& shape);
// Throws unless t has the given rank.
void check_op_rank(const Tensor& t, const char* op, const char* what, int rank);
// Throws unless attention_merge's tensors fit: out, part_out (B, Tq, Hq, D) of one activation
// dtype, lse, part_lse (B, Hq, Tq) f32, all on a `device` (`backend` names it in messages).
void check_attention_merge_args(DeviceType device, const char* backend, const Tensor& out,
                                const Tensor& lse, const Tensor& part_out,
                                const Tensor& part_lse);
// Throws unless the attention mask and offsets are consistent for a call with batch B, Tq
// queries and Tk keys: offsets, window and sinks >= 0, a segment for sparse patterns and a
// stride for strided, and doc_ids (when given) an i32 (B, L) tensor covering every query and
// key position.
void check_attention_params(const char* op, const AttentionParams& params, int64_t B,
                            int64_t Tq, int64_t Tk);

}  // namespace anvil
