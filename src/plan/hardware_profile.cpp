// The built-in hardware profiles and the measurement of this CPU (see hardware_profile.h).
#include "plan/hardware_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/cpu_info.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/threading.h"
#include "train/config.h"

namespace anvil {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// The shares of a datasheet's peaks that a training step's kernels reach on an accelerator:
// cuBLAS-class GEMMs at a 1-8B model's shapes, fused (flash) attention forward and backward
// at head size 64-128 and a few thousand positions, and streaming kernels against the memory
// bandwidth. docs/plan.md gives each figure's source; the report prints the ceilings.
struct Achievable {
  double gemm = 0;
  double attention = 0;
  double memory = 0;
  const char* source = "";
};
// NVIDIA Hopper: bf16 GEMMs measure 677-798 TFLOP/s from 2048^3 to 8192^3 on an H100 SXM
// (0.68-0.81 of 989.4; docs/gpu.md's benchmark measured 769 and 797 at 8192^3 on the H200),
// f32 ones 51.9 of 66.9; FlashAttention-3 and cuDNN reach about 500-620 TFLOP/s forward and
// 450 backward at head size 128 and 2k positions (the FlashAttention-3 paper); device copies
// reach about 3.0 of the H100's 3.35 TB/s.
constexpr Achievable kHopper{0.75, 0.45, 0.90, "published Hopper measurements, docs/plan.md"};
// Other accelerators: assumed lower than Hopper's (less mature GEMM and attention libraries).
constexpr Achievable kAssumed{0.60, 0.35, 0.80, "assumed"};
// The fixed cost of one kernel on a stream the host keeps queued: CUDA.jl's documentation
// measures 80 small kernels at 260 us launched one by one (3.3 us each, host-bound) and 70 us
// as one CUDA graph (0.9 us each); a host that runs ahead sits between the two.
constexpr double kLaunchMicroseconds = 2.0;

// Vendors' "GB" of device memory are binary gigabytes (an "80 GB" H100 reports 80 GiB); what
// a process may allocate is a little less, which the plan's --reserve covers. Memory
// bandwidth is in decimal GB/s, as datasheets give it.
HardwareProfile accelerator(std::string name, std::string description, int64_t memory_gib,
                            double bf16_tflops, double f32_tflops, double memory_gbps,
                            Achievable achievable, double link_gbps, double host_link_gbps,
                            std::string notes) {
  HardwareProfile p;
  p.name = std::move(name);
  p.description = std::move(description);
  p.memory_bytes = memory_gib * kGiB;
  p.bf16_tflops = bf16_tflops;
  p.f32_tflops = f32_tflops;
  p.gemm_efficiency = achievable.gemm;
  p.gemm_bf16_tflops = bf16_tflops * achievable.gemm;
  p.gemm_f32_tflops = f32_tflops * achievable.gemm;
  p.attention_bf16_tflops = bf16_tflops * achievable.attention;
  p.attention_f32_tflops = f32_tflops * achievable.attention;
  p.memory_peak_gbps = memory_gbps;
  p.memory_gbps = memory_gbps * achievable.memory;
  p.launch_us = kLaunchMicroseconds;
  p.link_gbps = link_gbps;
  p.network_gbps = 50;  // one 400 Gb/s NIC per device (assumed for every profile)
  p.devices_per_node = 8;
  p.host_link_gbps = host_link_gbps;
  p.host_memory_gbps = 300;  // two sockets of DDR5 (assumed)
  p.notes = fmt::format("{}; achievable: GEMMs {:.0f}%, attention {:.0f}%, memory {:.0f}% of the "
                        "peaks ({}), {:.0f} us per kernel launch",
                        notes, 100 * achievable.gemm, 100 * achievable.attention,
                        100 * achievable.memory,
                        achievable.source,
                        kLaunchMicroseconds);
  return p;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// Returns the GFLOP/s of the cpu backend's matmul on n x n x n in `dtype`, the best of a few.
double measure_gemm_gflops(const std::string& dtype_text) {
  constexpr int64_t n = 1024;
  const DType dtype = parse_dtype(dtype_text);
  const auto backend = make_backend("cpu");
  const Buffer a(*backend, static_cast<size_t>(n * n) * dtype_size(dtype), MemoryCategory::workspace);
  const Buffer b(*backend, static_cast<size_t>(n * n) * dtype_size(dtype), MemoryCategory::workspace);
  const Buffer c(*backend, static_cast<size_t>(n * n) * sizeof(float), MemoryCategory::workspace);
  const Tensor ta = a.as(dtype, Shape{n, n}), tb = b.as(dtype, Shape{n, n});
  const Tensor tc = c.as(DType::f32, Shape{n, n});
  backend->fill_zero(ta);
  backend->fill_zero(tb);
  backend->matmul(ta, tb, tc, false, true);  // warm-up: threads, packing buffers
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const Clock::time_point begin = Clock::now();
    backend->matmul(ta, tb, tc, false, true);
    backend->synchronize();
    best = std::max(best, 2.0 * n * n * n / seconds_since(begin) / 1e9);
  }
  return best;
}

// Returns the bytes per second (read + written) the cpu backend's elementwise add reaches on
// f32 tensors of 32 MiB each, the best of a few: the rate of its memory-bound kernels.
double measure_kernel_gbps() {
  constexpr int64_t n = int64_t{8} << 20;  // 32 MiB of f32
  const auto backend = make_backend("cpu");
  std::vector<Buffer> buffers;
  buffers.reserve(3);
  for (int i = 0; i < 3; ++i)
    buffers.emplace_back(*backend, static_cast<size_t>(n) * sizeof(float),
                         MemoryCategory::workspace);
  const Tensor a = buffers[0].as(DType::f32, Shape{n}), b = buffers[1].as(DType::f32, Shape{n});
  const Tensor out = buffers[2].as(DType::f32, Shape{n});
  for (const Tensor& t : {a, b, out}) backend->fill_zero(t);
  backend->add(a, b, out);  // warm-up: first touch, threads
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const Clock::time_point begin = Clock::now();
    backend->add(a, b, out);
    backend->synchronize();
    const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
    best = std::max(best, bytes / seconds_since(begin) / 1e9);
  }
  return best;
}

// Returns the GFLOP/s of the cpu backend's causal attention forward in `dtype` (4 head_dim
// FLOPs per visible query-key pair), the best of a few, and through `launch_us` the time in
// microseconds of an op on 64 elements (what every op costs beyond its work).
double measure_attention_gflops(const std::string& dtype_text, double& launch_us) {
  constexpr int64_t batch = 1, seq = 512, heads = 4, head_dim = 64;
  const DType dtype = parse_dtype(dtype_text);
  const auto backend = make_backend("cpu");
  const int64_t numel = batch * seq * heads * head_dim;
  std::vector<Buffer> buffers;
  buffers.reserve(4);
  for (int i = 0; i < 4; ++i)
    buffers.emplace_back(*backend, static_cast<size_t>(numel) * dtype_size(dtype),
                         MemoryCategory::workspace);
  const Buffer lse_buffer(*backend, static_cast<size_t>(batch * heads * seq) * sizeof(float),
                          MemoryCategory::workspace);
  const Shape shape{batch, seq, heads, head_dim};
  const Tensor q = buffers[0].as(dtype, shape), k = buffers[1].as(dtype, shape);
  const Tensor v = buffers[2].as(dtype, shape), out = buffers[3].as(dtype, shape);
  const Tensor lse = lse_buffer.as(DType::f32, Shape{batch, heads, seq});
  for (const Tensor& t : {q, k, v}) backend->fill_zero(t);
  const AttentionParams params;  // causal
  backend->attention_forward(q, k, v, out, lse, params);  // warm-up
  const double flops = 4.0 * head_dim * heads * batch * static_cast<double>(seq * (seq + 1) / 2);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const Clock::time_point begin = Clock::now();
    backend->attention_forward(q, k, v, out, lse, params);
    backend->synchronize();
    best = std::max(best, flops / seconds_since(begin) / 1e9);
  }
  const Tensor small = lse.flat(0, 64);
  launch_us = 1e9;
  for (int rep = 0; rep < 20; ++rep) {
    const Clock::time_point begin = Clock::now();
    backend->add(small, small, small);
    backend->synchronize();
    launch_us = std::min(launch_us, seconds_since(begin) * 1e6);
  }
  return best;
}

// Returns the memcpy bandwidth of this machine in GB/s (bytes copied per second), the best of
// a few 64 MiB copies.
double measure_copy_gbps() {
  constexpr size_t bytes = size_t{64} << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const Clock::time_point begin = Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    best = std::max(best, static_cast<double>(bytes) / seconds_since(begin) / 1e9);
  }
  // Keep the copy observable.
  ANVIL_CHECK(to[bytes / 2] == 1, "[plan] the copy-bandwidth measurement went wrong");
  return best;
}

}  // namespace

const std::vector<HardwareProfile>& accelerator_profiles() {
  static const std::vector<HardwareProfile> profiles = {
      accelerator("h100", "NVIDIA H100 SXM5 80 GB", 80, 989.4, 66.9, 3350, kHopper, 450, 64,
                  "datasheet: 989.4 TFLOPS dense BF16, 66.9 TFLOPS FP32 (non-tensor), HBM3 3.35 "
                  "TB/s, NVLink 4 900 GB/s bidirectional, PCIe 5.0 x16"),
      accelerator("h200", "NVIDIA H200 SXM 141 GB", 141, 989.4, 66.9, 4800, kHopper, 450, 64,
                  "datasheet: the H100's compute and NVLink with 141 GB of HBM3e at 4.8 TB/s"),
      accelerator("mi300x", "AMD Instinct MI300X 192 GB", 192, 1307.4, 163.4, 5300, kAssumed,
                  448, 64,
                  "datasheet: 1307.4 TFLOPS dense BF16, 163.4 TFLOPS FP32 matrix, HBM3 5.3 TB/s, "
                  "Infinity Fabric 7 x 128 GB/s bidirectional links, PCIe 5.0 x16"),
      accelerator("ascend-910b", "Huawei Ascend 910B 64 GB", 64, 320, 80, 1600, kAssumed, 196, 32,
                  "assumed (no datasheet at hand): ~320 TFLOPS FP16/BF16, FP32 a quarter of "
                  "it, HBM2e 1.6 TB/s, HCCS 392 GB/s bidirectional, PCIe 4.0 x16"),
      accelerator("metax-mxc500", "MetaX MXC500 64 GB", 64, 98, 24.5, 1800, kAssumed, 64, 64,
                  "FP16 98 TFLOPS as issue 19 states it (BF16 taken equal); assumed: FP32 a "
                  "quarter of it, HBM2e 1.8 TB/s, device links at PCIe 5.0 x16 speed"),
  };
  return profiles;
}

double gemm_flops_per_s(const HardwareProfile& profile, const std::string& dtype) {
  const bool half = dtype == "bf16" || dtype == "fp16" || dtype == "f16";
  return 1e12 * (half ? profile.gemm_bf16_tflops : profile.gemm_f32_tflops);
}

double attention_flops_per_s(const HardwareProfile& profile, const std::string& dtype) {
  const bool half = dtype == "bf16" || dtype == "fp16" || dtype == "f16";
  return 1e12 * (half ? profile.attention_bf16_tflops : profile.attention_f32_tflops);
}

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> names = {"cpu"};
  for (const HardwareProfile& p : accelerator_profiles()) names.push_back(p.name);
  return names;
}

HardwareProfile cpu_profile(const CpuProfileOptions& options) {
  ANVIL_CHECK(options.ranks >= 1, "[plan] --nproc must be >= 1, got {}", options.ranks);
  ANVIL_CHECK(!options.gflops || *options.gflops > 0, "[plan] --cpu-gflops must be > 0, got {}",
              options.gflops.value_or(0));
  ANVIL_CHECK(!options.link_gbps || *options.link_gbps > 0,
              "[plan] --link-gbps must be > 0, got {}", options.link_gbps.value_or(0));
  ANVIL_CHECK(!options.memory_gbps || *options.memory_gbps > 0,
              "[plan] --memory-gbps must be > 0, got {}", options.memory_gbps.value_or(0));
  HardwareProfile p;
  p.name = "cpu";
  const double gflops = options.gflops ? *options.gflops : measure_gemm_gflops(options.dtype);
  const double copy_gbps = options.link_gbps ? 2 * *options.link_gbps : measure_copy_gbps();
  const double kernel_gbps = options.memory_gbps ? *options.memory_gbps : measure_kernel_gbps();
  double launch_us = 0;
  const double attention_gflops = measure_attention_gflops(options.dtype, launch_us);
  // The ranks share the cores (each runs as many threads) and the memory.
  const double per_rank_tflops = gflops / 1e3 / options.ranks;
  p.description = fmt::format("this CPU ({}, {} threads{}): {} GFLOP/s {} GEMM{}",
                              cpu_info().model_name, num_threads(),
                              options.ranks > 1 ? fmt::format(", shared by {} ranks", options.ranks)
                                                : std::string(),
                              fmt::format("{:.1f}", gflops), options.dtype,
                              options.gflops ? " (--cpu-gflops)" : " measured");
  p.memory_bytes = host_memory_total() / options.ranks;
  p.bf16_tflops = per_rank_tflops;
  p.f32_tflops = per_rank_tflops;
  // The rates measured are what the kernels reach: they are the ceilings too.
  p.gemm_efficiency = 1;
  p.gemm_bf16_tflops = per_rank_tflops;
  p.gemm_f32_tflops = per_rank_tflops;
  p.attention_bf16_tflops = attention_gflops / 1e3 / options.ranks;
  p.attention_f32_tflops = p.attention_bf16_tflops;
  p.memory_peak_gbps = kernel_gbps / options.ranks;
  p.memory_gbps = p.memory_peak_gbps;
  p.launch_us = launch_us;
  p.link_gbps = copy_gbps / 2;
  p.network_gbps = p.link_gbps;
  p.devices_per_node = options.ranks;
  p.host_link_gbps = copy_gbps;
  p.host_memory_gbps = copy_gbps;
  p.measured = true;
  p.notes = fmt::format(
      "rates measured here: attention {:.1f} GFLOP/s (causal forward), memory-bound kernels "
      "{:.1f} GB/s{}, {:.1f} us per op; the memory is the host's MemTotal shared by the ranks",
      attention_gflops, kernel_gbps, options.memory_gbps ? " (--memory-gbps)" : "", launch_us);
  return p;
}

HardwareProfile find_hardware_profile(const std::string& name, const CpuProfileOptions& cpu) {
  if (name == "cpu") return cpu_profile(cpu);
  for (const HardwareProfile& p : accelerator_profiles())
    if (p.name == name) return p;
  const std::vector<std::string> names = hardware_profile_names();
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  ANVIL_FAIL("[plan] unknown hardware '{}' (known: {}; did you mean '{}'?)", name, known,
             closest_name(name, names));
}

}  // namespace anvil
