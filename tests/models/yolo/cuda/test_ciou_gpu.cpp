// CIoU loss on CUDA: the kernel descriptors (no GPU needed); the forward and backward kernels in f32, f16 and bf16
// pred against the CPU twin on the same (dtype-rounded) inputs, both box formats and both alpha modes, B = 4,
// A = 8400, ~10% positives, poisoned outputs; the graph op on the CUDA backend against its CPU twin; the op in a bf16
// plan (pred converted, target and weight not). GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <array>
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "error_bounds.h"
#include "models/yolo/ciou_reference.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/loss/ciou.h"
#include "vision/models/yolo/kernels/loss/ciou_cuda.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_ciou_gpu_cpp {

using namespace vision;
using namespace vision::test;
using namespace vision::models::yolo::kernels::loss;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<uint8_t> bytes_of_floats(const std::vector<float>& v) { return encode(v, DType::f32); }

TEST(CiouDescriptors, EveryDtypeOfBothKernelsIsRegistered) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("ciou_")) ids.insert(k->id());
  EXPECT_EQ(ids, (std::set<std::string>{"ciou_forward__f32__block256", "ciou_forward__f16__block256",
                                        "ciou_forward__bf16__block256", "ciou_backward__f32__block256",
                                        "ciou_backward__f16__block256", "ciou_backward__bf16__block256"}));
  const auto& k = cuda::kernel_instance<CiouBackward>(DType::bf16);
  EXPECT_EQ(k.name_expression(), "vision::models::yolo::kernels::loss::ciou_backward<__nv_bfloat16, 256>");
  EXPECT_NE(k.source().find("ciou_backward"), std::string::npos);
  CiouLossOp op;
  const auto rt = op.lower(graph::Backend::cuda, graph::Mode::train);
  ASSERT_TRUE(rt->supports(graph::Format{DType::f16, core::Layout::nchw}));
  rt->set_format(graph::Format{DType::f16, core::Layout::nchw});
  const auto kernels = rt->kernels();
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].id, "ciou_forward__f16__block256");
  EXPECT_EQ(kernels[1].id, "ciou_backward__f16__block256");
  EXPECT_TRUE(rt->has_backward());
  EXPECT_EQ(rt->input_dtype(1), std::optional<DType>(DType::f32));
  EXPECT_EQ(rt->input_dtype(2), std::optional<DType>(DType::f32));
}

// Bounds. Both sides compute in f32 from identical inputs; they differ by the order of f32 operations (FMA
// contraction on the GPU, atanf and sqrtf within a few ulp), on coordinates ≤ ~130 and per-box values whose terms are
// O(1)·weight: a few 2^-24 relative to the largest term, far below 2e-5·max(1, |ref|). d_pred is then rounded to the
// dtype: u·|ref| more (the loss and the saved tensors are f32 in every dtype).
void expect_close(const std::vector<float>& out, const std::vector<float>& ref, DType rounded_to, const std::string& what) {
  const double u = rounded_to == DType::f32 ? 0.0 : unit_roundoff(rounded_to);
  EXPECT_LT(rel_error(out, ref), 1e-5 + 2 * u) << what;
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double r = ref[i], bound = 2e-5 * std::max(1.0, std::abs(r)) + 2 * u * std::abs(r);
    if (!(std::abs(out[i] - r) <= bound) && bad++ < 5) ADD_FAILURE() << what << " element " << i << ": " << out[i] << " vs " << r;
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(CiouKernels, ForwardAndBackwardMatchTheCpuTwinInEveryDtype) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t batch = 4, n = 8400;
  const Shape boxes{batch, 4, n}, ba{batch, n};
  const size_t nb = static_cast<size_t>(batch * n);
  for (bool xywh : {false, true}) {
    const BoxFormat format = xywh ? BoxFormat::xywh : BoxFormat::xyxy;
    const CiouBatch c = random_ciou_batch(batch, n, 0.1, xywh);
    const std::vector<float> d_loss = random_values(nb, 0.5f, 1.5f);
    DeviceBuffer target(nb * 16), weight(nb * 4), dl(nb * 4), loss(nb * 4), iou(nb * 4), v(nb * 4), alpha(nb * 4);
    target.upload(bytes_of_floats(c.target));
    weight.upload(bytes_of_floats(c.weight));
    dl.upload(bytes_of_floats(d_loss));
    for (DType dt : kDtypes) {
      const std::vector<float> pred = rounded(c.pred, dt);
      const size_t pred_bytes = nb * 4 * core::dtype_size(dt);
      DeviceBuffer pred_dev(pred_bytes), d_pred(pred_bytes);
      pred_dev.upload(encode(pred, dt));
      // The twin on the same rounded boxes.
      const Tensor pred_h = Tensor::from_vector(boxes, pred), target_h = Tensor::from_vector(boxes, c.target);
      const Tensor weight_h = Tensor::from_vector(ba, c.weight);
      Tensor loss_h = poisoned(ba), iou_h = poisoned(ba), v_h = poisoned(ba), alpha_h = poisoned(ba);
      ciou_forward_cpu(pred_h, target_h, weight_h, format, loss_h, iou_h, v_h, alpha_h);
      const std::string tag = std::string(core::dtype_name(dt)) + (xywh ? " xywh" : " xyxy");

      for (DeviceBuffer* b : {&loss, &iou, &v, &alpha}) b->poison();
      launch_ciou_forward(nullptr, dt, pred_dev.get(), static_cast<const float*>(target.get()),
                          static_cast<const float*>(weight.get()), static_cast<float*>(loss.get()),
                          static_cast<float*>(iou.get()), static_cast<float*>(v.get()), static_cast<float*>(alpha.get()),
                          batch, n, format);
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      expect_close(decode(loss.download(nb * 4), DType::f32), loss_h.to_vector(), DType::f32, tag + " loss");
      expect_close(decode(iou.download(nb * 4), DType::f32), iou_h.to_vector(), DType::f32, tag + " iou");
      expect_close(decode(v.download(nb * 4), DType::f32), v_h.to_vector(), DType::f32, tag + " v");
      expect_close(decode(alpha.download(nb * 4), DType::f32), alpha_h.to_vector(), DType::f32, tag + " alpha");

      // Inference: nothing saved (null pointers), the same loss.
      loss.poison();
      launch_ciou_forward(nullptr, dt, pred_dev.get(), static_cast<const float*>(target.get()),
                          static_cast<const float*>(weight.get()), static_cast<float*>(loss.get()), nullptr, nullptr,
                          nullptr, batch, n, format);
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      expect_close(decode(loss.download(nb * 4), DType::f32), loss_h.to_vector(), DType::f32, tag + " loss (inference)");

      for (bool full : {false, true}) {
        // The twin's backward from the twin's saved tensors; the kernel's from its own (just compared).
        Tensor d_pred_h = poisoned(boxes);
        ciou_backward_cpu(pred_h, target_h, weight_h, iou_h, v_h, alpha_h, Tensor::from_vector(ba, d_loss),
                          {format, full}, d_pred_h);
        // The saved tensors of the last forward with them.
        launch_ciou_forward(nullptr, dt, pred_dev.get(), static_cast<const float*>(target.get()),
                            static_cast<const float*>(weight.get()), static_cast<float*>(loss.get()),
                            static_cast<float*>(iou.get()), static_cast<float*>(v.get()),
                            static_cast<float*>(alpha.get()), batch, n, format);
        d_pred.poison();
        launch_ciou_backward(nullptr, dt, pred_dev.get(), static_cast<const float*>(target.get()),
                             static_cast<const float*>(weight.get()), static_cast<const float*>(iou.get()),
                             static_cast<const float*>(v.get()), static_cast<const float*>(alpha.get()),
                             static_cast<const float*>(dl.get()), d_pred.get(), batch, n, {format, full});
        VISION_CUDA_CHECK(cudaDeviceSynchronize());
        const auto g = decode(d_pred.download(pred_bytes), dt);
        expect_close(g, d_pred_h.to_vector(), dt, tag + (full ? " d_pred full alpha" : " d_pred constant alpha"));
        // Zero where the weight is 0.
        for (size_t i = 0; i < nb; ++i)
          if (c.weight[i] == 0)
            for (int64_t k = 0; k < 4; ++k)
              ASSERT_EQ(g[static_cast<size_t>((static_cast<int64_t>(i) / n * 4 + k) * n + static_cast<int64_t>(i) % n)],
                        0.0f)
                  << tag << " anchor " << i;
      }
    }
  }
}

// Degenerate boxes on the GPU: finite values equal to the twin's (f32).
TEST(CiouKernels, DegenerateBoxesAreFinite) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const std::vector<std::array<float, 8>> cases = {
      {2, 2, 2, 6, 1, 1, 5, 5},   {1, 3, 5, 3, 1, 1, 5, 5},        {3, 3, 3, 3, 1, 1, 5, 5},
      {3, 3, 3, 3, 3, 3, 3, 3},   {1, 1, 5, 5, 1, 1, 5, 5},        {0, 0, 1, 1, 50, 60, 52, 61},
      {0, 0, 2, 2, 2, 0, 4, 2},   {0, 0, 1000, 0.001f, 10, 0, 20, 10}, {0, 0, 0.001f, 1000, 0, 0, 1000, 0.001f},
      {5, 5, 1, 1, 1, 1, 5, 5}};
  const int64_t n = static_cast<int64_t>(cases.size());
  std::vector<float> pred(4 * cases.size()), target(4 * cases.size()), weight(cases.size(), 1.0f), ones = weight;
  for (size_t a = 0; a < cases.size(); ++a)
    for (size_t k = 0; k < 4; ++k) pred[k * cases.size() + a] = cases[a][k], target[k * cases.size() + a] = cases[a][4 + k];
  Tensor loss_h = poisoned(Shape{1, n}), iou_h = poisoned(Shape{1, n}), v_h = poisoned(Shape{1, n}),
         alpha_h = poisoned(Shape{1, n});
  const Tensor p_h = Tensor::from_vector(Shape{1, 4, n}, pred), t_h = Tensor::from_vector(Shape{1, 4, n}, target),
               w_h = Tensor::from_vector(Shape{1, n}, weight);
  ciou_forward_cpu(p_h, t_h, w_h, BoxFormat::xyxy, loss_h, iou_h, v_h, alpha_h);
  DeviceBuffer p(pred.size() * 4), t(pred.size() * 4), w(weight.size() * 4), dl(weight.size() * 4),
      saved(4 * weight.size() * 4), g(pred.size() * 4);
  p.upload(bytes_of_floats(pred));
  t.upload(bytes_of_floats(target));
  w.upload(bytes_of_floats(weight));
  dl.upload(bytes_of_floats(ones));
  saved.poison();
  auto* s = static_cast<float*>(saved.get());
  launch_ciou_forward(nullptr, DType::f32, p.get(), static_cast<const float*>(t.get()),
                      static_cast<const float*>(w.get()), s, s + n, s + 2 * n, s + 3 * n, 1, n, BoxFormat::xyxy);
  VISION_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = decode(saved.download(saved.bytes()), DType::f32);
  std::vector<float> twin;
  for (const Tensor* x : {&loss_h, &iou_h, &v_h, &alpha_h})
    for (float f : x->to_vector()) twin.push_back(f);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << i;
    EXPECT_NEAR(out[i], twin[i], 2e-5 * std::max(1.0f, std::abs(twin[i]))) << i;
  }
  for (int full = 0; full < 2; ++full) {
    g.poison();
    launch_ciou_backward(nullptr, DType::f32, p.get(), static_cast<const float*>(t.get()),
                         static_cast<const float*>(w.get()), s + n, s + 2 * n, s + 3 * n,
                         static_cast<const float*>(dl.get()), g.get(), 1, n, {BoxFormat::xyxy, full == 1});
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    for (float x : decode(g.download(g.bytes()), DType::f32)) ASSERT_TRUE(std::isfinite(x)) << "full " << full;
  }
}

// The graph op on the GPU (f32) against its CPU twin, through OpHarness: forward, backward in both alpha modes and
// both formats; zeros for target and weight when their gradient is asked for.
TEST(CiouOpGpu, MatchesTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (bool xywh : {false, true})
    for (bool full : {false, true}) {
      const CiouBatch c = random_ciou_batch(2, 1000, 0.3, xywh);
      const Shape boxes{c.batch, 4, c.anchors}, ba{c.batch, c.anchors};
      CiouLossOp op({xywh ? BoxFormat::xywh : BoxFormat::xyxy, full});
      OpHarness cpu(op, {Tensor::from_vector(boxes, c.pred), Tensor::from_vector(boxes, c.target),
                         Tensor::from_vector(ba, c.weight)},
                    graph::Mode::train);
      OpHarness gpu(op, cpu, graph::cuda_backend());
      const std::string tag = std::string(xywh ? "xywh" : "xyxy") + (full ? " full" : " constant");
      expect_close(gpu.forward(true).to_vector(), cpu.forward(true).to_vector(), DType::f32, tag + " loss");
      const Tensor dy = random_tensor(ba, 0.5f, 1.5f);
      const auto g_cpu = cpu.backward(dy), g_gpu = gpu.backward(dy);
      expect_close(g_gpu.inputs[0].to_vector(), g_cpu.inputs[0].to_vector(), DType::f32, tag + " d_pred");
      for (size_t i = 1; i < 3; ++i) {
        EXPECT_EQ(g_gpu.inputs[i].to_vector(), std::vector<float>(static_cast<size_t>(g_gpu.inputs[i].numel()), 0.0f));
        EXPECT_EQ(g_cpu.inputs[i].to_vector(), std::vector<float>(static_cast<size_t>(g_cpu.inputs[i].numel()), 0.0f));
      }
    }
}

// In a bf16 plan the op runs its bf16 kernel: pred is converted, target and weight (f32, taken in f32: input_dtype) are not,
// and the loss comes out f32 without a conversion. Loss equal to the twin's on bf16-rounded pred.
TEST(CiouOpGpu, RunsInABf16PlanWithF32TargetsAndLoss) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto pred = g->input("pred", Shape{Shape::kAny, 4, Shape::kAny});
  auto target = g->input("target", Shape{Shape::kAny, 4, Shape::kAny});
  auto weight = g->input("weight", Shape{Shape::kAny, Shape::kAny});
  g->mark_output(ciou_loss(pred, target, weight));
  graph::Executor gpu(g, graph::cuda_backend(), graph::PlanOptions{.compute_dtype = DType::bf16});
  const CiouBatch c = random_ciou_batch(2, 2000, 0.2, false);
  const Shape boxes{c.batch, 4, c.anchors}, ba{c.batch, c.anchors};
  const std::vector<Tensor> inputs = {Tensor::from_vector(boxes, c.pred), Tensor::from_vector(boxes, c.target),
                                      Tensor::from_vector(ba, c.weight)};
  const auto y = to_host(gpu, gpu.forward(inputs)[0]);
  graph::Plan& plan = gpu.plan(graph::Mode::inference, {inputs[0].shape(), inputs[1].shape(), inputs[2].shape()});
  EXPECT_EQ(plan.conversion_steps(), 1u) << plan.describe();
  CiouBatch r = c;
  r.pred = rounded(c.pred, DType::bf16);
  Tensor loss = poisoned(ba);
  ciou_forward_cpu(Tensor::from_vector(boxes, r.pred), Tensor::from_vector(boxes, c.target),
                   Tensor::from_vector(ba, c.weight), BoxFormat::xyxy, loss, Tensor(), Tensor(), Tensor());
  expect_close(y, loss.to_vector(), DType::f32, "bf16 plan loss");
}

}  // namespace

}  // namespace test_ciou_gpu_cpp
