// Hardware profiles for `anvil plan`: what one device holds and how fast it computes and
// talks, as the vendors state it (dense peak rates, nominal memory and memory bandwidth, link
// bandwidth per direction) or, for this CPU, as measured here at run time, plus the ceilings a
// step's kernels reach: the share of the peak that GEMMs and fused attention achieve, of the
// memory bandwidth that memory-bound kernels achieve, and a fixed cost per kernel launch. The
// numbers are the inputs of the plan's time model and are printed with every plan, so a
// prediction can be checked against them; docs/plan.md lists each profile's sources and which
// numbers are datasheet peaks, which measured and which assumed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

struct HardwareProfile {
  std::string name;         // as given to --hardware ("h100")
  std::string description;  // "NVIDIA H100 SXM5 80 GB"
  int64_t memory_bytes = 0;     // one device's memory
  double bf16_tflops = 0;       // dense peak, bf16 GEMMs with f32 accumulation
  double f32_tflops = 0;        // dense peak, f32 GEMMs
  // Achievable ceilings of the step's kernels (what `anvil plan` times each op against):
  double gemm_bf16_tflops = 0;       // bf16 GEMMs (tensor cores) of a training step's shapes
  double gemm_f32_tflops = 0;        // f32 GEMMs
  double attention_bf16_tflops = 0;  // fused attention, forward and backward, visible pairs
  double attention_f32_tflops = 0;
  double memory_peak_gbps = 0;  // device memory bandwidth, datasheet (cpu: as measured)
  double memory_gbps = 0;       // what memory-bound kernels reach (bytes read + written / s)
  double launch_us = 0;         // fixed cost per kernel launch on a queued stream
  double link_gbps = 0;         // device-to-device bandwidth inside a node, GB/s per direction
  double network_gbps = 0;      // between nodes, GB/s per device and direction
  int devices_per_node = 8;
  double host_link_gbps = 0;    // device <-> host memory (PCIe), GB/s per direction
  double host_memory_gbps = 0;  // one node's host memory bandwidth (the CPU AdamW of offload)
  double gemm_efficiency = 0;   // gemm_*_tflops as a share of the dense peak
  bool measured = false;        // the cpu profile: rates measured on this machine
  std::string notes;            // what is assumed rather than stated by a datasheet
};

// Returns the built-in accelerator profiles (h100, h200, mi300x, ascend-910b, metax-mxc500).
const std::vector<HardwareProfile>& accelerator_profiles();

// Returns the profile's achievable GEMM and attention rates in FLOP/s for a compute dtype
// ("bf16", "fp16" and "f16" take the bf16 ceilings, anything else the f32 ones).
double gemm_flops_per_s(const HardwareProfile& profile, const std::string& dtype);
double attention_flops_per_s(const HardwareProfile& profile, const std::string& dtype);

// Returns the names --hardware accepts: "cpu" and the accelerator profiles.
std::vector<std::string> hardware_profile_names();

// What to measure or override for the cpu profile.
struct CpuProfileOptions {
  int ranks = 1;                        // processes sharing this machine (--nproc)
  std::string dtype = "f32";            // the GEMM dtype measured (training.dtype)
  std::optional<double> gflops;         // --cpu-gflops: skip the GEMM measurement
  std::optional<double> link_gbps;      // --link-gbps: skip the copy-bandwidth measurement
  std::optional<double> memory_gbps;    // --memory-gbps: skip the kernel-bandwidth measurement
};

// Returns the profile of this machine for `options.ranks` processes: each rank's share of
// the GEMM rate of the cpu backend (a few 1024 x 1024 x 1024 matmuls in options.dtype on the
// configured threads, unless given), of its attention rate (a causal attention forward), of
// the bandwidth its memory-bound kernels reach (an elementwise add of 3 x 32 MiB, unless
// given) and of the host memory (MemTotal); a link of half the measured memory copy bandwidth
// (MPI's shared-memory transport copies each message twice); the launch cost is the time of
// an op on a handful of elements.
HardwareProfile cpu_profile(const CpuProfileOptions& options);

// Returns the named profile ("cpu" measures this machine with `cpu`); throws "[plan] unknown
// hardware 'x' (known: ...; did you mean ...?)".
HardwareProfile find_hardware_profile(const std::string& name, const CpuProfileOptions& cpu);

}  // namespace anvil
