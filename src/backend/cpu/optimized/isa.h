// Instruction-set selection for the optimized CPU kernels. The best table the CPU supports is
// used (AVX-512F/BW/VL + FMA, then AVX2 + FMA, then generic); ANVIL_CPU_ISA=generic|avx2|avx512
// forces one, which is how tests cover every path on one machine. Forcing a table the CPU
// cannot run is an error, never a crash.
#pragma once

#include <string>
#include <vector>

#include "backend/cpu/optimized/kernels.h"

namespace anvil::cpu_opt {

// Returns the kernel table to use: ANVIL_CPU_ISA when set (checked against the CPU), otherwise
// the widest one the CPU supports. Throws anvil::Error for an unknown or unsupported request.
const Kernels& select_kernels();
// Returns the names of the tables this CPU can run, widest (the default) first.
std::vector<std::string> supported_kernel_tables();

}  // namespace anvil::cpu_opt
