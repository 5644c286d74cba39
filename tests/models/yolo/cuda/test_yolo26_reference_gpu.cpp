// YOLO26n on CUDA against the independent PyTorch reference (the fixture of test_yolo26_reference.cpp): the raw
// outputs of both heads in f32 NCHW (TF32 off) within 2× the reference's own f32-vs-float64 error and in f16 NCHW /
// NHWC within 2× its own f16 error, at 320×320, 192×320 and 640×640; detections as sets (f32: against the reference's;
// f16: against the CPU twins' decode and top-k of the GPU's own raw outputs); eager, captured and replayed runs; the
// training forward in f32; the model's default plan (f16 NHWC).
//
// The reference's f16 error is that of an emulated f16 inference (tools/reference/yolo26_model.py, NUMERICS.f16):
// BatchNorm folded in float64, weights, biases and every op's output rounded to f16, arithmetic in f32, the attention
// probabilities rounded to f16 — what a PyTorch f16 inference with folded BatchNorm does on a GPU (f32 accumulation),
// computed on the CPU, where PyTorch 1.13 has no f16 convolution.
#include <gtest/gtest.h>

#include "models/yolo/yolo26_fixture.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/model.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_yolo26_reference_gpu_cpp {

using namespace vision;
using namespace vision::test::yolo26_fixture;
using core::DType;
using core::Layout;

namespace {

struct Case {
  DType dtype;
  Layout layout;
};
std::string name(const testing::TestParamInfo<Case>& i) {
  return std::string(core::dtype_name(i.param.dtype)) + "_" + std::string(core::layout_name(i.param.layout));
}

class Yolo26ReferenceGpu : public testing::TestWithParam<Case> {};

core::Tensor host(graph::Executor& ex, const core::Tensor& t) { return ex.backend().download(t); }

// The CPU twins' end-to-end detections of raw outputs: decode to input pixels, then the top k.
std::pair<core::Tensor, core::Tensor> cpu_detections(const core::Tensor& ltrb, const core::Tensor& logits,
                                                     int64_t height, int64_t width, float conf) {
  namespace k = models::yolo::kernels;
  const int64_t a = ltrb.dim(2);
  const core::Tensor anchors = core::Tensor::from_vector(core::Shape{3, a}, k::detect_anchor_grid(height, width));
  core::Tensor boxes = core::Tensor::zeros(ltrb.shape());
  k::detect_decode_cpu(ltrb, anchors, k::DecodeMode::pixels, boxes);
  core::Tensor dets = core::Tensor::zeros(core::Shape{ltrb.dim(0), 300, 6});
  core::Tensor count = core::Tensor::zeros(core::Shape{ltrb.dim(0)}, DType::i32);
  k::postprocess_e2e_cpu(boxes, logits, {.conf = conf}, dets, count);
  return {dets, count};
}

TEST_P(Yolo26ReferenceGpu, InferenceMatchesTheReference) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Case c = GetParam();
  const bool f32 = c.dtype == DType::f32;
  const float conf = metadata_float("e2e_conf");
  graph::Executor ex(inference_graph(kSpec, false, conf), graph::cuda_backend(),
                     graph::PlanOptions{.compute_dtype = c.dtype, .layout = c.layout});
  load(ex);
  const char* names[] = {"eval.one2one.ltrb", "eval.one2one.logits", "eval.one2many.ltrb", "eval.one2many.logits"};
  for (int run = 0; run < 3; ++run) {  // eager, captured, replayed
    SCOPED_TRACE("run " + std::to_string(run));
    const auto out = ex.forward({image("image_320", 2)});
    std::vector<core::Tensor> h;
    for (const auto& t : out) h.push_back(host(ex, t));
    for (int64_t b = 0; b < 2; ++b) {
      for (size_t k = 0; k < 4; ++k) expect_matches_reference(h[2 + k].to_vector(), names[k], f32, b);
      if (f32) {
        expect_same_detections({h[0], h[1], b}, {output("e2e.detections"), output("e2e.count")}, score_tolerance(),
                               box_tolerance(), "image " + std::to_string(b));
      } else {
        // f16 boxes: within half an f16 ulp at 320 px of the twins' f32 decode of the same LTRB values.
        const auto [dets, count] = cpu_detections(h[2], h[3], 320, 320, conf);
        expect_same_detections({h[0], h[1], b}, {dets, count, b}, 1e-5, 0.25, "f16 image " + std::to_string(b));
      }
    }
  }
  EXPECT_TRUE(ex.plan(graph::Mode::inference, {image("image_320", 2).shape()}).graph_replayed());
}

// 640×640 (8400 anchors), batch 2 of the same image: f32 with deterministic cuDNN algorithms (and, as every f32 plan,
// IEEE f32 without TF32) within 2× the reference's f32 error, f16 within 2× its f16 error; the detections as above.
TEST_P(Yolo26ReferenceGpu, InferenceAt640MatchesTheReference) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Case c = GetParam();
  const bool f32 = c.dtype == DType::f32;
  const float conf = metadata_float("e2e_conf");
  graph::Executor ex(inference_graph(kSpec, false, conf), graph::cuda_backend(),
                     graph::PlanOptions{.deterministic = f32, .compute_dtype = c.dtype, .layout = c.layout});
  load(ex);
  const char* names[] = {"eval640.one2one.ltrb", "eval640.one2one.logits", "eval640.one2many.ltrb",
                         "eval640.one2many.logits"};
  for (int run = 0; run < 3; ++run) {  // eager, captured, replayed
    SCOPED_TRACE("run " + std::to_string(run));
    const auto out = ex.forward({image("image_640", 2)});
    std::vector<core::Tensor> h;
    for (const auto& t : out) h.push_back(host(ex, t));
    ASSERT_EQ(h[2].shape(), (core::Shape{2, 4, 8400}));
    for (int64_t b = 0; b < 2; ++b) {
      for (size_t k = 0; k < 4; ++k) expect_matches_reference(h[2 + k].to_vector(), names[k], f32, b);
      if (f32) {
        expect_same_detections({h[0], h[1], b}, {output("e2e640.detections"), output("e2e640.count")},
                               score_tolerance("eval640"), box_tolerance("eval640"), "640 image " + std::to_string(b));
      } else {
        // f16 boxes: within one f16 ulp at the largest coordinate of the twins' f32 decode of the same LTRB values
        // (0.5 px from 512 px on).
        const auto [dets, count] = cpu_detections(h[2], h[3], 640, 640, conf);
        const std::vector<float> d = dets.to_vector();
        double largest = 1;
        for (size_t i = 0; i < d.size(); ++i)
          if (i % 6 < 4) largest = std::max(largest, static_cast<double>(std::abs(d[i])));
        const double ulp = std::ldexp(1.0, std::ilogb(largest) - 10);
        expect_same_detections({h[0], h[1], b}, {dets, count, b}, 1e-5, ulp, "f16 640 image " + std::to_string(b));
      }
    }
  }
  EXPECT_TRUE(ex.plan(graph::Mode::inference, {image("image_640", 2).shape()}).graph_replayed());
}

TEST_P(Yolo26ReferenceGpu, RectangularInputMatches) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Case c = GetParam();
  graph::Executor ex(inference_graph(), graph::cuda_backend(),
                     graph::PlanOptions{.compute_dtype = c.dtype, .layout = c.layout});
  load(ex);
  const auto out = ex.forward({image("image_192x320")});
  expect_matches_reference(host(ex, out[2]).to_vector(), "rect.one2one.ltrb", c.dtype == DType::f32);
  expect_matches_reference(host(ex, out[3]).to_vector(), "rect.one2one.logits", c.dtype == DType::f32);
}

INSTANTIATE_TEST_SUITE_P(Formats, Yolo26ReferenceGpu,
                         testing::Values(Case{DType::f32, Layout::nchw}, Case{DType::f16, Layout::nchw},
                                         Case{DType::f16, Layout::nhwc}),
                         name);

// Training mode in f32: BatchNorm on the batch's statistics (the GPU's reduction kernels).
TEST(Yolo26ReferenceGpuTraining, TrainingForwardMatchesInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  graph::Executor ex(training_graph(), graph::cuda_backend());
  load(ex, weights(), kSpec, graph::Mode::train);
  const auto out = ex.forward_train({image("image_320", 2)});
  const char* names[] = {"train.one2one.ltrb", "train.one2one.logits", "train.one2many.ltrb", "train.one2many.logits"};
  for (int64_t b = 0; b < 2; ++b)
    for (size_t k = 0; k < 4; ++k) expect_matches_reference(host(ex, out[k]).to_vector(), names[k], true, b);
}

// Yolo26Model on CUDA computes in f16 NHWC by default.
TEST(Yolo26ReferenceGpuModel, DefaultPlanIsF16Nhwc) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  models::yolo::Yolo26Model::Options options;
  options.inference.raw_outputs = true;
  auto model = models::yolo::Yolo26Model::load(fixture_path("yolo26n_random.safetensors"), graph::cuda_backend(),
                                               options);
  const auto out = model.forward(image("image_320"));
  const graph::Plan& plan = model.executor().plan(graph::Mode::inference, {image("image_320").shape()});
  EXPECT_EQ(plan.options().compute_dtype, DType::f16);
  EXPECT_EQ(plan.options().layout, Layout::nhwc);
  expect_matches_reference(host(model.executor(), out[3]).to_vector(), "eval.one2one.logits", false);
}

}  // namespace

}  // namespace test_yolo26_reference_gpu_cpp
