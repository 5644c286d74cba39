// Our BatchNorm kernels (training statistics with the running-statistics update, normalisation, inference, backward)
// and convolution-bias kernels (bias + SiLU epilogue, per-channel gradient sum) in f32, f16 and bf16 × NCHW and NHWC,
// through their launch helpers, against float64 references computed from the same rounded inputs, with error bounds
// derived from each dtype's unit roundoff and the reductions' lengths (error_bounds.h). Outputs poisoned first.
// Skipped without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "cuda/format_test_util.h"
#include "error_bounds.h"
#include "ops/thread_ranks.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/ops/kernels/batchnorm_cuda.h"
#include "vision/ops/kernels/bias_cuda.h"

using namespace vision;
using namespace vision::test;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
using graph::Format;

namespace {

class NormBiasKernels : public testing::TestWithParam<Format> {
 protected:
  void SetUp() override { VISION_SKIP_WITHOUT_GPU(cuda::gpu_available()); }
  DType dtype() const { return GetParam().dtype; }
  Layout layout() const { return GetParam().layout; }
  void check_training(bool silu);
};

// Channels not a multiple of the NHWC tile (32), and enough rows (2·40·40 = 3200) for several splits of the rows.
const Shape kShape{2, 37, 40, 40};

// BatchNorm's paths (batchnorm.cuh): in NHWC, scalar accesses (37 or 6 channels) and 16-byte ones (64, 16 channels),
// column tiles of 32, 16 or 2 vectors, one split or many; in NCHW, 16-byte accesses (H·W = 1600, 1024, 16384) and
// scalar ones (H·W = 25), one split or several (2·128·128 values per channel).
const std::vector<Shape> kBatchNormShapes = {{2, 37, 40, 40}, {4, 64, 32, 32}, {2, 6, 128, 128}, {3, 16, 5, 5}};

float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }

// SiLU and its first two derivatives in float64.
double silu_f64(double y) { return y / (1 + std::exp(-y)); }
double silu_d1(double y) {
  const double s = 1 / (1 + std::exp(-y));
  return s * (1 + y * (1 - s));
}
double silu_d2(double y) {
  const double s = 1 / (1 + std::exp(-y));
  return s * (1 - s) * (2 + y * (1 - 2 * s));
}

}  // namespace

// Training forward and backward; with silu, BatchNorm → SiLU fused (the output is silu(y), the incoming gradient dz
// is the SiLU output's, and y is recomputed, never stored).
void NormBiasKernels::check_training(bool silu) {
  for (const Shape& shape : kBatchNormShapes) {
    SCOPED_TRACE(shape.str());
    auto backend = graph::cuda_backend();
    auto& b = *backend;
    const cudaStream_t stream = graph::CudaBackendContext::of(backend.get()).stream();
    const int64_t N = shape[0], C = shape[1], HW = shape[2] * shape[3], M = N * HW;
    const size_t n = static_cast<size_t>(shape.numel());
    const float eps = 1e-3f, momentum = 0.1f;
    // A mean away from 0, far from it (100, std 1.2) for the last shape: the f32 sums must not cancel. Random γ, β and
    // running statistics.
    const float offset = &shape == &kBatchNormShapes.back() ? 100.0f : 0.0f;
    const auto x = rounded(random_values(n, offset - 2.0f, offset + 3.0f), dtype());
    const auto dy = rounded(random_values(n), dtype());
    const auto gamma = random_values(C, 0.5f, 1.5f), beta = random_values(C), rm0 = random_values(C),
               rv0 = random_values(C, 0.2f, 2.0f);
    auto index = [&](int64_t i, int64_t c, int64_t j) { return static_cast<size_t>((i * C + c) * HW + j); };  // NCHW

    // float64 reference.
    std::vector<double> mean(C), var(C), invstd(C), y(n), g(n), dx(n), dgamma(C), dbeta(C), rm(C), rv(C);
    std::vector<double> abs_mean(C), sq_mean(C), sum_abs_dy(C), sum_abs_dyxhat(C);
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, a = 0, q = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < HW; ++j) s += x[index(i, c, j)], a += std::abs(x[index(i, c, j)]);
      mean[c] = s / M, abs_mean[c] = a / M;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < HW; ++j) {
          const double d = x[index(i, c, j)] - mean[c];
          q += d * d;
          sq_mean[c] += double(x[index(i, c, j)]) * x[index(i, c, j)] / M;
        }
      var[c] = q / M, invstd[c] = 1 / std::sqrt(var[c] + eps);
      rm[c] = (1 - momentum) * rm0[c] + momentum * mean[c];
      rv[c] = (1 - momentum) * rv0[c] + momentum * var[c] * M / (M - 1);
      double sdy = 0, sdyx = 0, adyx = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < HW; ++j) {
          const size_t k = index(i, c, j);
          const double xhat = (x[k] - mean[c]) * invstd[c];
          y[k] = gamma[c] * xhat + beta[c];
          g[k] = silu ? dy[k] * silu_d1(y[k]) : dy[k];  // the gradient reaching BatchNorm's output
          sdy += g[k], sdyx += g[k] * xhat, sum_abs_dy[c] += std::abs(g[k]);
          adyx += std::abs(g[k]) * (std::abs(xhat) + std::abs(mean[c]) * invstd[c]);
        }
      dbeta[c] = sdy, dgamma[c] = sdyx, sum_abs_dyxhat[c] = adyx;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < HW; ++j) {
          const size_t k = index(i, c, j);
          const double xhat = (x[k] - mean[c]) * invstd[c];
          dx[k] = gamma[c] * invstd[c] * (g[k] - sdy / M - xhat * sdyx / M);
        }
    }
    // What the f32 statistics over M rows and the roundings to the dtype may move each result by (error_bounds.h):
    // every magnitude the f32 arithmetic touches, the output rounded once; k = M plus the per-element work.
    RoundingTerms y_terms(n, dtype()), dx_terms(n, dtype()), dgamma_terms(C, DType::f32), dbeta_terms(C, DType::f32),
        mean_terms(C, DType::f32), invstd_terms(C, DType::f32), rm_terms(C, DType::f32), rv_terms(C, DType::f32);
    for (int64_t c = 0; c < C; ++c) {
      const double g_s = std::abs(gamma[c]) * invstd[c], shift = std::abs(mean[c]) * invstd[c];
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < HW; ++j) {
          const size_t k = index(i, c, j);
          const double xhat = std::abs((x[k] - mean[c]) * invstd[c]);
          y_terms.add(k, y[k]);
          y_terms.add(k, g_s * (std::abs(x[k] - mean[c]) + abs_mean[c]));
          y_terms.add(k, beta[c]);
          dx_terms.add(k, dx[k]);
          dx_terms.add(k, g_s * g[k]);
          dx_terms.add(k, g_s * sum_abs_dy[c] / M);
          dx_terms.add(k, g_s * (xhat + shift) * sum_abs_dyxhat[c] / M);
        }
      dgamma_terms.add(c, dgamma[c]);
      dgamma_terms.add(c, sum_abs_dyxhat[c]);
      dbeta_terms.add(c, dbeta[c]);
      dbeta_terms.add(c, sum_abs_dy[c]);
      mean_terms.add(c, mean[c]);
      mean_terms.add(c, abs_mean[c]);
      invstd_terms.add(c, invstd[c]);
      invstd_terms.add(c, sq_mean[c], 0.5 * invstd[c] * invstd[c] * invstd[c]);  // δvar ~ E[x²], ∂invstd/∂var
      rm_terms.add(c, rm[c]);
      rm_terms.add(c, momentum * abs_mean[c]);
      rv_terms.add(c, rv[c]);
      rv_terms.add(c, momentum * sq_mean[c] * M / (M - 1));
    }
    // With SiLU: z = silu(y) rounded once, y's own error reaching it through silu'(y); the gradient reaching
    // BatchNorm's output, dz·silu'(y), moves with y's error by dz·silu''(y), which reaches dx directly and dγ, dβ
    // through their sums (the f32 y the kernel recomputes is never rounded to the dtype: y_terms, which count that
    // rounding too, bound it from above).
    std::vector<double> out = y;
    RoundingTerms out_terms = y_terms;
    if (silu) {
      out_terms = RoundingTerms(n, dtype());
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < HW; ++j) {
            const size_t q = index(i, c, j);
            const double xhat = (x[q] - mean[c]) * invstd[c], dg = dy[q] * silu_d2(y[q]);
            out[q] = silu_f64(y[q]);
            out_terms.add(q, out[q]);
            out_terms.add_terms(q, y_terms, q, silu_d1(y[q]));
            dx_terms.add_terms(q, y_terms, q, std::abs(gamma[c]) * invstd[c] * dg);
            dbeta_terms.add_terms(static_cast<size_t>(c), y_terms, q, dg);
            dgamma_terms.add_terms(static_cast<size_t>(c), y_terms, q, dg * xhat);
          }
    }
    const int64_t k = M + 16;

    const Tensor x_dev = to_device(b, x, shape, dtype(), layout());
    const Tensor dy_dev = to_device(b, dy, shape, dtype(), layout());
    const Tensor g_dev = to_device(b, gamma, Shape{C}, DType::f32, Layout::nchw);
    const Tensor b_dev = to_device(b, beta, Shape{C}, DType::f32, Layout::nchw);
    const Tensor rm_dev = to_device(b, rm0, Shape{C}, DType::f32, Layout::nchw);
    const Tensor rv_dev = to_device(b, rv0, Shape{C}, DType::f32, Layout::nchw);
    const Tensor y_dev = poisoned_device(b, shape, dtype(), layout()),
                 dx_dev = poisoned_device(b, shape, dtype(), layout());
    const Tensor mean_dev = poisoned_device(b, Shape{C}, DType::f32),
                 invstd_dev = poisoned_device(b, Shape{C}, DType::f32);
    const Tensor dg_dev = poisoned_device(b, Shape{C}, DType::f32), db_dev = poisoned_device(b, Shape{C}, DType::f32);
    const size_t ws_bytes = ops::kernels::batchnorm_workspace_bytes(shape, layout());
    const Tensor ws = poisoned_device(b, Shape{int64_t(ws_bytes)}, DType::u8);

    ops::kernels::launch_batchnorm_forward_training(stream, dtype(), layout(), shape, x_dev.raw(), y_dev.raw(),
                                                    f32(g_dev), f32(b_dev), f32(rm_dev), f32(rv_dev), f32(mean_dev),
                                                    f32(invstd_dev), ws.raw(), momentum, eps, silu);
    EXPECT_TRUE(within_rounding(to_host_nchw(b, y_dev), out, out_terms, dtype(), k)) << (silu ? "silu(y)" : "y");
    EXPECT_TRUE(within_rounding(to_host_nchw(b, mean_dev), mean, mean_terms, DType::f32, k)) << "batch mean";
    EXPECT_TRUE(within_rounding(to_host_nchw(b, invstd_dev), invstd, invstd_terms, DType::f32, k)) << "inverse std";
    EXPECT_TRUE(within_rounding(to_host_nchw(b, rm_dev), rm, rm_terms, DType::f32, k)) << "running mean";
    EXPECT_TRUE(within_rounding(to_host_nchw(b, rv_dev), rv, rv_terms, DType::f32, k)) << "running variance";

    ops::kernels::launch_batchnorm_backward(stream, dtype(), layout(), shape, x_dev.raw(), dy_dev.raw(), dx_dev.raw(),
                                            f32(g_dev), f32(b_dev), f32(mean_dev), f32(invstd_dev), f32(dg_dev),
                                            f32(db_dev), ws.raw(), silu);
    EXPECT_TRUE(within_rounding(to_host_nchw(b, dx_dev), dx, dx_terms, dtype(), k)) << "dx";
    EXPECT_TRUE(within_rounding(to_host_nchw(b, dg_dev), dgamma, dgamma_terms, DType::f32, k)) << "dγ";
    EXPECT_TRUE(within_rounding(to_host_nchw(b, db_dev), dbeta, dbeta_terms, DType::f32, k)) << "dβ";
  }
}

TEST_P(NormBiasKernels, BatchNormTrainingForwardAndBackward) { check_training(false); }
TEST_P(NormBiasKernels, BatchNormSiluTrainingForwardAndBackward) { check_training(true); }

// SyncBatchNorm (BatchNormRanks): 3 ranks, threads with a stream each, each holding 2 of the 6 images, their partial
// results gathered, give what the kernels give on the whole batch in one launch — outputs, saved and running
// statistics, dx, and dγ, dβ summed over the ranks — with every rank's statistics the same bits. The control (no
// gather) gives each rank its own statistics.
TEST_P(NormBiasKernels, SyncBatchNormRanksTogetherAreTheWholeBatch) {
  const int world = 3;
  const Shape whole{6, 37, 20, 20}, share{2, 37, 20, 20};
  const int64_t C = whole[1];
  const size_t per = static_cast<size_t>(share.numel());
  const float eps = 1e-3f, momentum = 0.1f;
  const auto x = rounded(random_values(static_cast<size_t>(whole.numel()), -2.0f, 3.0f), dtype());
  const auto dy = rounded(random_values(static_cast<size_t>(whole.numel())), dtype());
  const auto gamma = random_values(C, 0.5f, 1.5f), beta = random_values(C), rm0 = random_values(C),
             rv0 = random_values(C, 0.2f, 2.0f);
  struct Out {
    std::vector<float> y, dx, mean, invstd, rm, rv, dg, db;
  };
  // One rank's launches on its own backend: the images [first, first + count) of x, with `ranks`.
  auto run = [&](graph::BackendContext& b, const Shape& shape, size_t first, ops::kernels::BatchNormRanks ranks,
                 bool silu) {
    const cudaStream_t stream = graph::CudaBackendContext::of(&b).stream();
    const size_t n = static_cast<size_t>(shape.numel());
    const std::vector<float> xs(x.begin() + first, x.begin() + first + n), dys(dy.begin() + first, dy.begin() + first + n);
    const auto param = [&](const std::vector<float>& v) { return to_device(b, v, Shape{C}, DType::f32, Layout::nchw); };
    const Tensor x_dev = to_device(b, xs, shape, dtype(), layout()), dy_dev = to_device(b, dys, shape, dtype(), layout());
    const Tensor g = param(gamma), be = param(beta), rm = param(rm0), rv = param(rv0);
    const Tensor y_dev = poisoned_device(b, shape, dtype(), layout()), dx_dev = poisoned_device(b, shape, dtype(), layout());
    const Tensor mean = poisoned_device(b, Shape{C}, DType::f32), invstd = poisoned_device(b, Shape{C}, DType::f32);
    const Tensor dg = poisoned_device(b, Shape{C}, DType::f32), db = poisoned_device(b, Shape{C}, DType::f32);
    const size_t ws_bytes = ops::kernels::batchnorm_workspace_bytes(shape, layout(), {}, ranks.world);
    const Tensor ws = poisoned_device(b, Shape{int64_t(ws_bytes)}, DType::u8);
    ops::kernels::launch_batchnorm_forward_training(stream, dtype(), layout(), shape, x_dev.raw(), y_dev.raw(), f32(g),
                                                    f32(be), f32(rm), f32(rv), f32(mean), f32(invstd), ws.raw(),
                                                    momentum, eps, silu, {}, ranks);
    ops::kernels::launch_batchnorm_backward(stream, dtype(), layout(), shape, x_dev.raw(), dy_dev.raw(), dx_dev.raw(),
                                            f32(g), f32(be), f32(mean), f32(invstd), f32(dg), f32(db), ws.raw(), silu,
                                            {}, ranks);
    return Out{to_host_nchw(b, y_dev), to_host_nchw(b, dx_dev), to_host_nchw(b, mean), to_host_nchw(b, invstd),
               to_host_nchw(b, rm),    to_host_nchw(b, rv),     to_host_nchw(b, dg),   to_host_nchw(b, db)};
  };
  for (const bool silu : {false, true}) {
    for (const bool synced : {true, false}) {
      SCOPED_TRACE(std::string(silu ? "BatchNorm → SiLU" : "BatchNorm") + (synced ? ", synced" : ", the control"));
      const Out ref = run(*graph::cuda_backend(), whole, 0, {}, silu);
      ThreadRanks gather(world);
      std::vector<Out> out(world);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          auto backend = std::make_shared<graph::CudaBackendContext>();
          ops::kernels::BatchNormRanks ranks;
          if (synced) {
            graph::Collective* mine = gather.rank(r, backend);
            ranks = {world, [mine](const void* send, void* recv, size_t bytes) { mine->all_gather(send, recv, bytes); }};
          }
          out[static_cast<size_t>(r)] = run(*backend, share, static_cast<size_t>(r) * per, ranks, silu);
        });
      for (std::thread& t : threads) t.join();
      std::vector<float> y, dx;
      for (const Out& o : out) {
        y.insert(y.end(), o.y.begin(), o.y.end());
        dx.insert(dx.end(), o.dx.begin(), o.dx.end());
      }
      if (!synced) {
        EXPECT_GT(rel_error(out[0].mean, ref.mean), 1e-3) << "each rank's own batch should give other statistics";
        continue;
      }
      EXPECT_EQ(gather.gathers(), 2) << "one gather in the forward, one in the backward";
      // Rounded like the whole batch's up to the order of the f64 combination: a few elements one unit apart.
      const double tol = dtype() == DType::f32 ? 1e-6 : 2 * unit_roundoff(dtype());
      EXPECT_LT(rel_error(y, ref.y), tol) << "the outputs";
      EXPECT_LT(rel_error(dx, ref.dx), dtype() == DType::f32 ? 1e-5 : 4 * unit_roundoff(dtype())) << "dx";
      // Every element (a wrong channel's statistics are O(1) away): within a few units of the largest value.
      const double elementwise = dtype() == DType::f32 ? 1e-4 : 8 * unit_roundoff(dtype());
      EXPECT_LT(max_abs_error(y, ref.y), elementwise * max_abs(ref.y)) << "the outputs";
      EXPECT_LT(max_abs_error(dx, ref.dx), elementwise * max_abs(ref.dx)) << "dx";
      std::vector<double> dg(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
      for (const Out& o : out)
        for (size_t c = 0; c < dg.size(); ++c) dg[c] += o.dg[c], db[c] += o.db[c];
      EXPECT_LT(rel_error(dg, ref.dg), 1e-5) << "Σ dγ over the ranks";
      EXPECT_LT(rel_error(db, ref.db), 1e-5) << "Σ dβ over the ranks";
      for (int r = 0; r < world; ++r) {
        const Out& o = out[static_cast<size_t>(r)];
        EXPECT_LT(rel_error(o.mean, ref.mean), 1e-6) << "rank " << r;
        EXPECT_LT(rel_error(o.invstd, ref.invstd), 1e-6) << "rank " << r;
        EXPECT_LT(rel_error(o.rm, ref.rm), 1e-6) << "rank " << r;
        EXPECT_LT(rel_error(o.rv, ref.rv), 1e-6) << "rank " << r;
        EXPECT_EQ(o.mean, out[0].mean) << "rank " << r;
        EXPECT_EQ(o.invstd, out[0].invstd) << "rank " << r;
        EXPECT_EQ(o.rm, out[0].rm) << "rank " << r;
        EXPECT_EQ(o.rv, out[0].rv) << "rank " << r;
      }
    }
  }
}

// The fused SiLU on cuDNN's f32 NCHW path: silu(y) from x and statistics saved elsewhere (γ·invstd formed in f32).
TEST_P(NormBiasKernels, BatchNormSiluFromSavedStatistics) {
  const Shape shape = kShape;
  auto backend = graph::cuda_backend();
  auto& b = *backend;
  const cudaStream_t stream = graph::CudaBackendContext::of(backend.get()).stream();
  const int64_t C = shape[1], HW = shape[2] * shape[3];
  const size_t n = static_cast<size_t>(shape.numel());
  const auto x = rounded(random_values(n, -2.0f, 3.0f), dtype());
  const auto gamma = random_values(C, 0.5f, 1.5f), beta = random_values(C), mean = random_values(C),
             invstd = random_values(C, 0.5f, 2.0f);
  std::vector<double> ref(n);
  RoundingTerms terms(n, dtype());
  for (size_t q = 0; q < n; ++q) {
    const size_t c = static_cast<size_t>((static_cast<int64_t>(q) / HW) % C);
    const double a = double(gamma[c]) * invstd[c], y = (x[q] - mean[c]) * a + beta[c];
    ref[q] = silu_f64(y);
    terms.add(q, ref[q]);
    // y's f32 arithmetic: γ·invstd, the subtraction, the product and the sum.
    terms.add(q, std::abs(a) * (std::abs(x[q]) + std::abs(mean[c])) + std::abs(beta[c]), silu_d1(y));
  }
  const Tensor x_dev = to_device(b, x, shape, dtype(), layout());
  const Tensor y_dev = poisoned_device(b, shape, dtype(), layout());
  auto dev = [&](const std::vector<float>& v) { return to_device(b, v, Shape{C}, DType::f32, Layout::nchw); };
  const Tensor g_dev = dev(gamma), b_dev = dev(beta), m_dev = dev(mean), s_dev = dev(invstd);
  ops::kernels::launch_batchnorm_silu_from_saved(stream, dtype(), layout(), shape, x_dev.raw(), y_dev.raw(),
                                                 f32(g_dev), f32(b_dev), f32(m_dev), f32(s_dev));
  EXPECT_TRUE(within_rounding(to_host_nchw(b, y_dev), ref, terms, dtype(), 8)) << "silu(y)";
}

TEST_P(NormBiasKernels, BatchNormInference) {
  for (const Shape& shape : kBatchNormShapes) {
    SCOPED_TRACE(shape.str());
    auto backend = graph::cuda_backend();
    auto& b = *backend;
    const cudaStream_t stream = graph::CudaBackendContext::of(backend.get()).stream();
    const int64_t C = shape[1], HW = shape[2] * shape[3];
    const size_t n = static_cast<size_t>(shape.numel());
    const float eps = 1e-3f;
    const auto x = rounded(random_values(n, -2.0f, 3.0f), dtype());
    const auto gamma = random_values(C, 0.5f, 1.5f), beta = random_values(C), rm = random_values(C),
               rv = random_values(C, 0.2f, 2.0f);
    std::vector<double> y(n);
    RoundingTerms terms(n, dtype());
    for (size_t i = 0; i < n; ++i) {
      const int64_t c = static_cast<int64_t>(i) / HW % C;
      const double s = gamma[c] / std::sqrt(double(rv[c]) + eps);
      y[i] = (x[i] - rm[c]) * s + beta[c];
      terms.add(i, y[i]);
      terms.add(i, std::abs(s) * (std::abs(x[i]) + std::abs(rm[c])));
      terms.add(i, beta[c]);
    }
    const Tensor x_dev = to_device(b, x, shape, dtype(), layout());
    const Tensor y_dev = poisoned_device(b, shape, dtype(), layout());
    const auto param = [&](const std::vector<float>& v) { return to_device(b, v, Shape{C}, DType::f32, Layout::nchw); };
    const Tensor g = param(gamma), be = param(beta), m = param(rm), v = param(rv);
    ops::kernels::launch_batchnorm_forward_inference(stream, dtype(), layout(), shape, x_dev.raw(), y_dev.raw(), f32(g),
                                                     f32(be), f32(m), f32(v), eps);
    EXPECT_TRUE(within_rounding(to_host_nchw(b, y_dev), y, terms, dtype(), 16));
  }
}

TEST_P(NormBiasKernels, BiasEpilogueAndBiasGradient) {
  auto backend = graph::cuda_backend();
  auto& b = *backend;
  const cudaStream_t stream = graph::CudaBackendContext::of(backend.get()).stream();
  const int64_t N = kShape[0], C = kShape[1], HW = kShape[2] * kShape[3];
  const size_t n = static_cast<size_t>(kShape.numel());
  const auto bias = rounded(random_values(C), dtype());
  for (bool silu : {false, true}) {
    SCOPED_TRACE(silu ? "bias + SiLU" : "bias");
    const auto y0 = rounded(random_values(n, -4.0f, 4.0f), dtype());
    std::vector<double> ref(n);
    RoundingTerms terms(n, dtype());
    for (size_t i = 0; i < n; ++i) {
      const double z = double(y0[i]) + bias[static_cast<int64_t>(i) / HW % C];
      const double s = 1 / (1 + std::exp(-z));
      ref[i] = silu ? z * s : z;
      terms.add(i, ref[i]);
      terms.add(i, std::abs(y0[i]) + std::abs(bias[static_cast<int64_t>(i) / HW % C]), silu ? 1.1 : 1.0);
    }
    const Tensor y = to_device(b, y0, kShape, dtype(), layout());
    const Tensor bias_dev = to_device(b, bias, Shape{C}, dtype(), Layout::nchw);
    ops::kernels::launch_bias_act(stream, dtype(), layout(), silu, kShape, y.raw(), bias_dev.raw());
    EXPECT_TRUE(within_rounding(to_host_nchw(b, y), ref, terms, dtype(), 8));
  }
  // Σ over (N, H, W) per channel in f32 (and f64 across splits), rounded once to the dtype: at most u·|Σ| for the
  // rounding plus M·2^-24·Σ|x| for the f32 additions (the classic bound of an M-term sum), element by element.
  const auto x = rounded(random_values(n), dtype());
  std::vector<double> sum(C, 0.0), abs_sum(C, 0.0), bound(C);
  for (size_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(i) / HW % C;
    sum[c] += x[i];
    abs_sum[c] += std::abs(x[i]);
  }
  for (int64_t c = 0; c < C; ++c) bound[c] = unit_roundoff(dtype()) * std::abs(sum[c]) + N * HW * 0x1p-24 * abs_sum[c];
  const Tensor x_dev = to_device(b, x, kShape, dtype(), layout());
  const Tensor out = poisoned_device(b, Shape{C}, dtype());
  const Tensor ws =
      poisoned_device(b, Shape{int64_t(ops::kernels::channel_sum_workspace_bytes(kShape, layout()))}, DType::u8);
  ops::kernels::launch_channel_sum(stream, dtype(), layout(), kShape, x_dev.raw(), out.raw(), ws.raw());
  EXPECT_TRUE(within_bounds(to_host_nchw(b, out), sum, bound)) << "channel sum";
}

INSTANTIATE_TEST_SUITE_P(AllFormats, NormBiasKernels,
                         testing::Values(Format{DType::f32, Layout::nchw}, Format{DType::f32, Layout::nhwc},
                                         Format{DType::f16, Layout::nchw}, Format{DType::f16, Layout::nhwc},
                                         Format{DType::bf16, Layout::nchw}, Format{DType::bf16, Layout::nhwc}),
                         [](const testing::TestParamInfo<Format>& info) { return format_test_name(info.param); });
