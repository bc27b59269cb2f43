// The schedule of a chunked all-to-all that feeds a rank-order reduction on a device (the NCCL
// communicator's ordered reduce_scatter and all_reduce). A tensor of `count` elements is split
// into one part per rank (chunk_begin's split); rank q reduces part q. In round k every rank
// sends the k-th piece of each other rank's part to that rank, and each rank receives the k-th
// piece of its own part from every other rank into one scratch row per sender, then reduces
// those rows and its own piece, read where it is. The schedule depends on (count, ranks) only,
// so every rank computes the same piece boundaries, and a piece is never longer than a scratch
// row: the scratch is ranks - 1 rows of `chunk` elements, under two parts whatever the world
// size (the MPI path holds two receive buffers of a part).
#pragma once

#include <cstdint>

namespace anvil {

// The half-open element range [begin, end) of a tensor.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

struct ExchangeSchedule {
  int64_t count = 0;  // elements of the whole tensor
  int ranks = 1;
  int64_t chunk = 0;  // elements of one scratch row: the longest piece
  int rounds = 0;     // rounds of the exchange; 0 when count is 0

  // Returns the elements of part `part` (reduced by rank `part`).
  ElementRange part(int part) const;
  // Returns the elements of part `part` that travel in round `round` (may be empty: parts
  // differ in length by at most one element).
  ElementRange piece(int part, int round) const;
  // Returns the elements of the scratch that receives the other ranks' pieces:
  // (ranks - 1) * chunk.
  int64_t scratch_elements() const { return chunk * (ranks - 1); }
};

// Returns the schedule for `count` elements over `ranks` ranks: pieces of
// min(longest part, ceil(2 * longest part / ranks)) elements, so at most ceil(ranks / 2)
// rounds and a scratch of fewer than 2 * longest part + ranks elements (one part on two
// ranks, none on one). Throws on a negative count or ranks < 1.
ExchangeSchedule plan_exchange(int64_t count, int ranks);

}  // namespace anvil
