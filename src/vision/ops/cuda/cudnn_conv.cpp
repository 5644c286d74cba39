// The legacy cuDNN convolution API is deprecated in cuDNN 9 but present and complete; it is what this wraps.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "vision/ops/cuda/cudnn_conv.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel_cache.h"
#include "vision/cuda/libraries.h"
#include "vision/cuda/memory.h"
#include "vision/cuda/sanitizer.h"

namespace vision::ops::cuda_impl {

cudnnDataType_t cudnn_dtype(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32: return CUDNN_DATA_FLOAT;
    case core::DType::f16: return CUDNN_DATA_HALF;
    case core::DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: fail("cuDNN convolutions take f32, f16 or bf16 tensors, not {}", core::dtype_name(dtype));
  }
}

namespace {
int to_int(int64_t v, const char* what) {
  VISION_CHECK(v >= 0 && v <= INT32_MAX, "convolution {} {} is out of cuDNN's range", what, v);
  return static_cast<int>(v);
}

// The first algorithm in cuDNN's ranking (fastest first) that succeeded, fits in max_workspace and, when asked for,
// is deterministic.
template <typename Perf>
const Perf& pick(const Perf* perf, int count, size_t max_workspace, bool deterministic, const char* what) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace &&
        (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      return perf[i];
  fail("cuDNN found no {}{} algorithm for this convolution within {} MiB of workspace{}",
       deterministic ? "deterministic " : "", what, max_workspace >> 20,
       deterministic ? "; run it without deterministic mode" : "");
}
int device_index() {
  int d = 0;
  VISION_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

struct Algorithms {
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
};
// Chosen algorithms per convolution geometry, dtype, layout, determinism, workspace limit and device, for the life of
// the process: each geometry is searched once, whichever plan asks first.
std::mutex algorithms_mutex;
std::map<std::string, Algorithms>& algorithm_cache() {
  static std::map<std::string, Algorithms> cache;
  return cache;
}
std::optional<Algorithms> cached_algorithms(const std::string& key) {
  std::lock_guard lock(algorithms_mutex);
  auto it = algorithm_cache().find(key);
  if (it == algorithm_cache().end()) return std::nullopt;
  return it->second;
}
AlgorithmChoiceTime choice_time;  // guarded by algorithms_mutex
void remember_algorithms(const std::string& key, const Algorithms& a, double ms, bool from_disk) {
  std::lock_guard lock(algorithms_mutex);
  algorithm_cache()[key] = a;
  choice_time.ms += ms;
  ++choice_time.geometries;
  if (from_disk) ++choice_time.from_disk;
}

// The disk's key of a geometry's choice: the geometry (which names the device only by its index) with the GPU's name
// and architecture, cuDNN's version (the library loaded, not the header's) and the search mode.
std::string disk_key(const std::string& geometry) {
  return cuda::kernel_cache_key("cudnn convolution algorithms v1\n" + geometry,
                                {cuda::current_device_name(),
                                 search_mode() == ConvSearch::benchmark ? "benchmark" : "heuristic"},
                                cuda::current_arch(), fmt::format("cudnn {}", cudnnGetVersion()));
}

std::string serialize(const Algorithms& a) {
  return fmt::format("{} {} {} {} {} {}\n", static_cast<int>(a.fwd), static_cast<int>(a.bwd_data),
                     static_cast<int>(a.bwd_filter), static_cast<int>(a.fwd_math), static_cast<int>(a.bwd_data_math),
                     static_cast<int>(a.bwd_filter_math));
}

// The choice a payload holds, or nullopt when it is not six algorithm and math numbers in cuDNN's ranges.
std::optional<Algorithms> deserialize(const std::string& payload) {
  int v[6];
  char end = 0;
  if (std::sscanf(payload.c_str(), "%d %d %d %d %d %d%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &end) != 7 ||
      end != '\n')
    return std::nullopt;
  const auto math_ok = [](int m) { return m >= CUDNN_DEFAULT_MATH && m <= CUDNN_FMA_MATH; };
  if (v[0] < 0 || v[0] >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || v[1] < 0 || v[1] >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT ||
      v[2] < 0 || v[2] >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT || !math_ok(v[3]) || !math_ok(v[4]) || !math_ok(v[5]))
    return std::nullopt;
  return Algorithms{static_cast<cudnnConvolutionFwdAlgo_t>(v[0]), static_cast<cudnnConvolutionBwdDataAlgo_t>(v[1]),
                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(v[2]), static_cast<cudnnMathType_t>(v[3]),
                    static_cast<cudnnMathType_t>(v[4]), static_cast<cudnnMathType_t>(v[5])};
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

}  // namespace

void forget_algorithm_choices() {
  std::lock_guard lock(algorithms_mutex);
  algorithm_cache().clear();
}

AlgorithmChoiceTime algorithm_choice_time() {
  std::lock_guard lock(algorithms_mutex);
  return choice_time;
}

std::vector<std::string> chosen_algorithms() {
  std::lock_guard lock(algorithms_mutex);
  std::vector<std::string> out;
  for (const auto& [key, a] : algorithm_cache())
    out.push_back(fmt::format("{}: fwd {} ({}), bwd-data {} ({}), bwd-filter {} ({})", key, static_cast<int>(a.fwd),
                              math_name(a.fwd_math), static_cast<int>(a.bwd_data), math_name(a.bwd_data_math),
                              static_cast<int>(a.bwd_filter), math_name(a.bwd_filter_math)));
  return out;
}

ConvSearch search_mode() {
  static const ConvSearch mode = [] {
    const char* v = std::getenv("VISION_CUDNN_SEARCH");
    if (!v || std::string_view(v).empty() || std::string_view(v) == "heuristic") return ConvSearch::heuristic;
    VISION_CHECK(std::string_view(v) == "benchmark",
                 "VISION_CUDNN_SEARCH must be 'heuristic' (the default) or 'benchmark', got '{}'", v);
    return ConvSearch::benchmark;
  }();
  return mode;
}

void CudnnConv::heuristic_algorithms(size_t max_workspace) {
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd));
  fwd_algo_ = pick(fwd, n, max_workspace, deterministic_, "forward").algo;
  if (forward_only_) return;
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_desc_, y_desc_, conv_desc_, x_desc_,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
  bwd_data_algo_ = pick(bd, n, max_workspace, deterministic_, "backward-data").algo;
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
  bwd_filter_algo_ = pick(bf, n, max_workspace, deterministic_, "backward-filter").algo;
}

// cudnnFind*AlgorithmEx: runs every algorithm on scratch tensors of this geometry (zero-filled) and ranks them by
// measured time, as PyTorch's cudnn.benchmark does. Synchronous; runs when a plan is built, never under capture.
void CudnnConv::benchmark_algorithms(core::DType dtype, size_t max_workspace) {
  const size_t e = core::dtype_size(dtype);
  size_t x_elems = 0, y_elems = 0, w_elems = 0;
  {
    cudnnDataType_t t;
    int n, c, h, w, ns, cs, hs, ws;
    VISION_CUDNN_CHECK(cudnnGetTensor4dDescriptor(x_desc_, &t, &n, &c, &h, &w, &ns, &cs, &hs, &ws));
    x_elems = size_t(n) * c * h * w;
    VISION_CUDNN_CHECK(cudnnGetTensor4dDescriptor(y_desc_, &t, &n, &c, &h, &w, &ns, &cs, &hs, &ws));
    y_elems = size_t(n) * c * h * w;
    cudnnTensorFormat_t f;
    VISION_CUDNN_CHECK(cudnnGetFilter4dDescriptor(w_desc_, &t, &f, &n, &c, &h, &w));
    w_elems = size_t(n) * c * h * w;
  }
  // The workspace cuDNN may use while searching: the limit, or less when the GPU has less free.
  size_t free_bytes = 0, total = 0;
  VISION_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  const size_t tensors = (x_elems + y_elems + w_elems) * e * 2 + (size_t(64) << 20);
  VISION_CHECK(free_bytes > tensors, "cuDNN algorithm search: {} MiB free on the GPU, {} MiB needed", free_bytes >> 20,
               tensors >> 20);
  const size_t ws_bytes = std::min(max_workspace, free_bytes - tensors);
  auto x = cuda::device_alloc(std::max<size_t>(x_elems * e, 256)), dx = cuda::device_alloc(std::max<size_t>(x_elems * e, 256));
  auto y = cuda::device_alloc(std::max<size_t>(y_elems * e, 256)), w = cuda::device_alloc(std::max<size_t>(w_elems * e, 256));
  auto ws = cuda::device_alloc(std::max<size_t>(ws_bytes, 256));
  VISION_CUDA_CHECK(cudaMemset(x.get(), 0, x_elems * e));
  VISION_CUDA_CHECK(cudaMemset(y.get(), 0, y_elems * e));
  VISION_CUDA_CHECK(cudaMemset(w.get(), 0, w_elems * e));
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(handle_, x_desc_, x.get(), w_desc_, w.get(), conv_desc_,
                                                            y_desc_, y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                            fwd, ws.get(), ws_bytes));
  // f32 keeps FMA math (no TF32) whatever the search reports, unless TF32 is allowed
  const bool f32 = dtype == core::DType::f32 && !tf32_;
  const auto& f = pick(fwd, n, max_workspace, deterministic_, "forward");
  fwd_algo_ = f.algo;
  if (!f32) fwd_math_ = f.mathType;
  if (forward_only_) return;
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(handle_, w_desc_, w.get(), y_desc_, y.get(),
                                                                 conv_desc_, x_desc_, dx.get(),
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd,
                                                                 ws.get(), ws_bytes));
  const auto& d = pick(bd, n, max_workspace, deterministic_, "backward-data");
  bwd_data_algo_ = d.algo;
  if (!f32) bwd_data_math_ = d.mathType;
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  auto dw = cuda::device_alloc(std::max<size_t>(w_elems * e, 256));
  VISION_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle_, x_desc_, x.get(), y_desc_, y.get(),
                                                                   conv_desc_, w_desc_, dw.get(),
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf,
                                                                   ws.get(), ws_bytes));
  const auto& wf = pick(bf, n, max_workspace, deterministic_, "backward-filter");
  bwd_filter_algo_ = wf.algo;
  if (!f32) bwd_filter_math_ = wf.mathType;
}

CudnnConv::CudnnConv(cudnnHandle_t handle, const Conv2dAttrs& a, const core::Shape& x, core::DType dtype,
                     core::Layout layout, bool deterministic, size_t max_workspace, bool tf32, bool forward_only)
    : handle_(handle), y_shape_(a.output_shape(x)), deterministic_(deterministic),
      tf32_(tf32 && dtype == core::DType::f32), forward_only_(forward_only) {
  VISION_CHECK(x.is_concrete(), "CudnnConv needs a concrete input shape, got {}", x.str());
  const size_t elem = core::dtype_size(dtype);
  x_bytes_ = static_cast<size_t>(x.numel()) * elem;
  w_bytes_ = static_cast<size_t>(a.weight_shape().numel()) * elem;
  y_bytes_ = static_cast<size_t>(y_shape_.numel()) * elem;
  bias_bytes_ = static_cast<size_t>(a.out_channels) * elem;
  const cudnnDataType_t dt = cudnn_dtype(dtype);
  const cudnnTensorFormat_t fmt = layout == core::Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_desc_));
  VISION_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
  VISION_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, fmt, dt, to_int(x[0], "batch"), to_int(x[1], "channels"),
                                                to_int(x[2], "height"), to_int(x[3], "width")));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc_, fmt, dt, to_int(y_shape_[0], "batch"),
                                                to_int(y_shape_[1], "channels"), to_int(y_shape_[2], "height"),
                                                to_int(y_shape_[3], "width")));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc_, fmt, dt, 1, to_int(a.out_channels, "channels"), 1, 1));
  VISION_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, dt, fmt, to_int(a.out_channels, "out_channels"),
                                                to_int(a.in_channels / a.groups, "in_channels"),
                                                to_int(a.kernel, "kernel"), to_int(a.kernel, "kernel")));
  const int pad = to_int(a.pad(), "padding"), stride = to_int(a.stride, "stride"),
            dil = to_int(a.dilation, "dilation");
  VISION_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_, pad, pad, stride, stride, dil, dil,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  VISION_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc_, to_int(a.groups, "groups")));
  // f32: FMA math keeps IEEE f32 (no TF32), or the default math (TF32 allowed) with tf32; f16/bf16: tensor cores,
  // f32 accumulation.
  const cudnnMathType_t f32_math = tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  math_ = dtype == core::DType::f32 ? f32_math : CUDNN_TENSOR_OP_MATH;
  VISION_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, math_));

  const std::string key = fmt::format("{} {} k{} s{} p{} d{} g{} c{}->{} {} {} det{} ws{}{}", device_index(),
                                      x.str(), a.kernel, a.stride, a.pad(), a.dilation, a.groups, a.in_channels,
                                      a.out_channels, core::dtype_name(dtype), core::layout_name(layout),
                                      deterministic, max_workspace, tf32_ ? " tf32" : "") +
                          (forward_only ? " forward-only" : "");
  fwd_math_ = bwd_data_math_ = bwd_filter_math_ = math_;
  const auto use = [&](const Algorithms& a) {
    fwd_algo_ = a.fwd;
    bwd_data_algo_ = a.bwd_data;
    bwd_filter_algo_ = a.bwd_filter;
    fwd_math_ = a.fwd_math;
    bwd_data_math_ = a.bwd_data_math;
    bwd_filter_math_ = a.bwd_filter_math;
  };
  if (const auto cached = cached_algorithms(key)) {
    use(*cached);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    const auto choose = [&] {
      if (search_mode() == ConvSearch::benchmark)
        benchmark_algorithms(dtype, max_workspace);
      else
        heuristic_algorithms(max_workspace);
      return Algorithms{fwd_algo_, bwd_data_algo_, bwd_filter_algo_, fwd_math_, bwd_data_math_, bwd_filter_math_};
    };
    // Chosen by an earlier process (the disk), else now (and stored for the next).
    cuda::CacheOutcome outcome = cuda::CacheOutcome::built;
    const std::string payload = cuda::KernelCache(cuda::default_kernel_cache_dir())
                                    .get_or_build(disk_key(key), [&] { return serialize(choose()); }, &outcome);
    std::optional<Algorithms> a = deserialize(payload);
    const bool from_disk = outcome == cuda::CacheOutcome::hit && a.has_value();
    if (!a) a = choose();  // an entry that holds no choice (not one this code wrote): ask cuDNN
    use(*a);
    remember_algorithms(key, *a, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                        from_disk);
  }
  // The heuristics' memory estimates can be short of what the call asks for: ask for the exact sizes, each with the
  // math type its call will use.
  size_t s = 0;
  use_math(fwd_math_);
  VISION_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_, y_desc_, fwd_algo_, &s));
  workspace_ = std::max(workspace_, s);
  if (forward_only_) return;
  use_math(bwd_data_math_);
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_desc_, y_desc_, conv_desc_, x_desc_,
                                                                  bwd_data_algo_, &s));
  workspace_ = std::max(workspace_, s);
  use_math(bwd_filter_math_);
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                                    bwd_filter_algo_, &s));
  workspace_ = std::max(workspace_, s);
}

CudnnConv::~CudnnConv() {
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (bias_desc_) cudnnDestroyTensorDescriptor(bias_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
}

// The math type the chosen algorithm of a direction was measured with (PyTorch does the same after its search).
void CudnnConv::use_math(cudnnMathType_t m) const {
  if (m == math_) return;
  VISION_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_, m));
  math_ = m;
}

void CudnnConv::forward(const void* x, const void* w, void* y, void* workspace, float beta) const {
  const float alpha = 1.0f;
  use_math(fwd_math_);
  mark_written(workspace, workspace_);  // cuDNN's scratch: see sanitizer.h
  VISION_CUDNN_CHECK(cudnnConvolutionForward(handle_, &alpha, x_desc_, x, w_desc_, w, conv_desc_, fwd_algo_, workspace,
                                             workspace_, &beta, y_desc_, y));
  mark_written(y, y_bytes_);
}

void CudnnConv::add_bias(const void* bias, void* y) const {
  const float one = 1.0f;
  VISION_CUDNN_CHECK(cudnnAddTensor(handle_, &one, bias_desc_, bias, &one, y_desc_, y));
  mark_written(y, y_bytes_);
}

void CudnnConv::backward_data(const void* w, const void* dy, void* dx, void* workspace) const {
  VISION_CHECK(!forward_only_, "cuDNN convolution: this one was made for forward passes only (an inference plan's)");
  const float alpha = 1.0f, beta = 0.0f;
  use_math(bwd_data_math_);
  mark_written(workspace, workspace_);  // cuDNN's scratch: see sanitizer.h
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &alpha, w_desc_, w, y_desc_, dy, conv_desc_, bwd_data_algo_,
                                                  workspace, workspace_, &beta, x_desc_, dx));
  mark_written(dx, x_bytes_);
}

void CudnnConv::backward_filter(const void* x, const void* dy, void* dw, void* workspace) const {
  VISION_CHECK(!forward_only_, "cuDNN convolution: this one was made for forward passes only (an inference plan's)");
  const float alpha = 1.0f, beta = 0.0f;
  use_math(bwd_filter_math_);
  mark_written(workspace, workspace_);  // cuDNN's scratch: see sanitizer.h
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_, &alpha, x_desc_, x, y_desc_, dy, conv_desc_,
                                                    bwd_filter_algo_, workspace, workspace_, &beta, w_desc_, dw));
  mark_written(dw, w_bytes_);
}

void CudnnConv::backward_bias(const void* dy, void* db) const {
  VISION_CHECK(!forward_only_, "cuDNN convolution: this one was made for forward passes only (an inference plan's)");
  const float alpha = 1.0f, beta = 0.0f;
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle_, &alpha, y_desc_, dy, &beta, bias_desc_, db));
  mark_written(db, bias_bytes_);
}

void CudnnConv::mark_written(const void* p, size_t bytes) const {
  cudaStream_t stream = nullptr;
  VISION_CUDNN_CHECK(cudnnGetStream(handle_, &stream));
  cuda::mark_written_by_library(stream, p, bytes);
}

}  // namespace vision::ops::cuda_impl
