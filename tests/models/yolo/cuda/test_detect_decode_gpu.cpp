// Detect decode on CUDA: the kernel descriptors (no GPU needed); the forward kernel of every mode and the grid-mode
// backward in f32, f16 and bf16 against a float64 reference with poisoned outputs; the graph op on the CUDA backend
// against its CPU twin (forward of every mode, grid backward, its own anchor grid); one graph at two input sizes on
// the GPU. GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "models/yolo/decode_reference.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/detect_decode_cuda.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_detect_decode_gpu_cpp {

using namespace vision;
using namespace vision::test;
using namespace vision::models::yolo::kernels;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

constexpr DecodeMode kModes[] = {DecodeMode::pixels, DecodeMode::grid, DecodeMode::cxcywh};
constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Unit roundoff of an element type.
double unit_roundoff(DType t) {
  return std::ldexp(1.0, t == DType::f32 ? -24 : t == DType::f16 ? -11 : -8);
}

std::vector<Tensor> levels(int64_t batch, int64_t h, int64_t w) {
  std::vector<Tensor> out;
  for (int64_t s : {8, 16, 32}) out.push_back(random_tensor(Shape{batch, 1, h / s, w / s}));
  return out;
}

TEST(DetectDecodeDescriptors, EveryDtypeOfBothKernelsIsRegistered) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("detect_decode_")) ids.insert(k->id());
  EXPECT_EQ(ids, (std::set<std::string>{"detect_decode_forward__f32", "detect_decode_forward__f16",
                                        "detect_decode_forward__bf16", "detect_decode_backward__f32",
                                        "detect_decode_backward__f16", "detect_decode_backward__bf16"}));
  const auto& k = cuda::kernel_instance<DetectDecodeForward>(DType::bf16);
  EXPECT_EQ(k.name_expression(), "vision::models::yolo::kernels::detect_decode_forward<__nv_bfloat16>");
  EXPECT_NE(k.source().find("detect_decode_forward"), std::string::npos);
  // The CUDA RuntimeOp lists the forward of its format's dtype, and in grid mode the backward too.
  DetectDecodeOp grid(DecodeMode::grid), pixels(DecodeMode::pixels);
  EXPECT_EQ(grid.lower(graph::Backend::cuda, graph::Mode::train)->kernels().size(), 2u);
  const auto rt = pixels.lower(graph::Backend::cuda, graph::Mode::inference);
  ASSERT_TRUE(rt->supports(graph::Format{DType::bf16, core::Layout::nhwc}));
  rt->set_format(graph::Format{DType::bf16, core::Layout::nhwc});
  ASSERT_EQ(rt->kernels().size(), 1u);
  EXPECT_EQ(rt->kernels()[0].id, "detect_decode_forward__bf16");
  EXPECT_FALSE(rt->reads_input(1));
  EXPECT_TRUE(grid.lower(graph::Backend::cuda, graph::Mode::train)->has_backward());
  EXPECT_FALSE(pixels.lower(graph::Backend::cuda, graph::Mode::train)->has_backward());
}

// The kernels through their launch helpers, per dtype and mode, on a rectangular 640×384 input, batch 2, against
// float64 from the dtype-rounded inputs. Bound per element: the f32 computation (a few ulp of |anchor| + |distance|,
// times stride) plus the output's rounding (u·|ref|).
TEST(DetectDecodeKernels, ForwardAndGridBackwardMatchFloat64InEveryDtype) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t h = 640, w = 384, batch = 2, n = detect_anchor_count(h, w);
  const auto grid = detect_anchor_grid(h, w);
  DeviceBuffer anchors(grid.size() * 4);
  anchors.upload(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(grid.data()),
                                      reinterpret_cast<const uint8_t*>(grid.data()) + grid.size() * 4));
  for (DType dt : kDtypes) {
    const size_t count = static_cast<size_t>(batch * 4 * n), bytes = count * core::dtype_size(dt);
    const std::vector<float> ltrb = rounded(random_values(count, 0.0f, 6.0f), dt);
    DeviceBuffer in(bytes), out(bytes);
    in.upload(encode(ltrb, dt));
    for (DecodeMode mode : kModes) {
      out.poison();
      launch_detect_decode_forward(nullptr, dt, in.get(), static_cast<const float*>(anchors.get()), out.get(), batch,
                                   n, mode);
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      const auto o = decode(out.download(bytes), dt);
      const auto ref = reference_decode(ltrb, batch, n, h, w, static_cast<int>(mode));
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        const auto a = reference_anchor(static_cast<int64_t>(i) % n, h, w);
        const double s = mode == DecodeMode::grid ? 1.0 : a[2];
        const double bound =
            8 * std::ldexp(1.0, -24) * (std::max(a[0], a[1]) + 6) * s + unit_roundoff(dt) * std::abs(ref[i]);
        if (!(std::abs(o[i] - ref[i]) <= bound) && bad++ < 5)
          ADD_FAILURE() << core::dtype_name(dt) << " " << decode_mode_name(mode) << " element " << i << ": " << o[i]
                        << " vs " << ref[i];
      }
      EXPECT_EQ(bad, 0u) << core::dtype_name(dt) << " " << decode_mode_name(mode);
    }
    // Backward: exact (a sign flip), so equality with the rounded input.
    out.poison();
    launch_detect_decode_backward(nullptr, dt, in.get(), out.get(), batch, n);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    const auto g = decode(out.download(bytes), dt);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(g[i], (static_cast<int64_t>(i) / n) % 4 < 2 ? -ltrb[i] : ltrb[i]) << core::dtype_name(dt) << " " << i;
  }
}

// The graph op on the GPU against its CPU twin: forward of every mode at 640×640 and 320×320 (bounds of the f32
// computation: a few ulp of the magnitudes), the grid backward (exact), and the GPU op's own anchor grid.
TEST(DetectDecodeOpGpu, MatchesTheCpuTwinInEveryMode) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (auto [h, w] : {std::pair<int64_t, int64_t>{640, 640}, {320, 320}})
    for (DecodeMode mode : kModes) {
      const Tensor ltrb = random_tensor(Shape{2, 4, detect_anchor_count(h, w)}, 0.0f, 6.0f);
      std::vector<Tensor> inputs = {ltrb};
      for (const Tensor& l : levels(2, h, w)) inputs.push_back(l);
      DetectDecodeOp op(mode);
      const graph::Mode gm = mode == DecodeMode::grid ? graph::Mode::train : graph::Mode::inference;
      OpHarness cpu(op, inputs, gm);
      OpHarness gpu(op, cpu, graph::cuda_backend());
      OpHarness own(op, inputs, gm, "node", graph::cuda_backend());  // anchors from the CUDA op's param_init_data
      EXPECT_EQ(own.params.at(0).to_vector(), cpu.params.at(0).to_vector()) << "anchor grid";
      const bool training = gm == graph::Mode::train;
      const Tensor y_cpu = cpu.forward(training), y_gpu = gpu.forward(training);
      EXPECT_LT(max_abs_error(y_gpu.to_vector(), y_cpu.to_vector()), 1e-6 * (std::max(h, w) + 64))
          << decode_mode_name(mode) << " " << h << "x" << w;
      if (!training) continue;
      const Tensor dy = random_tensor(y_cpu.shape());
      const auto g_cpu = cpu.backward(dy), g_gpu = gpu.backward(dy);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_EQ(g_gpu.inputs[i].to_vector(), g_cpu.inputs[i].to_vector()) << "gradient of input " << i;
    }
}

// One graph, two input sizes: two plans on the GPU, each with its own anchor grid, equal to the CPU executor's.
TEST(DetectDecodeOpGpu, OneGraphTwoSizesMatchesTheCpuExecutor) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto ltrb = g->input("ltrb", Shape{Shape::kAny, 4, Shape::kAny});
  std::vector<graph::SymTensor> lv;
  for (const char* name : {"p3", "p4", "p5"})
    lv.push_back(g->input(name, Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny}));
  g->mark_output(detect_decode(ltrb, lv[0], lv[1], lv[2], DecodeMode::cxcywh));
  graph::Executor cpu(g, graph::cpu_backend()), gpu(g, graph::cuda_backend());
  for (auto [h, w] : {std::pair<int64_t, int64_t>{640, 384}, {320, 320}}) {
    std::vector<Tensor> inputs = {random_tensor(Shape{2, 4, detect_anchor_count(h, w)}, 0.0f, 6.0f)};
    for (const Tensor& l : levels(2, h, w)) inputs.push_back(l);
    const auto y_cpu = cpu.forward(inputs)[0].to_vector();
    const auto y_gpu = to_host(gpu, gpu.forward(inputs)[0]);
    EXPECT_LT(max_abs_error(y_gpu, y_cpu), 1e-6 * (std::max(h, w) + 64)) << h << "x" << w;
  }
  EXPECT_EQ(gpu.cached_plans(), 2u);
}

// In an f16 NHWC plan the decode runs in f16; ltrb is converted and the boxes converted back, but the level maps,
// read for their shapes only, are not. Boxes within f16 rounding of the CPU twin's.
TEST(DetectDecodeOpGpu, RunsInALowPrecisionPlanWithoutConvertingTheLevelMaps) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto ltrb = g->input("ltrb", Shape{Shape::kAny, 4, Shape::kAny});
  std::vector<graph::SymTensor> lv;
  for (const char* name : {"p3", "p4", "p5"})
    lv.push_back(g->input(name, Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny}));
  g->mark_output(detect_decode(ltrb, lv[0], lv[1], lv[2], DecodeMode::pixels));
  graph::Executor cpu(g, graph::cpu_backend());
  graph::Executor gpu(g, graph::cuda_backend(),
                      graph::PlanOptions{.compute_dtype = DType::f16, .layout = core::Layout::nhwc});
  const int64_t h = 640, w = 640;
  std::vector<Tensor> inputs = {random_tensor(Shape{2, 4, detect_anchor_count(h, w)}, 0.0f, 6.0f)};
  for (const Tensor& l : levels(2, h, w)) inputs.push_back(l);
  const auto y_cpu = cpu.forward(inputs)[0].to_vector();
  const auto y_gpu = to_host(gpu, gpu.forward(inputs)[0]);
  graph::Plan& plan = gpu.plan(graph::Mode::inference, {inputs[0].shape(), inputs[1].shape(), inputs[2].shape(),
                                                        inputs[3].shape()});
  EXPECT_EQ(plan.conversion_steps(), 2u) << plan.describe();
  // ltrb rounded to f16 (≤ 6: ulp 2^-8), decoded, boxes rounded to f16 (≤ 700 px: u·|y|), times the stride.
  for (size_t i = 0; i < y_cpu.size(); ++i)
    ASSERT_LE(std::abs(y_gpu[i] - y_cpu[i]), 32 * 0x1p-11 * 6 + 0x1p-11 * std::abs(y_cpu[i]) + 1e-3) << i;
}

}  // namespace

}  // namespace test_detect_decode_gpu_cpp
