// Op conformance tables, part 2: the sequence ops, RoPE and attention. Same driver and
// conventions as ops_test.cpp. Attention rows cover GQA ratios 1, 2 and 8, one-token
// sequences, sliding windows, several documents per row, a custom scale, bf16 and f16, sequences
// spanning several of the optimized kernels' tiles, and queries placed after cached keys
// (q_offset, as KV-cache decoding uses).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention_cases.h"
#include "op_driver.h"
#include "oracles.h"

namespace anvil::test {
namespace {

// ---- rope: forward rotates (out may alias x); backward applies the inverse (dx may alias dout).

struct RopeRow {
  int64_t B, T, H, D;
  std::vector<int32_t> positions;  // (B, T)
  RopeParams params;
  bool in_place;
  DType dtype;
  Tolerance tol{1e-5, 1e-2, 1.25e-3};  // f16 = bf16 / 8: see ops_test.cpp
};

OpCase rope_case(const RopeRow& r) {
  Rng rng(r.B * 31 + r.T * 7 + r.D);
  const Shape shape{r.B, r.T, r.H, r.D};
  OpCase c;
  c.forward_op = "rope_forward";
  c.backward_op = "rope_backward";
  c.label = fmt::format("B={} T={} H={} D={} theta={}{}{}", r.B, r.T, r.H, r.D, r.params.theta,
                        r.params.scaling_factor != 0.0f ? " llama3" : "",
                        r.in_place ? " in_place" : "");
  c.dtype = r.dtype;
  c.tol = r.tol;
  c.inputs["x"] = random_tensor(rng, r.dtype, shape);
  c.inputs["positions"] = int_tensor(Shape{r.B, r.T}, r.positions);
  c.outputs = {{"out", r.dtype, shape}};
  c.forward = [r](Workspace& ws) {
    Backend& be = ws.backend();
    if (r.in_place) {
      be.copy(ws["out"], ws["x"]);
      be.rope_forward(ws["out"], ws["out"], ws["positions"], r.params);
    } else {
      be.rope_forward(ws["x"], ws["out"], ws["positions"], r.params);
    }
  };
  c.oracle = [r](const Values& in) {
    return Values{{"out", f64::rope(in.at("x"), in.at("positions"), r.B, r.T, r.H, r.D, r.params)}};
  };
  c.differentiated = {"out"};
  c.grads = {{"x", r.dtype}};
  c.backward = [r](Workspace& ws) {
    Backend& be = ws.backend();
    if (r.in_place) {
      be.copy(ws["dx"], ws["dout"]);
      be.rope_backward(ws["dx"], ws["dx"], ws["positions"], r.params);
    } else {
      be.rope_backward(ws["dout"], ws["dx"], ws["positions"], r.params);
    }
  };
  return c;
}

RopeParams llama3_rope() {
  RopeParams p;
  p.theta = 500000.0f;
  p.scaling_factor = 8.0f;
  p.low_freq_factor = 1.0f;
  p.high_freq_factor = 4.0f;
  p.original_max_position = 8192;
  return p;
}

// Returns n positions spread over [0, limit) in no particular order.
std::vector<int32_t> scattered_positions(int n, int limit) {
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) positions[i] = (i * 7919 + 13) % limit;
  return positions;
}

TEST(Ops, Rope) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const RopeParams plain;
  const std::vector<RopeRow> rows = {
      {2, 5, 3, 12, {0, 1, 2, 3, 4, 7, 100, 2000, 9999, 3}, plain, false, f32},
      // D = 16 with theta 5e5 puts frequencies in all three llama3 bands (kept, smoothed, slowed).
      {1, 6, 2, 16, {0, 1, 17, 4096, 8191, 30000}, llama3_rope(), false, f32},
      {2, 3, 4, 16, {5, 6, 7, 0, 65, 129}, llama3_rope(), true, bf16},
      {1, 1, 1, 2, {42}, plain, true, f32},
      // Larger rows: several threads, the optimized backend's cached cos/sin table growing past
      // its first size, and a position beyond that table (the reference path).
      {2, 40, 4, 64, scattered_positions(80, 3000), plain, false, f32},
      {2, 40, 4, 64, scattered_positions(80, 9000), llama3_rope(), true, bf16},
      {1, 2, 2, 8, {3, 2000000}, plain, false, f32},
  };
  for (const RopeRow& row :
       with_f16_twins(rows, [](RopeRow& r) { return bf16_to_f16(r.dtype); }))
    run_op_case(rope_case(row));
}

// ---- attention: forward writes out and lse; backward overwrites dq, dk and dv.

TEST(Ops, Attention) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<int32_t> two_rows_of_docs = {0, 0, 0, 1, 1, 2, 2, 5, 5, 7, 7, 7, 7, 9};
  const std::vector<AttentionRow> rows = {
      {2, 7, 4, 4, 12, true, 0, {}, 0.0f, f32},
      {2, 7, 8, 1, 16, true, 0, two_rows_of_docs, 0.0f, f32},
      {2, 7, 8, 1, 16, true, 0, two_rows_of_docs, 0.0f, bf16},
      {1, 9, 4, 2, 8, true, 3, {}, 0.0f, f32},
      {1, 9, 4, 2, 8, true, 3, {}, 0.0f, bf16},
      {1, 1, 2, 1, 12, true, 0, {}, 0.0f, f32},
      {2, 6, 2, 2, 10, false, 0, {}, 0.0f, f32},
      {1, 11, 4, 2, 12, true, 4, {3, 3, 3, 3, 3, 3, 4, 4, 4, 8, 8}, 0.3f, f32},
      {1, 8, 6, 3, 6, false, 2, {1, 1, 1, 2, 2, 2, 2, 2}, 0.0f, f32},
      // Several query and key tiles (the optimized kernels use 64 x 64), head dims that are
      // and are not multiples of the vector width, windows crossing tile edges.
      {1, 70, 2, 1, 64, true, 0, {}, 0.0f, f32},
      {1, 70, 2, 1, 64, true, 0, {}, 0.0f, bf16},
      {1, 70, 2, 2, 40, false, 0, runs_of_documents(70, 23), 0.0f, f32},
      {1, 100, 2, 1, 16, true, 20, {}, 0.0f, f32},
      {1, 80, 2, 1, 24, true, 0, runs_of_documents(80, 30), 0.0f, bf16},
      // Queries after cached keys (q_offset): decoding steps and chunked prefill.
      {1, 3, 4, 2, 8, true, 0, {}, 0.0f, f32, 9, 6},
      {2, 1, 4, 2, 16, true, 0, {}, 0.0f, f32, 130, 129},
      {1, 4, 2, 1, 8, true, 3, {0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, 0.0f, f32, 10, 5},
      {1, 5, 4, 2, 16, true, 0, {}, 0.0f, bf16, 70, 65},
      {1, 3, 2, 1, 8, false, 0, {}, 0.0f, f32, 8, 2},
      {1, 20, 2, 1, 32, true, 0, {}, 0.0f, f32, 90, 70},
  };
  for (const AttentionRow& row :
       with_f16_twins(rows, [](AttentionRow& r) { return bf16_to_f16(r.dtype); }))
    run_op_case(attention_case(row));
}

TEST(Ops, AttentionSparseMasks) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const SparsePattern lines = SparsePattern::lines, strided = SparsePattern::strided;
  const AttentionRow base{1, 160, 2, 1, 16, true, 0, {}, 0.0f, f32};
  const AttentionRow base_bf16{1, 160, 2, 1, 16, true, 0, {}, 0.0f, bf16};
  const std::vector<AttentionRow> rows = {
      // Segments smaller than, equal to and larger than the optimized kernels' 64-row tiles.
      masked(base, lines, 8, 0, 0),
      masked(base, lines, 64, 0, 0),
      masked(base_bf16, lines, 16, 0, 0),
      masked(base, strided, 16, 3, 0),
      masked(base_bf16, strided, 64, 2, 0),
      masked({1, 200, 4, 2, 24, true, 0, {}, 0.0f, f32}, lines, 32, 0, 0),
      // Sinks alone, with a window, with a pattern; combined with documents.
      masked({1, 150, 2, 1, 16, true, 20, {}, 0.0f, f32}, SparsePattern::dense, 0, 0, 5),
      masked({1, 150, 2, 1, 16, true, 20, {}, 0.0f, bf16}, lines, 16, 0, 70),
      masked({1, 130, 2, 2, 8, true, 0, runs_of_documents(130, 50), 0.0f, f32}, lines, 8, 0, 3),
      masked({1, 130, 2, 2, 8, true, 0, runs_of_documents(130, 50), 0.0f, f32}, strided, 8, 2,
             0),
      // Without causal masking the patterns look both ways.
      masked({1, 96, 2, 1, 8, false, 0, {}, 0.0f, f32}, lines, 16, 0, 0),
      masked({2, 96, 2, 1, 8, false, 40, {}, 0.0f, f32}, strided, 16, 2, 2),
      // Key blocks from elsewhere in the sequence (context parallelism): earlier keys, later
      // keys (all hidden under causal masking: out 0, lse -inf), overlapping positions, and
      // offsets that are not multiples of a tile, with documents indexed by position.
      key_block(base, 128, 0, 64),
      key_block(base, 0, 160, 64),
      key_block({1, 70, 4, 2, 16, true, 0, {}, 0.0f, f32}, 40, 20, 90),
      key_block({1, 70, 4, 2, 16, true, 0, {}, 0.0f, bf16}, 100, 3, 97),
      key_block({1, 50, 2, 1, 8, true, 0, runs_of_documents(200, 70), 0.0f, f32}, 130, 37, 80),
      key_block(masked(base, lines, 16, 0, 4), 192, 0, 128),
      key_block(masked({1, 64, 2, 1, 8, true, 48, {}, 0.0f, f32}, strided, 16, 2, 0), 200, 96,
                128),
  };
  for (const AttentionRow& row :
       with_f16_twins(rows, [](AttentionRow& r) { return bf16_to_f16(r.dtype); }))
    run_op_case(attention_case(row));
}

// ---- attention_merge: folds one key block's (out, lse) into a running result.

OpCase merge_case(int64_t B, int64_t T, int64_t H, int64_t D, DType dtype, double hidden) {
  Rng rng(B * 100 + T * 10 + D);
  const Shape out_shape{B, T, H, D}, lse_shape{B, H, T};
  OpCase c;
  c.forward_op = "attention_merge";
  c.label = fmt::format("B={} T={} H={} D={} hidden rows {}", B, T, H, D, hidden);
  c.dtype = dtype;
  c.tol = Tolerance{2e-6, 1e-2, 1.25e-3};  // f16 = bf16 / 8: see ops_test.cpp
  c.inputs["out0"] = random_tensor(rng, dtype, out_shape);
  c.inputs["part_out"] = random_tensor(rng, dtype, out_shape);
  // Rows that saw no key carry lse = -inf (and out = 0) on either side or both.
  HostTensor lse = random_tensor(rng, DType::f32, lse_shape, -4.0, 6.0);
  HostTensor part_lse = random_tensor(rng, DType::f32, lse_shape, -4.0, 6.0);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < lse.values.size(); ++i) {
    if (rng.uniform(0.0, 1.0) < hidden) lse.values[i] = neg_inf;
    if (rng.uniform(0.0, 1.0) < hidden) part_lse.values[i] = neg_inf;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D; ++i) {
          const size_t row = static_cast<size_t>((b * H + h) * T + t);
          const size_t at = static_cast<size_t>(((b * T + t) * H + h) * D + i);
          if (lse.values[row] == neg_inf) c.inputs["out0"].values[at] = 0.0;
          if (part_lse.values[row] == neg_inf) c.inputs["part_out"].values[at] = 0.0;
        }
  c.inputs["lse0"] = lse;
  c.inputs["part_lse"] = part_lse;
  c.outputs = {{"out", dtype, out_shape}, {"lse", DType::f32, lse_shape}};
  c.forward = [](Workspace& ws) {
    Backend& be = ws.backend();
    be.copy(ws["out"], ws["out0"]);
    be.copy(ws["lse"], ws["lse0"]);
    be.attention_merge(ws["out"], ws["lse"], ws["part_out"], ws["part_lse"]);
  };
  c.oracle = [B, T, H, D, neg_inf](const Values& in) {
    Values result{{"out", in.at("out0")}, {"lse", in.at("lse0")}};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const size_t row = static_cast<size_t>((b * H + h) * T + t);
          const double a = in.at("lse0")[row], p = in.at("part_lse")[row];
          if (a == neg_inf && p == neg_inf) continue;
          const double merged = std::log(std::exp(a) + std::exp(p));
          result["lse"][row] = merged;
          for (int64_t i = 0; i < D; ++i) {
            const size_t at = static_cast<size_t>(((b * T + t) * H + h) * D + i);
            result["out"][at] = in.at("out0")[at] * std::exp(a - merged) +
                                in.at("part_out")[at] * std::exp(p - merged);
          }
        }
    return result;
  };
  return c;
}

TEST(Ops, AttentionMerge) {
  run_op_case(merge_case(2, 5, 3, 8, DType::f32, 0.0));
  run_op_case(merge_case(1, 70, 4, 40, DType::f32, 0.3));
  run_op_case(merge_case(2, 9, 2, 16, DType::bf16, 0.3));
  run_op_case(merge_case(2, 9, 2, 16, DType::f16, 0.3));
}

// Attention over keys cut into blocks (k_offset), merged with attention_merge, equals one call
// over all keys; each block's backward from the merged out and lse gives that block's dk, dv
// and a share of dq that sums to the whole dq. Context parallelism's ring relies on both.
TEST(Ops, AttentionKeyBlocksMergeToTheWhole) {
  const int64_t B = 1, T = 192, Hq = 4, Hkv = 2, D = 16;
  const std::vector<int64_t> cuts = {0, 40, 64, 150, 192};
  const Shape q_shape{B, T, Hq, D}, kv_shape{B, T, Hkv, D}, lse_shape{B, Hq, T};
  for (const SparsePattern pattern : {SparsePattern::dense, SparsePattern::lines}) {
    for (auto& backend : available_backends()) {
      Rng rng(7);
      Workspace ws(*backend);
      for (const char* name : {"q", "dout"}) ws.upload(name, random_tensor(rng, DType::f32, q_shape));
      for (const char* name : {"k", "v"}) ws.upload(name, random_tensor(rng, DType::f32, kv_shape));
      ws.upload("doc_ids", int_tensor(Shape{B, T}, runs_of_documents(T, 100)));
      Tensor doc_ids = ws["doc_ids"];
      AttentionParams params;
      params.pattern = pattern;
      params.segment = 16;
      params.sinks = pattern == SparsePattern::lines ? 2 : 0;
      params.doc_ids = &doc_ids;
      Tensor out = ws.scratch(DType::f32, q_shape), lse = ws.scratch(DType::f32, lse_shape);
      Tensor dq = ws.scratch(DType::f32, q_shape), dk = ws.scratch(DType::f32, kv_shape);
      Tensor dv = ws.scratch(DType::f32, kv_shape);
      backend->attention_forward(ws["q"], ws["k"], ws["v"], out, lse, params);
      backend->attention_backward(ws["dout"], ws["q"], ws["k"], ws["v"], out, lse, dq, dk, dv,
                                  params);
      auto host = [&](const Tensor& t) {
        std::vector<float> values(static_cast<size_t>(t.numel()));
        backend->copy_to_host(values.data(), t);
        return std::vector<double>(values.begin(), values.end());
      };
      // Forward block by block into a running (out, lse) that starts empty.
      Tensor run_out = ws.scratch(DType::f32, q_shape), run_lse = ws.scratch(DType::f32, lse_shape);
      backend->fill_zero(run_out);
      std::vector<float> empty(static_cast<size_t>(B * Hq * T), -INFINITY);
      backend->copy_from_host(run_lse, empty.data());
      Tensor part_out = ws.scratch(DType::f32, q_shape), part_lse = ws.scratch(DType::f32, lse_shape);
      const int64_t row_floats = Hkv * D;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        const int64_t rows = cuts[i + 1] - cuts[i];
        const Shape block_shape{B, rows, Hkv, D};
        AttentionParams block = params;
        block.k_offset = static_cast<int>(cuts[i]);
        const Tensor k = ws["k"].flat(cuts[i] * row_floats, rows * row_floats).view(block_shape);
        const Tensor v = ws["v"].flat(cuts[i] * row_floats, rows * row_floats).view(block_shape);
        backend->attention_forward(ws["q"], k, v, part_out, part_lse, block);
        backend->attention_merge(run_out, run_lse, part_out, part_lse);
      }
      EXPECT_LT(peak_relative_error(host(run_out), host(out)), 2e-6) << backend->name();
      EXPECT_LT(peak_relative_error(host(run_lse), host(lse)), 2e-6) << backend->name();
      // Backward block by block from the merged results.
      std::vector<double> dq_sum(static_cast<size_t>(q_shape.numel()), 0.0);
      Tensor block_dq = ws.scratch(DType::f32, q_shape);
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        const int64_t rows = cuts[i + 1] - cuts[i];
        const Shape block_shape{B, rows, Hkv, D};
        AttentionParams block = params;
        block.k_offset = static_cast<int>(cuts[i]);
        auto slice = [&](const Tensor& t) {
          return t.flat(cuts[i] * row_floats, rows * row_floats).view(block_shape);
        };
        Tensor block_dk = ws.scratch(DType::f32, block_shape);
        Tensor block_dv = ws.scratch(DType::f32, block_shape);
        backend->attention_backward(ws["dout"], ws["q"], slice(ws["k"]), slice(ws["v"]), run_out,
                                    run_lse, block_dq, block_dk, block_dv, block);
        const std::vector<double> part = host(block_dq);
        for (size_t j = 0; j < part.size(); ++j) dq_sum[j] += part[j];
        EXPECT_LT(peak_relative_error(host(block_dk), host(slice(dk))), 2e-5) << backend->name();
        EXPECT_LT(peak_relative_error(host(block_dv), host(slice(dv))), 2e-5) << backend->name();
      }
      EXPECT_LT(peak_relative_error(dq_sum, host(dq)), 2e-5) << backend->name();
    }
  }
}

}  // namespace
}  // namespace anvil::test
