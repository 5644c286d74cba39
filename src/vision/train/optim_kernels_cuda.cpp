#include "vision/train/optim_kernels_cuda.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <limits>
#include <string_view>
#include <utility>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/libraries.h"
#include "vision/cuda/sanitizer.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/train/optim_kernels.h"

namespace vision::train {
namespace {

using core::DType;

constexpr const char* kOptimFile = "vision/train/optim.cuh";
constexpr const char* kOptimScope = "vision::train";

constexpr const char* kNewtonSchulzFile = "vision/train/newton_schulz.cuh";

void register_optim_kernels(cuda::KernelRegistry& r) {
  r.add<NsGemm>();
  r.add<GradSumsqPartial>();
  r.add<GradSumsqFinalize>();
  r.add<SgdStep>();
  r.add<AdamwStep>();
  r.add<MuonPrepare>();
  r.add<MuonNormalize>();
  r.add<EmaUpdate>();
}
VISION_REGISTER_KERNELS(register_optim_kernels);

// One block per chunk: the grid's x dimension.
dim3 chunk_grid(int64_t n_chunks, const char* what) {
  VISION_CHECK(n_chunks > 0 && n_chunks <= std::numeric_limits<int32_t>::max(),
               "{}: {} chunks do not fit one launch's grid (1 to 2^31 − 1 blocks)", what, n_chunks);
  return dim3(static_cast<unsigned>(n_chunks));
}

}  // namespace

GradSumsqPartial::GradSumsqPartial()
    : KernelDescriptor(
          {"grad_sumsq_partial", kOptimFile, DType::f32, {}, "const {T}*, const void*, const void*, float*", kOptimScope}) {}

GradSumsqFinalize::GradSumsqFinalize()
    : KernelDescriptor({"grad_sumsq_finalize", kOptimFile, DType::f32, {}, "const {T}*, int64_t, void*, float", kOptimScope}) {}

SgdStep::SgdStep()
    : KernelDescriptor({"sgd_step", kOptimFile, DType::f32, {},
                        "{T}*, const {T}*, {T}*, const __nv_bfloat16*, const void*, const void*, const void*, float, const void*",
                        kOptimScope}) {}

AdamwStep::AdamwStep()
    : KernelDescriptor({"adamw_step", kOptimFile, DType::f32, {},
                        "{T}*, const {T}*, {T}*, {T}*, const void*, const void*, const void*, float, const void*", kOptimScope}) {}

MuonPrepare::MuonPrepare()
    : KernelDescriptor({"muon_prepare", kOptimFile, DType::f32, {},
                        "const {T}*, {T}*, __nv_bfloat16*, const void*, const void*, const void*, float, const void*", kOptimScope}) {}

MuonNormalize::MuonNormalize()
    : KernelDescriptor({"muon_normalize", kOptimFile, DType::bf16, {}, "{T}*, const void*, const int64_t*, const void*", kOptimScope}) {}

NsGemm::NsGemm()
    : KernelDescriptor({"ns_gemm", kNewtonSchulzFile, DType::bf16, {},
                        "const void*, const void*, const {T}*, {T}*, {T}*, {T}*, int32_t, float, float", kOptimScope}) {}

EmaUpdate::EmaUpdate()
    : KernelDescriptor(
          {"ema_update", kOptimFile, DType::f32, {}, "{T}*, const {T}*, const {T}*, const void*, const float*, const void*", kOptimScope}) {}

void launch_grad_sumsq(cudaStream_t stream, const float* grads, const OptimTensor* tensors, const OptimChunk* chunks,
                       int64_t n_chunks, float* partials, OptimStatus* status, float max_grad_norm) {
  if (n_chunks > 0)
    cuda::kernel_instance<GradSumsqPartial>().launch(stream, chunk_grid(n_chunks, "grad_sumsq"), dim3(kOptimThreads),
                                                     0, grads, tensors, chunks, partials);
  // No chunks: the sum of nothing, 0, decided by the same kernel.
  cuda::kernel_instance<GradSumsqFinalize>().launch(stream, dim3(1), dim3(kOptimThreads), 0,
                                                    static_cast<const float*>(partials), n_chunks,
                                                    static_cast<void*>(status), max_grad_norm);
}

void launch_sgd_step(cudaStream_t stream, float* params, const float* grads, float* momentum, const uint16_t* ns_out,
                     const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks, const OptimGroup* groups,
                     float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<SgdStep>().launch(stream, chunk_grid(n_chunks, "sgd_step"), dim3(kOptimThreads), 0, params,
                                          grads, momentum, ns_out, tensors, chunks, groups, coef,
                                          static_cast<const void*>(status));
}

void launch_adamw_step(cudaStream_t stream, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                       const OptimGroup* groups, float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<AdamwStep>().launch(stream, chunk_grid(n_chunks, "adamw_step"), dim3(kOptimThreads), 0, params,
                                            grads, exp_avg, exp_avg_sq, tensors, chunks, groups, coef,
                                            static_cast<const void*>(status));
}

void launch_muon_prepare(cudaStream_t stream, const float* grads, float* muon_momentum, uint16_t* ns_in,
                         const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                         const OptimGroup* groups, float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<MuonPrepare>().launch(stream, chunk_grid(n_chunks, "muon_prepare"), dim3(kOptimThreads), 0,
                                              grads, muon_momentum, ns_in, tensors, chunks, groups, coef,
                                              static_cast<const void*>(status));
}

void launch_muon_normalize(cudaStream_t stream, uint16_t* ns, const OptimTensor* tensors, const int64_t* muon_tensors,
                           int64_t n_muon, const OptimStatus* status) {
  if (n_muon == 0) return;
  cuda::kernel_instance<MuonNormalize>().launch(stream, chunk_grid(n_muon, "muon_normalize"), dim3(kOptimThreads), 0,
                                                ns, tensors, muon_tensors, static_cast<const void*>(status));
}

void launch_ema_update(cudaStream_t stream, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, const float* decay, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<EmaUpdate>().launch(stream, chunk_grid(n_chunks, "ema_update"), dim3(kOptimThreads), 0, ema,
                                            params, buffers, chunks, decay, static_cast<const void*>(status));
}

void launch_ema_update(graph::BackendContext& backend, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, const cuda::ReplayableUpload& decay,
                       const OptimStatus* status) {
  VISION_CHECK(decay.bytes() == 2 * sizeof(float), "ema_update: the decay is {} bytes, not two floats", decay.bytes());
  const cudaStream_t stream = graph::stream_of(&backend);
  if (n_chunks == 0) return;
  decay.queue(stream);
  launch_ema_update(stream, ema, params, buffers, chunks, n_chunks, static_cast<const float*>(decay.device()), status);
}

uint16_t* newton_schulz_cuda(cublasHandle_t handle, cudaStream_t stream, uint16_t* x, uint16_t* y, uint16_t* a,
                             uint16_t* b, int64_t batch, int64_t m, int64_t n, int steps) {
  VISION_CHECK(m > 0 && n > 0 && m <= n && batch >= 0 && steps >= 0,
               "newton_schulz: {} matrices of {}×{} (rows ≤ cols, transpose first)", batch, m, n);
  VISION_CHECK(n <= std::numeric_limits<int>::max() && batch <= std::numeric_limits<int>::max(),
               "newton_schulz: {} matrices of {}×{} exceed cuBLAS's 32-bit sizes", batch, m, n);
  if (batch == 0 || steps == 0) return x;
  cudaStream_t bound = nullptr;
  VISION_CUBLAS_CHECK(cublasGetStream(handle, &bound));
  VISION_CHECK(bound == stream, "newton_schulz: the cuBLAS handle is bound to another stream than the one given");
  const int M = static_cast<int>(m), N = static_cast<int>(n), count = static_cast<int>(batch);
  const long long sx = static_cast<long long>(m) * n, sa = static_cast<long long>(m) * m;
  const size_t x_bytes = static_cast<size_t>(batch * m * n) * 2, a_bytes = static_cast<size_t>(batch * m * m) * 2;
  const float one = 1.0f, zero = 0.0f, fa = kNewtonSchulzA, fb = kNewtonSchulzB, fc = kNewtonSchulzC;
  // Row-major R×C bf16 matrices are column-major C×R ones (their transposes): each product below is written for
  // cuBLAS's column-major view, Cᵀ = op(B)ᵀ·op(A)ᵀ.
  for (int it = 0; it < steps; ++it) {
    // A = X·Xᵀ (m × m): column-major Aᵀ = (Xᵀ)ᵀ·Xᵀ, X's buffer being Xᵀ (n × m, ld n).
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, M, M, N, &one, x, CUDA_R_16BF, N,
                                                   sx, x, CUDA_R_16BF, N, sx, &zero, a, CUDA_R_16BF, M, sa, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, a, a_bytes);
    // B = c·(A·A) + b·A: B preset to A; column-major (A·A)ᵀ = Aᵀ·Aᵀ.
    VISION_CUDA_CHECK(cudaMemcpyAsync(b, a, a_bytes, cudaMemcpyDeviceToDevice, stream));
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &fc, a, CUDA_R_16BF, M,
                                                   sa, a, CUDA_R_16BF, M, sa, &fb, b, CUDA_R_16BF, M, sa, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, b, a_bytes);
    // Y = B·X + a·X: Y preset to X; column-major (B·X)ᵀ = Xᵀ·Bᵀ (n × m, k = m).
    VISION_CUDA_CHECK(cudaMemcpyAsync(y, x, x_bytes, cudaMemcpyDeviceToDevice, stream));
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, M, &one, x, CUDA_R_16BF, N,
                                                   sx, b, CUDA_R_16BF, M, sa, &fa, y, CUDA_R_16BF, N, sx, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, y, x_bytes);
    std::swap(x, y);
  }
  return x;
}

void launch_ns_gemm(cudaStream_t stream, int product, const NsMatrix* matrices, const NsTile* tiles, int64_t n_tiles,
                    const uint16_t* src, uint16_t* dst, uint16_t* a, uint16_t* b) {
  VISION_CHECK(product >= 0 && product <= 2, "ns_gemm: product {} (0, 1 or 2)", product);
  if (n_tiles == 0) return;
  cuda::kernel_instance<NsGemm>().launch(stream, chunk_grid(n_tiles, "ns_gemm"), dim3(kNsThreads), 0,
                                         static_cast<const void*>(matrices), static_cast<const void*>(tiles),
                                         static_cast<const void*>(src), static_cast<void*>(dst),
                                         static_cast<void*>(a), static_cast<void*>(b), static_cast<int32_t>(product),
                                         product == 1 ? kNewtonSchulzC : 1.0f,
                                         product == 0 ? 0.0f : product == 1 ? kNewtonSchulzB : kNewtonSchulzA);
}

NsPath newton_schulz_path_from_env() {
  const char* v = std::getenv(kNewtonSchulzGroupedEnv);
  if (v == nullptr || *v == 0) return NsPath::kernel;
  const std::string_view s(v);
  if (s == "kernel") return NsPath::kernel;
  if (s == "0") return NsPath::per_shape;
  VISION_CHECK(s == "1" || s == "cublas", "{}={}: expected kernel, cublas (1) or 0 (shape by shape)",
               kNewtonSchulzGroupedEnv, s);
  return NsPath::cublas;
}

int64_t GroupedNewtonSchulz::elements(std::span<const Shape> shapes) {
  int64_t e = 0;
  for (const Shape& s : shapes) e += s.count * s.m * s.n;
  return e;
}

int64_t GroupedNewtonSchulz::square_elements(std::span<const Shape> shapes) {
  int64_t e = 0;
  for (const Shape& s : shapes) e += s.count * square_stride(s.m);
  return e;
}

GroupedNewtonSchulz::GroupedNewtonSchulz(std::span<const Shape> shapes, uint16_t* x, uint16_t* y, uint16_t* a,
                                         uint16_t* b, const Upload& upload, NsPath path)
    : shapes_(shapes.begin(), shapes.end()), x_(x), y_(y), a_(a), b_(b), path_(path) {
  int64_t offset = 0;
  for (const Shape& s : shapes_) {
    VISION_CHECK(s.m > 0 && s.n > 0 && s.m <= s.n && s.count > 0,
                 "newton_schulz: {} matrices of {}×{} (rows ≤ cols, transpose first)", s.count, s.m, s.n);
    VISION_CHECK(s.offset == offset, "newton_schulz: the shapes' matrices must follow each other (offset {}, not {})",
                 s.offset, offset);
    VISION_CHECK(s.n <= std::numeric_limits<int>::max() && s.count <= std::numeric_limits<int>::max(),
                 "newton_schulz: {} matrices of {}×{} exceed cuBLAS's 32-bit sizes", s.count, s.m, s.n);
    offset += s.count * s.m * s.n;
  }
  elements_ = elements(shapes_);
  square_ = square_elements(shapes_);
  if (shapes_.empty()) return;
  // Each shape's first scratch element: its matrices' m × m scratch, each padded to square_stride(m), one after another.
  std::vector<int64_t> square_offsets;
  for (int64_t ao = 0; const Shape& s : shapes_) {
    square_offsets.push_back(ao);
    ao += s.count * square_stride(s.m);
  }
  if (path_ == NsPath::kernel) {
    build_tiles(upload, square_offsets);
    return;
  }
  if (path_ == NsPath::per_shape) return;
  // cuBLAS reads the grouped GEMM's matrix pointers on the device, so it cannot see their alignment and takes every
  // one to be 16-byte aligned (an odd-sized matrix ahead made the next one's start misaligned: cudaErrorMisaligned
  // Address on the GPU). A shape joins the grouped GEMMs only when each of its matrices starts on 16 bytes in x and y
  // (a and b: each matrix's scratch is padded to 8 elements); the others run shape by shape after them.
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % kGroupedAlignBytes == 0; };
  const bool bases = aligned(x_) && aligned(y_) && aligned(a_) && aligned(b_);
  constexpr int64_t kElems = kGroupedAlignBytes / 2;
  std::vector<bool> grouped(shapes_.size());
  for (size_t k = 0; k < shapes_.size(); ++k) {
    const Shape& s = shapes_[k];
    grouped[k] = bases && s.offset % kElems == 0 && (s.count == 1 || (s.m * s.n) % kElems == 0);
    if (grouped[k])
      matrices_ += s.count;
    else
      stragglers_.push_back(s);
  }
  if (matrices_ == 0) path_ = NsPath::per_shape;
  if (path_ == NsPath::per_shape) return;
  VISION_CHECK(matrices_ <= std::numeric_limits<int>::max(), "newton_schulz: {} matrices exceed cuBLAS's sizes",
               matrices_);
  // Row-major R×C matrices are column-major C×R ones: each product is written for cuBLAS's column-major view (see
  // newton_schulz_cuda).
  for (size_t k = 0; k < shapes_.size(); ++k) {
    if (!grouped[k]) continue;
    const Shape& s = shapes_[k];
    const int M = static_cast<int>(s.m), N = static_cast<int>(s.n);
    group_size_.push_back(static_cast<int>(s.count));
    auto add = [](GemmArgs& g, cublasOperation_t ta, int m, int n, int k, int lda, int ldb, int ldc, float alpha,
                  float beta) {
      g.ta.push_back(ta);
      g.tb.push_back(CUBLAS_OP_N);
      g.m.push_back(m);
      g.n.push_back(n);
      g.k.push_back(k);
      g.lda.push_back(lda);
      g.ldb.push_back(ldb);
      g.ldc.push_back(ldc);
      g.alpha.push_back(alpha);
      g.beta.push_back(beta);
    };
    add(args_[0], CUBLAS_OP_T, M, M, N, N, N, M, 1.0f, 0.0f);                           // A = X·Xᵀ
    add(args_[1], CUBLAS_OP_N, M, M, M, M, M, M, kNewtonSchulzC, kNewtonSchulzB);      // B = c·A·A + b·B
    add(args_[2], CUBLAS_OP_N, N, M, M, N, M, N, 1.0f, kNewtonSchulzA);                // Y = B·X + a·Y
  }
  // The pointer tables: per table the A, B and C arrays of every matrix, shape by shape.
  const size_t P = static_cast<size_t>(matrices_);
  std::vector<const void*> host(5 * 3 * P);
  size_t i = 0;
  for (size_t k = 0; k < shapes_.size(); ++k) {
    if (!grouped[k]) continue;
    const Shape& s = shapes_[k];
    for (int64_t j = 0, xo = s.offset, ao = square_offsets[k]; j < s.count;
         ++j, ++i, xo += s.m * s.n, ao += square_stride(s.m)) {
      uint16_t* xs[2] = {x_ + xo, y_ + xo};
      uint16_t *as = a_ + ao, *bs = b_ + ao;
      auto set = [&](int table, const void* pa, const void* pb, const void* pc) {
        host[(static_cast<size_t>(table) * 3 + 0) * P + i] = pa;
        host[(static_cast<size_t>(table) * 3 + 1) * P + i] = pb;
        host[(static_cast<size_t>(table) * 3 + 2) * P + i] = pc;
      };
      set(0, xs[0], xs[0], as);         // A = X·Xᵀ from x
      set(1, xs[1], xs[1], as);         // from y
      set(2, as, as, bs);               // B = c·A·A + b·B
      set(3, xs[0], bs, xs[1]);         // y = B·x + a·y
      set(4, xs[1], bs, xs[0]);         // x = B·y + a·x
    }
  }
  pointers_ = upload(host.data(), host.size() * sizeof(void*));
}

bool GroupedNewtonSchulz::gemm(cublasHandle_t handle, int which, int parity) {
  const int table = which == 0 ? parity : which == 1 ? 2 : 3 + parity;
  const size_t P = static_cast<size_t>(matrices_);
  auto** base = static_cast<void**>(pointers_.get()) + static_cast<size_t>(table) * 3 * P;
  const GemmArgs& g = args_[which];
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      handle, g.ta.data(), g.tb.data(), g.m.data(), g.n.data(), g.k.data(), g.alpha.data(), base, CUDA_R_16BF,
      g.lda.data(), base + P, CUDA_R_16BF, g.ldb.data(), g.beta.data(), base + 2 * P, CUDA_R_16BF, g.ldc.data(),
      static_cast<int>(group_size_.size()), group_size_.data(), CUBLAS_COMPUTE_32F);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && !tried_) return false;
  VISION_CUBLAS_CHECK(status);
  tried_ = true;
  return true;
}

void GroupedNewtonSchulz::build_tiles(const Upload& upload, std::span<const int64_t> square_offsets) {
  std::vector<NsMatrix> matrices;
  std::vector<NsTile> square, rect;
  auto tiles_of = [](std::vector<NsTile>& into, int32_t matrix, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r += kNsTileM)
      for (int64_t c = 0; c < cols; c += kNsTileN)
        into.push_back({matrix, static_cast<int32_t>(r), static_cast<int32_t>(c), 0});
  };
  for (size_t k = 0; k < shapes_.size(); ++k) {
    const Shape& s = shapes_[k];
    for (int64_t j = 0, ao = square_offsets[k]; j < s.count; ++j, ao += square_stride(s.m)) {
      const auto index = static_cast<int32_t>(matrices.size());
      matrices.push_back({s.offset + j * s.m * s.n, ao, static_cast<int32_t>(s.m), static_cast<int32_t>(s.n)});
      tiles_of(square, index, s.m, s.m);
      tiles_of(rect, index, s.m, s.n);
    }
  }
  VISION_CHECK(matrices.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()) &&
                   square.size() + rect.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "newton_schulz: {} matrices in {} tiles exceed one launch's grid", matrices.size(),
               square.size() + rect.size());
  square_tiles_ = static_cast<int64_t>(square.size());
  rect_tiles_ = static_cast<int64_t>(rect.size());
  square.insert(square.end(), rect.begin(), rect.end());
  ns_matrices_ = upload(matrices.data(), matrices.size() * sizeof(NsMatrix));
  ns_tiles_ = upload(square.data(), square.size() * sizeof(NsTile));
}

uint16_t* GroupedNewtonSchulz::per_shape(std::span<const Shape> shapes, cublasHandle_t handle, cudaStream_t stream,
                                         int steps) {
  uint16_t* out = steps % 2 ? y_ : x_;
  for (const Shape& s : shapes)
    out = newton_schulz_cuda(handle, stream, x_ + s.offset, y_ + s.offset, a_, b_, s.count, s.m, s.n, steps) -
          s.offset;
  return out;
}

uint16_t* GroupedNewtonSchulz::run(cublasHandle_t handle, cudaStream_t stream, int steps) {
  VISION_CHECK(steps >= 0, "newton_schulz: {} steps", steps);
  if (shapes_.empty() || steps == 0) return x_;
  cudaStream_t bound = nullptr;
  VISION_CUBLAS_CHECK(cublasGetStream(handle, &bound));
  VISION_CHECK(bound == stream, "newton_schulz: the cuBLAS handle is bound to another stream than the one given");
  if (path_ == NsPath::kernel) {
    const auto* matrices = static_cast<const NsMatrix*>(ns_matrices_.get());
    const auto* tiles = static_cast<const NsTile*>(ns_tiles_.get());
    for (int it = 0; it < steps; ++it) {
      const uint16_t* src = it & 1 ? y_ : x_;
      uint16_t* dst = it & 1 ? x_ : y_;
      launch_ns_gemm(stream, 0, matrices, tiles, square_tiles_, src, dst, a_, b_);
      launch_ns_gemm(stream, 1, matrices, tiles, square_tiles_, src, dst, a_, b_);
      launch_ns_gemm(stream, 2, matrices, tiles + square_tiles_, rect_tiles_, src, dst, a_, b_);
    }
    return steps % 2 ? y_ : x_;
  }
  if (path_ == NsPath::per_shape) return per_shape(shapes_, handle, stream, steps);
  const size_t x_bytes = static_cast<size_t>(elements_) * 2, a_bytes = static_cast<size_t>(square_) * 2;
  for (int it = 0; it < steps; ++it) {
    const int p = it & 1;
    uint16_t *x = p ? y_ : x_, *y = p ? x_ : y_;
    if (!gemm(handle, 0, p)) {  // the first call: cuBLAS has no grouped bf16 GEMM here
      path_ = NsPath::per_shape;
      return per_shape(shapes_, handle, stream, steps);
    }
    cuda::mark_written_by_library(stream, a_, a_bytes);
    VISION_CUDA_CHECK(cudaMemcpyAsync(b_, a_, a_bytes, cudaMemcpyDeviceToDevice, stream));
    gemm(handle, 1, p);
    cuda::mark_written_by_library(stream, b_, a_bytes);
    VISION_CUDA_CHECK(cudaMemcpyAsync(y, x, x_bytes, cudaMemcpyDeviceToDevice, stream));
    gemm(handle, 2, p);
    cuda::mark_written_by_library(stream, y, x_bytes);
  }
  // The stragglers' matrices were only copied between the buffers, so x still holds their input.
  return per_shape(stragglers_, handle, stream, steps);
}

}  // namespace vision::train
