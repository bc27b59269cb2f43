// Thread-count resolution; OpenMP does the actual parallel work.
#include "core/threading.h"

#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace anvil {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return omp_get_num_procs();
}

int configure_threads(std::optional<int> flag) {
  int n = available_cores();
  if (flag) {
    ANVIL_CHECK(*flag >= 1, "[threads] --threads must be at least 1, got {}", *flag);
    n = *flag;
  } else if (const char* env = std::getenv("ANVIL_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    ANVIL_CHECK(end && *end == '\0' && v >= 1 && v <= 4096,
                "[threads] ANVIL_NUM_THREADS must be a positive integer, got '{}'", env);
    n = static_cast<int>(v);
  }
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace anvil
