// bench_attention — times our FlashAttention-2 kernels (flash_attn2.cuh through the kernel system) on the GPU:
// forward (with lse, as in training) and forward + backward (preprocess, dQ, dK/dV), at YOLO26's PSA shapes and a
// few large ones. Each measurement: one eager run (compiles/loads the kernels, raises shared-memory limits), then
// `iters` iterations captured into one CUDA graph, replayed `replays` times with CUDA events around each replay; the
// result is the median replay time divided by iters. Prints one table; --json / --csv write the same rows for
// bench/attention/run.sh, which puts them next to PyTorch's (peer.py). See NOTES.md.
//
// FLOPs (matmuls only, the usual FlashAttention convention):
//   forward  = 2 · BH · Nq · Nk · (d + d_v)                 (S = QKᵀ, O = PV)
//   backward = 2 · BH · Nq · Nk · (3·d + 2·d_v)             (S again, dP = dO Vᵀ, dV = Pᵀ dO, dQ = dS K, dK = dSᵀ Q)
//            = 2.5 × forward when d = d_v; fwd+bwd = forward + backward.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/ops/attention/flash_attn2_cuda.h"

using namespace vision;
using namespace vision::ops::attention;
using core::DType;

namespace {

struct Shape {
  int b, h, n, d, dv;
  DType dtype;
  std::string key() const {
    return fmt::format("B{}_H{}_N{}_d{}_dv{}_{}", b, h, n, d, dv, core::dtype_name(dtype));
  }
  int64_t bh() const { return int64_t{b} * h; }
  double fwd_flops() const { return 2.0 * double(bh()) * n * n * (d + dv); }
  double bwd_flops() const { return 2.0 * double(bh()) * n * n * (3.0 * d + 2.0 * dv); }
};

// PSA: B ∈ {1, 16, 64} × heads {2, 4} × N ∈ {400, 1600} (640² and 1280² inputs at stride 32), d 32, d_v 64, f16 and
// bf16. Large: B 8, H 16, N ∈ {1024, 4096}, d = d_v ∈ {64, 128}, bf16.
std::vector<Shape> default_shapes() {
  std::vector<Shape> s;
  for (DType t : {DType::f16, DType::bf16})
    for (int b : {1, 16, 64})
      for (int h : {2, 4})
        for (int n : {400, 1600}) s.push_back({b, h, n, 32, 64, t});
  for (int n : {1024, 4096})
    for (int d : {64, 128}) s.push_back({8, 16, n, d, d, DType::bf16});
  return s;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { VISION_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { (void)cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// Uniform values in [-1, 1) as dtype (xorshift; timing does not depend on the values beyond their range).
std::vector<uint16_t> random_16bit(size_t n, DType dtype, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    v = dtype == DType::f16 ? core::float_to_half(f) : core::float_to_bf16(f);
  }
  return out;
}

struct Timing {
  double median_us = 0, min_us = 0;
  int iters = 0;
};

// One eager run, then `iters` runs of body captured into a CUDA graph (iters chosen so that a replay takes ~2 ms,
// at least min_iters), replayed `replays` times; per-iteration times.
Timing time_graph(cudaStream_t s, const std::function<void()>& body, int replays, int min_iters) {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  VISION_CUDA_CHECK(cudaEventCreate(&e0));
  VISION_CUDA_CHECK(cudaEventCreate(&e1));
  body();  // compiles/loads the kernels and raises shared-memory limits: nothing of that may happen during capture
  VISION_CUDA_CHECK(cudaStreamSynchronize(s));
  VISION_CUDA_CHECK(cudaEventRecord(e0, s));
  body();
  VISION_CUDA_CHECK(cudaEventRecord(e1, s));
  VISION_CUDA_CHECK(cudaEventSynchronize(e1));
  float eager_ms = 0;
  VISION_CUDA_CHECK(cudaEventElapsedTime(&eager_ms, e0, e1));
  const int iters = std::clamp(static_cast<int>(std::ceil(2.0 / std::max(eager_ms, 1e-3f))), min_iters, 200);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  VISION_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < iters; ++i) body();
  } catch (...) {
    (void)cudaStreamEndCapture(s, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    throw;
  }
  VISION_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  VISION_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  VISION_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm replay
  VISION_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> us;
  for (int r = 0; r < replays; ++r) {
    VISION_CUDA_CHECK(cudaEventRecord(e0, s));
    VISION_CUDA_CHECK(cudaGraphLaunch(exec, s));
    VISION_CUDA_CHECK(cudaEventRecord(e1, s));
    VISION_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    VISION_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(double(ms) * 1000.0 / iters);
  }
  VISION_CUDA_CHECK(cudaGraphExecDestroy(exec));
  VISION_CUDA_CHECK(cudaGraphDestroy(graph));
  VISION_CUDA_CHECK(cudaEventDestroy(e0));
  VISION_CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(us.begin(), us.end());
  const size_t m = us.size();
  return {m % 2 ? us[m / 2] : 0.5 * (us[m / 2 - 1] + us[m / 2]), us.front(), iters};
}

struct Result {
  Shape shape;
  Timing fwd, fwdbwd;
};

struct Options {
  FlashAttention2Path forward = FlashAttention2Path::automatic;
  bool deterministic = false;  // the separate dQ and dK/dV kernels instead of the fused pass with atomic dQ
};

Result run_shape(cudaStream_t s, const Shape& sh, int replays, int min_iters, const Options& opt) {
  const size_t elem = core::dtype_size(sh.dtype);
  const size_t nqk = size_t(sh.bh()) * sh.n * sh.d, nv = size_t(sh.bh()) * sh.n * sh.dv;
  DeviceBuffer q(nqk * elem), k(nqk * elem), v(nv * elem), o(nv * elem), go(nv * elem), dq(nqk * elem),
      dk(nqk * elem), dv(nv * elem), lse(size_t(sh.bh()) * sh.n * 4), delta(size_t(sh.bh()) * sh.n * 4),
      dq_accum(nqk * 4);
  uint64_t seed = 1;
  const std::pair<DeviceBuffer*, size_t> inputs[] = {{&q, nqk}, {&k, nqk}, {&v, nv}, {&go, nv}};
  for (const auto& [buf, count] : inputs) {
    const auto host = random_16bit(count, sh.dtype, seed++);
    VISION_CUDA_CHECK(cudaMemcpy(buf->get(), host.data(), count * elem, cudaMemcpyHostToDevice));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
  auto* lse_p = static_cast<float*>(lse.get());
  auto forward = [&] {
    launch_flash_attention2_forward(s, sh.dtype, sh.d, sh.dv, q.get(), k.get(), v.get(), o.get(), lse_p, sh.bh(),
                                    sh.n, sh.n, scale, opt.forward);
  };
  auto forward_backward = [&] {
    forward();
    launch_flash_attention2_backward(s, sh.dtype, sh.d, sh.dv, q.get(), k.get(), v.get(), o.get(), go.get(), lse_p,
                                     static_cast<float*>(delta.get()),
                                     opt.deterministic ? nullptr : static_cast<float*>(dq_accum.get()), dq.get(),
                                     dk.get(), dv.get(), sh.bh(), sh.n, sh.n, scale, opt.forward);
  };
  Result r{sh, {}, {}};
  r.fwd = time_graph(s, forward, replays, min_iters);
  r.fwdbwd = time_graph(s, forward_backward, replays, min_iters);
  return r;
}

double tflops(double flops, double us) { return us > 0 ? flops / us * 1e-6 : 0.0; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FlashAttention-2 benchmark: forward and forward+backward of our kernels, CUDA-graph replays"};
  std::string json_path, csv_path, only;
  int replays = 15, min_iters = 5;
  std::string forward = "auto";
  Options opt;
  app.add_option("--json", json_path, "write the results as JSON (what run.sh and peer.py read)");
  app.add_option("--csv", csv_path, "write the results as CSV");
  app.add_option("--only", only, "run only the shapes whose key contains this text (e.g. B64_H4, bf16, N4096)");
  app.add_option("--replays", replays, "graph replays per measurement (the median is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--min-iters", min_iters, "fewest iterations captured per graph")->check(CLI::Range(1, 200));
  app.add_option("--forward", forward,
                 "kernel family: auto (the fastest the GPU takes), mma_sync or sm90 (forward and fused backward)")
      ->check(CLI::IsMember({"auto", "mma_sync", "sm90"}));
  app.add_flag("--deterministic", opt.deterministic,
               "backward with the separate dQ and dK/dV kernels (bit-reproducible) instead of the fused pass");
  CLI11_PARSE(app, argc, argv);
  opt.forward = forward == "sm90" ? FlashAttention2Path::sm90
                                  : (forward == "mma_sync" ? FlashAttention2Path::mma_sync : FlashAttention2Path::automatic);

  try {
    if (!cuda::gpu_available()) {
      std::fprintf(stderr, "bench_attention: no usable GPU (%s)\n", cuda::gpu_unavailable_reason().c_str());
      return 2;
    }
    int device = 0;
    cudaDeviceProp prop{};
    VISION_CUDA_CHECK(cudaGetDevice(&device));
    VISION_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    cudaStream_t stream = nullptr;
    VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::vector<Result> results;
    std::printf("FlashAttention-2 (ours) on %s (%s): median of %d CUDA-graph replays, per iteration; forward %s, "
                "backward %s\n",
                prop.name, cuda::current_arch().c_str(), replays, forward.c_str(),
                opt.deterministic ? "deterministic (dQ kernel + dK/dV kernel)" : "fused dK/dV + atomic dQ");
    std::printf("%-28s %10s %9s %12s %9s\n", "shape", "fwd us", "TFLOP/s", "fwd+bwd us", "TFLOP/s");
    for (const Shape& sh : default_shapes()) {
      if (!only.empty() && sh.key().find(only) == std::string::npos) continue;
      const Result r = run_shape(stream, sh, replays, min_iters, opt);
      results.push_back(r);
      std::printf("%-28s %10.1f %9.1f %12.1f %9.1f\n", sh.key().c_str(), r.fwd.median_us,
                  tflops(sh.fwd_flops(), r.fwd.median_us), r.fwdbwd.median_us,
                  tflops(sh.fwd_flops() + sh.bwd_flops(), r.fwdbwd.median_us));
      std::fflush(stdout);
    }
    VISION_CUDA_CHECK(cudaStreamDestroy(stream));

    nlohmann::json j;
    j["implementation"] = "vision-cpp flash_attn2.cuh";
    j["forward"] = forward;
    j["backward"] = opt.deterministic ? "deterministic" : "fused";
    j["device"] = prop.name;
    j["arch"] = cuda::current_arch();
    j["method"] = fmt::format("CUDA-graph replays (median of {}), CUDA events, per iteration", replays);
    j["flops"] = {{"forward", "2*B*H*N*N*(d+dv)"}, {"backward", "2*B*H*N*N*(3*d+2*dv)"},
                  {"fwdbwd", "forward + backward"}};
    j["results"] = nlohmann::json::array();
    for (const Result& r : results) {
      const Shape& sh = r.shape;
      j["results"].push_back({{"key", sh.key()},
                              {"B", sh.b},
                              {"H", sh.h},
                              {"N", sh.n},
                              {"d", sh.d},
                              {"dv", sh.dv},
                              {"dtype", std::string(core::dtype_name(sh.dtype))},
                              {"fwd_us", r.fwd.median_us},
                              {"fwd_min_us", r.fwd.min_us},
                              {"fwd_iters", r.fwd.iters},
                              {"fwdbwd_us", r.fwdbwd.median_us},
                              {"fwdbwd_min_us", r.fwdbwd.min_us},
                              {"fwdbwd_iters", r.fwdbwd.iters},
                              {"fwd_flops", sh.fwd_flops()},
                              {"fwdbwd_flops", sh.fwd_flops() + sh.bwd_flops()},
                              {"fwd_tflops", tflops(sh.fwd_flops(), r.fwd.median_us)},
                              {"fwdbwd_tflops", tflops(sh.fwd_flops() + sh.bwd_flops(), r.fwdbwd.median_us)}});
    }
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      VISION_CHECK(f.good(), "cannot write {}", json_path);
      f << j.dump(2) << "\n";
    }
    if (!csv_path.empty()) {
      std::ofstream f(csv_path);
      VISION_CHECK(f.good(), "cannot write {}", csv_path);
      f << "key,B,H,N,d,dv,dtype,fwd_us,fwd_tflops,fwdbwd_us,fwdbwd_tflops\n";
      for (const Result& r : results) {
        const Shape& sh = r.shape;
        f << fmt::format("{},{},{},{},{},{},{},{:.2f},{:.2f},{:.2f},{:.2f}\n", sh.key(), sh.b, sh.h, sh.n, sh.d, sh.dv,
                         core::dtype_name(sh.dtype), r.fwd.median_us, tflops(sh.fwd_flops(), r.fwd.median_us),
                         r.fwdbwd.median_us, tflops(sh.fwd_flops() + sh.bwd_flops(), r.fwdbwd.median_us));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
