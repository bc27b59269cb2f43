// Argument checks shared by every SampleSource implementation.
#include "data/sample_source.h"

#include "core/error.h"

namespace anvil {

void check_fill_tensors(int count, int seq_len, const Tensor& tokens, const Tensor& targets,
                        const Tensor* doc_ids, const Tensor* loss_mask) {
  ANVIL_CHECK(count >= 0, "[data] sample count must not be negative, got {}", count);
  const Shape shape{count, seq_len};
  const auto check = [&](const Tensor& t, DType dtype, const char* what) {
    ANVIL_CHECK(t.device.is_cpu(), "[data] {} must be a host tensor", what);
    ANVIL_CHECK(count == 0 || t.defined(), "[data] {} has no data pointer", what);
    check_shape(t, shape, what);
    check_dtype(t, dtype, what);
  };
  check(tokens, DType::i32, "tokens");
  check(targets, DType::i32, "targets");
  if (doc_ids != nullptr) check(*doc_ids, DType::i32, "doc_ids");
  if (loss_mask != nullptr) check(*loss_mask, DType::f32, "loss_mask");
}

}  // namespace anvil
