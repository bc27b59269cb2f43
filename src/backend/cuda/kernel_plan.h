// Host-side launch planning of the CUDA backend's memory-bound kernels: how a flat range or a
// row splits into packs of 8 elements that move with 16-byte accesses, how many blocks and
// threads a row kernel gets, the workspace of the one-launch RMSNorm backward, and the
// parameter blocks of the multi-tensor AdamW (at most kAdamWSetsPerLaunch tensor sets per
// launch, in a kernel parameter block under 4 KiB; more sets take more launches, as PyTorch's
// multi_tensor_apply chunks its lists). No CUDA header here: the structs are plain data that
// kernels take by value, and every function is unit-tested on a machine without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/op_rules.h"
#include "core/dtype.h"

// The pack helpers below run in kernels and in host tests alike.
#ifdef __CUDACC__
#define ANVIL_PACK_FUNCTION __host__ __device__ __forceinline__
#else
#define ANVIL_PACK_FUNCTION inline
#endif

namespace anvil::cuda {

// Elements per pack: 16 bytes of bf16 or f16 (one access), 32 bytes of f32 (two).
inline constexpr int kPackElements = 8;
// The width of one vector access.
inline constexpr size_t kVectorBytes = 16;

// One array a kernel reads or writes: its base address and element size (data may be null:
// an absent optional output, ignored).
struct AccessedArray {
  const void* data;
  size_t element_bytes;
};

// A flat range of n elements walked in packs: pack q holds elements [8q - shift, 8q + 8 -
// shift) clipped to [0, n), so with the right shift every full pack of every array is 16-byte
// aligned even when the arrays start mid-vector (views into larger buffers).
struct FlatPacks {
  int64_t n = 0;
  int64_t count = 0;     // packs, ceil((n + shift) / 8)
  int32_t shift = 0;     // in [0, 8)
  bool vectorized = false;  // full packs use 16-byte accesses
};

// One pack of a range: lanes [lo, hi) hold elements first + lane; `vector` when all 8 lanes
// are inside and the pack is aligned for 16-byte access.
struct Pack {
  int64_t first;
  int lo, hi;
  bool vector;
  ANVIL_PACK_FUNCTION bool holds(int lane) const { return lane >= lo && lane < hi; }
};

// Returns pack q of a flat range.
ANVIL_PACK_FUNCTION Pack flat_pack(const FlatPacks& packs, int64_t q) {
  Pack p;
  p.first = q * kPackElements - packs.shift;
  p.lo = p.first < 0 ? static_cast<int>(-p.first) : 0;
  const int64_t left = packs.n - p.first;
  p.hi = left < kPackElements ? static_cast<int>(left) : kPackElements;
  p.vector = packs.vectorized && p.lo == 0 && p.hi == kPackElements;
  return p;
}

// Returns pack j of a row of `cols` elements starting at element row_first; `vectorized` when
// the row's bases are aligned and cols is a multiple of 8 (rows_vectorized).
ANVIL_PACK_FUNCTION Pack row_pack(int64_t row_first, int64_t cols, int64_t j, bool vectorized) {
  Pack p;
  p.first = row_first + j * kPackElements;
  p.lo = 0;
  const int64_t left = cols - j * kPackElements;
  p.hi = left < kPackElements ? static_cast<int>(left) : kPackElements;
  p.vector = vectorized && p.hi == kPackElements;
  return p;
}

// Returns the shift s in [0, 8) for which every array's element -s lies on a 16-byte
// boundary (so element 8q - s does for every q), or -1 when no shift aligns them all.
int vector_shift(std::initializer_list<AccessedArray> arrays);
// Returns the packs of a flat range of n elements over these arrays (scalar when unaligned).
FlatPacks plan_flat_packs(int64_t n, std::initializer_list<AccessedArray> arrays);
// Returns whether rows of `cols` elements over these arrays start 16-byte aligned (every base
// aligned and cols a multiple of 8), so each full pack of a row can use vector accesses.
bool rows_vectorized(int64_t cols, std::initializer_list<AccessedArray> arrays);

// Row kernels (RMSNorm, the fused classifier, embedding rows) give one thread per pack of a
// row, in multiples of a warp, up to kMaxRowThreads; a thread keeps its first pack in
// registers, so rows up to 8 * kMaxRowThreads elements are read once.
inline constexpr int kMaxRowThreads = 1024;
// Returns the threads per block for rows of `cols` elements (32..max_threads).
int row_block_threads(int64_t cols, int max_threads = kMaxRowThreads);

// The one-launch RMSNorm backward: `blocks` blocks each take every blocks-th row, keep their
// columns' dweight partial sums and write them to the workspace; the last block of each group
// of kRmsnormGroupBlocks adds its group's partials in block order, and the last group adds the
// group sums in group order into dweight (fixed order: deterministic for a given GPU).
inline constexpr int kRmsnormGroupBlocks = 16;
// Resident threads per SM the backward aims at (blocks = SMs * this / threads).
inline constexpr int kRmsnormThreadsPerSm = 1024;
// The counters (u32) the backend keeps zeroed for it: one per group and one for the last.
inline constexpr int kRmsnormMaxCounters = 1024;
struct RmsnormBackwardPlan {
  int threads = 0;
  int blocks = 0;
  int groups = 0;
  int64_t partial_floats = 0;  // blocks * cols
  int64_t group_floats = 0;    // groups * cols
  // Returns the workspace bytes: the partials, then the group sums.
  size_t workspace_bytes() const {
    return static_cast<size_t>(partial_floats + group_floats) * sizeof(float);
  }
};
// Returns the plan for (rows, cols) on a GPU with `sm_count` SMs (rows, cols > 0).
RmsnormBackwardPlan plan_rmsnorm_backward(int64_t rows, int64_t cols, int sm_count);

// The multi-tensor AdamW: one descriptor per tensor set, packs numbered across the sets of a
// launch (a pack never spans two sets).
inline constexpr int kAdamWSetsPerLaunch = 48;
struct AdamWSetDescriptor {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* copy;           // null: no copy
  int64_t n;            // elements
  int64_t first_pack;   // the set's first pack within its launch
  float decay;          // AdamWScalars::decay for this set's weight decay
  int32_t shift;        // FlatPacks::shift, or -1: element by element
  DType copy_dtype;
};
// One launch's kernel parameter block: the scalars every set shares (their decay field is
// unused: each set has its own) and the sets.
struct AdamWLaunch {
  AdamWScalars scalars;
  int32_t set_count;
  int64_t total_packs;
  AdamWSetDescriptor sets[kAdamWSetsPerLaunch];
};
static_assert(sizeof(AdamWLaunch) <= 4096, "a kernel parameter block must fit in 4 KiB");
// Returns the set holding pack q of `launch`, searching forward from `set` (a thread walks its
// packs in increasing order, so its set index only moves forward).
ANVIL_PACK_FUNCTION int advance_set(const AdamWLaunch& launch, int set, int64_t q) {
  while (set + 1 < launch.set_count && q >= launch.sets[set + 1].first_pack) ++set;
  return set;
}
// Returns set d's packs as a flat range (FlatPacks of its n and shift).
ANVIL_PACK_FUNCTION FlatPacks set_packs(const AdamWSetDescriptor& d) {
  FlatPacks packs;
  packs.n = d.n;
  packs.shift = d.shift >= 0 ? d.shift : 0;
  packs.vectorized = d.shift >= 0;
  packs.count = (d.n + packs.shift + kPackElements - 1) / kPackElements;
  return packs;
}
// Returns the launches of one AdamW step over `sets` (empty sets are skipped; no launch when
// every set is empty), sets in order, kAdamWSetsPerLaunch per launch.
std::vector<AdamWLaunch> plan_adamw_launches(std::span<const AdamWTensors> sets,
                                             const AdamWParams& params);

}  // namespace anvil::cuda
