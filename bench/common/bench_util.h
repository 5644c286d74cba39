// What the graph-engine benchmarks share: timing back-to-back calls with CUDA events on the backend's stream (or the
// host clock on the CPU), the median of repeated measurements, random host tensors and BatchNorm state, and small
// helpers for their command lines and checks.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "vision/core/tensor.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/state.h"

namespace vision::bench {

struct Timing {
  double median_ms = 0, min_ms = 0;
  int iters = 0, repeats = 0;
  double median_us() const { return 1000.0 * median_ms; }
  double min_us() const { return 1000.0 * min_ms; }
};

class Clock {
 public:
  explicit Clock(graph::BackendContext& b) : backend_(b) {
    if (b.backend() == graph::Backend::cuda) {
      stream_ = graph::CudaBackendContext::of(&b).stream();
      VISION_CUDA_CHECK(cudaEventCreate(&e0_));
      VISION_CUDA_CHECK(cudaEventCreate(&e1_));
    }
  }
  ~Clock() {
    if (e0_) (void)cudaEventDestroy(e0_);
    if (e1_) (void)cudaEventDestroy(e1_);
  }
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;

  // Milliseconds for n back-to-back calls of f: CUDA events on the backend's stream, or the host clock (CPU).
  double time(int n, const std::function<void()>& f) {
    if (!e0_) {
      backend_.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) f();
      backend_.synchronize();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    VISION_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    for (int i = 0; i < n; ++i) f();
    VISION_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    VISION_CUDA_CHECK(cudaEventSynchronize(e1_));
    float ms = 0;
    VISION_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return ms;
  }

 private:
  graph::BackendContext& backend_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

struct TimingOptions {
  int warmup = 3;
  int repeats = 15;
  double target_ms = 20;
  int max_iters = 200;
};

// The median and minimum of per-call times (ms), measured `iters` calls at a time.
inline Timing summarize(std::vector<double> per_call, int iters) {
  std::sort(per_call.begin(), per_call.end());
  const size_t m = per_call.size();
  Timing t;
  t.median_ms = m % 2 ? per_call[m / 2] : 0.5 * (per_call[m / 2 - 1] + per_call[m / 2]);
  t.min_ms = per_call.front();
  t.iters = iters;
  t.repeats = static_cast<int>(m);
  return t;
}

// warmup untimed calls, one timed call to pick `iters` so that a measurement takes about target_ms, then `repeats`
// measurements of `iters` back-to-back calls; the median and minimum per call.
inline Timing measure(Clock& clock, const std::function<void()>& f, const TimingOptions& o) {
  for (int i = 0; i < o.warmup; ++i) f();
  const double one = clock.time(1, f);
  const int iters = std::clamp(static_cast<int>(std::ceil(o.target_ms / std::max(one, 1e-3))), 1, o.max_iters);
  std::vector<double> per_call;
  for (int r = 0; r < o.repeats; ++r) per_call.push_back(clock.time(iters, f) / iters);
  return summarize(per_call, iters);
}

// As measure, timing the work the way a captured training step runs it: after the warm-up calls, `iters` calls of f
// are captured once into a CUDA graph on `stream` and every measurement replays that graph, so the host's launch
// cost (which dominates small kernels launched one by one) is not in the figures. f must only queue work on stream.
inline Timing measure_graph(Clock& clock, cudaStream_t stream, const std::function<void()>& f,
                            const TimingOptions& o) {
  for (int i = 0; i < o.warmup; ++i) f();  // kernels compiled, lazily made buffers made
  const double one = clock.time(1, f);
  const int iters = std::clamp(static_cast<int>(std::ceil(o.target_ms / std::max(one, 1e-3))), 1, o.max_iters);
  cudaGraph_t graph = nullptr;
  VISION_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < iters; ++i) f();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    throw;
  }
  VISION_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  VISION_CUDA_CHECK(made);
  struct ExecGuard {
    cudaGraphExec_t e;
    ~ExecGuard() { (void)cudaGraphExecDestroy(e); }
  } guard{exec};
  auto replay = [&] { VISION_CUDA_CHECK(cudaGraphLaunch(exec, stream)); };
  clock.time(1, replay);  // the first replay uploads the graph
  std::vector<double> per_call;
  for (int r = 0; r < o.repeats; ++r) per_call.push_back(clock.time(1, replay) / iters);
  return summarize(per_call, iters);
}

// A host tensor of uniform values in [lo, hi) in the given dtype and layout.
inline core::Tensor random_host(const core::Shape& shape, core::DType dtype, core::Layout layout, std::mt19937& rng,
                                float lo, float hi) {
  core::Tensor f32 = core::Tensor::zeros(shape);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i) p[i] = u(rng);
  core::Tensor t = core::Tensor::zeros(shape, dtype, shape.rank() == 4 ? layout : core::Layout::nchw);
  graph::cpu_backend()->convert(t, f32);
  return t;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Random BatchNorm state (the peers do the same): γ and running variance in [0.5, 1.5), β and running mean in
// [-0.1, 0.1). Convolution weights keep their default (PyTorch's) initialisation.
inline void randomize_batchnorm(graph::StateStore& state, std::mt19937& rng) {
  for (const graph::StateEntry& e : state.entries()) {
    float lo = 0, hi = 0;
    if (ends_with(e.key, ".bn.weight") || ends_with(e.key, ".bn.running_var")) {
      lo = 0.5f, hi = 1.5f;
    } else if (ends_with(e.key, ".bn.bias") || ends_with(e.key, ".bn.running_mean")) {
      lo = -0.1f, hi = 0.1f;
    } else {
      continue;
    }
    state.set_from_host(e.key, random_host(e.shape, core::DType::f32, core::Layout::nchw, rng, lo, hi));
  }
}

// A host f32 NCHW copy of any floating host tensor.
inline core::Tensor to_f32_nchw(const core::Tensor& host) {
  core::Tensor t = core::Tensor::zeros(host.shape());
  graph::cpu_backend()->convert(t, host);
  return t;
}

inline bool all_finite(const core::Tensor& host) {
  for (float v : host.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

// "a,b,,c" → {"a", "b", "c"}
// The name of the device a backend runs on: the GPU's ("NVIDIA H200") or "CPU".
inline std::string device_name(const graph::BackendContext& backend) {
  if (backend.backend() != graph::Backend::cuda) return "CPU";
  int dev = 0;
  cudaDeviceProp prop{};
  VISION_CUDA_CHECK(cudaGetDevice(&dev));
  VISION_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace vision::bench
