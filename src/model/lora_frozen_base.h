// Bf16BaseViews: the weights a LoRA model with a bf16 base computes with. The frozen base is a
// bf16 ParameterSet (half the bytes of f32, no master copy: nothing ever updates it); its
// matrices and biases are GEMM operands as they are and the embedding lookup reads the bf16
// table. Only the norm weights are cast into small f32 copies, because the rmsnorm ops take f32
// weights (as mixed precision promises), each time their group is about to be used: the base
// may just have been gathered into other storage by a parallel layer.
#pragma once

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/llama_parameters.h"

namespace anvil {

class Bf16BaseViews {
 public:
  Bf16BaseViews() = default;
  // Allocates the f32 norm copies: (2 * n_layers + 1) * dim floats.
  Bf16BaseViews(const LlamaConfig& config, Backend& backend);

  bool enabled() const { return backend_ != nullptr; }
  // Takes group `group`'s views from `stored` (views of the bf16 base) and casts its norms.
  void refresh(int group, const LlamaWeights& stored);
  // Returns the views the blocks compute with.
  const LlamaWeights& views() const { return views_; }
  // Returns the bytes the norm copies of a model of `config` take.
  static size_t planned_bytes(const LlamaConfig& config);

 private:
  // Casts `stored` (bf16, (dim)) into norm copy `index` and returns the copy.
  Tensor cast_norm(const Tensor& stored, int index);

  LlamaConfig config_;
  Backend* backend_ = nullptr;
  Buffer norms_;
  LlamaWeights views_;
};

}  // namespace anvil
