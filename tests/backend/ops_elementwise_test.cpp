// Op conformance tables, part 3: the forward-only ops (add, scale, axpy, cast) through the
// same driver, then the ops that return scalars or update state in place and so need their own
// loop: sum_squares, all_finite and adamw_step (ten steps against a double implementation).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_driver.h"

namespace anvil::test {
namespace {

// ---- add / scale / axpy / cast. The oracle is the exact double result (rounded to the
// destination dtype for cast, which must match bit for bit: tolerance 0).

struct ElementwiseRow {
  std::string op;  // "add", "scale", "axpy" or "cast"
  int64_t n;
  DType x, y;  // operand dtypes: add a/b, axpy x/y, cast src/dst; scale uses x only
  float alpha;
  bool in_place;  // add writes into a
  Tolerance tol{1e-6, 4e-3, 1e-3};
};

// Returns values for cast rows: random ones plus rounding ties, overflow, subnormals and
// non-finite values, keeping only those representable in the source dtype.
std::vector<double> cast_values(Rng& rng, DType src, int64_t random_count) {
  std::vector<double> values = random_tensor(rng, src, Shape{random_count}, -3.0, 3.0).values;
  const double specials[] = {0.0, -0.0, 1.0 + 0x1p-8, 1.0 + 0x3p-8, -(1.0 + 0x1p-8),
                             1.0 + 0x1p-11, 1.0 + 0x3p-11, 65504.0, 65519.0, 65520.0,
                             70000.0, 1e-7, 0x1p-25, 0x3p-25, 0x1p-24, 1e-40, 3e38,
                             HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN()};
  for (double v : specials)
    if (std::isnan(v) || round_to_dtype(v, src) == v) values.push_back(v);
  return values;
}

OpCase elementwise_case(const ElementwiseRow& r) {
  Rng rng(r.n * 3 + static_cast<int>(r.x) * 11 + static_cast<int>(r.y));
  OpCase c;
  c.forward_op = r.op;
  c.tol = r.tol;
  c.compute_dtype_op = false;
  const Shape shape{r.n};
  if (r.op == "add") {
    c.label = fmt::format("n={} {}+{}{}", r.n, dtype_name(r.x), dtype_name(r.y),
                          r.in_place ? " in_place" : "");
    c.dtype = r.x;
    c.inputs["a"] = random_tensor(rng, r.x, shape);
    c.inputs["b"] = random_tensor(rng, r.y, shape);
    c.outputs = {{"out", r.x, shape}};
    c.forward = [r](Workspace& ws) {
      if (!r.in_place) return ws.backend().add(ws["a"], ws["b"], ws["out"]);
      ws.backend().copy(ws["out"], ws["a"]);
      ws.backend().add(ws["out"], ws["b"], ws["out"]);
    };
    c.oracle = [](const Values& in) {
      std::vector<double> out = in.at("a");
      for (size_t i = 0; i < out.size(); ++i) out[i] += in.at("b")[i];
      return Values{{"out", out}};
    };
  } else if (r.op == "scale") {
    c.label = fmt::format("n={} alpha={}", r.n, r.alpha);
    c.dtype = r.x;
    c.inputs["x"] = random_tensor(rng, r.x, shape);
    c.outputs = {{"out", r.x, shape}};
    c.forward = [r](Workspace& ws) {
      ws.backend().copy(ws["out"], ws["x"]);
      ws.backend().scale(ws["out"], r.alpha);
    };
    c.oracle = [r](const Values& in) {
      std::vector<double> out = in.at("x");
      for (double& v : out) v *= r.alpha;
      return Values{{"out", out}};
    };
  } else if (r.op == "axpy") {
    c.label = fmt::format("n={} alpha={} x={} y={}", r.n, r.alpha, dtype_name(r.x),
                          dtype_name(r.y));
    c.dtype = r.y;
    c.inputs["x"] = random_tensor(rng, r.x, shape);
    c.inputs["y0"] = random_tensor(rng, r.y, shape);
    c.outputs = {{"y", r.y, shape}};
    c.forward = [r](Workspace& ws) {
      ws.backend().copy(ws["y"], ws["y0"]);
      ws.backend().axpy(r.alpha, ws["x"], ws["y"]);
    };
    c.oracle = [r](const Values& in) {
      std::vector<double> y = in.at("y0");
      for (size_t i = 0; i < y.size(); ++i) y[i] += r.alpha * in.at("x")[i];
      return Values{{"y", y}};
    };
  } else {
    const std::vector<double> values = cast_values(rng, r.x, r.n);
    const Shape cast_shape{static_cast<int64_t>(values.size())};
    c.label = fmt::format("n={} {}->{}", cast_shape[0], dtype_name(r.x), dtype_name(r.y));
    c.dtype = r.y;
    c.inputs["src"] = HostTensor{r.x, cast_shape, values};
    c.outputs = {{"dst", r.y, cast_shape}};
    c.forward = [](Workspace& ws) { ws.backend().cast(ws["src"], ws["dst"]); };
    const DType dst = r.y;
    c.oracle = [dst](const Values& in) {
      std::vector<double> out = in.at("src");
      for (double& v : out) v = round_to_dtype(v, dst);
      return Values{{"dst", out}};
    };
  }
  return c;
}

TEST(Ops, Elementwise) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const Tolerance exact{0.0, 0.0, 0.0};
  const std::vector<ElementwiseRow> rows = {
      {"add", 37, f32, f32, 0.0f, false},
      {"add", 37, f32, bf16, 0.0f, true},
      {"add", 29, bf16, bf16, 0.0f, false},
      {"add", 13, f16, f32, 0.0f, true},
      {"scale", 37, f32, f32, -0.37f, false},
      {"scale", 37, bf16, bf16, 3.0f, false},
      {"scale", 37, f16, f16, -0.37f, false},
      {"axpy", 37, f32, f32, 0.3f, false},
      {"axpy", 37, bf16, f32, -1.5f, false},
      {"axpy", 37, f32, bf16, 0.125f, false},
      {"axpy", 37, f16, f32, -1.5f, false},
      {"axpy", 37, f32, f16, 0.125f, false},
      {"cast", 37, f32, bf16, 0.0f, false, exact},
      {"cast", 37, bf16, f32, 0.0f, false, exact},
      {"cast", 37, f32, f16, 0.0f, false, exact},
      {"cast", 37, f16, f32, 0.0f, false, exact},
      {"cast", 37, bf16, f16, 0.0f, false, exact},
      {"cast", 37, f16, bf16, 0.0f, false, exact},
      {"cast", 37, f32, f32, 0.0f, false, exact},
      // Long enough to be split across threads, with a partial last vector.
      {"add", 100003, bf16, f32, 0.0f, false},
      {"scale", 100003, f32, f32, 0.7f, false},
      {"axpy", 100003, f32, bf16, -0.25f, false},
      {"cast", 100003, f32, bf16, 0.0f, false, exact},
      {"cast", 100003, bf16, f32, 0.0f, false, exact},
      {"add", 100003, f16, f16, 0.0f, true},
      {"axpy", 100003, f16, f16, -0.25f, false},
      {"cast", 100003, f32, f16, 0.0f, false, exact},
      {"cast", 100003, f16, f32, 0.0f, false, exact},
      {"cast", 100003, bf16, f16, 0.0f, false, exact},
  };
  for (const ElementwiseRow& row : rows) run_op_case(elementwise_case(row));
}

// ---- sum_squares and all_finite.

// Checks sum_squares and all_finite on n random values of `dtype`.
void check_reductions(Backend& backend, int64_t n, DType dtype) {
  Rng rng(static_cast<uint64_t>(dtype) + 5 + static_cast<uint64_t>(n));
  HostTensor x = random_tensor(rng, dtype, Shape{n}, -2.0, 2.0);
  double want = 0.0;
  for (double v : x.values) want += v * v;
  Workspace ws(backend);
  const double got = backend.sum_squares(ws.upload("x", x));
  const double error = std::fabs(got - want) / want;
  std::printf("[ops] sum_squares n=%lld %s on %s: rel_err=%s tol=1e-12 %s\n",
              static_cast<long long>(n), std::string(dtype_name(dtype)).c_str(),
              backend.name().c_str(), format_error(error).c_str(), error <= 1e-12 ? "OK" : "FAIL");
  EXPECT_LE(error, 1e-12) << backend.name() << " " << dtype_name(dtype);

  // The largest finite value is finite; NaN or +-inf anywhere (first, middle, last) is not.
  x.values[n / 3] = dtype == DType::f16 ? 65504.0 : 0x1.fep127;
  EXPECT_TRUE(backend.all_finite(ws.upload("finite", x))) << backend.name();
  int checked = 1;
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), HUGE_VAL, -HUGE_VAL}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      HostTensor broken = x;
      broken.values[at] = bad;
      const std::string name = fmt::format("bad{}", checked++);
      EXPECT_FALSE(backend.all_finite(ws.upload(name, broken)))
          << backend.name() << " " << dtype_name(dtype) << " value " << bad << " at " << at;
    }
  }
  std::printf("[ops] all_finite n=%lld %s on %s: %d tensors (NaN/+inf/-inf at first, middle, "
              "last) checked\n",
              static_cast<long long>(n), std::string(dtype_name(dtype)).c_str(),
              backend.name().c_str(), checked);
}

TEST(Ops, Reductions) {
  for (const auto& backend : available_backends()) {
    // The long tensors are split across threads by the optimized backend.
    for (const int64_t n : {int64_t{1001}, int64_t{150001}})
      for (DType dtype : {DType::f32, DType::bf16, DType::f16})
        check_reductions(*backend, n, dtype);
  }
}

// ---- adamw_step: ten steps against a double implementation of the same update.

struct AdamWRow {
  int64_t n;
  AdamWParams params;  // step is advanced by the test
  DType copy;          // param_copy dtype; i32 means no copy
  double tol;
};

TEST(Ops, AdamW) {
  AdamWParams decayed;
  decayed.lr = 1e-2f, decayed.weight_decay = 0.1f, decayed.grad_scale = 0.5f;
  AdamWParams plain;
  plain.lr = 3e-3f, plain.beta2 = 0.999f;
  AdamWParams large_eps;
  large_eps.lr = 1e-1f, large_eps.eps = 1e-3f, large_eps.weight_decay = 0.01f;
  const std::vector<AdamWRow> rows = {
      {37, decayed, DType::bf16, 2e-6},
      {100, plain, DType::i32, 2e-6},
      {5, large_eps, DType::f32, 2e-6},
      {50001, decayed, DType::bf16, 2e-6},
      {50001, decayed, DType::f16, 2e-6},
  };
  const int kSteps = 10;
  for (const AdamWRow& row : rows) {
    for (const auto& backend : available_backends()) {
      Rng rng(row.n);
      const Shape shape{row.n};
      const HostTensor param0 = random_tensor(rng, DType::f32, shape);
      std::vector<HostTensor> grads;
      for (int s = 0; s < kSteps; ++s) grads.push_back(random_tensor(rng, DType::f32, shape));

      // The double model: the textbook update with bias-corrected moments.
      const AdamWParams& h = row.params;
      std::vector<double> p = param0.values, m(row.n, 0.0), v(row.n, 0.0);
      for (int s = 1; s <= kSteps; ++s) {
        for (int64_t i = 0; i < row.n; ++i) {
          const double g = grads[s - 1].values[i] * static_cast<double>(h.grad_scale);
          p[i] *= 1.0 - static_cast<double>(h.lr) * h.weight_decay;
          m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
          v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
          const double m_hat = m[i] / (1.0 - std::pow(static_cast<double>(h.beta1), s));
          const double v_hat = v[i] / (1.0 - std::pow(static_cast<double>(h.beta2), s));
          p[i] -= h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
        }
      }

      Workspace ws(*backend);
      const Tensor param = ws.upload("param", param0);
      const std::vector<double> zeros(static_cast<size_t>(row.n), 0.0);
      const Tensor m_state = ws.upload("m", HostTensor{DType::f32, shape, zeros});
      const Tensor v_state = ws.upload("v", HostTensor{DType::f32, shape, zeros});
      const bool with_copy = row.copy != DType::i32;
      Tensor copy;
      if (with_copy) copy = ws.upload("copy", HostTensor{row.copy, shape, zeros});
      for (int s = 1; s <= kSteps; ++s) {
        AdamWParams step_params = h;
        step_params.step = s;
        const Tensor grad = ws.upload(fmt::format("g{}", s), grads[s - 1]);
        backend->adamw_step(param, grad, m_state, v_state, step_params,
                            with_copy ? &copy : nullptr);
      }
      backend->synchronize();
      const std::vector<double> param_now = ws.download("param");
      const double param_error = peak_relative_error(param_now, p);
      const double m_error = peak_relative_error(ws.download("m"), m);
      const double v_error = peak_relative_error(ws.download("v"), v);
      // The copy must be exactly the updated f32 parameter rounded to the copy's dtype.
      double copy_error = 0.0;
      if (with_copy) {
        std::vector<double> want_copy = param_now;
        for (double& x : want_copy) x = round_to_dtype(x, row.copy);
        copy_error = peak_relative_error(ws.download("copy"), want_copy);
      }
      const bool ok = param_error <= row.tol && m_error <= row.tol && v_error <= row.tol &&
                      copy_error == 0.0;
      std::printf("[ops] adamw_step n=%lld lr=%g wd=%g grad_scale=%g eps=%g copy=%s x%d steps on "
                  "%s: param f64=%s m f64=%s v f64=%s copy exact=%s; tol=%s %s\n",
                  static_cast<long long>(row.n), h.lr, h.weight_decay, h.grad_scale, h.eps,
                  with_copy ? std::string(dtype_name(row.copy)).c_str() : "none", kSteps,
                  backend->name().c_str(), format_error(param_error).c_str(),
                  format_error(m_error).c_str(), format_error(v_error).c_str(),
                  format_error(copy_error).c_str(), format_error(row.tol).c_str(),
                  ok ? "OK" : "FAIL");
      EXPECT_TRUE(ok) << backend->name();
    }
  }
}

}  // namespace
}  // namespace anvil::test
