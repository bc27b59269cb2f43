// The built-in hardware profiles and the measurement of this CPU (see hardware_profile.h).
#include "plan/hardware_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "backend/backend.h"
#include "core/cpu_info.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/threading.h"
#include "train/config.h"

namespace anvil {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Vendors' "GB" of device memory are binary gigabytes (an "80 GB" H100 reports 80 GiB); what
// a process may allocate is a little less, which the plan's --reserve covers.
HardwareProfile accelerator(std::string name, std::string description, int64_t memory_gib,
                            double bf16_tflops, double f32_tflops, double link_gbps,
                            double host_link_gbps, std::string notes) {
  HardwareProfile p;
  p.name = std::move(name);
  p.description = std::move(description);
  p.memory_bytes = memory_gib * kGiB;
  p.bf16_tflops = bf16_tflops;
  p.f32_tflops = f32_tflops;
  p.link_gbps = link_gbps;
  p.network_gbps = 50;  // one 400 Gb/s NIC per device (assumed for every profile)
  p.devices_per_node = 8;
  p.host_link_gbps = host_link_gbps;
  p.host_memory_gbps = 300;  // two sockets of DDR5 (assumed)
  p.efficiency = 0.4;
  p.notes = std::move(notes);
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

// Returns MemTotal of /proc/meminfo in bytes (0 when unreadable).
int64_t host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

}  // namespace

const std::vector<HardwareProfile>& accelerator_profiles() {
  static const std::vector<HardwareProfile> profiles = {
      accelerator("h100", "NVIDIA H100 SXM5 80 GB", 80, 989.4, 66.9, 450, 64,
                  "datasheet: 989.4 TFLOPS dense BF16, 66.9 TFLOPS FP32 (non-tensor), NVLink 4 "
                  "900 GB/s bidirectional, PCIe 5.0 x16"),
      accelerator("h200", "NVIDIA H200 SXM 141 GB", 141, 989.4, 66.9, 450, 64,
                  "datasheet: the H100's compute and NVLink with 141 GB of HBM3e"),
      accelerator("mi300x", "AMD Instinct MI300X 192 GB", 192, 1307.4, 163.4, 448, 64,
                  "datasheet: 1307.4 TFLOPS dense BF16, 163.4 TFLOPS FP32 matrix, Infinity "
                  "Fabric 7 x 128 GB/s bidirectional links, PCIe 5.0 x16"),
      accelerator("ascend-910b", "Huawei Ascend 910B 64 GB", 64, 320, 80, 196, 32,
                  "assumed (no datasheet at hand): ~320 TFLOPS FP16/BF16, FP32 a quarter of "
                  "it, HCCS 392 GB/s bidirectional, PCIe 4.0 x16"),
      accelerator("metax-mxc500", "MetaX MXC500 64 GB", 64, 98, 24.5, 64, 64,
                  "FP16 98 TFLOPS as issue 19 states it (BF16 taken equal); assumed: FP32 a "
                  "quarter of it, device links at PCIe 5.0 x16 speed"),
  };
  return profiles;
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
  HardwareProfile p;
  p.name = "cpu";
  const double gflops = options.gflops ? *options.gflops : measure_gemm_gflops(options.dtype);
  const double copy_gbps = options.link_gbps ? 2 * *options.link_gbps : measure_copy_gbps();
  // The ranks share the cores (each runs as many threads) and the memory.
  const double per_rank_tflops = gflops / 1e3 / options.ranks;
  p.description = fmt::format("this CPU ({}, {} threads{}): {} GFLOP/s {} GEMM{}",
                              cpu_info().model_name, num_threads(),
                              options.ranks > 1 ? fmt::format(", shared by {} ranks", options.ranks)
                                                : std::string(),
                              fmt::format("{:.1f}", gflops), options.dtype,
                              options.gflops ? " (--cpu-gflops)" : " measured");
  p.memory_bytes = host_memory_bytes() / options.ranks;
  p.bf16_tflops = per_rank_tflops;
  p.f32_tflops = per_rank_tflops;
  p.link_gbps = copy_gbps / 2;
  p.network_gbps = p.link_gbps;
  p.devices_per_node = options.ranks;
  p.host_link_gbps = copy_gbps;
  p.host_memory_gbps = copy_gbps;
  // A step runs attention, norms and elementwise ops beside the GEMMs.
  p.efficiency = 0.6;
  p.measured = true;
  p.notes = "rates measured here; the memory is the host's MemTotal shared by the ranks";
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
