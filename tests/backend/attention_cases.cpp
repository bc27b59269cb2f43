// The attention rows of the op conformance suite (attention_cases.h).
#include "attention_cases.h"

#include "oracles.h"

namespace anvil::test {
namespace {

const char* pattern_name(SparsePattern pattern) {
  switch (pattern) {
    case SparsePattern::strided: return "strided";
    case SparsePattern::lines: return "lines";
    default: return "dense";
  }
}

}  // namespace

OpCase attention_case(const AttentionRow& r) {
  Rng rng(r.B * 1000 + r.T * 100 + r.Hq * 10 + r.D);
  const int64_t Tk = r.Tk > 0 ? r.Tk : r.T;
  const Shape q_shape{r.B, r.T, r.Hq, r.D}, kv_shape{r.B, Tk, r.Hkv, r.D};
  const bool doc_mask = !r.doc_ids.empty();
  OpCase c;
  c.forward_op = "attention_forward";
  c.backward_op = "attention_backward";
  c.label = fmt::format(
      "B={} T={}{} Hq={} Hkv={} D={}{}{}{}{}{}{}", r.B, r.T,
      r.Tk > 0 ? fmt::format(" Tk={} q_offset={} k_offset={}", Tk, r.q_offset, r.k_offset) : "",
      r.Hq, r.Hkv, r.D, r.causal ? " causal" : " full",
      r.window ? fmt::format(" window={}", r.window) : "", doc_mask ? " doc_mask" : "",
      r.scale != 0.0f ? fmt::format(" scale={}", r.scale) : "",
      r.pattern != SparsePattern::dense
          ? fmt::format(" {} segment={} stride={}", pattern_name(r.pattern), r.segment, r.stride)
          : "",
      r.sinks ? fmt::format(" sinks={}", r.sinks) : "");
  c.dtype = r.dtype;
  c.tol = r.tol;
  c.inputs["q"] = random_tensor(rng, r.dtype, q_shape, -1.5, 1.5);
  c.inputs["k"] = random_tensor(rng, r.dtype, kv_shape, -1.5, 1.5);
  c.inputs["v"] = random_tensor(rng, r.dtype, kv_shape);
  const int64_t doc_len = static_cast<int64_t>(r.doc_ids.size()) / r.B;
  if (doc_mask) c.inputs["doc_ids"] = int_tensor(Shape{r.B, doc_len}, r.doc_ids);
  c.outputs = {{"out", r.dtype, q_shape}, {"lse", DType::f32, Shape{r.B, r.Hq, r.T}}};
  auto params_for = [r, doc_mask](Workspace& ws, Tensor& doc_ids) {
    AttentionParams p;
    p.causal = r.causal;
    p.window = r.window;
    p.scale = r.scale;
    p.q_offset = r.q_offset;
    p.k_offset = r.k_offset;
    p.pattern = r.pattern;
    p.segment = r.segment;
    p.stride = r.stride;
    p.sinks = r.sinks;
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
  c.oracle = [r, doc_mask, doc_len, Tk](const Values& in) {
    const f64::AttentionSpec spec{.B = r.B, .T = r.T, .Hq = r.Hq, .Hkv = r.Hkv, .D = r.D,
                                  .causal = r.causal, .window = r.window,
                                  .doc_ids = doc_mask ? &in.at("doc_ids") : nullptr,
                                  .scale = r.scale, .Tk = Tk, .q_offset = r.q_offset,
                                  .k_offset = r.k_offset, .pattern = r.pattern,
                                  .segment = r.segment, .stride = r.stride, .sinks = r.sinks,
                                  .doc_len = doc_len};
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

std::vector<int32_t> runs_of_documents(int n, int run) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = i / run;
  return ids;
}

AttentionRow masked(AttentionRow r, SparsePattern pattern, int segment, int stride, int sinks) {
  r.pattern = pattern;
  r.segment = segment;
  r.stride = stride;
  r.sinks = sinks;
  return r;
}

AttentionRow key_block(AttentionRow r, int q_offset, int k_offset, int64_t Tk) {
  r.q_offset = q_offset;
  r.k_offset = k_offset;
  r.Tk = Tk;
  return r;
}

}  // namespace anvil::test
