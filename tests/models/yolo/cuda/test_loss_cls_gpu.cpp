// YOLO26 BCE classification and L1 distance losses on CUDA: the kernel descriptors (no GPU needed); the kernels
// through their launch helpers at YOLO26n's training shape (B = 4, A = 8400, nc = 80) with f32, f16 and bf16
// predictions against the CPU twin (float64 sums) with poisoned outputs, bounds from the f32 reduction length, and
// bit-identical results across two runs. GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "error_bounds.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/cls.h"
#include "vision/models/yolo/kernels/loss/cls_cuda.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_loss_cls_gpu_cpp {

using namespace vision;
using namespace vision::test;
using namespace vision::models::yolo::kernels;
using namespace vision::models::yolo::kernels::loss;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<float> floats_of(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// The f32 error of a forward's sum: each thread adds ≤ ceil(items / (blocks·256)) terms, the block tree 8 levels, and
// each term itself a few ulps (exp, log1p, the scaling): K = per-thread + 8 + 4, bound K·2^-24·Σ|term|.
double sum_bound(int64_t items, double abs_sum) {
  const int64_t blocks = loss_partial_blocks(items), per_thread = (items + blocks * 256 - 1) / (blocks * 256);
  return static_cast<double>(per_thread + 12) * kF32Epsilon * abs_sum;
}

TEST(ClsLossDescriptors, EveryDtypeOfEveryKernelIsRegistered) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("bce_cls_") || k->id().starts_with("l1_distance_") || k->id().starts_with("loss_sum_"))
      ids.insert(k->id());
  std::set<std::string> want = {"loss_sum_finalize__f32"};
  for (const char* t : {"f32", "f16", "bf16"})
    for (const char* k : {"bce_cls_forward_partial", "bce_cls_backward", "l1_distance_forward_partial",
                          "l1_distance_backward"})
      want.insert(std::string(k) + "__" + t);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(cuda::kernel_instance<BceClsForwardPartial>(DType::bf16).name_expression(),
            "vision::models::yolo::kernels::loss::bce_cls_forward_partial<__nv_bfloat16>");
  // The CUDA RuntimeOps: any floating format for the prediction, f32 for the rest; forward + finalize (+ backward).
  const auto rt = BceClsLossOp().lower(graph::Backend::cuda, graph::Mode::train);
  ASSERT_TRUE(rt->supports(graph::Format{DType::bf16, core::Layout::nhwc}));
  rt->set_format(graph::Format{DType::f16, core::Layout::nchw});
  EXPECT_EQ(rt->kernels().size(), 3u);
  EXPECT_EQ(rt->kernels()[0].id, "bce_cls_forward_partial__f16");
  EXPECT_EQ(rt->input_dtype(1), DType::f32);
  const auto l1 = L1DistanceLossOp().lower(graph::Backend::cuda, graph::Mode::inference);
  l1->set_format(graph::Format{DType::bf16, core::Layout::nchw});
  EXPECT_EQ(l1->kernels().size(), 2u);
  EXPECT_FALSE(l1->reads_input(3));
  EXPECT_EQ(l1->input_dtype(2), DType::f32);
  // Block counts depend on the element count alone (so the sums are the same on every GPU).
  EXPECT_EQ(loss_partial_blocks(0), 1);
  EXPECT_EQ(loss_partial_blocks(2048), 1);
  EXPECT_EQ(loss_partial_blocks(2049), 2);
  EXPECT_EQ(loss_partial_blocks(4 * 80 * 8400), kMaxLossPartials);
}

TEST(ClsLossKernels, BceMatchesTheCpuTwinInEveryDtypeAndIsBitIdenticalAcrossRuns) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t batch = 4, nc = 80, n_anchors = 8400, n = batch * nc * n_anchors;
  const Shape shape{batch, nc, n_anchors};
  // Soft targets on ~1% of the pairs, logits over a wide range with a few at ±80.
  std::vector<float> t(static_cast<size_t>(n), 0.0f);
  const auto u = random_values(t.size(), 0.0f, 1.0f), tv = random_values(t.size(), 0.01f, 1.0f);
  for (size_t i = 0; i < t.size(); ++i) t[i] = u[i] < 0.01f ? tv[i] : 0.0f;
  DeviceBuffer targets(t.size() * 4), loss(4), norm(4), workspace(loss_workspace_bytes(n));
  targets.upload(bytes_of(t));
  for (DType dt : kDtypes) {
    auto xs = random_values(t.size(), -12.0f, 12.0f);
    for (size_t i = 0; i < xs.size(); i += 9973) xs[i] = (i / 9973) % 2 ? 80.0f : -80.0f;
    const std::vector<float> x = rounded(xs, dt);  // what the kernel sees
    const size_t bytes = x.size() * core::dtype_size(dt);
    DeviceBuffer logits(bytes), grad(bytes), grad_loss(4);
    logits.upload(encode(x, dt));
    const float g = 0.625f;
    grad_loss.upload(bytes_of({g}));

    const Tensor tx = Tensor::from_vector(shape, x), tt = Tensor::from_vector(shape, t);
    const LossSums ref = bce_cls_forward_cpu(tx, tt);
    const double nref = loss_normalizer(ref.norm);
    std::vector<float> first_loss, first_grad;
    for (int run = 0; run < 2; ++run) {
      loss.poison(), norm.poison(), workspace.poison(), grad.poison();
      launch_bce_cls_forward(nullptr, dt, logits.get(), static_cast<const float*>(targets.get()),
                             static_cast<float*>(loss.get()), static_cast<float*>(norm.get()), workspace.get(), n);
      launch_bce_cls_backward(nullptr, dt, logits.get(), static_cast<const float*>(targets.get()),
                              static_cast<const float*>(grad_loss.get()), static_cast<const float*>(norm.get()),
                              grad.get(), n);
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      const auto l = floats_of(loss.download(4)), nn = floats_of(norm.download(4));
      const auto d = decode(grad.download(bytes), dt);
      // The normaliser (Σ t, all terms ≥ 0) and the loss (Σ bce ≥ 0, all terms ≥ 0) within their f32 sums' bound,
      // plus the final division and rounding.
      EXPECT_NEAR(nn[0], nref, sum_bound(n, ref.norm) + 2 * kF32Epsilon * nref) << core::dtype_name(dt);
      const double loss_ref = ref.loss / nref;
      EXPECT_NEAR(l[0], loss_ref, (sum_bound(n, ref.loss) + 4 * kF32Epsilon * ref.loss) / nref)
          << core::dtype_name(dt);
      // The gradient per element: (σ − t)·g/N in f32 (a few ulps of σ + t, and N's relative error), then rounded
      // to dt (u·|ref|, or half f16's subnormal spacing for the tiny gradients of confident predictions).
      const double n_rel = sum_bound(n, ref.norm) / nref + 2 * kF32Epsilon;
      std::vector<double> gref(x.size()), bound(x.size());
      Tensor twin = Tensor::zeros(shape);
      bce_cls_backward_cpu(tx, tt, g / nref, twin);
      const auto tw = twin.to_vector();
      for (size_t i = 0; i < x.size(); ++i) {
        const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
        gref[i] = (sig - t[i]) * g / nref;
        bound[i] = unit_roundoff(dt) * std::abs(gref[i]) + (4 * kF32Epsilon * (sig + t[i]) * g / nref) +
                   n_rel * std::abs(gref[i]) + kF32Epsilon * std::abs(gref[i]) + subnormal_error(dt);
        ASSERT_LE(std::abs(tw[i] - gref[i]), 1e-7 * std::abs(gref[i]) + 1e-15) << "twin " << i;
      }
      EXPECT_TRUE(within_bounds(d, gref, bound)) << core::dtype_name(dt);
      EXPECT_LT(rel_error(d, gref), 2 * unit_roundoff(dt) + n_rel) << core::dtype_name(dt);
      if (run == 0) {
        first_loss = l, first_grad = d;
      } else {  // deterministic: bit for bit
        EXPECT_EQ(std::memcmp(first_loss.data(), l.data(), 4), 0) << core::dtype_name(dt);
        EXPECT_EQ(std::memcmp(first_grad.data(), d.data(), d.size() * 4), 0) << core::dtype_name(dt);
      }
    }
  }
}

TEST(ClsLossKernels, L1MatchesTheCpuTwinInEveryDtypeAndIsBitIdenticalAcrossRuns) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t batch = 4, h = 640, w = 384, n_anchors = detect_anchor_count(h, w), n = batch * n_anchors;
  const Shape shape{batch, 4, n_anchors};
  const auto grid = detect_anchor_grid(h, w);
  std::vector<float> target = random_values(static_cast<size_t>(4 * n), 0.0f, 6.0f);
  std::vector<float> weight = random_values(static_cast<size_t>(n), 0.0f, 1.0f);
  const auto keep = random_values(weight.size(), 0.0f, 1.0f);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = keep[i] < 0.05f ? weight[i] + 0.05f : 0.0f;
  DeviceBuffer dtarget(target.size() * 4), dweight(weight.size() * 4), anchors(grid.size() * 4), loss(4), norm(4),
      workspace(loss_workspace_bytes(n)), grad_loss(4);
  dtarget.upload(bytes_of(target)), dweight.upload(bytes_of(weight)), anchors.upload(bytes_of(grid));
  const float g = 1.25f;
  grad_loss.upload(bytes_of({g}));
  const Tensor tt = Tensor::from_vector(shape, target), tw = Tensor::from_vector(Shape{batch, n_anchors}, weight);
  const Tensor ta = Tensor::from_vector(Shape{3, n_anchors}, grid);
  for (DType dt : kDtypes) {
    const std::vector<float> p = rounded(random_values(target.size(), 0.0f, 6.0f), dt);
    const size_t bytes = p.size() * core::dtype_size(dt);
    DeviceBuffer pred(bytes), grad(bytes);
    pred.upload(encode(p, dt));
    const Tensor tp = Tensor::from_vector(shape, p);
    const LossSums ref = l1_distance_forward_cpu(tp, tt, tw, ta, h, w);
    const double nref = loss_normalizer(ref.norm);
    Tensor twin = Tensor::zeros(shape);
    l1_distance_backward_cpu(tp, tt, tw, ta, h, w, g / nref, twin);
    const auto gref = to_double(twin);
    std::vector<float> first_loss, first_grad;
    for (int run = 0; run < 2; ++run) {
      loss.poison(), norm.poison(), workspace.poison(), grad.poison();
      launch_l1_distance_forward(nullptr, dt, pred.get(), static_cast<const float*>(dtarget.get()),
                                 static_cast<const float*>(dweight.get()), static_cast<const float*>(anchors.get()),
                                 static_cast<float*>(loss.get()), static_cast<float*>(norm.get()), workspace.get(),
                                 batch, n_anchors, h, w);
      launch_l1_distance_backward(nullptr, dt, pred.get(), static_cast<const float*>(dtarget.get()),
                                  static_cast<const float*>(dweight.get()), static_cast<const float*>(anchors.get()),
                                  static_cast<const float*>(grad_loss.get()), static_cast<const float*>(norm.get()),
                                  grad.get(), batch, n_anchors, h, w);
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      const auto l = floats_of(loss.download(4)), nn = floats_of(norm.download(4));
      const auto d = decode(grad.download(bytes), dt);
      EXPECT_NEAR(nn[0], nref, sum_bound(n, ref.norm) + 2 * kF32Epsilon * nref) << core::dtype_name(dt);
      // Each term: |Δ| (subtraction), the scalings and the products, ~8 ulps of the term.
      EXPECT_NEAR(l[0], ref.loss / nref, (sum_bound(n, ref.loss) + 8 * kF32Epsilon * ref.loss) / nref)
          << core::dtype_name(dt);
      // Per element the gradient is a product of a few f32 factors with the same sign(Δ) (the f32 Δ of two
      // dt-representable values is exact in sign), then rounded to dt: (u + N's error + 8·2^-24)·|ref|, plus f16's subnormal rounding.
      const double n_rel = sum_bound(n, ref.norm) / nref + 2 * kF32Epsilon;
      std::vector<double> bound(gref.size());
      for (size_t i = 0; i < gref.size(); ++i)
        bound[i] = (unit_roundoff(dt) + n_rel + 8 * kF32Epsilon) * std::abs(gref[i]) + subnormal_error(dt);
      EXPECT_TRUE(within_bounds(d, gref, bound)) << core::dtype_name(dt);
      if (run == 0) {
        first_loss = l, first_grad = d;
      } else {
        EXPECT_EQ(std::memcmp(first_loss.data(), l.data(), 4), 0) << core::dtype_name(dt);
        EXPECT_EQ(std::memcmp(first_grad.data(), d.data(), d.size() * 4), 0) << core::dtype_name(dt);
      }
    }
  }
}

// The CUDA RuntimeOps (f32) through the op harness against the CPU twin's: the loss, the saved normaliser's use in
// backward, the prediction's gradient and zeros for the constants' gradients.
TEST(ClsLossOps, CudaRuntimeOpsMatchTheCpuTwinInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t batch = 2, nc = 80, h = 640, w = 384, n = detect_anchor_count(h, w);
  std::vector<float> t = random_values(static_cast<size_t>(batch * nc * n), 0.0f, 1.0f);
  for (float& v : t) v = v < 0.97f ? 0.0f : v;
  std::vector<float> wt = random_values(static_cast<size_t>(batch * n), 0.0f, 1.0f);
  for (float& v : wt) v = v < 0.9f ? 0.0f : v;
  const Tensor go = Tensor::from_vector(Shape{}, std::vector<float>{0.5f});
  {
    BceClsLossOp op;
    OpHarness cpu(op, {random_tensor(Shape{batch, nc, n}, -10.0f, 10.0f), Tensor::from_vector(Shape{batch, nc, n}, t)},
                  graph::Mode::train);
    OpHarness gpu(op, cpu, graph::cuda_backend());
    const double lc = cpu.forward(true).data<float>()[0], lg = gpu.forward(true).data<float>()[0];
    EXPECT_NEAR(lg, lc, 1e-5 * lc);
    const auto gc = cpu.backward(go), gg = gpu.backward(go);
    EXPECT_LT(rel_error(gg.inputs[0].to_vector(), to_double(gc.inputs[0])), 1e-5);
    for (float v : gg.inputs[1].to_vector()) ASSERT_EQ(v, 0.0f);
  }
  {
    L1DistanceLossOp op;
    std::vector<Tensor> in = {random_tensor(Shape{batch, 4, n}, 0.0f, 6.0f), random_tensor(Shape{batch, 4, n}, 0.0f, 6.0f),
                              Tensor::from_vector(Shape{batch, n}, wt)};
    for (int64_t s : {8, 16, 32}) in.push_back(random_tensor(Shape{batch, 1, h / s, w / s}));
    OpHarness cpu(op, in, graph::Mode::train);
    OpHarness gpu(op, cpu, graph::cuda_backend());
    const double lc = cpu.forward(true).data<float>()[0], lg = gpu.forward(true).data<float>()[0];
    EXPECT_NEAR(lg, lc, 1e-5 * lc);
    const auto gc = cpu.backward(go), gg = gpu.backward(go);
    EXPECT_LT(rel_error(gg.inputs[0].to_vector(), to_double(gc.inputs[0])), 1e-5);
    for (size_t i = 1; i < 6; ++i)
      for (float v : gg.inputs[i].to_vector()) ASSERT_EQ(v, 0.0f) << i;
  }
}

}  // namespace

}  // namespace test_loss_cls_gpu_cpp
