// ComputeWeights: the low-precision weights that a mixed-precision model
// (ModelOptions::compute_dtype = bf16) feeds its GEMMs. The f32 master weights stay the only
// state the optimizer, checkpoints and parallel layer see. Two ways to hold them:
//   own copies   (stages 0-2): one compute-dtype copy per group, cast from its master right
//                after the group's before_forward hook, so it always equals the current master
//                and nothing outside the model must refresh it;
//   bound        (ZeRO-3, ModelOptions::allocate_compute_copies = false): nothing is held; the
//                parallel layer gathers each group in the compute dtype (and its f32 parts in
//                f32) into transient storage and binds it (bind) before the group is used.
// Views: matrices and biases point into the compute-dtype weights; norm weights and the
// embedding table (a lookup, not a GEMM) are read in f32 (the masters, or the bound f32
// parts), so norms run with f32 weights and casting never changes a result.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/llama_parameters.h"

namespace anvil {

// The parts of one group a mixed-precision model reads in f32, and whether it reads any of
// the group in the compute dtype.
struct ComputeParts {
  struct Range {
    int param = -1;      // the parameter's index in the layout
    int64_t offset = 0;  // elements from the start of the group
    int64_t length = 0;
  };
  std::vector<Range> f32;  // in a fixed order: the packed order of bound f32 parts
  int64_t f32_numel = 0;   // the sum of the ranges' lengths
  bool reads_compute = false;  // matrices (or a tied head) read the compute-dtype group
  bool all_f32 = false;        // every parameter of the group is read in f32
};

class ComputeWeights {
 public:
  ComputeWeights() = default;
  // Prepares `dtype` weights for every group of `layout` on `backend`: one copy per group
  // when `own_copies`, none otherwise (each group is then bound before use).
  ComputeWeights(const LlamaConfig& config, std::shared_ptr<const ParameterLayout> layout,
                 Backend& backend, DType dtype, bool own_copies);

  // Returns which parts of `group` a model of `config` with `layout` reads in f32.
  static ComputeParts parts(const LlamaConfig& config, const ParameterLayout& layout, int group);

  // Returns whether the model computes through these views (false for an f32 model).
  bool enabled() const { return dtype_ != DType::f32; }
  // Returns whether each group has its own copy (false: the parallel layer binds them).
  bool owns_copies() const { return !copies_.empty(); }
  // Casts master group `group` (flat f32) into its copy when `cast`, and points the group's
  // views at the copy (matrices, biases) and at `master` (norms, embedding table). Own copies
  // only.
  void refresh(int group, const Tensor& master_group, const LlamaWeights& master, bool cast);
  // Points group `group`'s views at `compute` (the whole group in the compute dtype, layout
  // offsets; undefined when parts(group).reads_compute is false) and at `f32`, the group's
  // f32 parts packed in parts(group) order. Bound mode only; not owned.
  void bind(int group, const Tensor& compute, const Tensor& f32);
  // Returns the views the blocks compute with.
  const LlamaWeights& views() const { return views_; }
  // Returns group `group`'s copy as one flat tensor (own copies).
  Tensor group(int group) const;

 private:
  // Returns the view of master tensor `t` (inside `master_group`) translated into the copy.
  Tensor translate(const Tensor& t, const Tensor& master_group, int group) const;

  LlamaConfig config_;
  std::shared_ptr<const ParameterLayout> layout_;
  Backend* backend_ = nullptr;
  DType dtype_ = DType::f32;
  std::vector<Buffer> copies_;
  ParameterSet bound_;          // bound mode: the compute-dtype groups the layer binds
  LlamaWeights bound_views_;    // views of bound_
  LlamaWeights views_;
};

}  // namespace anvil
