// Op conformance, part 5: the fused ops of the device step. Each fused op is defined as the
// plain ops in sequence (cpu-ref), so besides the driver's comparison with cpu-ref and a
// double oracle, every backend must give the fused result bit for bit equal to its own
// unfused sequence: the residual add fused into rmsnorm (add_rmsnorm_forward), the residual
// gradient's compute-dtype copy fused into rmsnorm's backward (dx_copy), the multi-tensor
// AdamW step (adamw_step_many) against one adamw_step per set, the loss sum kept on the
// device (sum_to_double) against the host's serial double sum, and the fused classifier
// (cross_entropy writing dlogits over bf16 logits in place, at the head's chunk of 1024+ rows)
// against the same op out of place.
#include <gtest/gtest.h>

#include <cstring>

#include "oracles.h"
#include "op_driver.h"

namespace anvil::test {
namespace {

// Returns the raw bytes of a device tensor.
std::vector<uint8_t> bytes_of(Backend& backend, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  backend.copy_to_host(out.data(), t);
  return out;
}

// ---- add_rmsnorm_forward: sum = a + b, then rmsnorm of sum (forward only in the driver).

struct AddRmsnormRow {
  int64_t N, C;
  DType residual;  // a, b, sum
  DType act;       // weight, out
  Tolerance tol{2e-5, 2e-2, 2.5e-3};
};

OpCase add_rmsnorm_case(const AddRmsnormRow& r) {
  Rng rng(r.N * 7919 + r.C);
  OpCase c;
  c.forward_op = "add_rmsnorm_forward";
  c.label = fmt::format("N={} C={} residual={}", r.N, r.C, dtype_name(r.residual));
  c.dtype = r.act;
  c.tol = r.tol;
  c.inputs["a"] = random_tensor(rng, r.residual, Shape{r.N, r.C}, -2.0, 2.0);
  c.inputs["b"] = random_tensor(rng, r.residual, Shape{r.N, r.C}, -2.0, 2.0);
  c.inputs["weight"] = random_tensor(rng, r.act, Shape{r.C}, 0.5, 1.5);
  c.outputs = {{"sum", r.residual, Shape{r.N, r.C}},
               {"out", r.act, Shape{r.N, r.C}},
               {"rstd", DType::f32, Shape{r.N}}};
  c.forward = [](Workspace& ws) {
    ws.backend().add_rmsnorm_forward(ws["a"], ws["b"], ws["sum"], ws["weight"], ws["out"],
                                     ws["rstd"], 1e-5f);
  };
  c.oracle = [r](const Values& in) {
    Values out{{"sum", {}}, {"out", {}}, {"rstd", {}}};
    std::vector<double>& sum = out["sum"];
    for (size_t i = 0; i < in.at("a").size(); ++i)
      sum.push_back(round_to_dtype(in.at("a")[i] + in.at("b")[i], r.residual));
    f64::rmsnorm(sum, in.at("weight"), r.N, r.C, 1e-5f, out["out"], out["rstd"]);
    return out;
  };
  return c;
}

TEST(Ops, AddRmsnorm) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<AddRmsnormRow> rows = {
      {5, 37, f32, f32}, {67, 515, f32, f32}, {40, 600, f32, bf16}, {8, 64, bf16, bf16}};
  for (const AddRmsnormRow& row : with_f16_twins(rows, [](AddRmsnormRow& r) {
         return bf16_to_f16(r.residual) | bf16_to_f16(r.act);
       }))
    run_op_case(add_rmsnorm_case(row));
}

TEST(Ops, AddRmsnormEqualsAddThenRmsnormBitForBit) {
  for (const auto& backend : available_backends()) {
    for (const DType act : {DType::f32, DType::bf16}) {
      Rng rng(3);
      const int64_t N = 33, C = 320;
      Workspace ws(*backend);
      const Tensor a = ws.upload("a", random_tensor(rng, DType::f32, Shape{N, C}, -2.0, 2.0));
      const Tensor b = ws.upload("b", random_tensor(rng, DType::f32, Shape{N, C}, -2.0, 2.0));
      const Tensor w = ws.upload("w", random_tensor(rng, act, Shape{C}, 0.5, 1.5));
      const Tensor sum1 = ws.scratch(DType::f32, Shape{N, C});
      const Tensor out1 = ws.scratch(act, Shape{N, C});
      const Tensor rstd1 = ws.scratch(DType::f32, Shape{N});
      backend->add(a, b, sum1);
      backend->rmsnorm_forward(sum1, w, out1, rstd1, 1e-5f);
      // Fused, writing the sum over a (as the model does: resid_mid += x).
      const Tensor out2 = ws.scratch(act, Shape{N, C});
      const Tensor rstd2 = ws.scratch(DType::f32, Shape{N});
      backend->add_rmsnorm_forward(a, b, a, w, out2, rstd2, 1e-5f);
      EXPECT_EQ(bytes_of(*backend, a), bytes_of(*backend, sum1)) << backend->name();
      EXPECT_EQ(bytes_of(*backend, out2), bytes_of(*backend, out1)) << backend->name();
      EXPECT_EQ(bytes_of(*backend, rstd2), bytes_of(*backend, rstd1)) << backend->name();
      std::printf("[ops] add_rmsnorm_forward == add; rmsnorm_forward bit for bit on %s (%s)\n",
                  backend->name().c_str(), std::string(dtype_name(act)).c_str());
    }
  }
}

TEST(Ops, RmsnormBackwardCopyIsTheUpdatedGradientRounded) {
  for (const auto& backend : available_backends()) {
    for (const DType act : {DType::f32, DType::bf16}) {
      Rng rng(5);
      const int64_t N = 29, C = 384;
      Workspace ws(*backend);
      const HostTensor x = random_tensor(rng, act, Shape{N, C}, -2.0, 2.0);
      const HostTensor dout = random_tensor(rng, act, Shape{N, C});
      const HostTensor w = random_tensor(rng, act, Shape{C}, 0.5, 1.5);
      const HostTensor dx0 = random_tensor(rng, DType::f32, Shape{N, C});
      const HostTensor dw0 = random_tensor(rng, DType::f32, Shape{C});
      const Tensor xt = ws.upload("x", x), gt = ws.upload("dout", dout), wt = ws.upload("w", w);
      const Tensor rstd = ws.scratch(DType::f32, Shape{N});
      backend->rmsnorm_forward(xt, wt, ws.scratch(act, Shape{N, C}), rstd, 1e-5f);
      const Tensor dx_plain = ws.upload("dx_plain", dx0), dw_plain = ws.upload("dw_plain", dw0);
      const Tensor dx_fused = ws.upload("dx_fused", dx0), dw_fused = ws.upload("dw_fused", dw0);
      backend->rmsnorm_backward(gt, xt, wt, rstd, dx_plain, dw_plain);
      const Tensor cast = ws.scratch(DType::bf16, Shape{N, C});
      backend->cast(dx_plain, cast);
      const Tensor copy = ws.scratch(DType::bf16, Shape{N, C});
      backend->rmsnorm_backward(gt, xt, wt, rstd, dx_fused, dw_fused, &copy);
      EXPECT_EQ(bytes_of(*backend, dx_fused), bytes_of(*backend, dx_plain)) << backend->name();
      EXPECT_EQ(bytes_of(*backend, dw_fused), bytes_of(*backend, dw_plain)) << backend->name();
      EXPECT_EQ(bytes_of(*backend, copy), bytes_of(*backend, cast)) << backend->name();
      std::printf("[ops] rmsnorm_backward dx_copy == cast(dx) bit for bit on %s (%s)\n",
                  backend->name().c_str(), std::string(dtype_name(act)).c_str());
    }
  }
}

// ---- adamw_step_many: one update of several sets equals one adamw_step per set.

TEST(Ops, AdamWManyEqualsOneStepPerSet) {
  struct Set {
    int64_t n;
    float weight_decay;
    DType copy;  // i32: no copy
  };
  const std::vector<Set> sets = {
      {37, 0.1f, DType::bf16}, {5000, 0.0f, DType::bf16}, {3, 0.1f, DType::i32},
      {40001, 0.05f, DType::f32}};
  AdamWParams params;
  params.lr = 3e-3f, params.grad_scale = 0.5f, params.step = 3;
  for (const auto& backend : available_backends()) {
    Rng rng(11);
    Workspace ws(*backend);
    std::vector<AdamWTensors> many, single;
    for (size_t i = 0; i < sets.size(); ++i) {
      const Shape shape{sets[i].n};
      const HostTensor p = random_tensor(rng, DType::f32, shape);
      const HostTensor g = random_tensor(rng, DType::f32, shape);
      const HostTensor m = random_tensor(rng, DType::f32, shape, -0.1, 0.1);
      const HostTensor v = random_tensor(rng, DType::f32, shape, 0.0, 0.1);
      for (std::vector<AdamWTensors>* target : {&many, &single}) {
        const std::string tag = fmt::format("{}{}", target == &many ? "many" : "one", i);
        AdamWTensors set;
        set.param = ws.upload(tag + "p", p);
        set.grad = ws.upload(tag + "g", g);
        set.m = ws.upload(tag + "m", m);
        set.v = ws.upload(tag + "v", v);
        if (sets[i].copy != DType::i32) set.param_copy = ws.scratch(sets[i].copy, shape);
        set.weight_decay = sets[i].weight_decay;
        target->push_back(set);
      }
    }
    backend->adamw_step_many(many, params);
    for (const AdamWTensors& set : single) {
      AdamWParams one = params;
      one.weight_decay = set.weight_decay;
      backend->adamw_step(set.param, set.grad, set.m, set.v, one,
                          set.param_copy.defined() ? &set.param_copy : nullptr);
    }
    for (size_t i = 0; i < sets.size(); ++i) {
      EXPECT_EQ(bytes_of(*backend, many[i].param), bytes_of(*backend, single[i].param));
      EXPECT_EQ(bytes_of(*backend, many[i].m), bytes_of(*backend, single[i].m));
      EXPECT_EQ(bytes_of(*backend, many[i].v), bytes_of(*backend, single[i].v));
      if (many[i].param_copy.defined())
        EXPECT_EQ(bytes_of(*backend, many[i].param_copy),
                  bytes_of(*backend, single[i].param_copy));
    }
    std::printf("[ops] adamw_step_many of %zu sets == one adamw_step per set, bit for bit, on %s\n",
                sets.size(), backend->name().c_str());
  }
}

// ---- sum_to_double: the serial double sum, bit for bit, left on the device.

TEST(Ops, SumToDoubleIsTheSerialDoubleSum) {
  for (const auto& backend : available_backends()) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65537}}) {
      Rng rng(n);
      const HostTensor x = random_tensor(rng, DType::f32, Shape{n}, 0.0, 12.0);
      double want = 0.0;
      for (const double value : x.values) want += static_cast<float>(value);
      Workspace ws(*backend);
      const Tensor result = ws.scratch(DType::u32, Shape{2});
      backend->sum_to_double(ws.upload("x", x), result);
      double got = 0.0;
      backend->copy_to_host(&got, result);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0)
          << backend->name() << " n=" << n << ": " << got << " vs " << want;
      std::printf("[ops] sum_to_double n=%lld on %s: %s\n", static_cast<long long>(n),
                  backend->name().c_str(), got == want ? "exact" : "FAIL");
    }
  }
}

// ---- the fused classifier: the head's chunk (1024+ rows of bf16 logits) turned into its
// dlogits in place by cross_entropy, equal to the out-of-place op bit for bit, and to cpu-ref
// within the bf16 tolerance (the driver's in_place rows check small shapes against the
// oracle; this one the head's).

TEST(Ops, FusedClassifierInPlaceAtTheHeadsChunk) {
  const int64_t N = 1030, V = 2053;
  Rng rng(17);
  const HostTensor logits = random_tensor(rng, DType::bf16, Shape{N, V}, -6.0, 6.0);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    targets[static_cast<size_t>(i)] = i % 97 == 0 ? -100 : static_cast<int32_t>((i * 31) % V);
  const HostTensor target_tensor = int_tensor(Shape{N}, targets);
  const float grad_scale = 1.0f / 1000.0f;
  // Runs the fused classifier on `backend`: returns its dlogits and losses, after checking
  // them bit for bit against the same op out of place.
  auto run = [&](Backend& backend, std::vector<double>& dlogits, std::vector<double>& losses) {
    Workspace ws(backend);
    const Tensor t = ws.upload("targets", target_tensor);
    const Tensor in_place = ws.upload("in_place", logits);
    const Tensor source = ws.upload("source", logits);
    const Tensor out = ws.scratch(DType::bf16, Shape{N, V});
    const Tensor losses_in = ws.scratch(DType::f32, Shape{N});
    const Tensor losses_out = ws.scratch(DType::f32, Shape{N});
    backend.cross_entropy(in_place, t, nullptr, -100, losses_in, &in_place, grad_scale);
    backend.cross_entropy(source, t, nullptr, -100, losses_out, &out, grad_scale);
    EXPECT_EQ(bytes_of(backend, in_place), bytes_of(backend, out)) << backend.name();
    EXPECT_EQ(bytes_of(backend, losses_in), bytes_of(backend, losses_out)) << backend.name();
    dlogits = ws.download("in_place");
    std::vector<float> host(static_cast<size_t>(N));
    backend.copy_to_host(host.data(), losses_in);
    losses.assign(host.begin(), host.end());
  };
  std::vector<double> reference_dlogits, reference_losses;
  run(*make_backend("cpu-ref"), reference_dlogits, reference_losses);
  for (const auto& backend : available_backends()) {
    std::vector<double> dlogits, losses;
    run(*backend, dlogits, losses);
    // bf16 logits are read exactly; the loss is an f32 computation (tolerance of a few f32
    // roundings), dlogits one bf16 rounding of an f32 value (2^-8 relative per element).
    const double loss_error = peak_relative_error(losses, reference_losses);
    const double grad_error = peak_relative_error(dlogits, reference_dlogits);
    std::printf("[ops] fused classifier N=%lld V=%lld bf16 in place on %s vs cpu-ref: losses %s "
                "(tol 1e-5), dlogits %s (tol 8e-3)\n",
                static_cast<long long>(N), static_cast<long long>(V), backend->name().c_str(),
                format_error(loss_error).c_str(), format_error(grad_error).c_str());
    EXPECT_LE(loss_error, 1e-5) << backend->name();
    EXPECT_LE(grad_error, 8e-3) << backend->name();
  }
}

}  // namespace
}  // namespace anvil::test
