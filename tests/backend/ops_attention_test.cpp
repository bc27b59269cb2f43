// Op conformance tables, part 2: the sequence ops, RoPE and attention. Same driver and
// conventions as ops_test.cpp. Attention rows cover GQA ratios 1, 2 and 8, one-token
// sequences, sliding windows, several documents per row, a custom scale, bf16, sequences
// spanning several of the optimized kernels' tiles, and queries placed after cached keys
// (q_offset, as KV-cache decoding uses).
#include <gtest/gtest.h>

#include "oracles.h"
#include "op_driver.h"

namespace anvil::test {
namespace {

// ---- rope: forward rotates (out may alias x); backward applies the inverse (dx may alias dout).

struct RopeRow {
  int64_t B, T, H, D;
  std::vector<int32_t> positions;  // (B, T)
  RopeParams params;
  bool in_place;
  DType dtype;
  Tolerance tol{1e-5, 1e-2};
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
  for (const RopeRow& row : rows) run_op_case(rope_case(row));
}

// ---- attention: forward writes out and lse; backward overwrites dq, dk and dv.

struct AttentionRow {
  int64_t B, T, Hq, Hkv, D;  // T: query rows
  bool causal;
  int window;
  std::vector<int32_t> doc_ids;  // (B, key rows), empty: no document mask
  float scale;
  DType dtype;
  int64_t Tk = 0;    // key rows; 0: T
  int q_offset = 0;  // absolute position of query row 0 (KV-cache decoding)
  Tolerance tol{2e-5, 2e-2};
};

OpCase attention_case(const AttentionRow& r) {
  Rng rng(r.B * 1000 + r.T * 100 + r.Hq * 10 + r.D);
  const int64_t Tk = r.Tk > 0 ? r.Tk : r.T;
  const Shape q_shape{r.B, r.T, r.Hq, r.D}, kv_shape{r.B, Tk, r.Hkv, r.D};
  const bool doc_mask = !r.doc_ids.empty();
  OpCase c;
  c.forward_op = "attention_forward";
  c.backward_op = "attention_backward";
  c.label = fmt::format("B={} T={}{} Hq={} Hkv={} D={}{}{}{}{}", r.B, r.T,
                        r.Tk > 0 ? fmt::format(" Tk={} q_offset={}", Tk, r.q_offset) : "", r.Hq,
                        r.Hkv, r.D, r.causal ? " causal" : " full",
                        r.window ? fmt::format(" window={}", r.window) : "",
                        doc_mask ? " doc_mask" : "",
                        r.scale != 0.0f ? fmt::format(" scale={}", r.scale) : "");
  c.dtype = r.dtype;
  c.tol = r.tol;
  c.inputs["q"] = random_tensor(rng, r.dtype, q_shape, -1.5, 1.5);
  c.inputs["k"] = random_tensor(rng, r.dtype, kv_shape, -1.5, 1.5);
  c.inputs["v"] = random_tensor(rng, r.dtype, kv_shape);
  if (doc_mask) c.inputs["doc_ids"] = int_tensor(Shape{r.B, Tk}, r.doc_ids);
  c.outputs = {{"out", r.dtype, q_shape}, {"lse", DType::f32, Shape{r.B, r.Hq, r.T}}};
  auto params_for = [r, doc_mask](Workspace& ws, Tensor& doc_ids) {
    AttentionParams p;
    p.causal = r.causal;
    p.window = r.window;
    p.scale = r.scale;
    p.q_offset = r.q_offset;
    if (doc_mask) {
      doc_ids = ws["doc_ids"];
      p.doc_ids = &doc_ids;
    }
    return p;
  };
  c.forward = [params_for](Workspace& ws) {
    Tensor doc_ids;
    const AttentionParams p = params_for(ws, doc_ids);
    ws.backend().attention_forward(ws["q"], ws["k"], ws["v"], ws["out"], ws["lse"], p);
  };
  c.oracle = [r, doc_mask, Tk](const Values& in) {
    const f64::AttentionSpec spec{.B = r.B, .T = r.T, .Hq = r.Hq, .Hkv = r.Hkv, .D = r.D,
                                  .causal = r.causal, .window = r.window,
                                  .doc_ids = doc_mask ? &in.at("doc_ids") : nullptr,
                                  .scale = r.scale, .Tk = Tk, .q_offset = r.q_offset};
    Values out{{"out", {}}, {"lse", {}}};
    f64::attention(in.at("q"), in.at("k"), in.at("v"), spec, out["out"], out["lse"]);
    return out;
  };
  c.differentiated = {"out"};
  c.grads = {{"q", r.dtype}, {"k", r.dtype}, {"v", r.dtype}};
  c.backward = [params_for](Workspace& ws) {
    Tensor doc_ids;
    const AttentionParams p = params_for(ws, doc_ids);
    ws.backend().attention_backward(ws["dout"], ws["q"], ws["k"], ws["v"], ws["out"], ws["lse"],
                                    ws["dq"], ws["dk"], ws["dv"], p);
  };
  return c;
}

// Returns document ids for n positions in runs of `run` positions (0, 0, ..., 1, 1, ...).
std::vector<int32_t> runs_of_documents(int n, int run) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = i / run;
  return ids;
}

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
  for (const AttentionRow& row : rows) run_op_case(attention_case(row));
}

}  // namespace
}  // namespace anvil::test
