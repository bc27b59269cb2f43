// FrozenBf16Base: the weight store of a LoRA model computing in bf16. The base is frozen, so
// no f32 master exists for its matrices: each group's matrices and biases live only in a bf16
// buffer with the layout's offsets, while norm weights and the embedding table (a lookup, and
// the f32 norms mixed precision promises) keep f32 storage of their own. Values are written
// once through set() (rounded to nearest even) and the views never move.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/llama_parameters.h"

namespace anvil {

class FrozenBf16Base {
 public:
  FrozenBf16Base() = default;
  // Allocates zeroed storage for every tensor of `layout` on `backend`.
  FrozenBf16Base(const LlamaConfig& config, std::shared_ptr<const ParameterLayout> layout,
                 Backend& backend);

  bool enabled() const { return layout_ != nullptr; }
  // Returns the views the blocks compute with.
  const LlamaWeights& views() const { return views_; }
  // Returns the storage tensor of parameter `index` (bf16 for matrices and biases, else f32).
  Tensor tensor(int index) const;
  // Writes parameter `index` from host f32 values (rounded when stored in bf16).
  void set(int index, const float* host);
  // Reads parameter `index` into host f32 values.
  void get(int index, float* host) const;
  // Returns the bytes held.
  size_t bytes() const;

 private:
  LlamaConfig config_;
  std::shared_ptr<const ParameterLayout> layout_;
  Backend* backend_ = nullptr;
  std::vector<Buffer> bf16_groups_;     // per group; empty for group 0 unless tied
  std::vector<Buffer> f32_tensors_;     // per parameter; empty unless stored in f32
  LlamaWeights views_;
};

}  // namespace anvil
