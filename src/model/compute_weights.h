// ComputeWeights: the low-precision copies of the weights that a mixed-precision model
// (ModelOptions::compute_dtype = bf16) feeds its GEMMs. The f32 master weights stay the only
// state the optimizer, checkpoints and parallel layer see; each group's copy is cast from its
// master right after the group's before_forward hook, so it always equals the current master
// (also when a parallel layer just gathered it) and nothing outside the model must refresh
// it. Views: matrices and biases point into the copies; norm weights and the embedding table
// (a lookup, not a GEMM) stay the f32 master views, so norms run with f32 weights.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/llama_parameters.h"

namespace anvil {

class ComputeWeights {
 public:
  ComputeWeights() = default;
  // Allocates one `dtype` copy per group of `layout` on `backend`.
  ComputeWeights(const LlamaConfig& config, std::shared_ptr<const ParameterLayout> layout,
                 Backend& backend, DType dtype);

  // Returns whether copies exist (false for an f32 model, which computes on its masters).
  bool enabled() const { return !copies_.empty(); }
  // Casts master group `group` (flat f32) into its copy when `cast`, and points the group's
  // views at the copy (matrices, biases) and at `master` (norms, embedding table).
  void refresh(int group, const Tensor& master_group, const LlamaWeights& master, bool cast);
  // Returns the views the blocks compute with.
  const LlamaWeights& views() const { return views_; }
  // Returns group `group`'s copy as one flat tensor.
  Tensor group(int group) const;

 private:
  // Returns the view of master tensor `t` (inside `master_group`) translated into the copy.
  Tensor translate(const Tensor& t, const Tensor& master_group, int group) const;

  LlamaConfig config_;
  std::shared_ptr<const ParameterLayout> layout_;
  Backend* backend_ = nullptr;
  DType dtype_ = DType::f32;
  std::vector<Buffer> copies_;
  LlamaWeights views_;
};

}  // namespace anvil
