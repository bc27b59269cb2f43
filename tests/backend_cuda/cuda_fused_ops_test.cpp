// The CUDA backend's fused step kernels on a real GPU, at the shapes the 1.5B benchmark runs
// and at the edges of their launch plans: the multi-tensor AdamW (two launches' worth of
// sets, views starting mid-vector, every copy dtype) bit for bit equal to one adamw_step per
// set and to cpu-ref; sum_to_double equal to the host's serial double sum; the one-launch
// RMSNorm backward against cpu-ref (one and several block groups, rows wider than a block's
// packs), its dx_copy exactly cast(dx) and its results identical run after run (the ticket
// counters reset themselves); add_rmsnorm_forward equal to add then rmsnorm_forward; and the
// fused classifier over bf16 logits at vocabulary 128256 in place equal to out of place.
// Every test skips with the reason when there is no device.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernel_plan.h"
#include "cuda_reference_fixture.h"
#include "device_tensors.h"

namespace anvil::test {
namespace {

using CudaFusedOpsTest = CudaReferenceTest;

TEST_F(CudaFusedOpsTest, MultiTensorAdamWEqualsOneStepPerSetAndTheReference) {
  const int set_count = cuda::kAdamWSetsPerLaunch + 12;  // two launches
  const DType copy_dtypes[] = {DType::bf16, DType::f16, DType::f32, DType::i32};  // i32: none
  AdamWParams params;
  params.lr = 2e-3f, params.grad_scale = 0.25f, params.step = 7;
  std::vector<AdamWTensors> many, single, reference;
  for (int s = 0; s < set_count; ++s) {
    const int64_t n = s == 3 ? 65537 : s == 5 ? 1 : (s * 131) % 1000 + 1;
    const int64_t offset = s % 8;  // views starting mid-vector
    const DType copy = copy_dtypes[s % 4];
    const std::vector<float> p = wave(n, s), g = wave(n, s + 100);
    const std::vector<float> m = wave(n, s + 200, -0.1f, 0.1f), v = wave(n, s + 300, 0.0f, 0.1f);
    auto make_set = [&](DeviceTensors& on) {
      AdamWTensors set;
      set.param = on.make(DType::f32, Shape{n}, p, offset);
      set.grad = on.make(DType::f32, Shape{n}, g, (offset + 3) % 8);
      set.m = on.make(DType::f32, Shape{n}, m, offset);
      set.v = on.make(DType::f32, Shape{n}, v, offset);
      if (copy != DType::i32) set.param_copy = on.make(copy, Shape{n}, {}, offset);
      set.weight_decay = s % 3 == 0 ? 0.0f : 0.1f;
      return set;
    };
    many.push_back(make_set(*gpu_));
    single.push_back(make_set(*gpu_));
    reference.push_back(make_set(*host_));
  }
  cuda_->adamw_step_many(many, params);
  for (const AdamWTensors& set : single) {
    AdamWParams one = params;
    one.weight_decay = set.weight_decay;
    cuda_->adamw_step(set.param, set.grad, set.m, set.v, one,
                      set.param_copy.defined() ? &set.param_copy : nullptr);
  }
  cpu_->adamw_step_many(reference, params);
  for (int s = 0; s < set_count; ++s) {
    for (auto member : {&AdamWTensors::param, &AdamWTensors::m, &AdamWTensors::v,
                        &AdamWTensors::param_copy}) {
      if (!(many[s].*member).defined()) continue;
      const auto got = gpu_->bytes(many[s].*member);
      EXPECT_EQ(got, gpu_->bytes(single[s].*member)) << "set " << s;
      EXPECT_EQ(got, host_->bytes(reference[s].*member)) << "set " << s << " vs cpu-ref";
    }
  }
}

TEST_F(CudaFusedOpsTest, SumToDoubleIsTheHostsSerialSum) {
  for (const int64_t n : {int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{4097},
                          int64_t{8192}, int64_t{300001}}) {
    for (const int64_t offset : {int64_t{0}, int64_t{3}}) {
      std::vector<float> values = wave(n, static_cast<int>(n), 0.0f, 12.0f);
      for (int64_t i = 0; i < n; i += 7) values[i] *= 1e-7f;  // roundings that order matters for
      double want = 0.0;
      for (const float value : values) want += value;
      const Tensor x = gpu_->make(DType::f32, Shape{n}, values, offset);
      const Tensor result = gpu_->empty(DType::u32, Shape{2});
      cuda_->sum_to_double(x, result);
      double got = 0.0;
      cuda_->copy_to_host(&got, result);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0)
          << "n=" << n << " offset=" << offset << ": " << got << " vs " << want;
    }
  }
}

struct NormCase {
  int64_t N, C;
  DType x, weight, dx, copy;  // dout has x's dtype; copy i32: none
};

TEST_F(CudaFusedOpsTest, RmsnormBackwardInOneLaunchMatchesTheReference) {
  const DType f32 = DType::f32, bf16 = DType::bf16, none = DType::i32;
  const std::vector<NormCase> cases = {
      {1000, 2048, f32, bf16, f32, bf16},  // the bf16 model's norms (typed kernel)
      {3000, 256, f32, f32, f32, none},    // many block groups, the last one partial
      {3, 2048, f32, f32, f32, bf16},      // fewer rows than a group
      {37, 515, bf16, bf16, bf16, f32},    // odd width: element by element
      {40, 20000, f32, f32, f32, bf16},    // wider than a block's packs
  };
  for (const NormCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " C=" << c.C);
    const Shape rows{c.N, c.C};
    const std::vector<float> x = wave(c.N * c.C, 1, -2.0f, 2.0f), dout = wave(c.N * c.C, 2);
    const std::vector<float> w = wave(c.C, 3, 0.5f, 1.5f), dx0 = wave(c.N * c.C, 4);
    const std::vector<float> dw0 = wave(c.C, 5);
    // rstd from the reference forward, uploaded to both, so only the backward differs.
    const Tensor hx = host_->make(c.x, rows, x), hw = host_->make(c.weight, Shape{c.C}, w);
    const Tensor hrstd = host_->empty(f32, Shape{c.N});
    cpu_->rmsnorm_forward(hx, hw, host_->empty(c.x, rows), hrstd, 1e-5f);
    const std::vector<float> rstd = host_->read(hrstd);
    const Tensor hdx = host_->make(c.dx, rows, dx0), hdw = host_->make(f32, Shape{c.C}, dw0);
    cpu_->rmsnorm_backward(host_->make(c.x, rows, dout), hx, hw, hrstd, hdx, hdw);

    const Tensor gx = gpu_->make(c.x, rows, x), gw = gpu_->make(c.weight, Shape{c.C}, w);
    const Tensor gdout = gpu_->make(c.x, rows, dout), grstd = gpu_->make(f32, Shape{c.N}, rstd);
    std::vector<unsigned char> first_dx, first_dw;
    for (int run = 0; run < 3; ++run) {
      const Tensor gdx = gpu_->make(c.dx, rows, dx0), gdw = gpu_->make(f32, Shape{c.C}, dw0);
      const Tensor copy = c.copy == none ? Tensor() : gpu_->empty(c.copy, rows);
      cuda_->rmsnorm_backward(gdout, gx, gw, grstd, gdx, gdw, copy.defined() ? &copy : nullptr);
      if (run == 0) {
        const double tol = c.x == bf16 || c.dx == bf16 ? 2e-2 : 2e-5;
        EXPECT_LE(peak_relative_error(gpu_->read(gdx), host_->read(hdx)), tol);
        EXPECT_LE(peak_relative_error(gpu_->read(gdw), host_->read(hdw)), tol);
        first_dx = gpu_->bytes(gdx), first_dw = gpu_->bytes(gdw);
        if (copy.defined()) {
          const Tensor cast = gpu_->empty(c.copy, rows);
          cuda_->cast(gdx, cast);
          EXPECT_EQ(gpu_->bytes(copy), gpu_->bytes(cast)) << "dx_copy is not cast(dx)";
        }
      } else {  // deterministic, and the counters were left at zero for the next launch
        EXPECT_EQ(gpu_->bytes(gdx), first_dx) << "run " << run;
        EXPECT_EQ(gpu_->bytes(gdw), first_dw) << "run " << run;
      }
    }
  }
}

TEST_F(CudaFusedOpsTest, AddRmsnormAtTheModelsShapeEqualsAddThenRmsnorm) {
  const int64_t N = 512, C = 2048;
  for (const DType act : {DType::f32, DType::bf16}) {
    const Tensor a = gpu_->make(DType::f32, Shape{N, C}, wave(N * C, 6, -2.0f, 2.0f));
    const Tensor b = gpu_->make(DType::f32, Shape{N, C}, wave(N * C, 7, -2.0f, 2.0f));
    const Tensor w = gpu_->make(act, Shape{C}, wave(C, 8, 0.5f, 1.5f));
    const Tensor sum = gpu_->empty(DType::f32, Shape{N, C}), out1 = gpu_->empty(act, Shape{N, C});
    const Tensor rstd1 = gpu_->empty(DType::f32, Shape{N});
    cuda_->add(a, b, sum);
    cuda_->rmsnorm_forward(sum, w, out1, rstd1, 1e-5f);
    const Tensor out2 = gpu_->empty(act, Shape{N, C}), rstd2 = gpu_->empty(DType::f32, Shape{N});
    cuda_->add_rmsnorm_forward(a, b, a, w, out2, rstd2, 1e-5f);  // the sum over a, as the model
    EXPECT_EQ(gpu_->bytes(a), gpu_->bytes(sum)) << dtype_name(act);
    EXPECT_EQ(gpu_->bytes(out2), gpu_->bytes(out1)) << dtype_name(act);
    EXPECT_EQ(gpu_->bytes(rstd2), gpu_->bytes(rstd1)) << dtype_name(act);
  }
}

TEST_F(CudaFusedOpsTest, FusedClassifierAtTheBenchmarksVocabulary) {
  const int64_t N = 1024, V = 128256;
  std::vector<float> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<float>((i * 7919) % V);
  targets[5] = -100;                          // ignore_index
  targets[6] = static_cast<float>(V + 5);     // out of range: counts as ignored
  targets[7] = -7;                            // negative: counts as ignored
  const std::vector<float> logits = wave(N * V, 9, -6.0f, 6.0f);
  const Tensor t = gpu_->make(DType::i32, Shape{N}, targets);
  const Tensor in_place = gpu_->make(DType::bf16, Shape{N, V}, logits);
  const Tensor source = gpu_->make(DType::bf16, Shape{N, V}, logits);
  const Tensor out = gpu_->empty(DType::bf16, Shape{N, V});
  const Tensor losses_in = gpu_->empty(DType::f32, Shape{N});
  const Tensor losses_out = gpu_->empty(DType::f32, Shape{N});
  const float grad_scale = 1.0f / 4096.0f;
  cuda_->cross_entropy(in_place, t, nullptr, -100, losses_in, &in_place, grad_scale);
  cuda_->cross_entropy(source, t, nullptr, -100, losses_out, &out, grad_scale);
  EXPECT_EQ(gpu_->bytes(in_place), gpu_->bytes(out));
  EXPECT_EQ(gpu_->bytes(losses_in), gpu_->bytes(losses_out));
  const std::vector<float> losses = gpu_->read(losses_in), dlogits = gpu_->read(in_place);
  for (const int64_t row : {int64_t{5}, int64_t{6}, int64_t{7}}) {
    EXPECT_EQ(losses[row], 0.0f) << "row " << row;
    for (int64_t j = 0; j < V; ++j) ASSERT_EQ(dlogits[row * V + j], 0.0f) << "row " << row;
  }
  // Rows 0-4 against cpu-ref (its targets are checked on the host: valid ones only).
  const int64_t rows = 5;
  const std::vector<float> head(logits.begin(), logits.begin() + rows * V);
  const Tensor ref_logits = host_->make(DType::bf16, Shape{rows, V}, head);
  const std::vector<float> head_targets(targets.begin(), targets.begin() + rows);
  const Tensor ref_targets = host_->make(DType::i32, Shape{rows}, head_targets);
  const Tensor ref_losses = host_->empty(DType::f32, Shape{rows});
  cpu_->cross_entropy(ref_logits, ref_targets, nullptr, -100, ref_losses, &ref_logits,
                      grad_scale);
  const std::vector<float> got_losses(losses.begin(), losses.begin() + rows);
  const std::vector<float> got_dlogits(dlogits.begin(), dlogits.begin() + rows * V);
  EXPECT_LE(peak_relative_error(got_losses, host_->read(ref_losses)), 1e-5);
  EXPECT_LE(peak_relative_error(got_dlogits, host_->read(ref_logits)), 8e-3);
}

}  // namespace
}  // namespace anvil::test
