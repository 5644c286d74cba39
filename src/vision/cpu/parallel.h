// OpenMP helpers for the CPU ops: a parallel loop over an index range, shared with oneDNN's thread pool.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vision::cpu {

// Loops below this many iterations run on the calling thread (the fork costs more than it saves).
inline constexpr int64_t kParallelGrain = 4096;

inline int max_threads() { return omp_get_max_threads(); }

// While alive, the OpenMP loops and oneDNN primitives this thread starts use `threads` threads (0: as before, which
// is every core unless OMP_NUM_THREADS says otherwise); the calling thread's setting comes back at destruction.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads) : saved_(threads > 0 ? omp_get_max_threads() : 0) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadLimit() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int saved_;
};

// Calls f(i) for i in [0, n), split statically over the OpenMP threads when work (an estimate of the
// total element count, default n) is large enough to pay for it. f must be safe to run concurrently.
template <typename F>
void parallel_for(int64_t n, F&& f, int64_t work = -1) {
  const bool par = (work < 0 ? n : work) >= kParallelGrain && n > 1;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// Σ f(i) over [0, n) in float64. Deterministic: fixed chunks of kParallelGrain, each summed in order, the
// chunk sums added in order, so the result does not depend on the thread count or schedule.
template <typename F>
double parallel_sum(int64_t n, F&& f) {
  const int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  if (chunks <= 1) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += f(i);
    return acc;
  }
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc = 0;
    const int64_t end = std::min(n, (c + 1) * kParallelGrain);
    for (int64_t i = c * kParallelGrain; i < end; ++i) acc += f(i);
    partial[static_cast<size_t>(c)] = acc;
  }
  double acc = 0;
  for (double p : partial) acc += p;
  return acc;
}

}  // namespace vision::cpu
