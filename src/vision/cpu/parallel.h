// OpenMP helpers for the CPU ops: a parallel loop over an index range, shared with oneDNN's thread pool.
#pragma once

#include <omp.h>

#include <cstdint>

namespace vision::cpu {

// Loops below this many iterations run on the calling thread (the fork costs more than it saves).
inline constexpr int64_t kParallelGrain = 4096;

inline int max_threads() { return omp_get_max_threads(); }

// Calls f(i) for i in [0, n), split statically over the OpenMP threads when work (an estimate of the
// total element count, default n) is large enough to pay for it. f must be safe to run concurrently.
template <typename F>
void parallel_for(int64_t n, F&& f, int64_t work = -1) {
  const bool par = (work < 0 ? n : work) >= kParallelGrain && n > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// Σ f(i) over [0, n) in float64, reduced over the OpenMP threads.
template <typename F>
double parallel_sum(int64_t n, F&& f) {
  double acc = 0;
#pragma omp parallel for schedule(static) reduction(+ : acc) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) acc += f(i);
  return acc;
}

}  // namespace vision::cpu
