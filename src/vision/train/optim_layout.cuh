// Optimizer and EMA tables — the records the fused optimizer kernels (optim.cuh) and their CPU twins
// (optim_kernels.h) read: plain structs of 64-bit integers and floats, one definition for the host compiler and NVRTC.
//
// A step walks the flat f32 parameter buffer in chunks: each chunk is a run of at most kOptimChunk elements of one
// tensor, one CUDA block of kOptimThreads threads per chunk (thread t takes elements t, t + kOptimThreads, ...), so no
// block crosses a tensor and every element finds its tensor and group in O(1). Reductions (the gradient norm, a Muon
// matrix's Frobenius norm) follow that structure in a fixed order: thread-strided f32 sums, then a shared-memory
// tree (stride kOptimThreads/2 down to 1); the CPU twins reproduce that order, so they agree bit for bit.
#pragma once

#ifndef __CUDACC_RTC__
#include <cstdint>
#endif

namespace vision::train {

enum : int { kOptimThreads = 256 };              // threads per block (the reductions assume exactly this)
enum : int64_t { kOptimChunk = 4096 };           // elements per chunk (= per block)

// One trainable tensor the optimizer updates (frozen tensors have none).
struct OptimTensor {
  int64_t offset;      // first element in the flat parameter / gradient / state buffers
  int64_t numel;
  int64_t group;       // index into the group table
  int64_t ns_offset;   // Muon tensors: first element of its matrix in the Newton–Schulz workspace; −1 otherwise
  int64_t rows;        // Muon view (rows, cols) = (shape[0], numel / shape[0]) of the original tensor
  int64_t cols;
  int64_t transposed;  // 1 when rows > cols: the workspace holds the cols × rows transpose
  float muon_scale;    // sqrt(max(1, shape[-2] / shape[-1])) of the original shape
  float pad_;
};

// A run of elements [start, start + length) of tensor `tensor` (start counted within the tensor).
struct OptimChunk {
  int64_t tensor;
  int64_t start;
  int64_t length;
};

// One parameter group's hyperparameters for the current step, as f32 (computed on the host in float64 and rounded).
struct OptimGroup {
  float lr;                  // SGD / AdamW learning rate (the SGD part of MuSGD: lr · 1.0)
  float momentum;            // SGD momentum, MuSGD β; AdamW β1
  float weight_decay;        // L2 (SGD, MuSGD) or decoupled (AdamW)
  float one_minus_momentum;  // 1 − momentum (MuSGD's Muon lerp; AdamW 1 − β1)
  float muon_lr;             // MuSGD: lr · 0.2
  float decay_factor;        // AdamW: 1 − lr · weight_decay
  float beta2;               // AdamW
  float one_minus_beta2;     // AdamW
  float eps;                 // AdamW
  float step_size;           // AdamW: lr / (1 − β1^t)
  float bc2_sqrt;            // AdamW: sqrt(1 − β2^t)
  float pad_[5];
};

// What a step decided, where the step runs (on the device for CUDA): grad_sumsq_finalize writes it from the gradient's
// sum of squares, the update kernels and the EMA read it, so that queueing a step needs nothing back from the device;
// the host reads it when it asks (Optimizer::finish_step).
struct OptimStatus {
  float sumsq;      // Σ g² over the non-frozen elements
  float norm;       // sqrt(sumsq), before clipping (+inf or NaN when a gradient is not finite)
  float coef;       // the clipping factor the update scales the gradients by (1 when not clipped)
  int32_t applied;  // 1: the step updates; 0: the gradient was not finite, nothing changes
};

// A run of the EMA's flat f32 copy: `length` elements from source region `src_region` (0: the flat parameters,
// 1: the buffer region) at element `src_offset`, to the EMA at element `dst_offset`.
struct EmaChunk {
  int64_t src_region;
  int64_t src_offset;
  int64_t dst_offset;
  int64_t length;
};

// MuSGD's Newton–Schulz in the engine's own grouped GEMM (newton_schulz.cuh): per iteration three launches over every
// Muon matrix of every shape, A = X·Xᵀ, B = c·(A·A) + b·A, Y = B·X + a·X.
// One row-major m × n bf16 matrix (m ≤ n) of the iteration: element offsets of its X in the two iteration buffers
// and of its m × m scratch in the scratch buffers a and b.
struct NsMatrix {
  int64_t x_offset;
  int64_t a_offset;
  int32_t m;
  int32_t n;
};

// One output tile of one product: kNsTileM × kNsTileN elements of matrix `matrix` from (row, col) on (multiples of
// the tile size); a product's launch has one block per tile.
struct NsTile {
  int32_t matrix;
  int32_t row;
  int32_t col;
  int32_t pad_;
};

enum : int { kNsTileM = 64, kNsTileN = 64, kNsTileK = 32, kNsThreads = 128 };

}  // namespace vision::train
