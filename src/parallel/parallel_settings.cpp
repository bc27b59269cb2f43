// The one validation of the [parallel] settings (see parallel_settings.h).
#include "parallel/parallel_settings.h"

#include <cmath>
#include <string_view>

#include "core/error.h"

namespace anvil {
namespace {

// More ranks on one axis than any job has; keeps the product of the four axes in an int64.
constexpr int64_t kMaxAxisRanks = int64_t{1} << 15;

void check_axis(int64_t value, int64_t least, std::string_view key) {
  ANVIL_CHECK(value >= least, "[config] parallel.{} must be at least {}{}, got {}", key, least,
              least == 0 ? " (0: automatic)" : "", value);
  ANVIL_CHECK(value <= kMaxAxisRanks, "[config] parallel.{} must be at most {} ranks, got {}",
              key, kMaxAxisRanks, value);
}

}  // namespace

ReduceMode ParallelSettings::reduce_mode() const {
  return reduce == "fast" ? ReduceMode::fast : ReduceMode::exact;
}

DType ParallelSettings::reduce_type() const {
  return reduce_dtype == "bf16" ? DType::bf16 : DType::f32;
}

void validate_parallel_settings(const ParallelSettings& settings) {
  check_axis(settings.dp, 0, "dp");
  check_axis(settings.fsdp, 0, "fsdp");
  check_axis(settings.tp, 1, "tp");
  check_axis(settings.cp, 1, "cp");
  ANVIL_CHECK(!settings.sequence_parallel || settings.tp > 1,
              "[config] parallel.sequence_parallel splits the sequence over the tp ranks; it "
              "needs parallel.tp > 1, got tp = {}",
              settings.tp);
  ANVIL_CHECK(settings.zero_stage >= 0 && settings.zero_stage <= 3,
              "[config] parallel.zero_stage must be 0, 1, 2 or 3, got {}", settings.zero_stage);
  ANVIL_CHECK(settings.prefetch >= 1 && settings.prefetch <= 64,
              "[config] parallel.prefetch must be 1..64 groups gathered ahead, got {}",
              settings.prefetch);
  ANVIL_CHECK(!settings.offload_params || (settings.offload && settings.zero_stage == 3),
              "[config] parallel.offload_params needs parallel.offload = true and "
              "parallel.zero_stage = 3");
  ANVIL_CHECK(settings.reshard_after_forward || settings.zero_stage == 3,
              "[config] parallel.reshard_after_forward = false needs parallel.zero_stage = 3 "
              "(only stage 3 gathers weights), got stage {}",
              settings.zero_stage);
  ANVIL_CHECK(settings.collective_timeout_s >= 0 && std::isfinite(settings.collective_timeout_s),
              "[config] parallel.collective_timeout_s must be >= 0 seconds (0 disables the hang "
              "watchdog), got {}",
              settings.collective_timeout_s);
  ANVIL_CHECK(settings.reduce == "exact" || settings.reduce == "fast",
              "[config] parallel.reduce must be exact or fast, got '{}'", settings.reduce);
  ANVIL_CHECK(settings.reduce_dtype == "f32" || settings.reduce_dtype == "bf16",
              "[config] parallel.reduce_dtype must be f32 or bf16, got '{}'",
              settings.reduce_dtype);
  ANVIL_CHECK(settings.reduce_dtype == "f32" || settings.reduce == "fast",
              "[config] parallel.reduce_dtype = bf16 needs parallel.reduce = fast (exact "
              "reductions are f32 ordered sums)");
}

}  // namespace anvil
