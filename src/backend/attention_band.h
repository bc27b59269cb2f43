// An attention call's mask as a band of diagonals, the form fused-attention libraries take
// (cuDNN's SDPA: a right bound and a left bound with top-left diagonal alignment). Rows and
// columns are indices within the call: query row r sits at q_offset + r, key column c at
// k_offset + c. A pair is visible when  c - r <= right  (if a right bound is set)  and
// r - c < left  (if a left bound is set). The band exists only for the dense pattern without
// documents (and without sinks where a window is set: sinks under a window are not a band),
// and is returned only when every query row sees at least one key (a row that sees nothing must
// end with out = 0 and lse = -inf, which a library need not produce) and the left bound is at
// least 1 (older cuDNN rejects others; such calls are rare: keys over a window behind). tests/backend/
// attention_tiles_test.cpp checks it against position_visible pair by pair.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/backend.h"

namespace anvil {

struct DiagonalBand {
  std::optional<int64_t> right;  // visible only when column - row <= right (>= 0)
  std::optional<int64_t> left;   // visible only when row - column < left (>= 1); implies right
};

// Returns the band of a call with Tq query rows and Tk key rows, or nothing when its mask is not
// a band or some query row would see no key (including Tq == 0 or Tk == 0).
inline std::optional<DiagonalBand> diagonal_band_for(int64_t Tq, int64_t Tk,
                                                     const AttentionParams& params) {
  if (Tq <= 0 || Tk <= 0) return std::nullopt;
  if (params.pattern != SparsePattern::dense || params.doc_ids != nullptr) return std::nullopt;
  // Without a window every causally visible key is visible: sinks change nothing.
  if (params.sinks > 0 && params.window > 0) return std::nullopt;
  // Positions t = q_offset + r and s = k_offset + c: t - s = r - c + shift.
  const int64_t shift = static_cast<int64_t>(params.q_offset) - params.k_offset;
  DiagonalBand band;
  if (params.causal) {
    band.right = shift;  // s <= t  <=>  c - r <= shift
  } else if (params.window > 0) {
    band.right = params.window - 1 + shift;  // s - t < window
  }
  if (params.window > 0) band.left = params.window - shift;  // t - s < window
  // Bounds no pair reaches are dropped; a left bound keeps a right one (libraries want both).
  if (band.left && *band.left > Tq - 1) band.left.reset();
  if (band.right && *band.right >= Tk - 1 && !band.left) band.right.reset();
  if (band.left && !band.right) band.right = Tk - 1;
  if (band.right && *band.right < 0) return std::nullopt;  // row 0 sees no key
  if (band.left && *band.left < 1) return std::nullopt;    // the last rows see no key
  // With right >= 0 and left >= 1 only the last row can run past the keys: it needs a column
  // c <= Tk - 1 with (Tq - 1) - c < left.
  if (band.left && Tq - *band.left > Tk - 1) return std::nullopt;
  return band;
}

}  // namespace anvil
