// Optimizer and EMA kernels — one CUDA block per chunk of the flat f32 buffers (optim_layout.cuh): the gradient's sum of
// squares (per-chunk partials, then one block: no atomics, a fixed order), the fused SGD / AdamW steps, MuSGD's Muon
// momentum + bf16 Newton–Schulz input and its per-matrix Frobenius normalisation, and the EMA update. Every f32
// operation is an explicit round-to-nearest intrinsic (no contraction into FMA); the per-element arithmetic is
// optim_math.cuh, which the CPU twins (optim_kernels.cpp) call too, so they reproduce the results bit for bit. Launch
// with blockDim.x = kOptimThreads.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/train/optim_layout.cuh"
#include "vision/train/optim_math.cuh"

namespace vision::train {

namespace optim_detail {

// The block's sum of the threads' values v (a tree over shared memory), returned to every thread.
__device__ __forceinline__ float block_tree_sum(float v, float* s) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kOptimThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] = __fadd_rn(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  return s[0];
}

// The gradient factor of an update: the step's decision when there is one (false: the step is skipped), else coef.
__device__ __forceinline__ bool step_coef(const void* status, float& coef) {
  if (status == nullptr) return true;
  const OptimStatus& s = *static_cast<const OptimStatus*>(status);
  coef = s.coef;
  return s.applied != 0;
}

__device__ __forceinline__ int64_t ns_index(const OptimTensor& t, int64_t e) {
  if (!t.transposed) return t.ns_offset + e;
  const int64_t i = e / t.cols, j = e % t.cols;
  return t.ns_offset + j * t.rows + i;
}

}  // namespace optim_detail

// partials[chunk] = Σ grad² over the chunk (one block per chunk).
template <typename T>
__global__ void grad_sumsq_partial(const T* __restrict__ grads, const void* __restrict__ tensor_table,
                                   const void* __restrict__ chunk_table, float* __restrict__ partials) {
  __shared__ float s[kOptimThreads];
  const OptimChunk c = static_cast<const OptimChunk*>(chunk_table)[blockIdx.x];
  const T* g = grads + static_cast<const OptimTensor*>(tensor_table)[c.tensor].offset + c.start;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < c.length; j += kOptimThreads) {
    const float v = vk::to_float(g[j]);
    acc = __fadd_rn(acc, __fmul_rn(v, v));
  }
  const float total = optim_detail::block_tree_sum(acc, s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// The step's decision (an OptimStatus at status) from Σ partials[0..n) (one block).
template <typename T>
__global__ void grad_sumsq_finalize(const T* __restrict__ partials, int64_t n, void* __restrict__ status,
                                    float max_grad_norm) {
  __shared__ float s[kOptimThreads];
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += kOptimThreads) acc = __fadd_rn(acc, vk::to_float(partials[j]));
  const float total = optim_detail::block_tree_sum(acc, s);
  if (threadIdx.x == 0) *static_cast<OptimStatus*>(status) = optim_math::decide_step(total, max_grad_norm);
}

// The update kernels take the gradient factor from status (the step's OptimStatus) when it is not null, and then do
// nothing for a skipped step; with a null status they scale by coef.
// SGD (Nesterov, L2 decay, no dampening), after the Muon update for tensors with a Newton–Schulz output (MuSGD).
template <typename T>
__global__ void sgd_step(T* __restrict__ params, const T* __restrict__ grads, T* __restrict__ momentum,
                         const __nv_bfloat16* __restrict__ ns_out, const void* __restrict__ tensor_table,
                         const void* __restrict__ chunk_table, const void* __restrict__ group_table, float coef,
                         const void* __restrict__ status) {
  if (!optim_detail::step_coef(status, coef)) return;
  const OptimChunk c = static_cast<const OptimChunk*>(chunk_table)[blockIdx.x];
  const OptimTensor t = static_cast<const OptimTensor*>(tensor_table)[c.tensor];
  const OptimGroup& G = static_cast<const OptimGroup*>(group_table)[t.group];
  const float lr = G.lr, mom = G.momentum, wd = G.weight_decay;
  const float muon_lr = __fmul_rn(G.muon_lr, t.muon_scale);
  const bool muon = t.ns_offset >= 0;
  for (int64_t e = c.start + threadIdx.x; e < c.start + c.length; e += kOptimThreads) {
    const int64_t i = t.offset + e;
    const float g = optim_math::scaled_grad(vk::to_float(grads[i]), coef);
    float p = vk::to_float(params[i]);
    if (muon) p = optim_math::muon_update(p, muon_lr, __bfloat162float(ns_out[optim_detail::ns_index(t, e)]));
    float b = vk::to_float(momentum[i]);
    optim_math::sgd(g, p, b, lr, mom, wd);
    momentum[i] = vk::from_float<T>(b);
    params[i] = vk::from_float<T>(p);
  }
}

// AdamW (decoupled decay, bias-corrected moments).
template <typename T>
__global__ void adamw_step(T* __restrict__ params, const T* __restrict__ grads, T* __restrict__ exp_avg,
                           T* __restrict__ exp_avg_sq, const void* __restrict__ tensor_table,
                           const void* __restrict__ chunk_table, const void* __restrict__ group_table, float coef,
                           const void* __restrict__ status) {
  if (!optim_detail::step_coef(status, coef)) return;
  const OptimChunk c = static_cast<const OptimChunk*>(chunk_table)[blockIdx.x];
  const OptimTensor t = static_cast<const OptimTensor*>(tensor_table)[c.tensor];
  const OptimGroup G = static_cast<const OptimGroup*>(group_table)[t.group];
  for (int64_t e = c.start + threadIdx.x; e < c.start + c.length; e += kOptimThreads) {
    const int64_t i = t.offset + e;
    const float g = optim_math::scaled_grad(vk::to_float(grads[i]), coef);
    float p = vk::to_float(params[i]), m = vk::to_float(exp_avg[i]), v = vk::to_float(exp_avg_sq[i]);
    optim_math::adamw(g, p, m, v, G);
    exp_avg[i] = vk::from_float<T>(m);
    exp_avg_sq[i] = vk::from_float<T>(v);
    params[i] = vk::from_float<T>(p);
  }
}

// MuSGD, Muon tensors: buf₁ ← buf₁ + (1 − β)(g − buf₁); the workspace gets bf16((1 − β)·g + β·buf₁) in the tensor's
// (rows, cols) view, transposed when rows > cols.
template <typename T>
__global__ void muon_prepare(const T* __restrict__ grads, T* __restrict__ muon_momentum,
                             __nv_bfloat16* __restrict__ ns_in, const void* __restrict__ tensor_table,
                             const void* __restrict__ chunk_table, const void* __restrict__ group_table, float coef,
                           const void* __restrict__ status) {
  if (!optim_detail::step_coef(status, coef)) return;
  const OptimChunk c = static_cast<const OptimChunk*>(chunk_table)[blockIdx.x];
  const OptimTensor t = static_cast<const OptimTensor*>(tensor_table)[c.tensor];
  const OptimGroup& G = static_cast<const OptimGroup*>(group_table)[t.group];
  const float mom = G.momentum, omm = G.one_minus_momentum;
  for (int64_t e = c.start + threadIdx.x; e < c.start + c.length; e += kOptimThreads) {
    const int64_t i = t.offset + e;
    const float g = optim_math::scaled_grad(vk::to_float(grads[i]), coef);
    float b = vk::to_float(muon_momentum[i]);
    const float x = optim_math::muon_momentum(g, b, mom, omm);
    muon_momentum[i] = vk::from_float<T>(b);
    ns_in[optim_detail::ns_index(t, e)] = __float2bfloat16_rn(x);
  }
}

// One block per Muon tensor (tensor index muon_tensors[blockIdx.x]): its workspace matrix X ← bf16(X / (‖X‖_F + 1e-7)).
template <typename T>
__global__ void muon_normalize(T* __restrict__ ns, const void* __restrict__ tensor_table,
                               const int64_t* __restrict__ muon_tensors, const void* __restrict__ status) {
  float unused = 1.0f;
  if (!optim_detail::step_coef(status, unused)) return;
  __shared__ float s[kOptimThreads];
  const OptimTensor t = static_cast<const OptimTensor*>(tensor_table)[muon_tensors[blockIdx.x]];
  T* x = ns + t.ns_offset;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < t.numel; j += kOptimThreads) {
    const float v = vk::to_float(x[j]);
    acc = __fadd_rn(acc, __fmul_rn(v, v));
  }
  const float total = optim_detail::block_tree_sum(acc, s);
  const float den = optim_math::muon_norm_divisor(total);
  for (int64_t j = threadIdx.x; j < t.numel; j += kOptimThreads) x[j] = vk::from_float<T>(__fdiv_rn(vk::to_float(x[j]), den));
}

// EMA: ema ← d·ema + omd·source over the chunks (source region 0: params, 1: buffers), with {d, omd} read from device
// memory (decay[0], decay[1]: written before each replay of a captured step); nothing when status (an OptimStatus, or
// null) says the step was skipped.
template <typename T>
__global__ void ema_update(T* __restrict__ ema, const T* __restrict__ params, const T* __restrict__ buffers,
                           const void* __restrict__ chunk_table, const float* __restrict__ decay,
                           const void* __restrict__ status) {
  float unused = 1.0f;
  if (!optim_detail::step_coef(status, unused)) return;
  const float d = decay[0], omd = decay[1];
  const EmaChunk c = static_cast<const EmaChunk*>(chunk_table)[blockIdx.x];
  const T* src = (c.src_region == 0 ? params : buffers) + c.src_offset;
  T* dst = ema + c.dst_offset;
  for (int64_t j = threadIdx.x; j < c.length; j += kOptimThreads)
    dst[j] = vk::from_float<T>(optim_math::ema(d, vk::to_float(dst[j]), omd, vk::to_float(src[j])));
}

}  // namespace vision::train
