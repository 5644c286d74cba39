// CudnnConv — one 2-D convolution geometry through cuDNN: forward, backward-data, backward-filter, bias.
#pragma once

#include <cudnn.h>

#include <string>
#include <vector>

#include "vision/core/tensor.h"
#include "vision/ops/conv2d.h"

namespace vision::ops::cuda_impl {

// How the algorithms are chosen: from cuDNN's heuristics (the default), or by running them
// (VISION_CUDNN_SEARCH=benchmark: cudnnFind*AlgorithmEx with each result's math type, as PyTorch's cudnn.benchmark).
// Measured on the H200 (bench/graph/NOTES.md, v1): the search made f16/bf16 NHWC inference slower (Conv-BN-SiLU
// stack at batch 32: 4.28 ms against 2.85 ms; the PSA block 204 µs against 114 µs) and f32 a little faster (6.30
// against 6.73 ms), so the heuristics stay the default.
enum class ConvSearch { benchmark, heuristic };
ConvSearch search_mode();

// The algorithms chosen so far in this process, one line per convolution geometry (device, input shape, kernel,
// stride, padding, dilation, groups, channels, dtype, layout, determinism, workspace limit, TF32), in key order:
// "<geometry>: fwd <algo> (<math>), bwd-data <algo> (<math>), bwd-filter <algo> (<math>)" with cuDNN's algorithm
// numbers (cudnnConvolutionFwdAlgo_t, …) and math types (default, tensor-op, tensor-op-conversion, fma).
std::vector<std::string> chosen_algorithms();

// Wall-clock milliseconds this process spent choosing convolution algorithms (heuristic queries or searches, and the
// descriptors around them), and for how many geometries (each is chosen once: chosen_algorithms()).
struct AlgorithmChoiceTime {
  double ms = 0;
  int64_t geometries = 0;
  int64_t from_disk = 0;  // of those, for how many an earlier process's choice was read (below)
};
AlgorithmChoiceTime algorithm_choice_time();

// A geometry's choice is also kept on disk, in the kernel cache's folder (cuda::default_kernel_cache_dir(), through
// cuda::KernelCache: checksummed, written atomically, one writer per key), keyed by the geometry, the GPU's name and
// architecture, cuDNN's version and the search mode: a later process reads it instead of asking cuDNN again. The
// choice read is the one cuDNN gave for the same key, so the algorithms, and the results, are the same. Measured on
// the H200 host (YOLO26n, 27 geometries): the choice 256 ms in a fresh process, 1 ms read back; but the plan's making
// only 277 → 269 ms, as most of those 256 ms is cuDNN loading its libraries, which then happens in the first
// workspace query instead (bench/video/NOTES.md). Training plans (three directions a geometry): not measured.
// Forgets this process's choices (the disk keeps them): a later CudnnConv of a geometry chooses again, or reads it
// from the disk. For tests.
void forget_algorithm_choices();

// Activations in NCHW or NHWC (the filter then in KCRS or KRSC), f32 with IEEE f32 math (no TF32; with `tf32`,
// cuDNN's default math, which lets it pick TF32 tensor-core algorithms as PyTorch's allow_tf32 does) or
// f16/bf16 on tensor cores with f32 accumulation. For each of forward, backward-data and backward-filter: the
// first in cuDNN's ranking (measured time, or the heuristics' order; see ConvSearch) whose workspace fits in
// max_workspace, or with `deterministic` the first of those that cuDNN reports as CUDNN_DETERMINISTIC (bit-for-bit
// reproducible results; a vision::Error when a direction has none). The choice is cached per geometry for the
// life of the process, and on disk (above).
class CudnnConv {
 public:
  CudnnConv(cudnnHandle_t handle, const Conv2dAttrs& attrs, const core::Shape& x, core::DType dtype,
            core::Layout layout, bool deterministic = false, size_t max_workspace = size_t(256) << 20,
            bool tf32 = false, bool forward_only = false);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  const core::Shape& output_shape() const { return y_shape_; }
  bool deterministic() const { return deterministic_; }
  // Bytes of workspace that forward, backward_data and backward_filter need (the largest of the three).
  size_t workspace_bytes() const { return workspace_; }

  // y = conv(x, w) (+ y·beta)
  void forward(const void* x, const void* w, void* y, void* workspace, float beta = 0.0f) const;
  // y += bias, broadcast over N, H, W (bias has out_channels elements of the conv's dtype)
  void add_bias(const void* bias, void* y) const;
  void backward_data(const void* w, const void* dy, void* dx, void* workspace) const;
  void backward_filter(const void* x, const void* dy, void* dw, void* workspace) const;
  void backward_bias(const void* dy, void* db) const;

 private:
  void heuristic_algorithms(size_t max_workspace);
  void use_math(cudnnMathType_t m) const;
  void benchmark_algorithms(core::DType dtype, size_t max_workspace);
  // Tells compute-sanitizer that cuDNN wrote [p, p + bytes) (cuda/sanitizer.h).
  void mark_written(const void* p, size_t bytes) const;

  cudnnHandle_t handle_;
  core::Shape y_shape_;
  bool deterministic_;
  bool tf32_;  // f32 with TF32 allowed
  bool forward_only_;  // no backward algorithms chosen (an inference plan's): the backward calls are errors
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr, bias_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  cudnnMathType_t fwd_math_{}, bwd_data_math_{}, bwd_filter_math_{};
  mutable cudnnMathType_t math_{};  // what conv_desc_ is set to
  size_t workspace_ = 0;
  size_t x_bytes_ = 0, w_bytes_ = 0, y_bytes_ = 0, bias_bytes_ = 0;
};

cudnnDataType_t cudnn_dtype(core::DType dtype);

}  // namespace vision::ops::cuda_impl
