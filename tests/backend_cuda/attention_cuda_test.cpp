// The CUDA flash-attention kernels (cuda_attention_forward/backward) against the CPU reference,
// called directly on device memory so a failure points at the kernels, not the backend
// wrapper. Cases cover both head-dim paths and odd sizes (D = 1, 37, 96), one-token and
// multi-tile sequences, GQA up to 8:1, causal/non-causal, sliding windows, document ids,
// q_offset decoding and bf16 tensors. Every test skips with the reason when no GPU is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cuda/attention.h"

namespace anvil {
namespace {

// Returns "" when a CUDA device is usable, else the reason to skip.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

void expect_cuda(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// A host tensor and its device twin of the same dtype and shape.
struct Pair {
  std::vector<uint8_t> host;
  void* device = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Pair(DType dtype_, Shape shape_) : dtype(dtype_), shape(shape_) {
    host.resize(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    if (!host.empty()) expect_cuda(cudaMalloc(&device, host.size()), "cudaMalloc");
  }
  ~Pair() { cudaFree(device); }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  Tensor cpu() { return Tensor(host.data(), dtype, shape); }
  Tensor gpu() const { return Tensor(device, dtype, shape, Device{DeviceType::cuda, 0}); }
  void upload() {
    if (!host.empty())
      expect_cuda(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  }
  // Returns the device contents as floats.
  std::vector<float> download() const {
    std::vector<uint8_t> bytes(host.size());
    if (!bytes.empty())
      expect_cuda(cudaMemcpy(bytes.data(), device, bytes.size(), cudaMemcpyDeviceToHost),
                  "download");
    return to_floats(bytes.data());
  }
  std::vector<float> host_floats() const { return to_floats(host.data()); }
  std::vector<float> to_floats(const uint8_t* bytes) const {
    std::vector<float> out(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (dtype == DType::bf16) {
        out[i] = bf16_to_float(reinterpret_cast<const uint16_t*>(bytes)[i]);
      } else {
        out[i] = reinterpret_cast<const float*>(bytes)[i];
      }
    }
    return out;
  }
  void fill_random(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < shape.numel(); ++i) {
      const float x = normal(rng);
      if (dtype == DType::bf16) {
        reinterpret_cast<uint16_t*>(host.data())[i] = float_to_bf16(x);
      } else {
        reinterpret_cast<float*>(host.data())[i] = x;
      }
    }
    upload();
  }
};

struct Case {
  int64_t B, Tq, Tk, Hq, Hkv, D;
  bool causal;
  int window;
  bool documents;
  int q_offset;
  DType dtype;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                  double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_neg_inf = std::isinf(got[i]) && std::isinf(want[i]) && got[i] < 0 && want[i] < 0;
    if (both_neg_inf) continue;
    const double limit = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= limit) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << " vs reference " << want[i];
  }
}

void run_case(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.B * 1000 + c.Tq * 10 + c.D));
  const Shape q_shape{c.B, c.Tq, c.Hq, c.D}, kv_shape{c.B, c.Tk, c.Hkv, c.D};
  Pair q(c.dtype, q_shape), k(c.dtype, kv_shape), v(c.dtype, kv_shape), dout(c.dtype, q_shape);
  Pair out(c.dtype, q_shape), lse(DType::f32, Shape{c.B, c.Hq, c.Tq});
  Pair dq(c.dtype, q_shape), dk(c.dtype, kv_shape), dv(c.dtype, kv_shape);
  Pair docs(DType::i32, Shape{c.B, c.Tk});
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  dout.fill_random(rng);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t s = 0; s < c.Tk; ++s)  // documents of 8 tokens, shifted per row
      reinterpret_cast<int32_t*>(docs.host.data())[b * c.Tk + s] = static_cast<int32_t>((s + b) / 8);
  docs.upload();

  AttentionParams params;
  params.causal = c.causal;
  params.window = c.window;
  params.q_offset = c.q_offset;
  const Tensor docs_gpu = docs.gpu();
  const Tensor docs_cpu = docs.cpu();

  params.doc_ids = c.documents ? &docs_gpu : nullptr;
  cuda_attention_forward(q.gpu(), k.gpu(), v.gpu(), out.gpu(), lse.gpu(), params, nullptr);
  const size_t workspace_bytes = cuda_attention_backward_workspace(q.gpu(), k.gpu());
  void* workspace = nullptr;
  expect_cuda(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc workspace");
  // The backward reads the reference's forward results so both sides see the same out and lse.
  params.doc_ids = c.documents ? &docs_cpu : nullptr;
  cpu_ref::attention_forward(q.cpu(), k.cpu(), v.cpu(), out.cpu(), lse.cpu(), params);
  const std::vector<float> gpu_out = out.download(), gpu_lse = lse.download();
  out.upload();
  lse.upload();
  cpu_ref::attention_backward(dout.cpu(), q.cpu(), k.cpu(), v.cpu(), out.cpu(), lse.cpu(),
                              dq.cpu(), dk.cpu(), dv.cpu(), params);
  params.doc_ids = c.documents ? &docs_gpu : nullptr;
  cuda_attention_backward(dout.gpu(), q.gpu(), k.gpu(), v.gpu(), out.gpu(), lse.gpu(), dq.gpu(),
                          dk.gpu(), dv.gpu(), params, workspace, nullptr);
  expect_cuda(cudaDeviceSynchronize(), "kernels");
  cudaFree(workspace);

  const bool bf16 = c.dtype == DType::bf16;
  const double rtol = bf16 ? 2e-2 : 2e-4, atol = bf16 ? 2e-2 : 2e-4;
  expect_close(gpu_out, out.host_floats(), atol, rtol, "out");
  expect_close(gpu_lse, lse.host_floats(), 1e-4, 1e-4, "lse");
  expect_close(dq.download(), dq.host_floats(), atol, rtol, "dq");
  expect_close(dk.download(), dk.host_floats(), atol, rtol, "dk");
  expect_close(dv.download(), dv.host_floats(), atol, rtol, "dv");
}

class CudaAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttention, MatchesReference) {
  const std::string reason = no_device_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention,
    ::testing::Values(Case{2, 37, 37, 4, 2, 64, true, 0, false, 0, DType::f32},
                      Case{1, 1, 1, 2, 1, 1, true, 0, false, 0, DType::f32},
                      Case{1, 70, 70, 8, 1, 96, true, 0, false, 0, DType::f32},
                      Case{2, 65, 65, 2, 2, 37, false, 0, true, 0, DType::f32},
                      Case{1, 100, 100, 4, 2, 128, true, 16, false, 0, DType::f32},
                      Case{1, 50, 50, 2, 1, 64, false, 9, true, 0, DType::f32},
                      Case{1, 3, 40, 4, 4, 64, true, 0, false, 37, DType::f32},
                      Case{2, 1, 33, 4, 2, 128, true, 8, false, 32, DType::f32},
                      Case{2, 130, 130, 4, 2, 128, true, 0, true, 0, DType::bf16},
                      Case{1, 64, 64, 2, 1, 64, false, 0, false, 0, DType::bf16}),
    [](const ::testing::TestParamInfo<Case>& info) { return "case" + std::to_string(info.index); });

TEST(CudaAttentionArgs, RejectsHeadDimAbove128) {
  const Device gpu{DeviceType::cuda, 0};
  float dummy = 0.0f;  // never dereferenced: the host-side check fails first
  const Tensor q(&dummy, DType::f32, Shape{1, 2, 1, 160}, gpu);
  const Tensor lse(&dummy, DType::f32, Shape{1, 1, 2}, gpu);
  EXPECT_THROW(cuda_attention_forward(q, q, q, q, lse, AttentionParams{}, nullptr), Error);
}

TEST(CudaAttentionArgs, WorkspaceCoversDeltaAndDqAccumulator) {
  const Tensor q(nullptr, DType::bf16, Shape{2, 5, 4, 3});
  const Tensor k(nullptr, DType::bf16, Shape{2, 5, 2, 3});
  // delta: 2*4*5 floats padded to 256 bytes, then dq in f32: 2*5*4*3 floats.
  EXPECT_EQ(cuda_attention_backward_workspace(q, k), 256u + 120u * sizeof(float));
}

}  // namespace
}  // namespace anvil
