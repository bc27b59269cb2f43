// Hardware profiles for `anvil plan`: what one device holds and how fast it computes and
// talks, as the vendors state it (dense peak rates, nominal memory, link bandwidth per
// direction) or, for this CPU, as measured here at run time. The numbers are the inputs of the
// plan's time model and are printed with every plan, so a prediction can be checked against
// them; docs/plan.md lists each profile's sources and which numbers are assumptions.
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
  double link_gbps = 0;         // device-to-device bandwidth inside a node, GB/s per direction
  double network_gbps = 0;      // between nodes, GB/s per device and direction
  int devices_per_node = 8;
  double host_link_gbps = 0;    // device <-> host memory (PCIe), GB/s per direction
  double host_memory_gbps = 0;  // one node's host memory bandwidth (the CPU AdamW of offload)
  double efficiency = 0.4;      // default share of the peak a training step sustains
  bool measured = false;        // the cpu profile: rates measured on this machine
  std::string notes;            // what is assumed rather than stated by a datasheet
};

// Returns the built-in accelerator profiles (h100, h200, mi300x, ascend-910b, metax-mxc500).
const std::vector<HardwareProfile>& accelerator_profiles();

// Returns the names --hardware accepts: "cpu" and the accelerator profiles.
std::vector<std::string> hardware_profile_names();

// What to measure or override for the cpu profile.
struct CpuProfileOptions {
  int ranks = 1;                        // processes sharing this machine (--nproc)
  std::string dtype = "f32";            // the GEMM dtype measured (training.dtype)
  std::optional<double> gflops;         // --cpu-gflops: skip the GEMM measurement
  std::optional<double> link_gbps;      // --link-gbps: skip the copy-bandwidth measurement
};

// Returns the profile of this machine for `options.ranks` processes: each rank's share of
// the GEMM rate of the cpu backend (a few 1024 x 1024 x 1024 matmuls in options.dtype on the
// configured threads, unless given), of the host memory (MemTotal), and a link of half the
// measured memory copy bandwidth (MPI's shared-memory transport copies each message twice).
HardwareProfile cpu_profile(const CpuProfileOptions& options);

// Returns the named profile ("cpu" measures this machine with `cpu`); throws "[plan] unknown
// hardware 'x' (known: ...; did you mean ...?)".
HardwareProfile find_hardware_profile(const std::string& name, const CpuProfileOptions& cpu);

}  // namespace anvil
