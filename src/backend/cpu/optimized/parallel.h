// Row/element range splitting over OpenMP threads for the optimized ops. A range is cut into
// at most one contiguous chunk per thread (static schedule, so a given thread count always
// makes the same cut and reductions over chunks are reproducible), and small ranges run on
// the calling thread without entering a parallel region. Called outside parallel regions
// only; oneDNN uses the same OpenMP runtime and thread count, so nothing oversubscribes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace anvil::cpu_opt {

// Returns how many chunks parallel_ranges cuts n items into, each at least `grain` items.
inline int64_t range_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t wanted = (n + grain - 1) / grain;
  return std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), wanted));
}

// Calls body(chunk, begin, end) for each chunk of [0, n), chunks in parallel.
template <typename Body>
void parallel_ranges(int64_t n, int64_t grain, Body&& body) {
  const int64_t chunks = range_chunks(n, grain);
  if (chunks == 1) {
    body(int64_t{0}, int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c, n * c / chunks, n * (c + 1) / chunks);
}

// Calls body(task) for each task of [0, n), handed to the threads round-robin. With one task
// or one thread it runs on the calling thread: libgomp allocates a team for every parallel
// region that runs on one thread (and frees it after), which a steady-state step must not do.
template <typename Body>
void parallel_tasks(int64_t n, Body&& body) {
  if (n <= 1 || omp_get_max_threads() == 1) {
    for (int64_t task = 0; task < n; ++task) body(task);
    return;
  }
#pragma omp parallel for schedule(static, 1)
  for (int64_t task = 0; task < n; ++task) body(task);
}

}  // namespace anvil::cpu_opt
