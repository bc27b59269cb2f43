// HostBatch: one step's samples in host memory (tokens, targets, loss mask and, with document
// masking, document ids) for `rows` samples of `seq` positions, filled from a SampleSource and
// viewed as the micro-batches the engine runs. The trainer keeps one for training and one for
// evaluation, so a step allocates nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "data/sample_source.h"
#include "model/batch.h"

namespace anvil {

class HostBatch {
 public:
  HostBatch(int64_t rows, int seq, bool with_doc_ids)
      : seq_(seq),
        tokens_(static_cast<size_t>(rows) * seq),
        targets_(tokens_.size()),
        loss_mask_(tokens_.size()),
        doc_ids_(with_doc_ids ? tokens_.size() : 0) {}

  // Fills rows [row, row + count) with samples [first, first + count) of `source`.
  void fill(SampleSource& source, int64_t row, int64_t first, int count) {
    const size_t offset = static_cast<size_t>(row) * seq_;
    const Shape shape{count, seq_};
    const Tensor doc_ids(doc_ids_.data() + (doc_ids_.empty() ? 0 : offset), DType::i32, shape);
    const Tensor loss_mask(loss_mask_.data() + offset, DType::f32, shape);
    source.fill(first, count, Tensor(tokens_.data() + offset, DType::i32, shape),
                Tensor(targets_.data() + offset, DType::i32, shape),
                doc_ids_.empty() ? nullptr : &doc_ids, &loss_mask);
  }

  // Makes the first loss-mask value a NaN (fault injection: test_asks_nan_at_step).
  void poison_loss_mask() { loss_mask_.front() = std::numeric_limits<float>::quiet_NaN(); }

  // Points `views` at rows [row, row + count) and returns the Batch that reads them.
  struct Views {
    Tensor tokens, targets, loss_mask, doc_ids;
  };
  Batch micro_batch(int64_t row, int count, Views& views) {
    const size_t offset = static_cast<size_t>(row) * seq_;
    const Shape shape{count, seq_};
    views.tokens = Tensor(tokens_.data() + offset, DType::i32, shape);
    views.targets = Tensor(targets_.data() + offset, DType::i32, shape);
    views.loss_mask = Tensor(loss_mask_.data() + offset, DType::f32, shape);
    Batch batch{views.tokens, views.targets, &views.loss_mask, nullptr};
    if (!doc_ids_.empty()) {
      views.doc_ids = Tensor(doc_ids_.data() + offset, DType::i32, shape);
      batch.doc_ids = &views.doc_ids;
    }
    return batch;
  }

 private:
  int seq_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> targets_;
  std::vector<float> loss_mask_;
  std::vector<int32_t> doc_ids_;
};

}  // namespace anvil
