// CUDA kernels of BatchNorm: folding into a convolution, the batch counter, and BatchNorm itself (training with batch
// statistics, inference, backward) in every dtype and either memory order.
// Descriptors and launch helpers; kernel text: batchnorm.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "vision/core/shape.h"
#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;
using core::Layout;

struct BatchNormFold
    : cuda::KernelDescriptor<const void* /*w*/, const void* /*bias or null*/, const void* /*gamma*/,
                             const void* /*beta*/, const void* /*mean*/, const void* /*var*/, void* /*w_out*/,
                             void* /*b_out*/, int64_t /*out_channels*/, int64_t /*per_out*/, float /*eps*/> {
  explicit BatchNormFold(DType dtype);
};
struct IncrementCounter : cuda::KernelDescriptor<void* /*counter*/> {
  IncrementCounter();
};

// Our BatchNorm kernels: the element type of x, y, dy and dx is dtype (f32, f16 or bf16), the statistics and
// parameters are f32; NCHW kernels are named like "batchnorm_stats", NHWC ones "batchnorm_stats_nhwc". `vec` is the
// elements per access (batchnorm.cuh): 16 bytes of dtype, or 1 (batchnorm_vector_widths), in the id as "__v8".
// The grid arguments (units, cols, inner_v, tc_shift, units_per_split) are those of batchnorm_cuda.cpp's tiling.
struct BatchNormStats
    : cuda::KernelDescriptor<const void* /*x*/, void* /*partial*/, int32_t /*units*/, int32_t /*cols*/,
                             int32_t /*inner_v*/, int32_t /*tc_shift*/, int32_t /*units_per_split*/> {
  BatchNormStats(DType dtype, Layout layout, int vec);
};
struct BatchNormStatsFinalize
    : cuda::KernelDescriptor<const void* /*partial*/, const void* /*gamma*/, void* /*scale*/, void* /*save_mean*/,
                             void* /*save_invstd*/, void* /*running_mean*/, void* /*running_var*/,
                             int32_t /*splits*/, int32_t /*channels*/, int64_t /*count*/, int32_t /*units*/,
                             int32_t /*units_per_split*/, float /*momentum*/, float /*eps*/, int32_t /*ranks*/> {
  BatchNormStatsFinalize();
};
// The kernels that touch activations come with SiLU fused after the normalisation too (silu: "batchnorm_apply_silu",
// …): the forward writes silu(y), the backward takes the gradient through it, recomputing y from x.
struct BatchNormApply
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, const void* /*mean*/, const void* /*scale_src*/,
                             const void* /*gamma*/, const void* /*beta*/, int32_t /*units*/, int32_t /*cols*/,
                             int32_t /*inner_v*/, int32_t /*tc_shift*/, int32_t /*units_per_split*/, float /*eps*/,
                             int32_t /*from_var*/> {
  BatchNormApply(DType dtype, Layout layout, int vec, bool silu = false);
};
struct BatchNormBackwardSums
    : cuda::KernelDescriptor<const void* /*x*/, const void* /*dy*/, const void* /*mean*/, const void* /*invstd*/,
                             const void* /*gamma*/, const void* /*beta*/, void* /*partial*/, int32_t /*units*/,
                             int32_t /*cols*/, int32_t /*inner_v*/, int32_t /*tc_shift*/,
                             int32_t /*units_per_split*/> {
  BatchNormBackwardSums(DType dtype, Layout layout, int vec, bool silu = false);
};
struct BatchNormBackwardFinalize
    : cuda::KernelDescriptor<const void* /*partial*/, const void* /*invstd*/, void* /*dgamma*/, void* /*dbeta*/,
                             int32_t /*splits*/, int32_t /*channels*/> {
  BatchNormBackwardFinalize();
};
struct BatchNormBackwardApply
    : cuda::KernelDescriptor<const void* /*x*/, const void* /*dy*/, void* /*dx*/, const void* /*mean*/,
                             const void* /*invstd*/, const void* /*gamma*/, const void* /*beta*/,
                             const void* /*dgamma*/, const void* /*dbeta*/, int32_t /*units*/, int32_t /*cols*/,
                             int32_t /*inner_v*/, int32_t /*tc_shift*/, int32_t /*units_per_split*/,
                             int64_t /*count*/> {
  BatchNormBackwardApply(DType dtype, Layout layout, int vec, bool silu = false);
};

// The access widths our BatchNorm kernels come in for dtype: {1, 16 bytes of dtype} (f32: {1, 4}, f16/bf16: {1, 8}).
// A launch takes the wide one when the channels (NHWC) or H·W (NCHW) divide by it and every activation pointer is
// 16-byte aligned.
std::vector<int> batchnorm_vector_widths(DType dtype);

// w_out = w · γ/σ per output channel, b_out = β + (b − mean) · γ/σ, σ = sqrt(var + eps); f32 tensors.
void launch_batchnorm_fold(cudaStream_t stream, const float* w, const float* bias, const float* gamma,
                           const float* beta, const float* mean, const float* var, float* w_out, float* b_out,
                           int64_t out_channels, int64_t per_out, float eps);
// counter[0] += 1 for an i64 counter.
void launch_increment_counter(cudaStream_t stream, int64_t* counter);

// The kernels BatchNorm in dtype and layout may launch (every access width): inference, or training (forward and
// backward); with silu, those of BatchNorm → SiLU fused (training only).
std::vector<const cuda::Kernel*> batchnorm_kernels(DType dtype, Layout layout, bool training, bool silu = false);

// How the kernels cut an activation into blocks (batchnorm.cuh's grid): the blocks aimed at and the fewest units a
// thread takes, for the reduction passes (statistics, backward sums: their partial results per split fill the
// workspace) and for the element-wise passes (apply, backward apply) apart. The defaults are what the ops use;
// bench_batchnorm --sweep times others. A launch must use the grid its workspace was sized for.
// The reduction passes take at most target_blocks blocks and min_units_per_thread units a thread, but at least
// min_blocks blocks (down to 2 units a thread) when the activation is small: measured on the H100 over YOLO26n's
// shapes (bench_batchnorm --sweep, bench/train/NOTES.md v6), the reductions run best at about 100–256 blocks
// whatever the size — per-block and per-split costs (the in-block combination, the finalize over the splits) weigh
// more than bytes in flight.
struct BatchNormGrid {
  int64_t target_blocks = 256, min_units_per_thread = 8, min_blocks = 100;  // statistics and backward sums
  int64_t apply_target_blocks = 1024, apply_min_units_per_thread = 8;       // apply and backward apply
};

// SyncBatchNorm (PyTorch's, for data-parallel ranks): the batch statistics of the training forward, and the sums its
// backward takes through them, over every rank's batch. Each rank's partial results (the reduction passes' per-split
// sums, cut alike on every rank: the ranks' inputs have one shape) are gathered in rank order by `all_gather` (every
// rank's `bytes` at send, world × bytes at recv, device memory, queued on the launch's stream) and combined in the
// same order on every rank, so every rank gets the same bits. world 1: this rank's batch alone (all_gather unused).
struct BatchNormRanks {
  int world = 1;
  std::function<void(const void* send, void* recv, size_t bytes)> all_gather;
};

// Workspace bytes of the training forward and backward of an input of shape x (N, C, H, W) in layout (with `world`
// ranks' partial results gathered: BatchNormRanks).
size_t batchnorm_workspace_bytes(const core::Shape& x, Layout layout, const BatchNormGrid& grid = {}, int world = 1);

// Training: y = (x − μ)·invstd·γ + β with the batch mean μ and inverse std invstd = 1/sqrt(var + eps) (biased
// variance), saved for backward (f32, C each); running_mean and running_var (f32) are updated with `momentum` as
// PyTorch does, the variance unbiased. x and y: dtype, shape x in layout; gamma, beta: f32; workspace: at least
// batchnorm_workspace_bytes(x, layout). Needs more than one value per channel. silu: y = silu(that), BatchNorm →
// SiLU in one pass over the activations after the statistics' pass.
void launch_batchnorm_forward_training(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                       const void* x_data, void* y, const float* gamma, const float* beta,
                                       float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                                       void* workspace, float momentum, float eps, bool silu = false,
                                       const BatchNormGrid& grid = {}, const BatchNormRanks& ranks = {});
// y = silu((x − mean)·γ·invstd + β) from statistics saved elsewhere (cuDNN's training forward): the fused SiLU on
// cuDNN's f32 NCHW path.
void launch_batchnorm_silu_from_saved(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                      const void* x_data, void* y, const float* gamma, const float* beta,
                                      const float* save_mean, const float* save_invstd);
// Inference: y = (x − running_mean)/sqrt(running_var + eps)·γ + β.
void launch_batchnorm_forward_inference(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                        const void* x_data, void* y, const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var, float eps);
// Backward of the training forward: dx (dtype, layout), dγ and dβ (f32) from x, dy and the saved statistics. silu:
// dy is the gradient of the fused SiLU's output (beta then recomputes its input; unused otherwise). With several
// ranks, dx goes through the job's batch statistics (Σdy and Σdy·(x − μ) over every rank, the job's count) while dγ and
// dβ stay this rank's own, as PyTorch's SyncBatchNorm gives them to DDP's gradient all-reduce.
void launch_batchnorm_backward(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                               const void* x_data, const void* dy, void* dx, const float* gamma, const float* beta,
                               const float* save_mean, const float* save_invstd, float* dgamma, float* dbeta,
                               void* workspace, bool silu = false, const BatchNormGrid& grid = {},
                               const BatchNormRanks& ranks = {});

}  // namespace vision::ops::kernels
