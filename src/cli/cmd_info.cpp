// `anvil info`: version, compiled-in backends and what they see, CPU features, MPI.
#include "backend/backend.h"
#include "cli/command.h"
#include "comm/communicator.h"
#include "core/cpu_info.h"
#include "core/threading.h"

#include <fmt/ranges.h>

namespace anvil::cli {
namespace {

int run_info(const std::vector<std::string>& args) {
  CLI::App app("Print the version, the compiled-in backends and what they see.", "anvil info");
  ThreadOption threads;
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  const CpuInfo& cpu = cpu_info();
  fmt::print("anvil {}\n", ANVIL_VERSION);
  fmt::print("cpu: {} ({} usable cores, {} threads configured)\n", cpu.model_name, cpu.cores,
             num_threads());
  fmt::print("cpu features: {}\n", cpu.feature_list());
  fmt::print("backends compiled in: {}\n", fmt::join(compiled_backends(), ", "));
  for (const auto& line : describe_backends()) fmt::print("  {}\n", line);
  fmt::print("mpi: {}\n", mpi_description());
  return 0;
}

}  // namespace

ANVIL_COMMAND("info", "show version, backends, CPU features and MPI support", 100, run_info);

}  // namespace anvil::cli
