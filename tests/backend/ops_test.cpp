// Op conformance tables, part 1: matmul, embedding, rmsnorm, swiglu and cross-entropy. Each
// TEST is one op family; each row of its table becomes an OpCase that the driver (op_driver.h)
// runs on every compiled backend against cpu-ref, the double oracle and finite differences.
// Adding a case means adding a row; adding an op means adding a row type and a builder.
// Tolerances are peak-relative: f32 rows allow a few f32 roundings per element, bf16 rows a few
// bf16 roundings (one bf16 ulp is 2^-8 = 3.9e-3 relative). Every table with bf16 rows has an f16
// twin of each (with_f16_twins); f16 keeps 11 significant bits to bf16's 8, so one rounding is
// 2^-11 = 4.9e-4 relative, 8 times smaller, and the f16 tolerance is the bf16 one / 8: the same
// number of roundings. Both stay above one full f16 ulp (2^-10 = 9.8e-4), the most two correct
// roundings of one value (cpu-ref's and the backend's) can differ by.
#include <gtest/gtest.h>

#include "oracles.h"
#include "op_driver.h"

namespace anvil::test {
namespace {

// ---- matmul: forward c = alpha op(a) op(b) + beta c; backward through the matmul identities
// d op(a) = alpha dc op(b)^T and d op(b) = alpha op(a)^T dc, run on the backend under test.

struct MatmulRow {
  int64_t batches;  // 0: rank-2 operands
  int64_t M, K, N;
  bool transpose_a, transpose_b;
  bool shared_b;
  float alpha, beta;
  DType ab, c;
  Tolerance tol{1e-5, 1e-2, 1.25e-3};
};

OpCase matmul_case(const MatmulRow& r) {
  Rng rng(r.M * 1000003 + r.K * 1009 + r.N);
  const bool batched = r.batches > 0;
  const int64_t P = batched ? r.batches : 1;
  auto shape3 = [&](bool per_batch, int64_t rows, int64_t cols) {
    return batched && per_batch ? Shape{P, rows, cols} : Shape{rows, cols};
  };
  OpCase c;
  c.forward_op = "matmul";
  c.backward_op = "matmul_backward(identities)";
  c.label = fmt::format("{}M={} K={} N={} {}{} alpha={} beta={}{} c={}",
                        batched ? fmt::format("P={} ", P) : "", r.M, r.K, r.N,
                        r.transpose_a ? "aT" : "a", r.transpose_b ? "bT" : "b", r.alpha, r.beta,
                        r.shared_b ? " shared_b" : "", dtype_name(r.c));
  c.dtype = r.ab;
  c.tol = r.tol;
  const Shape a_shape = r.transpose_a ? shape3(true, r.K, r.M) : shape3(true, r.M, r.K);
  const Shape b_shape =
      r.transpose_b ? shape3(!r.shared_b, r.N, r.K) : shape3(!r.shared_b, r.K, r.N);
  const Shape c_shape = shape3(true, r.M, r.N);
  c.inputs["a"] = random_tensor(rng, r.ab, a_shape);
  c.inputs["b"] = random_tensor(rng, r.ab, b_shape);
  if (r.beta != 0.0f) c.inputs["c0"] = random_tensor(rng, r.c, c_shape);
  c.outputs = {{"c", r.c, c_shape}};
  c.forward = [r](Workspace& ws) {
    if (r.beta != 0.0f) ws.backend().copy(ws["c"], ws["c0"]);
    ws.backend().matmul(ws["a"], ws["b"], ws["c"], r.transpose_a, r.transpose_b, r.alpha,
                        r.beta);
  };
  const f64::MatmulDims dims{P, r.M, r.K, r.N, r.transpose_a, r.transpose_b, r.shared_b};
  c.oracle = [r, dims](const Values& in) {
    const std::vector<double>* c0 = r.beta != 0.0f ? &in.at("c0") : nullptr;
    return Values{{"c", f64::matmul(in.at("a"), in.at("b"), c0, dims, r.alpha, r.beta)}};
  };
  c.differentiated = {"c"};
  c.grads = {{"a", DType::f32}, {"b", DType::f32}};
  if (r.beta != 0.0f) c.grads.push_back({"c0", DType::f32});
  c.backward = [r, P](Workspace& ws) {
    Backend& be = ws.backend();
    const Tensor a = ws["a"], b = ws["b"], da = ws["da"], db = ws["db"];
    Tensor dc = ws["dc"];
    if (dc.dtype != a.dtype) {  // the identities multiply dc with a or b: bring it to their dtype
      const Tensor converted = ws.scratch(a.dtype, dc.shape);
      be.cast(dc, converted);
      dc = converted;
    }
    if (!r.transpose_a) {
      be.matmul(dc, b, da, false, !r.transpose_b, r.alpha, 0.0f);
    } else if (!r.shared_b) {
      be.matmul(b, dc, da, r.transpose_b, true, r.alpha, 0.0f);
    } else {
      for (int64_t p = 0; p < P; ++p)
        be.matmul(b, dc[p], da[p], r.transpose_b, true, r.alpha, 0.0f);
    }
    auto db_of = [&](const Tensor& a_part, const Tensor& dc_part, float beta) {
      if (!r.transpose_b) be.matmul(a_part, dc_part, db, !r.transpose_a, false, r.alpha, beta);
      else be.matmul(dc_part, a_part, db, true, r.transpose_a, r.alpha, beta);
    };
    if (!r.shared_b || r.batches == 0) {
      db_of(a, dc, 0.0f);
    } else {
      be.fill_zero(db);
      for (int64_t p = 0; p < P; ++p) db_of(a[p], dc[p], 1.0f);
    }
    if (r.beta != 0.0f) {
      be.cast(ws["dc"], ws["dc0"]);
      be.scale(ws["dc0"], r.beta);
    }
  };
  return c;
}

TEST(Ops, Matmul) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<MatmulRow> rows = {
      {0, 5, 7, 3, false, false, false, 1.0f, 0.0f, f32, f32},
      {0, 5, 7, 3, true, false, false, 1.0f, 0.0f, f32, f32},
      {0, 5, 7, 3, false, true, false, 1.0f, 0.0f, f32, f32},
      {0, 5, 7, 3, true, true, false, 1.0f, 0.0f, f32, f32},
      {0, 37, 19, 23, false, true, false, 0.5f, 0.75f, f32, f32},
      {0, 1, 37, 1, false, false, false, 2.0f, 0.0f, f32, f32},
      {0, 9, 16, 11, false, true, false, 1.0f, 0.0f, bf16, f32},
      {0, 6, 13, 10, true, false, false, 1.0f, 1.0f, bf16, bf16},
      {3, 4, 6, 5, false, false, false, 1.0f, 0.0f, f32, f32},
      {3, 4, 6, 5, true, true, false, 0.25f, 0.0f, f32, f32},
      {2, 3, 8, 7, false, true, true, 1.0f, 0.0f, f32, f32},
      {2, 3, 8, 7, true, false, true, 1.0f, 0.5f, f32, f32},
      {2, 5, 12, 9, false, false, true, 1.0f, 0.0f, bf16, bf16},
      // Larger shapes: the optimized backend's library kernels, not just their edge paths.
      {0, 130, 70, 90, false, true, false, 1.0f, 0.0f, f32, f32},
      {0, 130, 70, 90, true, false, false, 1.0f, 1.0f, f32, f32},
      {0, 96, 64, 80, false, true, false, 1.0f, 0.0f, bf16, bf16},
      {0, 96, 64, 80, true, false, false, 1.0f, 1.0f, bf16, f32},
      {0, 64, 100, 48, false, false, false, 1.0f, 0.0f, bf16, f32},
      {3, 40, 33, 20, true, true, false, 0.5f, 0.0f, bf16, f32},
      {4, 17, 64, 31, false, true, true, 1.0f, 0.0f, f32, f32},
      // Enough work for the OpenBLAS GEMM (AVX2, generic) to slice it over threads: by
      // columns of c, by batches, and by batches sharing b.
      {0, 24, 96, 300, false, true, false, 1.0f, 0.5f, f32, f32},
      {4, 48, 40, 96, true, false, false, 1.0f, 0.0f, f32, f32},
      {2, 64, 48, 100, false, false, true, 1.0f, 0.0f, f32, f32},
  };
  for (const MatmulRow& row :
       with_f16_twins(rows, [](MatmulRow& r) { return bf16_to_f16(r.ab) | bf16_to_f16(r.c); }))
    run_op_case(matmul_case(row));
}

// ---- embedding: gather rows; backward scatter-adds (+=) into an f32 table gradient.

struct EmbeddingRow {
  int64_t V, C;
  std::vector<int32_t> ids;
  DType table, out;
  Tolerance tol{1e-6, 1e-2, 1.25e-3};
};

OpCase embedding_case(const EmbeddingRow& r) {
  Rng rng(r.V * 7919 + r.C);
  const int64_t N = static_cast<int64_t>(r.ids.size());
  OpCase c;
  c.forward_op = "embedding_forward";
  c.backward_op = "embedding_backward";
  c.label = fmt::format("V={} C={} N={} table={} out={}", r.V, r.C, N, dtype_name(r.table),
                        dtype_name(r.out));
  c.dtype = r.out;
  c.tol = r.tol;
  c.inputs["ids"] = int_tensor(Shape{N}, r.ids);
  c.inputs["table"] = random_tensor(rng, r.table, Shape{r.V, r.C});
  c.outputs = {{"out", r.out, Shape{N, r.C}}};
  c.forward = [](Workspace& ws) {
    ws.backend().embedding_forward(ws["ids"], ws["table"], ws["out"]);
  };
  const int64_t C = r.C;
  c.oracle = [C](const Values& in) {
    return Values{{"out", f64::embedding(in.at("ids"), in.at("table"), C)}};
  };
  c.differentiated = {"out"};
  c.grads = {{"table", DType::f32, GradMode::accumulate}};
  c.backward = [](Workspace& ws) {
    ws.backend().embedding_backward(ws["ids"], ws["dout"], ws["dtable"]);
  };
  return c;
}

// Returns n ids in [0, vocab), with repeats.
std::vector<int32_t> repeated_ids(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = (i * i + 3 * i) % vocab;
  return ids;
}

TEST(Ops, Embedding) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<EmbeddingRow> rows = {
      {11, 37, {3, 0, 10, 3, 7, 3, 1, 10, 5}, f32, f32},
      {11, 37, {3, 0, 10, 3, 7, 3, 1, 10, 5}, bf16, bf16},
      {6, 20, {5, 5, 0, 2}, f32, bf16},
      {5, 12, {4}, f32, f32},
      {50, 130, repeated_ids(300, 50), f32, f32},
      {50, 130, repeated_ids(300, 50), bf16, bf16},
  };
  for (const EmbeddingRow& row : with_f16_twins(rows, [](EmbeddingRow& r) {
         return bf16_to_f16(r.table) | bf16_to_f16(r.out);
       }))
    run_op_case(embedding_case(row));
}

// ---- rmsnorm: forward saves rstd; backward accumulates (+=) dx and dweight.

struct RmsnormRow {
  int64_t N, C;
  float eps;
  DType x, weight;
  Tolerance tol{2e-5, 2e-2, 2.5e-3};
};

OpCase rmsnorm_case(const RmsnormRow& r) {
  Rng rng(r.N * 131 + r.C);
  OpCase c;
  c.forward_op = "rmsnorm_forward";
  c.backward_op = "rmsnorm_backward";
  c.label = fmt::format("N={} C={} eps={} weight={}", r.N, r.C, r.eps, dtype_name(r.weight));
  c.dtype = r.x;
  c.tol = r.tol;
  c.inputs["x"] = random_tensor(rng, r.x, Shape{r.N, r.C}, -2.0, 2.0);
  c.inputs["weight"] = random_tensor(rng, r.weight, Shape{r.C}, 0.5, 1.5);
  c.outputs = {{"out", r.x, Shape{r.N, r.C}}, {"rstd", DType::f32, Shape{r.N}}};
  const float eps = r.eps;
  c.forward = [eps](Workspace& ws) {
    ws.backend().rmsnorm_forward(ws["x"], ws["weight"], ws["out"], ws["rstd"], eps);
  };
  c.oracle = [r](const Values& in) {
    Values out{{"out", {}}, {"rstd", {}}};
    f64::rmsnorm(in.at("x"), in.at("weight"), r.N, r.C, r.eps, out["out"], out["rstd"]);
    return out;
  };
  c.differentiated = {"out"};
  c.grads = {{"x", r.x, GradMode::accumulate}, {"weight", DType::f32, GradMode::accumulate}};
  c.backward = [](Workspace& ws) {
    ws.backend().rmsnorm_backward(ws["dout"], ws["x"], ws["weight"], ws["rstd"], ws["dx"],
                                  ws["dweight"]);
  };
  return c;
}

TEST(Ops, Rmsnorm) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<RmsnormRow> rows = {
      {5, 37, 1e-5f, f32, f32},
      {1, 12, 1e-6f, f32, f32},
      {4, 64, 1e-5f, bf16, f32},
      {3, 20, 1e-5f, bf16, bf16},
      {67, 515, 1e-5f, f32, f32},
      {40, 600, 1e-6f, bf16, f32},
      {40, 600, 1e-6f, bf16, bf16},
  };
  for (const RmsnormRow& row : with_f16_twins(rows, [](RmsnormRow& r) {
         return bf16_to_f16(r.x) | bf16_to_f16(r.weight);
       }))
    run_op_case(rmsnorm_case(row));
}

// ---- swiglu: out = silu(gate) * up; backward overwrites dgate and dup.

struct SwigluRow {
  int64_t N, F;
  DType dtype;
  Tolerance tol{1e-5, 2e-2, 2.5e-3};
};

OpCase swiglu_case(const SwigluRow& r) {
  Rng rng(r.N * 17 + r.F);
  OpCase c;
  c.forward_op = "swiglu_forward";
  c.backward_op = "swiglu_backward";
  c.label = fmt::format("N={} F={}", r.N, r.F);
  c.dtype = r.dtype;
  c.tol = r.tol;
  c.inputs["gate"] = random_tensor(rng, r.dtype, Shape{r.N, r.F}, -5.0, 5.0);
  c.inputs["up"] = random_tensor(rng, r.dtype, Shape{r.N, r.F}, -2.0, 2.0);
  c.outputs = {{"out", r.dtype, Shape{r.N, r.F}}};
  c.forward = [](Workspace& ws) { ws.backend().swiglu_forward(ws["gate"], ws["up"], ws["out"]); };
  c.oracle = [](const Values& in) {
    return Values{{"out", f64::swiglu(in.at("gate"), in.at("up"))}};
  };
  c.differentiated = {"out"};
  c.grads = {{"gate", r.dtype}, {"up", r.dtype}};
  c.backward = [](Workspace& ws) {
    ws.backend().swiglu_backward(ws["dout"], ws["gate"], ws["up"], ws["dgate"], ws["dup"]);
  };
  return c;
}

TEST(Ops, Swiglu) {
  const std::vector<SwigluRow> rows = {
      {5, 37, DType::f32},
      {1, 12, DType::f32},
      {3, 40, DType::bf16},
      {64, 700, DType::f32},
      {33, 1000, DType::bf16},
  };
  for (const SwigluRow& row :
       with_f16_twins(rows, [](SwigluRow& r) { return bf16_to_f16(r.dtype); }))
    run_op_case(swiglu_case(row));
}

// ---- cross-entropy: forward writes per-row losses; the fused backward writes dlogits, which
// is grad_scale times the gradient of sum(losses), so the driver's cotangent is grad_scale.

struct CrossEntropyRow {
  int64_t V;
  std::vector<int32_t> targets;
  std::vector<double> loss_mask;  // empty: no mask
  float grad_scale;
  bool in_place;  // dlogits aliases logits
  DType dtype;
  Tolerance tol{1e-5, 2e-2, 2.5e-3};
};

constexpr int kIgnoreIndex = -100;

OpCase cross_entropy_case(const CrossEntropyRow& r) {
  const int64_t N = static_cast<int64_t>(r.targets.size());
  Rng rng(N * 409 + r.V);
  OpCase c;
  c.forward_op = "cross_entropy";
  c.backward_op = "cross_entropy(dlogits)";
  c.label = fmt::format("N={} V={}{} grad_scale={}{}", N, r.V, r.loss_mask.empty() ? "" : " mask",
                        r.grad_scale, r.in_place ? " in_place" : "");
  c.dtype = r.dtype;
  c.tol = r.tol;
  c.inputs["logits"] = random_tensor(rng, r.dtype, Shape{N, r.V}, -4.0, 4.0);
  c.inputs["targets"] = int_tensor(Shape{N}, r.targets);
  const bool masked = !r.loss_mask.empty();
  if (masked) c.inputs["loss_mask"] = HostTensor{DType::f32, Shape{N}, r.loss_mask};
  c.outputs = {{"losses", DType::f32, Shape{N}}};
  c.forward = [masked](Workspace& ws) {
    const Tensor mask = masked ? ws["loss_mask"] : Tensor{};
    ws.backend().cross_entropy(ws["logits"], ws["targets"], masked ? &mask : nullptr,
                               kIgnoreIndex, ws["losses"], nullptr, 1.0f);
  };
  const int64_t V = r.V;
  c.oracle = [masked, N, V](const Values& in) {
    const std::vector<double>* mask = masked ? &in.at("loss_mask") : nullptr;
    return Values{{"losses", f64::cross_entropy(in.at("logits"), in.at("targets"), mask, N, V,
                                                kIgnoreIndex)}};
  };
  c.differentiated = {"losses"};
  c.fixed_cotangents["dlosses"] = std::vector<double>(static_cast<size_t>(N), r.grad_scale);
  c.grads = {{"logits", r.dtype}};
  c.backward = [r, masked, N](Workspace& ws) {
    Backend& be = ws.backend();
    const Tensor mask = masked ? ws["loss_mask"] : Tensor{};
    const Tensor losses = ws.scratch(DType::f32, Shape{N});
    const Tensor dlogits = ws["dlogits"];
    if (r.in_place) be.copy(dlogits, ws["logits"]);
    const Tensor logits = r.in_place ? dlogits : ws["logits"];
    be.cross_entropy(logits, ws["targets"], masked ? &mask : nullptr, kIgnoreIndex, losses,
                     &dlogits, r.grad_scale);
  };
  return c;
}

TEST(Ops, CrossEntropy) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<CrossEntropyRow> rows = {
      {37, {3, kIgnoreIndex, 36, 0, 12, 5}, {1, 1, 1, 0, 0.5, 1}, 0.25f, false, f32},
      {50, {49, 0, 7, kIgnoreIndex}, {}, 1.0f, false, bf16},
      {33, {1, 2, 30, kIgnoreIndex, 4}, {0, 1, 1, 1, 1}, 0.5f, true, f32},
      {29, {28, 3, 3}, {}, 0.125f, true, bf16},
      {7, {6}, {}, 1.0f, false, f32},
      // A vocabulary that is not a multiple of the vector width, rows split across threads.
      {8200, {8199, 0, kIgnoreIndex, 4100, 17, 8190}, {1, 1, 1, 0.5, 1, 0}, 0.5f, false, f32},
      {8200, {3, 8199, 5000, kIgnoreIndex}, {}, 1.0f, true, f32},
      {8200, {3, 8199, 5000, 0, 1}, {}, 0.25f, true, bf16},
  };
  for (const CrossEntropyRow& row :
       with_f16_twins(rows, [](CrossEntropyRow& r) { return bf16_to_f16(r.dtype); }))
    run_op_case(cross_entropy_case(row));
}

}  // namespace
}  // namespace anvil::test
