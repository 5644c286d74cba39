// YOLO26n on the CPU against the independent PyTorch reference (tools/reference/yolo26_model.py, written from
// YOLO26.md) with the fixture's random weights: the raw outputs of both heads in inference and in the training forward
// within 2× the reference's own f32-vs-float64 error, the end-to-end and NMS detections as sets, a rectangular input,
// 640×640, and the exported (BatchNorm folded) model.
#include <gtest/gtest.h>

#include "models/yolo/yolo26_fixture.h"
#include "vision/models/yolo/model.h"

using namespace vision;
using namespace vision::test::yolo26_fixture;

namespace {

// Batch 2 of the same image: both images must match the reference (a batch indexing bug cannot pass).
TEST(Yolo26Reference, InferenceRawOutputsAndDetectionsMatchOnTheCpu) {
  graph::Executor ex(inference_graph(kSpec, false, metadata_float("e2e_conf")), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({image("image_320", 2)});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].shape(), (core::Shape{2, 300, 6}));
  const char* names[] = {"eval.one2one.ltrb", "eval.one2one.logits", "eval.one2many.ltrb", "eval.one2many.logits"};
  for (int64_t b = 0; b < 2; ++b) {
    for (size_t k = 0; k < 4; ++k) expect_matches_reference(out[2 + k].to_vector(), names[k], true, b);
    expect_same_detections({out[0], out[1], b}, {output("e2e.detections"), output("e2e.count")}, score_tolerance(),
                           box_tolerance(), "end-to-end image " + std::to_string(b));
  }
}

TEST(Yolo26Reference, NmsDetectionsOfTheOneToManyHeadMatch) {
  graph::Executor ex(inference_graph(kSpec, true, metadata_float("nms_conf")), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({image("image_320")});
  expect_matches_reference(out[4].to_vector(), "eval.one2many.ltrb");
  expect_same_detections({out[0], out[1]}, {output("nms.detections"), output("nms.count")}, score_tolerance(),
                         box_tolerance(), "NMS");
}

// Training mode: BatchNorm on the batch's statistics (a batch of two copies has the statistics of one image).
TEST(Yolo26Reference, TrainingForwardRawOutputsMatchOnTheCpu) {
  graph::Executor ex(training_graph(), graph::cpu_backend());
  load(ex, weights(), kSpec, graph::Mode::train);
  const auto out = ex.forward_train({image("image_320", 2)});
  ASSERT_EQ(out.size(), 4u);
  const char* names[] = {"train.one2one.ltrb", "train.one2one.logits", "train.one2many.ltrb", "train.one2many.logits"};
  for (int64_t b = 0; b < 2; ++b)
    for (size_t k = 0; k < 4; ++k) expect_matches_reference(out[k].to_vector(), names[k], true, b);
}

TEST(Yolo26Reference, RectangularInputMatches) {
  graph::Executor ex(inference_graph(), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({image("image_192x320")});
  EXPECT_EQ(out[2].shape(), (core::Shape{1, 4, 24 * 40 + 12 * 20 + 6 * 10}));
  expect_matches_reference(out[2].to_vector(), "rect.one2one.ltrb");
  expect_matches_reference(out[3].to_vector(), "rect.one2one.logits");
}

// The CPU's default plan, f32 NHWC (every convolution on oneDNN's NHWC kernels, pooling, upsampling, concat and split
// on pixels of C values, PSA reading NHWC, the heads converted to NCHW for their reshapes), against the same
// reference. Run once before the weights are loaded: the convolutions keep their weights in oneDNN's blocked
// layout, and loading new state must reach them (a plan's refresh), or the second run would use the first weights.
TEST(Yolo26Reference, NhwcPlanMatchesOnTheCpuAfterNewWeights) {
  graph::Executor ex(inference_graph(kSpec, false, metadata_float("e2e_conf")), graph::cpu_backend(),
                     graph::PlanOptions{.layout = core::Layout::nhwc});
  const core::Tensor x = image("image_320", 2);
  const auto before = ex.forward({x})[2].to_vector();
  load(ex);
  const auto out = ex.forward({x});
  EXPECT_NE(out[2].to_vector(), before);
  const char* names[] = {"eval.one2one.ltrb", "eval.one2one.logits", "eval.one2many.ltrb", "eval.one2many.logits"};
  for (int64_t b = 0; b < 2; ++b) {
    for (size_t k = 0; k < 4; ++k) expect_matches_reference(out[2 + k].to_vector(), names[k], true, b);
    expect_same_detections({out[0], out[1], b}, {output("e2e.detections"), output("e2e.count")}, score_tolerance(),
                           box_tolerance(), "end-to-end NHWC image " + std::to_string(b));
  }
  // Every rank-4 step computes in NHWC: the conversions are the NCHW input's and, before the heads' flattens, the 12
  // last convolutions' outputs (box and class maps of both heads at three levels).
  const graph::Plan& plan = ex.plan(graph::Mode::inference, {x.shape()});
  EXPECT_EQ(plan.conversion_steps(), 13u) << plan.describe();
}

TEST(Yolo26Reference, NhwcPlanRectangularInputMatches) {
  graph::Executor ex(inference_graph(), graph::cpu_backend(), graph::PlanOptions{.layout = core::Layout::nhwc});
  load(ex);
  const auto out = ex.forward({image("image_192x320")});
  expect_matches_reference(out[2].to_vector(), "rect.one2one.ltrb");
  expect_matches_reference(out[3].to_vector(), "rect.one2one.logits");
}

// 640×640 (8400 anchors, the size the model is trained at), batch 2 of the same image: the raw outputs of both heads
// and the end-to-end detections.
TEST(Yolo26Reference, InferenceAt640MatchesOnTheCpu) {
  graph::Executor ex(inference_graph(kSpec, false, metadata_float("e2e_conf")), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({image("image_640", 2)});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[2].shape(), (core::Shape{2, 4, 80 * 80 + 40 * 40 + 20 * 20}));
  EXPECT_EQ(out[3].shape(), (core::Shape{2, 80, 8400}));
  const char* names[] = {"eval640.one2one.ltrb", "eval640.one2one.logits", "eval640.one2many.ltrb",
                         "eval640.one2many.logits"};
  for (int64_t b = 0; b < 2; ++b) {
    for (size_t k = 0; k < 4; ++k) expect_matches_reference(out[2 + k].to_vector(), names[k], true, b);
    expect_same_detections({out[0], out[1], b}, {output("e2e640.detections"), output("e2e640.count")},
                           score_tolerance("eval640"), box_tolerance("eval640"),
                           "end-to-end 640 image " + std::to_string(b));
  }
}

TEST(Yolo26Reference, NmsDetectionsAt640Match) {
  graph::Executor ex(inference_graph(kSpec, true, metadata_float("nms_conf")), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({image("image_640")});
  expect_matches_reference(out[5].to_vector(), "eval640.one2many.logits");
  expect_same_detections({out[0], out[1]}, {output("nms640.detections"), output("nms640.count")},
                         score_tolerance("eval640"), box_tolerance("eval640"), "NMS 640");
}

// The exported model (BatchNorm folded into the convolutions in float64, stored in f32) through Yolo26Model: the same
// outputs as the reference's full checkpoint.
TEST(Yolo26Reference, ExportedModelMatches) {
  test::TempDir dir;
  const auto exported = models::yolo::fold_batchnorm(weights());
  core::write_safetensors(dir.path() / "fused.safetensors", exported.tensors, exported.metadata);
  models::yolo::Yolo26Model::Options options;
  options.inference.raw_outputs = true;
  options.inference.postprocess.conf = metadata_float("e2e_conf");
  auto model = models::yolo::Yolo26Model::load(dir.path() / "fused.safetensors", graph::cpu_backend(), options);
  EXPECT_TRUE(model.info().fused());
  const auto out = model.forward(image("image_320"));
  ASSERT_EQ(out.size(), 4u);
  expect_matches_reference(out[2].to_vector(), "eval.one2one.ltrb");
  expect_matches_reference(out[3].to_vector(), "eval.one2one.logits");
  expect_same_detections({out[0], out[1]}, {output("e2e.detections"), output("e2e.count")}, score_tolerance(),
                         box_tolerance(), "exported model");
}

}  // namespace
