#include "vision/ops/attention/flash_attn2.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "vision/core/error.h"
#include "vision/cpu/dnnl_context.h"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/ops/attention/flash_attn2_cuda.h"
#endif

namespace vision::ops::attention {

namespace {

using core::DType;
using core::Shape;

// CPU block sizes: query rows and key rows per block (the working set of a task stays in L2 for d ≤ 128).
constexpr int kBlockM = 64;
constexpr int kBlockN = 64;

// Four f32 lanes (GCC/Clang vector extension: SSE on x86-64, NEON on arm64, plain code elsewhere).
using V4 = float __attribute__((vector_size(16)));
using V4i = int32_t __attribute__((vector_size(16)));

inline V4 load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, V4 v) { std::memcpy(p, &v, sizeof v); }

// Register tile of gemm(): R rows of C times 8 columns, kept in registers across the depth loop.
template <int R>
inline void gemm_rows(const float* __restrict a, int64_t lda, const float* __restrict b, int64_t ldb,
                      float* __restrict c, int64_t ldc, int n, int depth, bool accumulate) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    V4 acc[R][2];
    for (int r = 0; r < R; ++r) {
      acc[r][0] = accumulate ? load4(c + r * ldc + j) : V4{};
      acc[r][1] = accumulate ? load4(c + r * ldc + j + 4) : V4{};
    }
    for (int k = 0; k < depth; ++k) {
      const V4 b0 = load4(b + k * ldb + j), b1 = load4(b + k * ldb + j + 4);
      for (int r = 0; r < R; ++r) {
        const float ar = a[r * lda + k];
        acc[r][0] += ar * b0;
        acc[r][1] += ar * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      store4(c + r * ldc + j, acc[r][0]);
      store4(c + r * ldc + j + 4, acc[r][1]);
    }
  }
  for (; j + 4 <= n; j += 4) {
    V4 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = accumulate ? load4(c + r * ldc + j) : V4{};
    for (int k = 0; k < depth; ++k) {
      const V4 b0 = load4(b + k * ldb + j);
      for (int r = 0; r < R; ++r) acc[r] += a[r * lda + k] * b0;
    }
    for (int r = 0; r < R; ++r) store4(c + r * ldc + j, acc[r]);
  }
  for (; j < n; ++j)
    for (int r = 0; r < R; ++r) {
      float s = accumulate ? c[r * ldc + j] : 0.0f;
      for (int k = 0; k < depth; ++k) s += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = s;
    }
}

// exp on four lanes: Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, a degree-7 Taylor polynomial for e^r and
// 2^n from the exponent bits. Relative error < 2 ulp on [−87, 88]; 0 below −87 (including −inf).
inline V4 exp4(V4 x) {
  const V4i tiny = x < -87.0f;
  x = x < 88.0f ? x : 88.0f;
  x = x > -87.0f ? x : -87.0f;
  constexpr float kShift = 12582912.0f;  // 1.5·2²³: adding it rounds to the nearest integer
  const V4 t = x * 1.44269504088896341f + kShift;
  const V4 n = t - kShift;
  const V4 r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  V4 p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const V4i e = (((V4i)t - 0x4B400000) + 127) << 23;  // 0x4B400000 = bits of kShift: (V4i)t − that = n
  return (V4)((V4i)(p * (V4)e) & ~tiny);
}

// x[j] = exp(x[j]) for j < n; returns Σ x[j].
float exp_inplace_sum(float* x, int n) {
  V4 acc{};
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const V4 e = exp4(load4(x + j));
    store4(x + j, e);
    acc += e;
  }
  float sum = acc[0] + acc[1] + acc[2] + acc[3];
  if (j < n) {
    const float ninf = -std::numeric_limits<float>::infinity();
    V4 v{ninf, ninf, ninf, ninf};
    std::memcpy(&v, x + j, sizeof(float) * static_cast<size_t>(n - j));
    v = exp4(v);
    std::memcpy(x + j, &v, sizeof(float) * static_cast<size_t>(n - j));
    sum += v[0] + v[1] + v[2] + v[3];
  }
  return sum;
}

// C[m×n] (row stride ldc) = A[m×depth] · B[depth×n], or C += A·B when accumulate. f32 accumulation.
void gemm(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n, int depth,
          bool accumulate) {
  int i = 0;
  for (; i + 4 <= m; i += 4) gemm_rows<4>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, depth, accumulate);
  for (; i < m; ++i) gemm_rows<1>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, depth, accumulate);
}

// dst[c][j] = src[j][c] for j < rows, c < cols (dst row stride ld_dst).
void transpose(const float* __restrict src, int rows, int cols, float* __restrict dst, int ld_dst) {
  for (int j = 0; j < rows; ++j)
    for (int c = 0; c < cols; ++c) dst[c * ld_dst + j] = src[j * cols + c];
}

int block_count(int64_t n, int block) { return static_cast<int>((n + block - 1) / block); }

// Problems smaller than this many multiply-adds run on the calling thread: waking a team costs more than they do.
bool worth_threading(const AttentionSizes& s) {
  return static_cast<double>(s.batch_heads) * static_cast<double>(s.n_q) * static_cast<double>(s.n_k) *
             static_cast<double>(s.d_qk + s.d_v) >
         double{1 << 18};
}

void forward_impl(const float* q, const float* k, const float* v, float* o, float* lse, const AttentionSizes& s,
                  float scale) {
  const int dqk = static_cast<int>(s.d_qk), dv = static_cast<int>(s.d_v);
  const int mb = block_count(s.n_q, kBlockM), nb = block_count(s.n_k, kBlockN);
  const int64_t tasks = s.batch_heads * mb;
#pragma omp parallel if (worth_threading(s))
  {
    std::vector<float> kt(static_cast<size_t>(dqk) * kBlockN), sc(static_cast<size_t>(kBlockM) * kBlockN),
        acc(static_cast<size_t>(kBlockM) * dv), row_max(kBlockM), row_sum(kBlockM);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / mb;
      const int64_t q0 = (t % mb) * int64_t{kBlockM};
      const int rows = static_cast<int>(std::min<int64_t>(kBlockM, s.n_q - q0));
      const float* qb = q + (bh * s.n_q + q0) * dqk;
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<float>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      for (int kb = 0; kb < nb; ++kb) {
        const int64_t k0 = int64_t{kb} * kBlockN;
        const int cols = static_cast<int>(std::min<int64_t>(kBlockN, s.n_k - k0));
        transpose(k + (bh * s.n_k + k0) * dqk, cols, dqk, kt.data(), kBlockN);
        gemm(qb, dqk, kt.data(), kBlockN, sc.data(), kBlockN, rows, cols, dqk, false);
        for (int i = 0; i < rows; ++i) {
          float* si = sc.data() + i * kBlockN;
          float mx = row_max[i];
          for (int j = 0; j < cols; ++j) {
            si[j] *= scale;
            mx = std::max(mx, si[j]);
          }
          const float alpha = std::exp(row_max[i] - mx);  // 0 on the first block (row_max = −inf)
          for (int j = 0; j < cols; ++j) si[j] -= mx;
          row_sum[i] = row_sum[i] * alpha + exp_inplace_sum(si, cols);
          row_max[i] = mx;
          float* ai = acc.data() + i * dv;
          for (int c = 0; c < dv; ++c) ai[c] *= alpha;
        }
        gemm(sc.data(), kBlockN, v + (bh * s.n_k + k0) * dv, dv, acc.data(), dv, rows, dv, cols, true);
      }
      for (int i = 0; i < rows; ++i) {
        const float inv = 1.0f / row_sum[i];
        float* oi = o + (bh * s.n_q + q0 + i) * dv;
        const float* ai = acc.data() + i * dv;
        for (int c = 0; c < dv; ++c) oi[c] = ai[c] * inv;
        if (lse) lse[bh * s.n_q + q0 + i] = row_max[i] + std::log(row_sum[i]);
      }
    }
  }
}

void preprocess_impl(const float* o, const float* grad_o, float* delta, int64_t rows, int64_t dv) {
#pragma omp parallel for schedule(static) if (rows * dv > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = o + r * dv;
    const float* b = grad_o + r * dv;
    float sum = 0.0f;
    for (int64_t c = 0; c < dv; ++c) sum += a[c] * b[c];
    delta[r] = sum;
  }
}

void dq_impl(const float* q, const float* k, const float* v, const float* grad_o, const float* lse,
             const float* delta, float* grad_q, const AttentionSizes& s, float scale) {
  const int dqk = static_cast<int>(s.d_qk), dv = static_cast<int>(s.d_v);
  const int mb = block_count(s.n_q, kBlockM), nb = block_count(s.n_k, kBlockN);
  const int64_t tasks = s.batch_heads * mb;
#pragma omp parallel if (worth_threading(s))
  {
    std::vector<float> kt(static_cast<size_t>(dqk) * kBlockN), vt(static_cast<size_t>(dv) * kBlockN),
        p(static_cast<size_t>(kBlockM) * kBlockN), dp(static_cast<size_t>(kBlockM) * kBlockN),
        acc(static_cast<size_t>(kBlockM) * dqk);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / mb;
      const int64_t q0 = (t % mb) * int64_t{kBlockM};
      const int rows = static_cast<int>(std::min<int64_t>(kBlockM, s.n_q - q0));
      const float* qb = q + (bh * s.n_q + q0) * dqk;
      const float* gob = grad_o + (bh * s.n_q + q0) * dv;
      const float* lseb = lse + bh * s.n_q + q0;
      const float* db = delta + bh * s.n_q + q0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int kb = 0; kb < nb; ++kb) {
        const int64_t k0 = int64_t{kb} * kBlockN;
        const int cols = static_cast<int>(std::min<int64_t>(kBlockN, s.n_k - k0));
        const float* kblk = k + (bh * s.n_k + k0) * dqk;
        transpose(kblk, cols, dqk, kt.data(), kBlockN);
        transpose(v + (bh * s.n_k + k0) * dv, cols, dv, vt.data(), kBlockN);
        gemm(qb, dqk, kt.data(), kBlockN, p.data(), kBlockN, rows, cols, dqk, false);
        gemm(gob, dv, vt.data(), kBlockN, dp.data(), kBlockN, rows, cols, dv, false);
        for (int i = 0; i < rows; ++i) {
          float* pi = p.data() + i * kBlockN;
          float* dpi = dp.data() + i * kBlockN;
          const float l = lseb[i], d = db[i];
          for (int j = 0; j < cols; ++j) pi[j] = pi[j] * scale - l;
          exp_inplace_sum(pi, cols);
          for (int j = 0; j < cols; ++j) dpi[j] = pi[j] * (dpi[j] - d);  // dS
        }
        gemm(dp.data(), kBlockN, kblk, dqk, acc.data(), dqk, rows, dqk, cols, true);
      }
      float* out = grad_q + (bh * s.n_q + q0) * dqk;
      for (int64_t i = 0; i < int64_t{rows} * dqk; ++i) out[i] = acc[static_cast<size_t>(i)] * scale;
    }
  }
}

void dkv_impl(const float* q, const float* k, const float* v, const float* grad_o, const float* lse,
              const float* delta, float* grad_k, float* grad_v, const AttentionSizes& s, float scale) {
  const int dqk = static_cast<int>(s.d_qk), dv = static_cast<int>(s.d_v);
  const int mb = block_count(s.n_q, kBlockM), nb = block_count(s.n_k, kBlockN);
  const int64_t tasks = s.batch_heads * nb;
#pragma omp parallel if (worth_threading(s))
  {
    std::vector<float> qt(static_cast<size_t>(dqk) * kBlockM), got(static_cast<size_t>(dv) * kBlockM),
        pt(static_cast<size_t>(kBlockN) * kBlockM), dpt(static_cast<size_t>(kBlockN) * kBlockM),
        acc_k(static_cast<size_t>(kBlockN) * dqk), acc_v(static_cast<size_t>(kBlockN) * dv);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / nb;
      const int64_t k0 = (t % nb) * int64_t{kBlockN};
      const int cols = static_cast<int>(std::min<int64_t>(kBlockN, s.n_k - k0));
      const float* kblk = k + (bh * s.n_k + k0) * dqk;
      const float* vblk = v + (bh * s.n_k + k0) * dv;
      std::fill(acc_k.begin(), acc_k.end(), 0.0f);
      std::fill(acc_v.begin(), acc_v.end(), 0.0f);
      for (int qb = 0; qb < mb; ++qb) {
        const int64_t q0 = int64_t{qb} * kBlockM;
        const int rows = static_cast<int>(std::min<int64_t>(kBlockM, s.n_q - q0));
        const float* qblk = q + (bh * s.n_q + q0) * dqk;
        const float* goblk = grad_o + (bh * s.n_q + q0) * dv;
        const float* lseb = lse + bh * s.n_q + q0;
        const float* db = delta + bh * s.n_q + q0;
        transpose(qblk, rows, dqk, qt.data(), kBlockM);
        gemm(kblk, dqk, qt.data(), kBlockM, pt.data(), kBlockM, cols, rows, dqk, false);  // Sᵀ
        for (int j = 0; j < cols; ++j) {
          float* pj = pt.data() + j * kBlockM;
          for (int i = 0; i < rows; ++i) pj[i] = pj[i] * scale - lseb[i];
          exp_inplace_sum(pj, rows);
        }
        if (grad_v) gemm(pt.data(), kBlockM, goblk, dv, acc_v.data(), dv, cols, dv, rows, true);
        if (!grad_k) continue;
        transpose(goblk, rows, dv, got.data(), kBlockM);
        gemm(vblk, dv, got.data(), kBlockM, dpt.data(), kBlockM, cols, rows, dv, false);  // dPᵀ
        for (int j = 0; j < cols; ++j) {
          const float* pj = pt.data() + j * kBlockM;
          float* dj = dpt.data() + j * kBlockM;
          for (int i = 0; i < rows; ++i) dj[i] = pj[i] * (dj[i] - db[i]);  // dSᵀ
        }
        gemm(dpt.data(), kBlockM, qblk, dqk, acc_k.data(), dqk, cols, dqk, rows, true);
      }
      if (grad_k) {
        float* out = grad_k + (bh * s.n_k + k0) * dqk;
        for (int64_t i = 0; i < int64_t{cols} * dqk; ++i) out[i] = acc_k[static_cast<size_t>(i)] * scale;
      }
      if (grad_v) std::copy_n(acc_v.data(), int64_t{cols} * dv, grad_v + (bh * s.n_k + k0) * dv);
    }
  }
}

void check_f32_host(const Tensor& t, const char* what, const Shape& expected) {
  VISION_CHECK(t.defined(), "flash_attention2 (CPU): {} is undefined", what);
  VISION_CHECK(t.dtype() == DType::f32 && t.device() == core::Device::cpu,
               "flash_attention2 (CPU): {} must be an f32 host tensor, got {}", what, t.str());
  VISION_CHECK(t.shape() == expected, "flash_attention2 (CPU): {} must have shape {}, got {}", what, expected.str(),
               t.shape().str());
}

AttentionSizes checked_sizes(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v}) VISION_CHECK(t->defined(), "flash_attention2 (CPU): undefined input");
  const AttentionSizes s = attention_sizes(q.shape(), k.shape(), v.shape());
  check_f32_host(q, "q", q.shape());
  check_f32_host(k, "k", k.shape());
  check_f32_host(v, "v", v.shape());
  return s;
}

}  // namespace

AttentionSizes attention_sizes(const Shape& q, const Shape& k, const Shape& v) {
  VISION_CHECK(q.rank() == 3 && k.rank() == 3 && v.rank() == 3,
               "flash_attention2: q, k and v must be [BH, N, d] tensors, got q {}, k {}, v {}", q.str(), k.str(),
               v.str());
  VISION_CHECK(q.is_concrete() && k.is_concrete() && v.is_concrete(),
               "flash_attention2: shapes must be concrete here, got q {}, k {}, v {}", q.str(), k.str(), v.str());
  VISION_CHECK(q[0] == k[0] && q[0] == v[0], "flash_attention2: q {}, k {} and v {} differ in BH (dimension 0)",
               q.str(), k.str(), v.str());
  VISION_CHECK(k[1] == v[1], "flash_attention2: k {} and v {} differ in the number of keys (dimension 1)", k.str(),
               v.str());
  VISION_CHECK(q[2] == k[2], "flash_attention2: q {} and k {} differ in head size (dimension 2)", q.str(), k.str());
  VISION_CHECK(q[1] > 0 && k[1] > 0 && q[2] > 0 && v[2] > 0,
               "flash_attention2: sequence lengths and head sizes must be positive, got q {}, k {}, v {}", q.str(),
               k.str(), v.str());
  return AttentionSizes{q[0], q[1], k[1], q[2], v[2]};
}

void flash_attention2_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o,
                                  const Tensor& lse) {
  const AttentionSizes s = checked_sizes(q, k, v);
  check_f32_host(o, "o", Shape{s.batch_heads, s.n_q, s.d_v});
  if (lse.defined()) check_f32_host(lse, "lse", Shape{s.batch_heads, s.n_q});
  forward_impl(q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(),
               lse.defined() ? lse.data<float>() : nullptr, s, scale);
}

void flash_attention2_backward_preprocess_cpu(const Tensor& o, const Tensor& grad_o, const Tensor& delta) {
  VISION_CHECK(o.defined() && o.rank() == 3, "flash_attention2 (CPU): o must be [BH, Nq, d_v], got {}",
               o.defined() ? o.shape().str() : std::string("undefined"));
  check_f32_host(o, "o", o.shape());
  check_f32_host(grad_o, "grad_o", o.shape());
  check_f32_host(delta, "delta", Shape{o.dim(0), o.dim(1)});
  preprocess_impl(o.data<float>(), grad_o.data<float>(), delta.data<float>(), o.dim(0) * o.dim(1), o.dim(2));
}

void flash_attention2_backward_dq_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_o,
                                      const Tensor& lse, const Tensor& delta, float scale, const Tensor& grad_q) {
  const AttentionSizes s = checked_sizes(q, k, v);
  check_f32_host(grad_o, "grad_o", Shape{s.batch_heads, s.n_q, s.d_v});
  check_f32_host(lse, "lse", Shape{s.batch_heads, s.n_q});
  check_f32_host(delta, "delta", Shape{s.batch_heads, s.n_q});
  check_f32_host(grad_q, "grad_q", q.shape());
  dq_impl(q.data<float>(), k.data<float>(), v.data<float>(), grad_o.data<float>(), lse.data<float>(),
          delta.data<float>(), grad_q.data<float>(), s, scale);
}

void flash_attention2_backward_dkv_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_o,
                                       const Tensor& lse, const Tensor& delta, float scale, const Tensor& grad_k,
                                       const Tensor& grad_v) {
  const AttentionSizes s = checked_sizes(q, k, v);
  check_f32_host(grad_o, "grad_o", Shape{s.batch_heads, s.n_q, s.d_v});
  check_f32_host(lse, "lse", Shape{s.batch_heads, s.n_q});
  check_f32_host(delta, "delta", Shape{s.batch_heads, s.n_q});
  if (grad_k.defined()) check_f32_host(grad_k, "grad_k", k.shape());
  if (grad_v.defined()) check_f32_host(grad_v, "grad_v", v.shape());
  if (!grad_k.defined() && !grad_v.defined()) return;
  dkv_impl(q.data<float>(), k.data<float>(), v.data<float>(), grad_o.data<float>(), lse.data<float>(),
           delta.data<float>(), grad_k.defined() ? grad_k.data<float>() : nullptr,
           grad_v.defined() ? grad_v.data<float>() : nullptr, s, scale);
}

// ---------------------------------------------------------------------------------------------------------------
// GPU kernel configuration

std::string_view flash_attention2_kernel_label(FlashAttention2Kernel kernel) {
  switch (kernel) {
    case FlashAttention2Kernel::forward: return "forward";
    case FlashAttention2Kernel::backward_preprocess: return "backward_preprocess";
    case FlashAttention2Kernel::backward_dq: return "backward_dq";
    case FlashAttention2Kernel::backward_dkv: return "backward_dkv";
    case FlashAttention2Kernel::backward_dkv_dq: return "backward_dkv_dq";
    case FlashAttention2Kernel::backward_dq_convert: return "backward_dq_convert";
    case FlashAttention2Kernel::forward_sm90: return "forward_sm90";
    case FlashAttention2Kernel::backward_sm90: return "backward_sm90";
  }
  return "?";
}

bool flash_attention2_kernel_exists(FlashAttention2Kernel kernel, DType dtype, int d, int d_v) {
  check_flash_attention2_gpu_sizes(dtype, d, d_v);
  switch (kernel) {
    case FlashAttention2Kernel::backward_dkv_dq:
    case FlashAttention2Kernel::backward_dq_convert: return dtype != DType::f32;
    case FlashAttention2Kernel::forward_sm90:
    case FlashAttention2Kernel::backward_sm90:
      return dtype != DType::f32 && (d_v == 16 || d_v == 32 || d_v == 64 || d_v == 128);
    default: return true;
  }
}

void check_flash_attention2_gpu_sizes(DType dtype, int64_t d, int64_t d_v) {
  VISION_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
               "flash_attention2 (GPU): dtype {} is not supported (f32, f16 or bf16)", core::dtype_name(dtype));
  VISION_CHECK(d == 16 || d == 32 || d == 64 || d == 128,
               "flash_attention2 (GPU): head size {} is not supported (16, 32, 64 or 128; the CPU path takes any)", d);
  VISION_CHECK(d_v % 16 == 0 && d_v >= 16 && d_v <= 256,
               "flash_attention2 (GPU): value head size {} is not supported (a multiple of 16 up to 256; the CPU path "
               "takes any)",
               d_v);
}

namespace {

// The rows one warp of the preprocessing kernel covers (fa2::PreprocessShape in flash_attn2.cuh): a row is
// d_v · size / 16 chunks of 16 bytes, one per lane when they are a power of two up to 32, else one row per warp.
int preprocess_rows_per_warp(DType dtype, int d_v) {
  const int chunks = d_v * static_cast<int>(core::dtype_size(dtype)) / 16;
  return chunks <= 32 && (chunks & (chunks - 1)) == 0 ? 32 / chunks : 1;
}

// VISION_FA2_TILES="forward_sm90=64,128,4;backward_dkv_dq=64,128,8" replaces the table's tiles of the kernels it
// names, for every dtype and size (a tuning aid for bench_attention; read once per process; the kernel names and
// shared-memory sizes follow, and check_tiles validates them at first use).
const std::vector<std::pair<std::string, FlashAttention2Tiles>>& tile_overrides() {
  static const auto overrides = [] {
    std::vector<std::pair<std::string, FlashAttention2Tiles>> out;
    const char* env = std::getenv("VISION_FA2_TILES");
    if (!env) return out;
    std::string spec(env);
    size_t pos = 0;
    while (pos < spec.size()) {
      const size_t end = std::min(spec.find(';', pos), spec.size());
      const std::string item = spec.substr(pos, end - pos);
      pos = end + 1;
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      FlashAttention2Tiles t;
      VISION_CHECK(eq != std::string::npos && std::sscanf(item.c_str() + eq + 1, "%d,%d,%d", &t.block_m, &t.block_n,
                                                          &t.warps) == 3,
                   "VISION_FA2_TILES: '{}' is not kernel=block_m,block_n,warps", item);
      out.emplace_back(item.substr(0, eq), t);
    }
    return out;
  }();
  return overrides;
}

}  // namespace

FlashAttention2Tiles flash_attention2_tiles(FlashAttention2Kernel kernel, DType dtype, int d, int d_v) {
  check_flash_attention2_gpu_sizes(dtype, d, d_v);
  for (const auto& [label, tiles] : tile_overrides())
    if (label == flash_attention2_kernel_label(kernel)) return tiles;
  const bool f32 = dtype == DType::f32;
  switch (kernel) {
    case FlashAttention2Kernel::forward:
      return f32 ? FlashAttention2Tiles{d_v >= 128 ? 32 : 64, 32, 4} : FlashAttention2Tiles{64, d_v >= 256 ? 32 : 64, 4};
    case FlashAttention2Kernel::backward_preprocess: return {8 * preprocess_rows_per_warp(dtype, d_v), 0, 8};
    case FlashAttention2Kernel::backward_dq:
      return f32 ? FlashAttention2Tiles{32, 32, 4} : FlashAttention2Tiles{64, d + d_v >= 384 ? 32 : 64, 4};
    case FlashAttention2Kernel::backward_dkv:
    case FlashAttention2Kernel::backward_dkv_dq:
      return f32 ? FlashAttention2Tiles{32, d + d_v >= 384 ? 16 : 32, 4}
                 : FlashAttention2Tiles{d + d_v <= 128 ? 64 : (d + d_v <= 256 ? 32 : 16), 64, 4};
    case FlashAttention2Kernel::backward_dq_convert: return {4 * 32 * 8, 0, 8};
    // Measured on the H200 (bench/attention/NOTES.md, v2): one warpgroup with 64-key steps is best up to d = 64,
    // two warpgroups with 128-key steps at d = 128.
    case FlashAttention2Kernel::forward_sm90:
      return d >= 128 ? FlashAttention2Tiles{128, 128, 8} : FlashAttention2Tiles{64, d >= 64 ? 128 : 64, 4};
    // Measured on the H200 (NOTES.md, v4): one warpgroup of 64 keys per CTA at d ≤ 32 (three CTAs per SM), three at
    // d = 64 and two at d = 128 (K/V loads shared, dQ partials summed in shared memory before the atomics).
    case FlashAttention2Kernel::backward_sm90:
      return d >= 128  ? FlashAttention2Tiles{64, 128, 8}
             : d >= 64 ? FlashAttention2Tiles{64, 192, 12}
                       : FlashAttention2Tiles{64, 64, 4};
  }
  fail("flash_attention2: unknown kernel");
}

namespace {

std::string_view cuda_type_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float";
    case DType::f16: return "__half";
    case DType::bf16: return "__nv_bfloat16";
    default: fail("flash_attention2 (GPU): dtype {} is not supported", core::dtype_name(dtype));
  }
}

void check_tiles(FlashAttention2Kernel kernel, DType dtype, int d_v, FlashAttention2Tiles t) {
  const bool f32 = dtype == DType::f32;
  const int w = t.warps;
  VISION_CHECK(w >= 1 && w <= 32, "flash_attention2 (GPU): {} warps per CTA", w);
  if (kernel == FlashAttention2Kernel::backward_preprocess) {
    VISION_CHECK(t.block_m == w * preprocess_rows_per_warp(dtype, d_v),
                 "flash_attention2 preprocess: block_m must be warps · {} (the rows a warp covers at d_v = {})",
                 preprocess_rows_per_warp(dtype, d_v), d_v);
    return;
  }
  if (kernel == FlashAttention2Kernel::backward_dq_convert) {
    VISION_CHECK(t.block_m == 4 * 32 * w, "flash_attention2 dq_convert: block_m must be 4 · 32 · warps");
    return;
  }
  if (kernel == FlashAttention2Kernel::backward_sm90) {
    VISION_CHECK(!f32 && (w == 4 || w == 8 || w == 12) && t.block_m == 64 && t.block_n == 16 * w,
                 "flash_attention2 backward_sm90: tiles {}x{} with {} warps (64 queries per step, 1 to 3 warpgroups "
                 "of 64 keys, 16-bit types)",
                 t.block_m, t.block_n, w);
    return;
  }
  if (kernel == FlashAttention2Kernel::forward_sm90) {
    VISION_CHECK(!f32 && (w == 4 || w == 8 || w == 12) && t.block_m == 16 * w && (t.block_n == 64 || t.block_n == 128),
                 "flash_attention2 forward_sm90: tiles {}x{} with {} warps (1 to 3 warpgroups of 64 query rows, "
                 "block_n 64 or 128, 16-bit types)",
                 t.block_m, t.block_n, w);
    return;
  }
  // The block a CTA owns, and the one it steps through.
  const bool dkv = kernel == FlashAttention2Kernel::backward_dkv || kernel == FlashAttention2Kernel::backward_dkv_dq;
  const int own = dkv ? t.block_n : t.block_m, step = dkv ? t.block_m : t.block_n;
  if (f32)
    VISION_CHECK(own > 0 && own % (2 * w) == 0 && step > 0 && step % 16 == 0,
                 "flash_attention2 f32 {}: tiles {}x{} with {} warps (owned block a multiple of 2·warps, the other "
                 "of 16)",
                 flash_attention2_kernel_label(kernel), t.block_m, t.block_n, w);
  else
    VISION_CHECK(own == 16 * w && step > 0 && step % 16 == 0,
                 "flash_attention2 {} {}: tiles {}x{} with {} warps (owned block = 16·warps, the other a multiple "
                 "of 16)",
                 core::dtype_name(dtype), flash_attention2_kernel_label(kernel), t.block_m, t.block_n, w);
}

}  // namespace

std::string flash_attention2_kernel_name(FlashAttention2Kernel kernel, DType dtype, int d, int d_v,
                                         FlashAttention2Tiles t) {
  check_flash_attention2_gpu_sizes(dtype, d, d_v);
  check_tiles(kernel, dtype, d_v, t);
  constexpr std::string_view ns = "vision::ops::attention::";
  VISION_CHECK(flash_attention2_kernel_exists(kernel, dtype, d, d_v),
               "flash_attention2 {}: no kernel for {} with d_v = {}", flash_attention2_kernel_label(kernel),
               core::dtype_name(dtype), d_v);
  if (kernel == FlashAttention2Kernel::backward_preprocess)
    return fmt::format("{}flash_attention2_backward_preprocess<{}, {}, {}>", ns, cuda_type_name(dtype), d_v, t.warps);
  if (kernel == FlashAttention2Kernel::backward_dq_convert)
    return fmt::format("{}flash_attention2_backward_dq_convert<{}, {}>", ns, cuda_type_name(dtype), t.warps);
  if (kernel == FlashAttention2Kernel::forward_sm90)
    return fmt::format("{}flash_attention2_forward_sm90<{}, {}, {}, {}, {}>", ns, cuda_type_name(dtype), d, d_v,
                       t.block_n, t.warps / 4);
  if (kernel == FlashAttention2Kernel::backward_sm90)
    return fmt::format("{}flash_attention2_backward_sm90<{}, {}, {}, {}>", ns, cuda_type_name(dtype), d, d_v,
                       t.warps / 4);
  return fmt::format("{}flash_attention2_{}<{}, {}, {}, {}, {}, {}>", ns, flash_attention2_kernel_label(kernel),
                     cuda_type_name(dtype), d, d_v, t.block_m, t.block_n, t.warps);
}

size_t flash_attention2_smem_bytes(FlashAttention2Kernel kernel, DType dtype, int d, int dv, FlashAttention2Tiles t) {
  check_flash_attention2_gpu_sizes(dtype, d, dv);
  check_tiles(kernel, dtype, dv, t);
  const size_t bm = static_cast<size_t>(t.block_m), bn = static_cast<size_t>(t.block_n);
  const size_t D = static_cast<size_t>(d), DV = static_cast<size_t>(dv);
  const bool f32 = dtype == DType::f32;
  switch (kernel) {
    case FlashAttention2Kernel::forward:
      return f32 ? (bm * (D + 1) + bn * (D + 1) + bn * (DV + 1) + bm * (bn + 1)) * 4
                 : (bm * (D + 8) + bn * (D + 8) + bn * (DV + 8)) * 2;
    case FlashAttention2Kernel::backward_preprocess: return 0;
    case FlashAttention2Kernel::backward_dq:
      return f32 ? (bm * (D + 1) + bm * (DV + 1) + bn * (D + 1) + bn * (DV + 1) + bm * (bn + 1)) * 4
                 : (bm * (D + 8) + bm * (DV + 8) + 2 * (bn * (D + 8) + bn * (DV + 8))) * 2;
    case FlashAttention2Kernel::backward_dkv:
      return f32 ? (bn * (D + 1) + bn * (DV + 1) + bm * (D + 1) + bm * (DV + 1) + 2 * bn * (bm + 1) + 2 * bm) * 4
                 : (bn * (D + 8) + bn * (DV + 8) + 2 * (bm * (D + 8) + bm * (DV + 8))) * 2 + 2 * 2 * bm * 4;
    case FlashAttention2Kernel::backward_dkv_dq:  // the 16-bit dK/dV layout, plus the dSᵀ tile for dQ
      return flash_attention2_smem_bytes(FlashAttention2Kernel::backward_dkv, dtype, d, dv, t) + bn * (bm + 8) * 2;
    case FlashAttention2Kernel::backward_dq_convert: return 0;
    case FlashAttention2Kernel::forward_sm90: return (bm * D + 2 * bn * (D + DV)) * 2;
    case FlashAttention2Kernel::backward_sm90:
      return (bn * (D + DV) + 2 * bm * (D + DV) + bn * bm) * 2 + 2 * 2 * bm * 4 +
             (t.warps == 8 ? 2 * 64 * (D / 2 + 8) : t.warps == 12 ? 3 * 64 * (D + 8) : 0) * 4;
  }
  fail("flash_attention2: unknown kernel");
}

FlashAttention2Launch flash_attention2_launch(FlashAttention2Kernel kernel, DType dtype, const AttentionSizes& s,
                                              FlashAttention2Tiles t) {
  VISION_CHECK(s.batch_heads >= 1 && s.batch_heads <= 65535 && s.n_q >= 1 && s.n_k >= 1 &&
                   s.n_q <= std::numeric_limits<int>::max() && s.n_k <= std::numeric_limits<int>::max(),
               "flash_attention2 (GPU): BH = {} (1..65535), n_q = {}, n_k = {} (positive) are out of range",
               s.batch_heads, s.n_q, s.n_k);
  FlashAttention2Launch l;
  l.smem_bytes = flash_attention2_smem_bytes(kernel, dtype, static_cast<int>(s.d_qk), static_cast<int>(s.d_v), t);
  l.threads = static_cast<unsigned>(t.warps) * 32u;
  auto blocks = [](int64_t n, int b) { return static_cast<unsigned>((n + b - 1) / b); };
  switch (kernel) {
    case FlashAttention2Kernel::forward:
    case FlashAttention2Kernel::forward_sm90:
    case FlashAttention2Kernel::backward_dq:
      l.grid = {blocks(s.n_q, t.block_m), static_cast<unsigned>(s.batch_heads), 1};
      break;
    case FlashAttention2Kernel::backward_dkv:
    case FlashAttention2Kernel::backward_dkv_dq:
    case FlashAttention2Kernel::backward_sm90:
      l.grid = {blocks(s.n_k, t.block_n), static_cast<unsigned>(s.batch_heads), 1};
      break;
    case FlashAttention2Kernel::backward_dq_convert: {
      const int64_t n = s.batch_heads * s.n_q * s.d_qk;
      VISION_CHECK(n <= std::numeric_limits<int32_t>::max(),
                   "flash_attention2 dq_convert: BH · n_q · d = {} is out of range", n);
      l.grid = {blocks(n, t.block_m), 1, 1};
      break;
    }
    case FlashAttention2Kernel::backward_preprocess:
      l.grid = {blocks(s.batch_heads * s.n_q, t.block_m), 1, 1};
      break;
  }
  return l;
}

// ---------------------------------------------------------------------------------------------------------------
// Graph op

namespace {

// Inference on the CPU (no lse to keep): the attention as three oneDNN primitives per chunk of (b, h) pairs —
// S = scale·Q·Kᵀ (a batched matmul reading K transposed through its strides), the row softmax in place, O = P·V —
// JIT-compiled for the machine's vector ISA, where the twin's blocked loop (flash_attention2_forward_cpu) is portable
// 4-lane code. The scores S of a chunk live in the op's workspace: at most kScoresBudget floats; a problem whose one
// (b, h) needs more keeps the blocked loop, which needs none.
constexpr int64_t kScoresBudget = int64_t{1} << 22;  // 16 MiB of f32 scores

int64_t scores_chunk(const AttentionSizes& s) {
  const int64_t per = s.n_q * s.n_k;
  if (per <= 0 || per > kScoresBudget) return 0;
  return std::min(s.batch_heads, std::max<int64_t>(1, kScoresBudget / per));
}

class DnnlAttention {
 public:
  DnnlAttention(const AttentionSizes& s, float scale) : s_(s), chunk_(scores_chunk(s)), scale_(scale) {
    VISION_CHECK(chunk_ > 0, "attention (oneDNN): {} × {} scores per head exceed the {}-float budget", s.n_q, s.n_k,
                 kScoresBudget);
    full_ = make(chunk_);
    if (s_.batch_heads % chunk_) tail_ = make(s_.batch_heads % chunk_);
  }
  bool fits(const AttentionSizes& s, float scale) const {
    return s.batch_heads == s_.batch_heads && s.n_q == s_.n_q && s.n_k == s_.n_k && s.d_qk == s_.d_qk &&
           s.d_v == s_.d_v && scale == scale_;
  }
  static size_t scratch_bytes(const AttentionSizes& s) {
    return static_cast<size_t>(scores_chunk(s) * s.n_q * s.n_k) * sizeof(float);
  }

  void run(const float* q, const float* k, const float* v, float* o, float* scores) {
    for (int64_t b0 = 0; b0 < s_.batch_heads; b0 += chunk_) {
      Prims& p = b0 + chunk_ <= s_.batch_heads ? full_ : tail_;
      auto at = [](const dnnl::memory::desc& md, const float* ptr) {
        return cpu::as_memory(md, const_cast<float*>(ptr));
      };
      cpu::execute(p.qk,
                   {{DNNL_ARG_SRC, at(p.q, q + b0 * s_.n_q * s_.d_qk)},
                    {DNNL_ARG_WEIGHTS, at(p.kt, k + b0 * s_.n_k * s_.d_qk)},
                    {DNNL_ARG_DST, at(p.s, scores)}},
                   "the attention's scores");
      cpu::execute(p.softmax, {{DNNL_ARG_SRC, at(p.s, scores)}, {DNNL_ARG_DST, at(p.s, scores)}},
                   "the attention's softmax");
      cpu::execute(p.pv,
                   {{DNNL_ARG_SRC, at(p.s, scores)},
                    {DNNL_ARG_WEIGHTS, at(p.v, v + b0 * s_.n_k * s_.d_v)},
                    {DNNL_ARG_DST, at(p.o, o + b0 * s_.n_q * s_.d_v)}},
                   "the attention's output");
    }
  }

 private:
  struct Prims {
    dnnl::memory::desc q, kt, s, v, o;
    dnnl::matmul qk, pv;
    dnnl::softmax_forward softmax;
  };
  Prims make(int64_t g) const {
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const auto abc = memory::format_tag::abc;
    Prims p;
    p.q = memory::desc({g, s_.n_q, s_.d_qk}, f32, abc);
    p.kt = memory::desc({g, s_.d_qk, s_.n_k}, f32, memory::dims{s_.n_k * s_.d_qk, 1, s_.d_qk});  // K, read as Kᵀ
    p.s = memory::desc({g, s_.n_q, s_.n_k}, f32, abc);
    p.v = memory::desc({g, s_.n_k, s_.d_v}, f32, abc);
    p.o = memory::desc({g, s_.n_q, s_.d_v}, f32, abc);
    const dnnl::engine& eng = cpu::dnnl_engine();
    p.qk = cpu::dnnl_guard("the attention's score matmul", [&] {
      dnnl::primitive_attr attr;
      attr.set_output_scales(0, {scale_});
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.q, p.kt, p.s), attr, eng));
    });
    p.softmax = cpu::dnnl_guard("the attention's softmax", [&] {
      return dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, p.s, 2), eng));
    });
    p.pv = cpu::dnnl_guard("the attention's output matmul", [&] {
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.s, p.v, p.o), eng));
    });
    return p;
  }

  AttentionSizes s_;
  int64_t chunk_;
  float scale_;
  Prims full_, tail_;
};

class FlashAttention2CpuRuntime final : public graph::RuntimeOp {
 public:
  FlashAttention2CpuRuntime(float scale, graph::Mode mode) : scale_(scale), mode_(mode) {}
  std::string name() const override { return "ops.flash_attention2"; }
  int n_activation_inputs() const override { return 3; }

  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{Shape{in.at(0)[0], in.at(0)[1]}, DType::f32}};  // lse
  }
  // Training: delta. Inference: the scores of the oneDNN attention's chunks (none where they would not fit).
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    if (mode_ != graph::Mode::train) return DnnlAttention::scratch_bytes(attention_sizes(in.at(0), in.at(1), in.at(2)));
    return static_cast<size_t>(in.at(0)[0] * in.at(0)[1]) * sizeof(float);  // delta
  }

  void forward(graph::ForwardCtx& ctx) override {
    const Tensor &q = ctx.inputs.at(0), &k = ctx.inputs.at(1), &v = ctx.inputs.at(2);
    if (ctx.saved.empty()) {  // inference: oneDNN's matmuls and softmax, when the scores fit the workspace
      const AttentionSizes s = checked_sizes(q, k, v);
      check_f32_host(ctx.output, "o", Shape{s.batch_heads, s.n_q, s.d_v});
      if (ctx.workspace.defined() && DnnlAttention::scratch_bytes(s) > 0 &&
          ctx.workspace.nbytes() >= DnnlAttention::scratch_bytes(s)) {
        if (!dnnl_ || !dnnl_->fits(s, scale_)) dnnl_ = std::make_unique<DnnlAttention>(s, scale_);
        dnnl_->run(q.data<float>(), k.data<float>(), v.data<float>(), ctx.output.data<float>(),
                   static_cast<float*>(ctx.workspace.raw()));
        return;
      }
    }
    const Tensor lse = ctx.saved.empty() ? Tensor() : ctx.saved[0];
    flash_attention2_forward_cpu(q, k, v, scale_, ctx.output, lse);
  }

  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(!ctx.saved.empty() && ctx.saved[0].defined(),
                 "flash_attention2 backward needs the lse saved by a training forward");
    const Tensor &q = ctx.inputs.at(0), &k = ctx.inputs.at(1), &v = ctx.inputs.at(2);
    const Tensor& lse = ctx.saved[0];
    const Shape rows{q.dim(0), q.dim(1)};
    VISION_CHECK(ctx.workspace.defined() && ctx.workspace.nbytes() >= static_cast<size_t>(rows.numel()) * 4,
                 "flash_attention2 backward: workspace of {} bytes is too small for delta {}",
                 ctx.workspace.defined() ? ctx.workspace.nbytes() : 0, rows.str());
    const Tensor delta = Tensor::view(ctx.workspace.raw(), rows, DType::f32, core::Device::cpu);
    flash_attention2_backward_preprocess_cpu(ctx.output, ctx.grad_output, delta);
    if (ctx.grad_inputs.at(0).defined())
      flash_attention2_backward_dq_cpu(q, k, v, ctx.grad_output, lse, delta, scale_, ctx.grad_inputs[0]);
    flash_attention2_backward_dkv_cpu(q, k, v, ctx.grad_output, lse, delta, scale_, ctx.grad_inputs.at(1),
                                      ctx.grad_inputs.at(2));
  }

 private:
  float scale_;
  graph::Mode mode_;
  std::unique_ptr<DnnlAttention> dnnl_;  // the inference primitives, for the sizes last run
};

bool dims_match(int64_t a, int64_t b) { return a == Shape::kAny || b == Shape::kAny || a == b; }

}  // namespace

FlashAttention2Op::FlashAttention2Op(float scale) : scale_(scale) {
  VISION_CHECK(std::isfinite(scale) && scale > 0, "flash_attention2: the softmax scale must be positive and finite, "
               "got {}", scale);
}

Shape FlashAttention2Op::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 3, "flash_attention2 takes 3 inputs (q, k, v), got {}", in.size());
  const Shape &q = in[0], &k = in[1], &v = in[2];
  VISION_CHECK(q.rank() == 3 && k.rank() == 3 && v.rank() == 3,
               "q, k and v must be [BH, N, d] tensors, got q {}, k {}, v {}", q.str(), k.str(), v.str());
  VISION_CHECK(dims_match(q[0], k[0]) && dims_match(q[0], v[0]) && dims_match(k[0], v[0]),
               "q {}, k {} and v {} differ in BH (dimension 0)", q.str(), k.str(), v.str());
  VISION_CHECK(dims_match(k[1], v[1]), "k {} and v {} differ in the number of keys (dimension 1)", k.str(), v.str());
  VISION_CHECK(dims_match(q[2], k[2]), "q {} and k {} differ in head size (dimension 2)", q.str(), k.str());
  for (const Shape* s : {&q, &k, &v})
    for (size_t i = 0; i < 3; ++i)
      VISION_CHECK((*s)[i] == Shape::kAny || (*s)[i] > 0, "dimensions must be positive, got {}", s->str());
  const int64_t bh = q[0] != Shape::kAny ? q[0] : (k[0] != Shape::kAny ? k[0] : v[0]);
  return Shape{bh, q[1], v[2]};
}

core::DType FlashAttention2Op::infer_output_dtype(const std::vector<core::DType>& in) const {
  VISION_CHECK(in.size() == 3 && in[0] == in[1] && in[0] == in[2] && core::is_floating(in[0]),
               "flash_attention2: q, k and v must share one floating dtype");
  return in[0];
}

std::unique_ptr<graph::RuntimeOp> FlashAttention2Op::lower(graph::Backend backend, graph::Mode mode) const {
  return ops::lower_cpu_or_cuda<FlashAttention2CpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_flash_attention2_cuda(std::move(twin), scale_, mode)), scale_, mode);
}

graph::SymTensor flash_attention2(graph::SymTensor q, graph::SymTensor k, graph::SymTensor v, float scale,
                                  const std::string& name) {
  VISION_CHECK(q.valid() && k.valid() && v.valid(), "flash_attention2: q, k and v must be recorded tensors");
  return q.graph()->apply(std::make_shared<FlashAttention2Op>(scale), {q, k, v}, name);
}

}  // namespace vision::ops::attention
