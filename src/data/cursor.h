// The dataloader's resume state and the mapping from (step, micro-step, rank) to samples.
// A run's data position is one integer, the next global sample index: global step k consumes
// samples [k*G, (k+1)*G) with G = micro_batch * grad_accum * dp_world_size, and micro-step m
// of data-parallel rank r reads the b consecutive samples starting at k*G + (m*w + r)*b.
// Ranks of one step therefore take disjoint slices whose union is exactly the single-process
// global batch, and the same G gives the same batches for any (b, a, w) split of it.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace anvil {

struct DataCursor {
  int64_t next_sample = 0;  // first global sample of the next global batch
  uint64_t seed = 0;        // sample-order seed
  int seq_len = 0;
  std::string split;                  // "train"; "synthetic" for SyntheticData
  std::string tokenizer_fingerprint;  // empty for synthetic data
  // A weighted mixture's sources and normalised weights ("data/web 0.7; data/code 0.3");
  // empty for one dataset.
  std::string mixture;

  // Returns {"next_sample":..,"seed":..,"seq_len":..,"split":..,"tokenizer_fingerprint":..},
  // with "mixture":.. after them for a mixture.
  nlohmann::json to_json() const;
  // Parses to_json's output (no "mixture": one dataset); throws naming the missing or
  // mistyped field.
  static DataCursor from_json(const nlohmann::json& json);
  // Checks that this saved cursor belongs to the same data stream as `current` (same seed,
  // seq_len, split, tokenizer and mixture), so resuming from it continues with the right samples.
  void check_resumable_with(const DataCursor& current) const;
  bool operator==(const DataCursor&) const = default;
};

struct BatchLayout {
  int micro_batch = 1;  // b: samples per rank per micro-step
  int grad_accum = 1;   // a: micro-steps per optimizer step
  int world_size = 1;   // w: data-parallel ranks (tensor-parallel peers share one slice)

  // Returns G = b * a * w, the samples per optimizer step.
  int64_t global_batch() const;
  // Returns the first global sample that `rank` reads in `micro_step` of optimizer `step`;
  // it then reads micro_batch consecutive samples. Throws on out-of-range arguments.
  int64_t first_sample(int64_t step, int micro_step, int rank) const;
};

}  // namespace anvil
