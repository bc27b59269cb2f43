// ParameterLayout and ParameterSet: where every named parameter lives in flat memory.
// Parameters are grouped (for Llama: group 0 = embeddings, 1..L = transformer layers,
// L+1 = final norm and lm_head); each group is ONE contiguous f32 buffer and each parameter a
// view at a fixed offset inside it. The same layout is instantiated for master weights,
// gradients and the optimizer's moments, so a group's flat tensor is the unit that ZeRO
// slices, reduces and gathers. Offsets are aligned to kParameterAlignment elements; the gaps
// (and the tail padding of a group) are zero and never written by the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"

namespace anvil {

// Parameter offsets and group sizes are multiples of this many elements (64 bytes of f32).
inline constexpr int64_t kParameterAlignment = 16;

struct ParameterInfo {
  std::string name;  // Hugging Face checkpoint name, e.g. "model.layers.0.mlp.up_proj.weight"
  int group = 0;
  int64_t offset = 0;  // in elements from the start of the group buffer
  Shape shape;
  bool weight_decay = false;  // false for norms and biases (and embeddings when configured)
  // The dimension tensor parallelism cuts into equal contiguous blocks, one per tp rank (0:
  // rows, 1: columns); -1 when every tp rank holds the whole tensor.
  int split_dim = -1;

  int64_t numel() const { return shape.numel(); }
};

class ParameterLayout {
 public:
  // Appends a parameter at the aligned end of `group`; groups are created on first use and
  // must be used in increasing order. Throws on a duplicate name.
  void add(const std::string& name, int group, Shape shape, bool weight_decay,
           int split_dim = -1);

  // Appends empty groups until the layout has at least `count` groups (a layout whose group
  // numbering mirrors another one may leave some groups empty).
  void ensure_groups(int count);

  const std::vector<ParameterInfo>& params() const { return params_; }
  int group_count() const { return static_cast<int>(group_numel_.size()); }
  // Returns the padded element count of group g's buffer.
  int64_t group_numel(int group) const;
  // Returns the sum of all parameters' element counts (padding excluded).
  int64_t total_params() const;
  // Returns the index of the named parameter, or -1.
  int find(const std::string& name) const;
  // Returns the index of the named parameter; throws "[params] no parameter named ..." if absent.
  int index_of(const std::string& name) const;

 private:
  std::vector<ParameterInfo> params_;
  std::vector<int64_t> group_numel_;
  std::unordered_map<std::string, int> index_;
};

// One buffer per group of a layout, in one dtype (f32 for masters, gradients and optimizer
// state; bf16 for a frozen LoRA base held in bf16), allocated on a backend and zero-filled. A
// parallel layer may instead bind a group to storage it owns (a sharded or gathered buffer);
// the set then reads and writes that storage until it is rebound.
class ParameterSet {
 public:
  ParameterSet() = default;
  // Allocates and zeroes every group, counted under `category`, or allocates nothing when
  // `allocate` is false (each group must then be bound before use).
  ParameterSet(std::shared_ptr<const ParameterLayout> layout, Backend& backend,
               MemoryCategory category, bool allocate = true, DType dtype = DType::f32);

  const ParameterLayout& layout() const { return *layout_; }
  std::shared_ptr<const ParameterLayout> shared_layout() const { return layout_; }
  int group_count() const { return layout_->group_count(); }
  DType dtype() const { return dtype_; }
  // Returns group g as one flat tensor of dtype() of layout().group_numel(g) elements.
  Tensor group(int group) const;
  // Returns parameter i (layout order) as a view with its own shape.
  Tensor tensor(int index) const;
  // Returns the named parameter; throws if the layout has no such name.
  Tensor tensor(const std::string& name) const;
  // Sets every group that has storage to zero (padding included).
  void zero();
  // Points group g at `storage` (dtype(), at least group_numel(g) elements, on the set's backend;
  // not owned); an undefined tensor returns the group to its own buffer, if it has one.
  void bind(int group, const Tensor& storage);
  // Returns whether group g has storage (its own buffer or a bound tensor).
  bool has_storage(int group) const;

 private:
  std::shared_ptr<const ParameterLayout> layout_;
  Backend* backend_ = nullptr;
  DType dtype_ = DType::f32;
  std::vector<Buffer> groups_;  // empty buffers when the set was built without allocation
  std::vector<Tensor> bound_;   // external storage per group; undefined when not bound
};

// Writes `host` (t.numel() f32 values) into t: copied for f32, rounded to nearest even for bf16.
void write_f32_values(Backend& backend, const Tensor& t, const float* host);
// Reads t (f32 or bf16) into `host` as f32 values (bf16 widens exactly).
void read_f32_values(Backend& backend, const Tensor& t, float* host);

}  // namespace anvil
