// The pre-flight memory check (see preflight.h).
#include "plan/preflight.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/registry.h"
#include "comm/launch_env.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {
namespace {

// Returns "51.3 GiB", or "212.4 MiB" below a GiB (small runs and test devices).
std::string gib(int64_t bytes) {
  const auto value = static_cast<double>(bytes);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", value / (1024.0 * 1024.0));
  return fmt::format("{:.1f} GiB", value / (1024.0 * 1024.0 * 1024.0));
}

// The order in which a refusal offers what would fit: the least change to the run first.
int preference(FitSuggestion::Kind kind) {
  using Kind = FitSuggestion::Kind;
  switch (kind) {
    case Kind::micro_batch: return 0;
    case Kind::activation_checkpointing: return 1;
    case Kind::zero3: return 2;
    case Kind::offload: return 3;
    case Kind::devices: return 4;
    case Kind::bf16: return 5;
    case Kind::seq_len: return 6;
    case Kind::lora: return 7;
  }
  return 8;
}

// Returns "--training.batch_size=8 (19.4 GiB), or ..." for what would fit, or why nothing does.
std::string remedies(const TrainConfig& config, const PlanSettings& settings) {
  std::vector<FitSuggestion> found = fit_suggestions(config, settings);
  // Adapters need a base model: a run from scratch cannot switch to them.
  std::erase_if(found, [&](const FitSuggestion& s) {
    return s.kind == FitSuggestion::Kind::lora && config.model.init_from.empty();
  });
  if (found.empty()) {
    return "no single change tried (micro-batch, activation checkpointing, ZeRO-3, offload, "
           "more ranks, bf16, shorter sequences) fits either";
  }
  std::stable_sort(found.begin(), found.end(), [](const FitSuggestion& a, const FitSuggestion& b) {
    return preference(a.kind) < preference(b.kind);
  });
  std::string text = "it fits with ";
  for (size_t i = 0; i < found.size(); ++i) {
    const FitSuggestion& s = found[i];
    // "--nproc N" is a launcher's option: name the ranks instead.
    const std::string& change = s.kind == FitSuggestion::Kind::devices ? s.what : s.setting;
    text += fmt::format("{}{} ({})", i == 0 ? "" : ", or ", change, gib(s.needed));
  }
  return text;
}

// Returns "activations 30.2 GiB" for the plan's largest category (device and, where the
// device's memory is the host's, host figures together).
std::string largest_category(const Plan& plan, bool device_is_host) {
  size_t best = 0;
  int64_t best_bytes = -1;
  for (size_t c = 0; c < plan.device.size(); ++c) {
    const int64_t bytes = plan.device[c] + (device_is_host ? plan.host[c] : 0);
    if (bytes > best_bytes) {
      best = c;
      best_bytes = bytes;
    }
  }
  return fmt::format("{} {}", kMemoryCategoryNames[best], gib(best_bytes));
}

}  // namespace

RankMemory rank_memory(const Backend& backend, int host_ranks) {
  RankMemory memory;
  memory.device_free = free_device_memory(backend);
  memory.device_name = backend.name();
  memory.host = host_memory_available();
  memory.host_ranks = std::max(host_ranks, 1);
  memory.host.bytes /= memory.host_ranks;
  return memory;
}

PreflightVerdict preflight_verdict(const TrainConfig& config, int nproc, int rank,
                                   const RankMemory& memory) {
  const bool on_host = memory.device_free < 0;
  PlanSettings settings;
  settings.nproc = nproc;
  settings.reserve = config.preflight.margin;
  settings.device_is_host = on_host;
  settings.memory_only = true;
  settings.hardware.memory_bytes = on_host ? memory.host.bytes : memory.device_free;
  const Plan plan = make_plan(config, settings);

  PreflightVerdict verdict;
  verdict.needed = plan.needed;
  verdict.available = settings.hardware.memory_bytes;
  const std::string who = rank < 0     ? fmt::format("each of the {} ranks: ", nproc)
                          : nproc > 1 ? fmt::format("rank {}: ", rank)
                                      : std::string();
  const std::string share =
      memory.host_ranks > 1 ? fmt::format(" (1/{} of the host's, one share per rank on it)",
                                          memory.host_ranks)
                            : std::string();
  const std::string margin =
      fmt::format("usable with the {:g}% margin (preflight.margin)", 100 * config.preflight.margin);
  if (on_host && memory.host.limited_by.empty()) return verdict;  // nothing says how much
  if (!plan.fits) {
    verdict.fits = false;
    const std::string where =
        on_host ? fmt::format("free in host memory{} ({})", share, memory.host.limited_by)
                : fmt::format("free on the {} device", memory.device_name);
    verdict.message = fmt::format(
        "[preflight] {}the run needs {} per device at its peak ({} the largest), {} {}, {} "
        "{}: {}; --preflight=warn goes on anyway",
        who, gib(plan.needed), largest_category(plan, on_host), gib(verdict.available), where,
        gib(plan.capacity), margin, remedies(config, settings));
    return verdict;
  }
  // With offload on a device backend the host holds the optimizer's part of the plan.
  const auto host_capacity = static_cast<int64_t>(static_cast<double>(memory.host.bytes) *
                                                  (1.0 - config.preflight.margin));
  if (!on_host && plan.host_total > 0 && !memory.host.limited_by.empty() &&
      plan.host_total > host_capacity) {
    verdict.fits = false;
    verdict.message = fmt::format(
        "[preflight] {}the run's offload needs {} of host memory per rank, {} free{} ({}), {} "
        "{}; --preflight=warn goes on anyway",
        who, gib(plan.host_total), gib(memory.host.bytes), share, memory.host.limited_by,
        gib(host_capacity), margin);
  }
  return verdict;
}

int64_t run_preflight(const TrainConfig& config, const Backend& backend, Communicator& world) {
  if (config.preflight.mode == "off") return 0;
  const int host_ranks = std::min(detect_launch_environment().local_size, world.size());
  const PreflightVerdict verdict =
      preflight_verdict(config, world.size(), world.rank(), rank_memory(backend, host_ranks));
  if (config.preflight.mode == "warn") {
    if (!verdict.fits) log_warn("{} (preflight.mode = warn: going on)", verdict.message);
    return verdict.needed;
  }
  // The ranks agree before any allocates: one that does not fit stops them all.
  int32_t refusing_rank = verdict.fits ? -1 : world.rank();
  if (world.size() > 1)
    world.all_reduce(Tensor(&refusing_rank, DType::i32, Shape{1}), ReduceOp::max);
  ANVIL_CHECK(verdict.fits, "{}", verdict.message);
  ANVIL_CHECK(refusing_rank < 0,
              "[preflight] rank {} fits, but rank {} has too little memory for this run (its "
              "message says what would fit)",
              world.rank(), refusing_rank);
  return verdict.needed;
}

void run_launch_preflight(const TrainConfig& config, const std::string& backend_name,
                          int nproc) {
  if (config.preflight.mode == "off") return;
  const std::unique_ptr<Backend> backend = make_backend(backend_name);
  const PreflightVerdict verdict =
      preflight_verdict(config, nproc, -1, rank_memory(*backend, nproc));
  if (verdict.fits) return;
  ANVIL_CHECK(config.preflight.mode == "warn", "{}", verdict.message);
  log_warn("{} (preflight.mode = warn: going on)", verdict.message);
}

}  // namespace anvil
