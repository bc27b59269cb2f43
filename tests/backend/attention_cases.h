// The attention rows of the op conformance suite: a row (shapes, mask, dtype, offsets) and the
// OpCase that runs attention_forward/backward for it against cpu-ref and the double oracle.
// Shared by tests/backend/ops_attention_test.cpp (every backend, default routing) and
// tests/backend_cuda/attention_paths_test.cpp (cuda, each attention path forced in turn).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "op_driver.h"

namespace anvil::test {

struct AttentionRow {
  int64_t B, T, Hq, Hkv, D;  // T: query rows
  bool causal;
  int window;
  std::vector<int32_t> doc_ids;  // (B, key rows), empty: no document mask
  float scale;
  DType dtype;
  int64_t Tk = 0;    // key rows; 0: T
  int q_offset = 0;  // absolute position of query row 0 (KV-cache decoding)
  Tolerance tol{2e-5, 2e-2, 2.5e-3};  // f16 = bf16 / 8: see ops_test.cpp
  int k_offset = 0;  // absolute position of key row 0 (a block of keys from elsewhere)
  SparsePattern pattern = SparsePattern::dense;
  int segment = 0, stride = 0, sinks = 0;
};

// Returns the OpCase of a row: out and lse forward, dq, dk and dv backward.
OpCase attention_case(const AttentionRow& r);
// Returns document ids for n positions in runs of `run` positions (0, 0, ..., 1, 1, ...).
std::vector<int32_t> runs_of_documents(int n, int run);
// Returns the row with a sparse pattern and sink keys.
AttentionRow masked(AttentionRow r, SparsePattern pattern, int segment, int stride, int sinks);
// Returns the row with its queries at q_offset and Tk keys from k_offset (a key block).
AttentionRow key_block(AttentionRow r, int q_offset, int k_offset, int64_t Tk);

}  // namespace anvil::test
