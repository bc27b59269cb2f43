// Cached RoPE cos/sin tables. The reference computes cos(f32(pos) * inv_freq[i]) and the sin
// in f32 for every element; the values depend only on (position, i), so the optimized rope
// looks them up instead. A table covers positions [0, capacity) for one (head_dim, RopeParams)
// and grows (to a power of two) when a larger position appears, so a training run builds it
// once; values are computed exactly as the reference computes them, hence bit-identical. The
// tables are the backend's memory, counted as workspace (they grow with the context length).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"

namespace anvil::cpu_opt {

class RopeTables {
 public:
  // Takes the tables' memory from `memory` (the backend, which outlives this object).
  explicit RopeTables(Allocator& memory) : memory_(memory) {}

  struct View {
    const float* cos = nullptr;  // (capacity, D/2)
    const float* sin = nullptr;
  };
  // Returns tables for head_dim D covering positions [0, max_position]. max_position must be
  // below kMaxCachedPosition.
  View get(int64_t D, const RopeParams& params, int64_t max_position);

  // Positions at or above this are rotated by the reference loops instead of a table.
  static constexpr int64_t kMaxCachedPosition = int64_t{1} << 20;

 private:
  struct Table {
    int64_t D = 0;
    RopeParams params;
    int64_t capacity = 0;
    Buffer cos, sin;  // (capacity, D/2) f32 each
  };
  Allocator& memory_;
  std::vector<Table> tables_;
};

}  // namespace anvil::cpu_opt
