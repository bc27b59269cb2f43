// Element-wise reductions the communicators run on the host: the rank-order sum behind
// ReduceOp::ordered_sum and the bitwise-deterministic max. Both are pure functions of their
// inputs, so every rank that runs them on the same contributions gets the same bits.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "core/dtype.h"

namespace anvil {

// A rank-order sum fed one contribution at a time: out = c0, then out += c1, ... (16-bit
// floats through f32 totals, rounded once by finish()), the same bits as sum_in_rank_order on
// all rows at once. So a communicator can add each rank's contribution as it arrives and
// needs receive buffers for the messages in flight only, not one per rank.
class RankOrderSum {
 public:
  // `out` (count elements of dtype) receives the sum; it must not overlap any contribution
  // but the first. 16-bit floats take their f32 totals from `staging`, counted as
  // communication.
  RankOrderSum(DType dtype, int64_t count, void* out, Allocator& staging);
  // Adds the next rank's contribution (count elements of dtype).
  void add(const void* contribution);
  // Writes the result into `out` (32-bit types sum in place: finish() only makes a NaN the
  // canonical quiet NaN).
  void finish();
  int added() const { return added_; }

 private:
  DType dtype_;
  int64_t count_;
  void* out_;
  Buffer totals_;  // f32, for bf16/f16 only
  int added_ = 0;
};

// The quiet NaN every reduction returns for a NaN result (the bits of +NaN, quiet bit only).
inline constexpr uint32_t kCanonicalNanF32 = 0x7fc00000u;
inline constexpr uint16_t kCanonicalNanBf16 = 0x7fc0u;
inline constexpr uint16_t kCanonicalNanF16 = 0x7e00u;

// Writes out[i] = c[0][i] + c[1][i] + ... + c[ranks-1][i], added left to right, where
// `contributions` holds `ranks` rows of `count` elements. bf16/f16 are accumulated in f32 and
// rounded once; integers wrap around; a NaN total is the canonical quiet NaN (whatever NaN
// the host's adds produced). `out` must not overlap `contributions`.
void sum_in_rank_order(const void* contributions, int ranks, int64_t count, DType dtype,
                       void* out);

// Sets inout[i] = max(in[i], inout[i]). For floating types a NaN in either input gives the
// canonical quiet NaN and +0 beats -0, so the result does not depend on argument order.
void max_into(const void* in, void* inout, int64_t count, DType dtype);

// Returns the first element of chunk `index` when `count` elements are split into `parts`
// nearly equal contiguous chunks (the last element is chunk_begin(count, parts, parts)).
inline int64_t chunk_begin(int64_t count, int parts, int index) { return count * index / parts; }

}  // namespace anvil
