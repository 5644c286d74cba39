// Optimizer kernels on CUDA — the descriptors of optim.cuh, their launch helpers (device pointers to the tables of
// optim_layout.cuh), and the batched bf16 Newton–Schulz iteration on cuBLAS. CUDA builds only.
// Ids: grad_sumsq_partial__f32, grad_sumsq_finalize__f32, sgd_step__f32, adamw_step__f32, muon_prepare__f32,
// muon_normalize__bf16, ema_update__f32.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "vision/cuda/kernel.h"
#include "vision/cuda/memory.h"
#include "vision/graph/backend.h"
#include "vision/train/optim_layout.cuh"

namespace vision::train {

struct GradSumsqPartial : cuda::KernelDescriptor<const void* /*grads*/, const void* /*tensors*/,
                                                 const void* /*chunks*/, void* /*partials (f32)*/> {
  GradSumsqPartial();
};
struct GradSumsqFinalize : cuda::KernelDescriptor<const void* /*partials*/, int64_t /*n*/, void* /*status*/,
                                                  float /*max_grad_norm*/> {
  GradSumsqFinalize();
};
struct SgdStep
    : cuda::KernelDescriptor<void* /*params*/, const void* /*grads*/, void* /*momentum*/, const void* /*ns_out (bf16)*/,
                             const void* /*tensors*/, const void* /*chunks*/, const void* /*groups*/, float /*coef*/,
                             const void* /*status*/> {
  SgdStep();
};
struct AdamwStep
    : cuda::KernelDescriptor<void* /*params*/, const void* /*grads*/, void* /*exp_avg*/, void* /*exp_avg_sq*/,
                             const void* /*tensors*/, const void* /*chunks*/, const void* /*groups*/, float /*coef*/,
                             const void* /*status*/> {
  AdamwStep();
};
struct MuonPrepare
    : cuda::KernelDescriptor<const void* /*grads*/, void* /*muon_momentum*/, void* /*ns_in (bf16)*/,
                             const void* /*tensors*/, const void* /*chunks*/, const void* /*groups*/, float /*coef*/,
                             const void* /*status*/> {
  MuonPrepare();
};
struct MuonNormalize
    : cuda::KernelDescriptor<void* /*ns (bf16)*/, const void* /*tensors*/, const void* /*muon_tensors (i64)*/,
                             const void* /*status*/> {
  MuonNormalize();
};
struct NsGemm : cuda::KernelDescriptor<const void* /*matrices*/, const void* /*tiles*/, const void* /*src (bf16)*/,
                                       void* /*dst*/, void* /*a*/, void* /*b*/, int32_t /*product*/,
                                       float /*alpha*/, float /*beta*/> {
  NsGemm();
};
struct EmaUpdate : cuda::KernelDescriptor<void* /*ema*/, const void* /*params*/, const void* /*buffers*/,
                                          const void* /*chunks*/, const void* /*decay: {d, omd}*/,
                                          const void* /*status*/> {
  EmaUpdate();
};

// Device pointers throughout; tensors/chunks/groups are arrays of OptimTensor/OptimChunk/OptimGroup, n_chunks blocks.
// partials: n_chunks floats; status: the step's decision (optim_math::decide_step of Σ grad² over the chunks, the CPU
// twin's order, and max_grad_norm). The updates (and the EMA) take their gradient factor from status where one is
// given, and do nothing when it says the step is skipped; with a null status they scale by coef.
void launch_grad_sumsq(cudaStream_t stream, const float* grads, const OptimTensor* tensors, const OptimChunk* chunks,
                       int64_t n_chunks, float* partials, OptimStatus* status, float max_grad_norm = 0.0f);
void launch_sgd_step(cudaStream_t stream, float* params, const float* grads, float* momentum, const uint16_t* ns_out,
                     const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks, const OptimGroup* groups,
                     float coef, const OptimStatus* status = nullptr);
void launch_adamw_step(cudaStream_t stream, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                       const OptimGroup* groups, float coef, const OptimStatus* status = nullptr);
void launch_muon_prepare(cudaStream_t stream, const float* grads, float* muon_momentum, uint16_t* ns_in,
                         const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                         const OptimGroup* groups, float coef, const OptimStatus* status = nullptr);
void launch_muon_normalize(cudaStream_t stream, uint16_t* ns, const OptimTensor* tensors, const int64_t* muon_tensors,
                           int64_t n_muon, const OptimStatus* status = nullptr);
// decay: device memory holding {d, omd} (e.g. a cuda::ReplayableUpload's device(): as of the launch, or of each replay).
void launch_ema_update(cudaStream_t stream, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, const float* decay,
                       const OptimStatus* status = nullptr);
// The same on a CUDA backend's stream with {d, omd} staged in `decay` (its copy queued first, then the update;
// train/ema.cpp reaches the backend through this, not graph/cuda/).
void launch_ema_update(graph::BackendContext& backend, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, const cuda::ReplayableUpload& decay,
                       const OptimStatus* status = nullptr);

// `steps` Newton–Schulz iterations on `batch` row-major m × n bf16 matrices (m ≤ n) at x, on the handle's stream,
// by cuBLAS strided-batched GEMMs in bf16 with f32 accumulation: per iteration A = X·Xᵀ, B = c·(A·A) + b·A (B preset
// to A, β = b), Y = B·X + a·X (Y preset to X, β = a), then X and Y swap roles. y: another batch·m·n bf16, a and b:
// batch·m·m bf16 each (scratch). Returns x or y, whichever holds the result (y after an odd number of steps).
uint16_t* newton_schulz_cuda(cublasHandle_t handle, cudaStream_t stream, uint16_t* x, uint16_t* y, uint16_t* a,
                             uint16_t* b, int64_t batch, int64_t m, int64_t n, int steps);

// The engine's grouped Newton–Schulz GEMM (newton_schulz.cuh): `product` (0: A = X·Xᵀ, 1: B = c·(A·A) + b·A,
// 2: Y = B·X + a·X) over the n_tiles output tiles of `tiles` (NsTile, device memory) of the matrices of `matrices`
// (NsMatrix), X read from src, Y written to dst, A and B in the scratch a and b.
void launch_ns_gemm(cudaStream_t stream, int product, const NsMatrix* matrices, const NsTile* tiles, int64_t n_tiles,
                    const uint16_t* src, uint16_t* dst, uint16_t* a, uint16_t* b);

// Newton–Schulz over matrices of several shapes at once, as newton_schulz_cuda computes each shape's batch, by one of
// three paths (NsPath):
//   kernel:   the engine's grouped GEMM (launch_ns_gemm): three launches an iteration over every matrix of every
//             shape, no copies (15 launches a 5-step run, whatever the shapes);
//   cublas:   three cuBLAS grouped GEMMs (cublasGemmGroupedBatchedEx: one call over every matrix of every shape, but a
//             kernel per shape inside) and two copies an iteration; matrices not 16-byte aligned run shape by shape;
//   per_shape: newton_schulz_cuda shape by shape (5 calls an iteration and shape).
// The device tables (tiles, or the matrices' pointers) are built and uploaded once, here. Where cuBLAS does not
// support the grouped bf16 GEMM (CUBLAS_STATUS_NOT_SUPPORTED on the first call), the cublas path falls back to
// per_shape; path() says which ran. The optimizer's engine takes VISION_NS_GROUPED (kNewtonSchulzGroupedEnv): unset
// or "kernel" (the default since it ran on an H100 on 2026-12-07: MuSGD + EMA 1.75 ms a YOLO26n step at batch 64,
// against 4.98 on cuBLAS's grouped GEMM and 6.57 shape by shape), "1" or "cublas", "0" (per_shape).
inline constexpr const char* kNewtonSchulzGroupedEnv = "VISION_NS_GROUPED";
enum class NsPath { kernel, cublas, per_shape };
NsPath newton_schulz_path_from_env();

class GroupedNewtonSchulz {
 public:
  struct Shape {
    int64_t m = 0, n = 0, count = 0, offset = 0;  // count row-major m × n matrices (m ≤ n) from element offset on
  };
  // Device memory holding a copy of `bytes` bytes of host memory (the backend's allocation and upload).
  using Upload = std::function<std::shared_ptr<void>(const void* host, size_t bytes)>;
  // x and y: the iteration's two buffers of elements(shapes) bf16 each, the shapes laid out one after another from 0
  // (offsets consecutive); a and b: scratch of square_elements(shapes) bf16 each (each matrix's m × m padded to a
  // multiple of 8 elements: square_stride). Shapes whose matrices do not all start 16-byte aligned in x and y run
  // shape by shape after cuBLAS's grouped GEMMs (stragglers()).
  GroupedNewtonSchulz(std::span<const Shape> shapes, uint16_t* x, uint16_t* y, uint16_t* a, uint16_t* b,
                      const Upload& upload, NsPath path = NsPath::cublas);
  static int64_t elements(std::span<const Shape> shapes);         // Σ count · m · n
  static int64_t square_elements(std::span<const Shape> shapes);  // Σ count · square_stride(m)
  static constexpr int64_t square_stride(int64_t m) { return (m * m + 7) / 8 * 8; }
  static constexpr size_t kGroupedAlignBytes = 16;
  // `steps` iterations on the handle's stream (bound to `stream`), from x; returns x or y, whichever holds the result
  // (y after an odd number of steps). Capturable into a CUDA graph after the first call.
  uint16_t* run(cublasHandle_t handle, cudaStream_t stream, int steps);
  NsPath path() const { return path_; }
  bool grouped() const { return path_ != NsPath::per_shape; }
  // The shapes left out of the cublas path's grouped GEMMs (their matrices not all 16-byte aligned); none on the
  // kernel path, all of them on per_shape.
  std::span<const Shape> stragglers() const {
    return path_ == NsPath::per_shape ? std::span<const Shape>(shapes_) : std::span<const Shape>(stragglers_);
  }
  int64_t tiles() const { return square_tiles_ + rect_tiles_; }  // the kernel path's tiles (all three products)

 private:
  struct GemmArgs {  // one product's per-shape arrays, as cublasGemmGroupedBatchedEx takes them (host memory)
    std::vector<cublasOperation_t> ta, tb;
    std::vector<int> m, n, k, lda, ldb, ldc;
    std::vector<float> alpha, beta;
  };
  // Product `which` (0: A = X·Xᵀ, 1: B = c·A·A + b·B, 2: Y = B·X + a·Y) with X the buffer of `parity` (0: x, 1: y).
  // False when cuBLAS does not support it on the first call (nothing was computed).
  bool gemm(cublasHandle_t handle, int which, int parity);
  uint16_t* per_shape(std::span<const Shape> shapes, cublasHandle_t handle, cudaStream_t stream, int steps);
  void build_tiles(const Upload& upload, std::span<const int64_t> square_offsets);
  std::vector<Shape> shapes_, stragglers_;
  uint16_t *x_, *y_, *a_, *b_;
  int64_t elements_ = 0, square_ = 0, matrices_ = 0;
  GemmArgs args_[3];
  std::vector<int> group_size_;
  std::shared_ptr<void> pointers_;  // 5 tables (product 0 per parity, 1, 2 per parity) of A, B, C pointer arrays
  // The kernel path: the matrices and the tiles, the m × m tiles (products 0, 1) first, then the m × n (product 2).
  std::shared_ptr<void> ns_matrices_, ns_tiles_;
  int64_t square_tiles_ = 0, rect_tiles_ = 0;
  NsPath path_ = NsPath::cublas;
  bool tried_ = false;
};

}  // namespace vision::train
