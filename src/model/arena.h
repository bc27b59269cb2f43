// Arena: one device allocation carved into many tensors, made once when a model is built.
// build() runs a carve function twice: first to measure (views have null data), then, after
// the single allocation, to hand out real views at the same offsets. Nothing is freed or
// allocated afterwards, so a training step performs no allocation at all. measure() runs only
// the first pass, which is how `anvil plan` sizes an arena without allocating it.
#pragma once

#include <cstddef>

#include "core/buffer.h"

namespace anvil {

class Arena {
 public:
  // Measures with `carve(*this)`, allocates once from `allocator` (counted under
  // `category`), then carves for real.
  template <typename CarveFn>
  void build(Allocator& allocator, MemoryCategory category, CarveFn&& carve) {
    measuring_ = true;
    offset_ = 0;
    carve(*this);
    buffer_ = Buffer(allocator, offset_ > 0 ? offset_ : kAlignment, category);
    measuring_ = false;
    offset_ = 0;
    carve(*this);
  }

  // Returns the bytes build() would allocate for `carve`, allocating nothing (the views
  // `carve` receives have null data).
  template <typename CarveFn>
  static size_t measure(CarveFn&& carve) {
    Arena arena;
    carve(arena);
    return arena.offset_ > 0 ? arena.offset_ : kAlignment;
  }

  // Returns the next view of `shape`, aligned to kAlignment bytes (null data while measuring).
  Tensor take(DType dtype, Shape shape);
  // Carves `first(arena)` and `second(arena)` over the same bytes and moves past the larger:
  // for buffers whose lives never meet (the head's logits chunk and the layers' backward
  // scratch, say), so the arena holds the larger of the two, not their sum.
  template <typename First, typename Second>
  void overlay(First&& first, Second&& second) {
    const size_t start = offset_;
    first(*this);
    const size_t first_end = offset_;
    offset_ = start;
    second(*this);
    if (first_end > offset_) offset_ = first_end;
  }
  // Returns the bytes the arena holds.
  size_t bytes() const { return buffer_.bytes(); }

 private:
  static constexpr size_t kAlignment = 256;
  Buffer buffer_;
  size_t offset_ = 0;
  bool measuring_ = true;
};

}  // namespace anvil
