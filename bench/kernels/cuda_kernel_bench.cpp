// cuda_kernel_bench: the CUDA backend's kernels at the 1.5B benchmark's shapes (B=4, T=2048,
// dim 2048, 16 query / 8 kv heads of 128, ffn 8192, vocab 128256, head chunks of 1024 rows),
// each called through the Backend interface and timed on the device with timing events
// (CudaBackend::record_timed_event, cuda::elapsed_seconds), after two warm-up calls. Two
// ceilings are measured in the same run: the device-to-device copy bandwidth (a 1 GiB
// cudaMemcpy, read + write counted) and a bf16 GEMM (cuBLASLt, 8192^3). Memory-bound kernels
// report the bytes they load and store per call (each access counted once; the fused
// classifier's two passes over the logits count twice), GB/s and the percentage of the copy
// bandwidth; attention and the GEMM report TFLOP/s (causal attention: half the square).
// Output: a Markdown table on stdout (tools/gpu_check.sh appends it to gpu_summary.md).
// Usage: cuda_kernel_bench [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "core/buffer.h"
#include "core/error.h"

namespace anvil {
namespace {

// The 1.5B benchmark's shapes.
constexpr int64_t kBatch = 4, kSeq = 2048, kTokens = kBatch * kSeq, kDim = 2048;
constexpr int64_t kHeads = 16, kKvHeads = 8, kHeadDim = 128, kFfn = 8192, kVocab = 128256;
constexpr int64_t kHeadChunk = 1024;
constexpr int64_t kGemmSize = 8192;
// The AdamW stand-in: 256M parameters in 100 sets (three launches).
constexpr int64_t kAdamWParams = int64_t{256} << 20;
constexpr int kAdamWSets = 100;

class Bench {
 public:
  Bench(CudaBackend& cuda, int reps) : cuda_(cuda), reps_(reps) {}

  // Returns a tensor filled with values in [lo, hi) (a pattern uploaded once and repeated).
  Tensor tensor(DType dtype, Shape shape, float lo = -1.0f, float hi = 1.0f) {
    const size_t bytes = std::max<size_t>(64, shape.numel() * dtype_size(dtype));
    buffers_.push_back(std::make_unique<Buffer>(cuda_, bytes, MemoryCategory::workspace));
    const Tensor t = buffers_.back()->as(dtype, shape);
    const int64_t chunk = std::min<int64_t>(t.numel(), int64_t{1} << 22);
    std::vector<unsigned char> pattern(static_cast<size_t>(chunk) * dtype_size(dtype));
    for (int64_t i = 0; i < chunk; ++i) {
      const float value = lo + (hi - lo) * static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
      if (dtype == DType::f32) {
        std::memcpy(&pattern[4 * i], &value, 4);
      } else {
        const uint16_t h = dtype == DType::bf16 ? float_to_bf16(value) : float_to_f16(value);
        std::memcpy(&pattern[2 * i], &h, 2);
      }
    }
    for (int64_t begin = 0; begin < t.numel(); begin += chunk) {
      const int64_t count = std::min(chunk, t.numel() - begin);
      cuda_.copy_from_host(t.flat(begin, count), pattern.data());
    }
    return t;
  }

  // Returns an i32 tensor of `n` values in [0, limit) (a fixed scramble: few repeats).
  Tensor indices(int64_t n, int64_t limit) {
    std::vector<int32_t> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<int32_t>((i * 7919 + 13) % limit);
    buffers_.push_back(std::make_unique<Buffer>(cuda_, n * 4, MemoryCategory::workspace));
    const Tensor t = buffers_.back()->as(DType::i32, Shape{n});
    cuda_.copy_from_host(t, values.data());
    return t;
  }

  // Returns the device seconds per call of `call` (two warm-up calls, then reps timed).
  double seconds(const std::function<void()>& call, int reps = 0) {
    const int n = reps > 0 ? reps : reps_;
    call();
    call();
    const auto begin = cuda_.record_timed_event();
    for (int i = 0; i < n; ++i) call();
    const auto end = cuda_.record_timed_event();
    return cuda::elapsed_seconds(*begin, *end) / n;
  }

  // Prints one memory-bound row: name, shape, bytes per call, time, GB/s, % of copy.
  void memory_row(const std::string& name, const std::string& shape, double bytes,
                  double seconds) {
    const double gbps = bytes / seconds / 1e9;
    std::printf("| %s | %s | %.1f | %.1f | %.0f | %.0f%% |\n", name.c_str(), shape.c_str(),
                bytes / 1e6, seconds * 1e6, gbps, 100.0 * gbps / copy_gbps_);
  }
  void flop_row(const std::string& name, const std::string& shape, double flops,
                double seconds) {
    std::printf("| %s | %s | %.1f GFLOP | %.1f | %.0f TFLOP/s | %.0f%% of GEMM |\n", name.c_str(),
                shape.c_str(), flops / 1e9, seconds * 1e6, flops / seconds / 1e12,
                100.0 * flops / seconds / 1e12 / gemm_tflops_);
  }

  void ceilings() {
    const int64_t bytes = int64_t{1} << 30;
    const Tensor a = tensor(DType::u16, Shape{bytes / 2}), b = tensor(DType::u16, Shape{bytes / 2});
    const double copy = seconds([&] { cuda_.copy(b, a); }, 10);
    copy_gbps_ = 2.0 * bytes / copy / 1e9;
    const Shape square{kGemmSize, kGemmSize};
    const Tensor x = tensor(DType::bf16, square), y = tensor(DType::bf16, square);
    const Tensor z = tensor(DType::bf16, square);
    const double gemm = seconds([&] { cuda_.matmul(x, y, z, false, false); }, 10);
    gemm_tflops_ = 2.0 * kGemmSize * kGemmSize * kGemmSize / gemm / 1e12;
    std::printf("Ceilings measured in this run: device-to-device copy %.0f GB/s (1 GiB, read + "
                "write), bf16 GEMM %.0f TFLOP/s (cuBLASLt %lld^3, %.2f ms).\n\n",
                copy_gbps_, gemm_tflops_, static_cast<long long>(kGemmSize), gemm * 1e3);
    std::printf("| kernel | shape | MB/call | us/call | GB/s | of copy |\n"
                "|---|---|---:|---:|---:|---:|\n");
    memory_row("copy (cudaMemcpyAsync)", "1 GiB", 2.0 * bytes, copy);
  }

  void memory_bound() {
    const DType f32 = DType::f32, bf16 = DType::bf16;
    const double NC = static_cast<double>(kTokens * kDim), NF = static_cast<double>(kTokens * kFfn);
    const std::string nc = "8192 x 2048", nf = "8192 x 8192";
    const Tensor a = tensor(f32, Shape{kTokens, kDim}), b = tensor(f32, Shape{kTokens, kDim});
    const Tensor c = tensor(f32, Shape{kTokens, kDim});
    const Tensor h = tensor(bf16, Shape{kTokens, kDim}), h2 = tensor(bf16, Shape{kTokens, kDim});
    const Tensor w = tensor(bf16, Shape{kDim}, 0.5f, 1.5f);
    const Tensor rstd = tensor(f32, Shape{kTokens}, 1.0f, 2.0f);
    const Tensor dw = tensor(f32, Shape{kDim});
    memory_row("add f32", nc, 12 * NC, seconds([&] { cuda_.add(a, b, c); }));
    memory_row("scale f32", nc, 8 * NC, seconds([&] { cuda_.scale(c, 1.0f); }));
    memory_row("axpy bf16 -> f32", nc, 10 * NC, seconds([&] { cuda_.axpy(1.0f, h, c); }));
    memory_row("cast f32 -> bf16", nc, 6 * NC, seconds([&] { cuda_.cast(a, h); }));
    memory_row("cast bf16 -> f32", nc, 6 * NC, seconds([&] { cuda_.cast(h, c); }));
    memory_row("dropout bf16", nc, 4 * NC, seconds([&] { cuda_.dropout(h, h2, 0.1f, 3); }));
    memory_row("rmsnorm_forward f32 -> bf16", nc, 6 * NC,
               seconds([&] { cuda_.rmsnorm_forward(a, w, h, rstd, 1e-5f); }));
    memory_row("add_rmsnorm_forward f32 -> bf16", nc, 14 * NC,
               seconds([&] { cuda_.add_rmsnorm_forward(a, b, c, w, h, rstd, 1e-5f); }));
    memory_row("rmsnorm_backward + dx_copy", nc, 18 * NC,
               seconds([&] { cuda_.rmsnorm_backward(a, b, w, rstd, c, dw, &h); }));
    const Tensor q = tensor(bf16, Shape{kBatch, kSeq, kHeads, kHeadDim});
    const Tensor k = tensor(bf16, Shape{kBatch, kSeq, kKvHeads, kHeadDim});
    const Tensor positions = indices(kTokens, kSeq);
    const Tensor pos = positions.view(Shape{kBatch, kSeq});
    memory_row("rope_forward q bf16", "8192 x 16 x 128", 4.0 * q.numel(),
               seconds([&] { cuda_.rope_forward(q, q, pos, RopeParams{}); }));
    memory_row("rope_backward k bf16", "8192 x 8 x 128", 4.0 * k.numel(),
               seconds([&] { cuda_.rope_backward(k, k, pos, RopeParams{}); }));
    const Tensor gate = tensor(bf16, Shape{kTokens, kFfn}), up = tensor(bf16, Shape{kTokens, kFfn});
    const Tensor act = tensor(bf16, Shape{kTokens, kFfn});
    const Tensor dgate = tensor(bf16, Shape{kTokens, kFfn});
    const Tensor dup = tensor(bf16, Shape{kTokens, kFfn});
    memory_row("swiglu_forward bf16", nf, 6 * NF,
               seconds([&] { cuda_.swiglu_forward(gate, up, act); }));
    memory_row("swiglu_backward bf16", nf, 10 * NF,
               seconds([&] { cuda_.swiglu_backward(act, gate, up, dgate, dup); }));
    const Tensor ids = indices(kTokens, kVocab);
    const Tensor table = tensor(bf16, Shape{kVocab, kDim});
    const Tensor dtable = tensor(f32, Shape{kVocab, kDim});
    memory_row("embedding_forward bf16", nc, 4 * NC,
               seconds([&] { cuda_.embedding_forward(ids, table, h); }));
    memory_row("embedding_backward bf16 -> f32", nc, 10 * NC,
               seconds([&] { cuda_.embedding_backward(ids, h, dtable); }, 3));
    const Tensor out = tensor(bf16, q.shape), part = tensor(bf16, q.shape);
    const Tensor lse = tensor(f32, Shape{kBatch, kHeads, kSeq}, 1, 2);
    const Tensor part_lse = tensor(f32, Shape{kBatch, kHeads, kSeq}, 1, 2);
    memory_row("attention_merge bf16", "8192 x 16 x 128", 6.0 * q.numel(),
               seconds([&] { cuda_.attention_merge(out, lse, part, part_lse); }));
    const Tensor logits = tensor(bf16, Shape{kHeadChunk, kVocab}, -4.0f, 4.0f);
    const Tensor targets = indices(kHeadChunk, kVocab), losses = tensor(f32, Shape{kHeadChunk});
    const Tensor pristine = tensor(bf16, logits.shape, -4.0f, 4.0f);
    // In place, as the head runs it: refresh the logits first (timed apart and subtracted).
    const double refresh = seconds([&] { cuda_.copy(logits, pristine); });
    const double classifier = seconds([&] {
      cuda_.copy(logits, pristine);
      cuda_.cross_entropy(logits, targets, nullptr, -100, losses, &logits, 1.0f / kTokens);
    });
    memory_row("cross_entropy fused, bf16 in place", "1024 x 128256",
               6.0 * static_cast<double>(logits.numel()), classifier - refresh);
    const Tensor loss_sum = tensor(DType::u32, Shape{2});
    const Tensor row_losses = tensor(f32, Shape{kTokens}, 0.0f, 12.0f);
    memory_row("sum_to_double (serial order)", "8192", 4.0 * kTokens,
               seconds([&] { cuda_.sum_to_double(row_losses, loss_sum); }));
    adamw();
  }

  void adamw() {
    const int64_t per_set = kAdamWParams / kAdamWSets;
    std::vector<AdamWTensors> sets;
    for (int s = 0; s < kAdamWSets; ++s) {
      const Shape shape{per_set};
      sets.push_back({tensor(DType::f32, shape), tensor(DType::f32, shape),
                      tensor(DType::f32, shape, -0.1f, 0.1f), tensor(DType::f32, shape, 0.0f, 0.1f),
                      tensor(DType::bf16, shape), s % 2 == 0 ? 0.1f : 0.0f});
    }
    AdamWParams params;
    params.step = 10;
    const double bytes = 30.0 * static_cast<double>(per_set * kAdamWSets);
    memory_row("adamw_step_many (+ bf16 copy)", "256M params, 100 sets", bytes,
               seconds([&] { cuda_.adamw_step_many(sets, params); }, 5));
  }

  void attention() {
    const DType bf16 = DType::bf16;
    const Tensor q = tensor(bf16, Shape{kBatch, kSeq, kHeads, kHeadDim});
    const Tensor k = tensor(bf16, Shape{kBatch, kSeq, kKvHeads, kHeadDim});
    const Tensor v = tensor(bf16, k.shape), o = tensor(bf16, q.shape), dout = tensor(bf16, q.shape);
    const Tensor dq = tensor(bf16, q.shape), dk = tensor(bf16, k.shape), dv = tensor(bf16, k.shape);
    const Tensor lse = tensor(DType::f32, Shape{kBatch, kHeads, kSeq});
    const AttentionParams causal;
    const double forward_flops = 2.0 * kBatch * kHeads * kSeq * kSeq * kHeadDim;  // causal half
    std::printf("\n| attention (causal, GQA 16/8) | shape | work | us/call | rate | of GEMM |\n"
                "|---|---|---:|---:|---:|---:|\n");
    const std::string shape = "B=4 T=2048 D=128";
    flop_row("attention_forward", shape, forward_flops,
             seconds([&] { cuda_.attention_forward(q, k, v, o, lse, causal); }, 3));
    flop_row("attention_backward", shape, 2.5 * forward_flops,
             seconds([&] { cuda_.attention_backward(dout, q, k, v, o, lse, dq, dk, dv, causal); },
                     3));
  }

 private:
  CudaBackend& cuda_;
  int reps_;
  double copy_gbps_ = 1.0, gemm_tflops_ = 1.0;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "cuda_kernel_bench: unknown argument %s (usage: [--reps N])\n",
                   argv[i]);
      return 2;
    }
  }
  const std::string unavailable = cuda::device_unavailable_reason();
  if (!unavailable.empty()) {
    std::fprintf(stderr, "cuda_kernel_bench: %s\n", unavailable.c_str());
    return 1;
  }
  CudaBackend cuda(0);
  std::printf("## CUDA kernels at the 1.5B benchmark's shapes\n\n");
  for (const std::string& line : describe_backends())
    if (line.rfind("cuda", 0) == 0) std::printf("%s\n\n", line.c_str());
  Bench bench(cuda, reps);
  bench.ceilings();
  bench.memory_bound();
  bench.attention();
  return 0;
}

}  // namespace
}  // namespace anvil

int main(int argc, char** argv) {
  try {
    return anvil::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernel_bench: %s\n", e.what());
    return 1;
  }
}
