// Postprocess on the CPU: the conf threshold in logit space; the end-to-end top-k and class-aware NMS on hand-computed
// cases (ties, all scores below conf, fewer anchors than max_det, max_nms, the class filter) at batch 1 and 7; both
// against independent references on random inputs (with many exact ties) at batch 1 and 7; the graph op in a CPU
// plan (two outputs, f32 and i32); shape and option errors; the letterbox transform and its inverse.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/yolo/postprocess_test_util.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/postprocess.h"

using namespace vision;
using namespace vision::graph;
using namespace vision::models::yolo::kernels;
using namespace vision::test::postprocess;
using vision::test::error_of;
using vision::test::random_tensor;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Conf threshold

TEST(PostprocessConf, TheLogitThresholdIsExactlyWhereSigmoidCrossesConf) {
  EXPECT_EQ(conf_logit_threshold(0.5f), 0.0f);  // σ(0) = 0.5 is not > 0.5; σ of the next float up is
  EXPECT_EQ(conf_logit_threshold(0.0f), -INFINITY);
  EXPECT_EQ(conf_logit_threshold(1.0f), INFINITY);
  for (float conf : {0.001f, 0.25f, 0.3f, 0.7f, 0.999f, 1e-30f, 0.9999999f}) {
    const float t = conf_logit_threshold(conf);
    EXPECT_LE(sigmoid_d(t), static_cast<double>(conf)) << conf;
    EXPECT_GT(sigmoid_d(std::nextafter(t, INFINITY)), static_cast<double>(conf)) << conf;
  }
  EXPECT_NE(error_of([] { (void)conf_logit_threshold(1.5f); }).find("conf"), std::string::npos);
  EXPECT_NE(error_of([] { (void)conf_logit_threshold(-0.1f); }).find("conf"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Hand-computed cases

TEST(PostprocessE2E, HandComputedCasesAtBatch1And7) {
  for (const HandCase& hc : hand_cases())
    if (hc.method == PostprocessMethod::end_to_end)
      for (int64_t batch : {1, 7}) check_hand_case(hc, *cpu_backend(), batch);
}

TEST(PostprocessNms, HandComputedCasesAtBatch1And7) {
  for (const HandCase& hc : hand_cases())
    if (hc.method == PostprocessMethod::nms)
      for (int64_t batch : {1, 7}) check_hand_case(hc, *cpu_backend(), batch);
}

// The hand cases' expectations agree with the independent references (so the cases test what they say).
TEST(PostprocessCases, HandCasesAgreeWithTheReferences) {
  for (const HandCase& hc : hand_cases()) {
    const Tensor boxes = make_boxes(hc.boxes, 1), logits = make_logits(hc.logits, 1);
    const auto ref = reference(hc.method, boxes, logits, 0, hc.options);
    ASSERT_EQ(ref.size(), hc.expected.size()) << hc.name;
    for (size_t r = 0; r < ref.size(); ++r)
      EXPECT_TRUE(ref[r].anchor == hc.expected[r].anchor && ref[r].cls == hc.expected[r].cls &&
                  ref[r].logit == hc.expected[r].logit)
          << hc.name << " row " << r;
  }
}

// NaN logits never become detections and do not disturb the others.
TEST(PostprocessE2E, NanLogitsRankLastAndAreNeverKept) {
  std::vector<std::vector<float>> logits = {{NAN, 1.0f, NAN, 0.5f}, {NAN, NAN, 2.0f, NAN}};
  const Tensor boxes = make_boxes({{0, 0, 10, 10}, {40, 0, 50, 10}, {80, 0, 90, 10}, {120, 0, 130, 10}}, 1);
  const Tensor l = make_logits(logits, 1);
  for (PostprocessMethod m : {PostprocessMethod::end_to_end, PostprocessMethod::nms}) {
    PostprocessOptions o;
    o.max_det = 4;
    const OpResult run = run_op(PostprocessOp(m, o), boxes, l, *cpu_backend());
    // Both methods: (2, c1) 2.0, (1, c0) 1.0, (3, c0) 0.5; anchor 0 (all NaN) nowhere, though k = 4 takes a pair of it.
    const std::vector<RefRow> expected = {{2, 1, 2.0f}, {1, 0, 1.0f}, {3, 0, 0.5f}};
    expect_rows(run, 0, boxes, expected, std::string(postprocess_method_name(m)));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Random inputs against the references

struct RandomCase {
  int64_t batch, n, nc;
  float step;  // logits rounded to multiples of step (0: continuous)
  PostprocessOptions options;
};

std::vector<RandomCase> random_cases() {
  std::vector<RandomCase> cases;
  for (int64_t batch : {1, 7})
    for (float step : {0.0f, 0.25f}) {
      PostprocessOptions o;
      o.max_det = 40;
      o.iou = 0.5f;
      cases.push_back({batch, 300, 5, step, o});
      o.conf = 0.6f;  // fewer rows than max_det
      o.iou = 0.7f;
      o.classes = {0, 3};
      cases.push_back({batch, 300, 5, step, o});
      o = {};
      o.max_nms = 50;
      o.max_det = 300;
      o.conf = 0.001f;
      cases.push_back({batch, 257, 3, step, o});  // fewer anchors than max_det
    }
  return cases;
}

void check_random(PostprocessMethod m) {
  for (const RandomCase& c : random_cases()) {
    const Tensor boxes = random_boxes(c.batch, c.n), logits = random_logits(c.batch, c.nc, c.n, -4.0f, 3.0f, c.step);
    const OpResult run = run_op(PostprocessOp(m, c.options), boxes, logits, *cpu_backend());
    const std::string what = std::string(postprocess_method_name(m)) + " batch " + std::to_string(c.batch) +
                             " step " + std::to_string(c.step) + " conf " + std::to_string(c.options.conf);
    for (int64_t b = 0; b < c.batch; ++b) expect_rows(run, b, boxes, reference(m, boxes, logits, b, c.options), what);
  }
}

TEST(PostprocessE2E, MatchesTheAllPairsReferenceOnRandomInputsWithTies) { check_random(PostprocessMethod::end_to_end); }
TEST(PostprocessNms, MatchesTheGreedyReferenceOnRandomInputsWithTies) { check_random(PostprocessMethod::nms); }

// The NMS suppresses: on clustered boxes the reference keeps far fewer rows than there are candidates, and so does
// the op (a check that the random test above exercises suppression at all).
TEST(PostprocessNms, ClusteredBoxesAreSuppressed) {
  const Tensor boxes = random_boxes(1, 400, 60, 20, 40), logits = random_logits(1, 2, 400, 0.0f, 3.0f);
  PostprocessOptions o;
  o.iou = 0.5f;
  const OpResult run = run_op(PostprocessOp(PostprocessMethod::nms, o), boxes, logits, *cpu_backend());
  const auto ref = reference_nms(boxes, logits, 0, o);
  EXPECT_LT(ref.size(), 200u);
  EXPECT_GT(ref.size(), 2u);
  expect_rows(run, 0, boxes, ref, "clustered");
}

// ---------------------------------------------------------------------------------------------------------------
// In a graph

TEST(PostprocessGraph, BothOpsInACpuPlanGiveF32DetectionsAndI32Counts) {
  auto g = std::make_shared<Graph>();
  auto boxes = g->input("boxes", Shape{Shape::kAny, 4, Shape::kAny});
  auto logits = g->input("logits", Shape{Shape::kAny, 5, Shape::kAny});
  PostprocessOptions o;
  o.max_det = 30;
  o.iou = 0.5f;
  o.classes = {1, 2, 4};
  const DetectionTensors e2e = postprocess_e2e(boxes, logits, o);
  const DetectionTensors nms = postprocess_nms(boxes, logits, o);
  EXPECT_EQ(e2e.detections.shape(), (Shape{Shape::kAny, 30, 6}));
  EXPECT_EQ(e2e.detections.dtype(), DType::f32);
  EXPECT_EQ(e2e.count.shape(), (Shape{Shape::kAny}));
  EXPECT_EQ(e2e.count.dtype(), DType::i32);
  EXPECT_FALSE(g->value(e2e.count.id()).differentiable);
  for (SymTensor t : {e2e.detections, e2e.count, nms.detections, nms.count}) g->mark_output(t, kInferenceOutput);
  Executor ex(g, cpu_backend());
  for (int64_t batch : {1, 7}) {
    const Tensor bx = random_boxes(batch, 200), lg = random_logits(batch, 5, 200, -3.0f, 3.0f, 0.5f);
    const auto out = ex.forward({bx, lg});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[1].dtype(), DType::i32);
    const OpResult re{out[0].clone(), out[1].clone()}, rn{out[2].clone(), out[3].clone()};
    for (int64_t b = 0; b < batch; ++b) {
      expect_rows(re, b, bx, reference_e2e(bx, lg, b, o), "graph e2e");
      expect_rows(rn, b, bx, reference_nms(bx, lg, b, o), "graph nms");
    }
  }
  // The class filter is a per-plan constant; a filter naming a class the logits lack is refused at build time.
  auto g2 = std::make_shared<Graph>();
  auto b2 = g2->input("boxes", Shape{1, 4, 10});
  auto l2 = g2->input("logits", Shape{1, 3, 10});
  PostprocessOptions bad;
  bad.classes = {3};
  const std::string e = error_of([&] { postprocess_e2e(b2, l2, bad); });
  EXPECT_NE(e.find("class 3"), std::string::npos) << e;
}

TEST(PostprocessGraph, ShapeAndOptionErrorsNameTheProblem) {
  const PostprocessOp op(PostprocessMethod::end_to_end, {});
  EXPECT_EQ(op.infer_output_shapes({Shape{2, 4, 8400}, Shape{2, 80, 8400}}),
            (std::vector<Shape>{Shape{2, 300, 6}, Shape{2}}));
  EXPECT_EQ(op.infer_output_dtypes({DType::bf16, DType::bf16}), (std::vector<DType>{DType::f32, DType::i32}));
  auto err = [&](std::vector<Shape> in) { return error_of([&] { (void)op.infer_output_shapes(in); }); };
  EXPECT_NE(err({Shape{2, 5, 8400}, Shape{2, 80, 8400}}).find("[B, 4, A]"), std::string::npos);
  EXPECT_NE(err({Shape{4, 8400}, Shape{2, 80, 8400}}).find("[B, 4, A]"), std::string::npos);
  EXPECT_NE(err({Shape{2, 4, 8400}, Shape{80, 8400}}).find("[B, nc, A]"), std::string::npos);
  EXPECT_NE(err({Shape{2, 4, 8400}, Shape{2, 80, 8401}}).find("anchors"), std::string::npos);
  EXPECT_NE(err({Shape{2, 4, 8400}, Shape{3, 80, 8400}}).find("batch"), std::string::npos);
  EXPECT_NE(err({Shape{2, 4, 8400}}).find("2 inputs"), std::string::npos);
  EXPECT_NE(err({Shape{2, 4, 8400}, Shape{2, 0, 8400}}).find("no classes"), std::string::npos);
  EXPECT_EQ(op.infer_output_shapes({Shape{Shape::kAny, 4, Shape::kAny}, Shape{Shape::kAny, 80, Shape::kAny}}),
            (std::vector<Shape>{Shape{Shape::kAny, 300, 6}, Shape{Shape::kAny}}));

  auto opt_err = [](PostprocessOptions o) {
    return error_of([&] { (void)PostprocessOp(PostprocessMethod::nms, o); });
  };
  PostprocessOptions o;
  o.max_det = 0;
  EXPECT_NE(opt_err(o).find("max_det"), std::string::npos);
  o.max_det = kMaxDetections + 1;
  EXPECT_NE(opt_err(o).find("max_det"), std::string::npos);
  o = {};
  o.conf = 1.5f;
  EXPECT_NE(opt_err(o).find("conf"), std::string::npos);
  o = {};
  o.iou = -0.1f;
  EXPECT_NE(opt_err(o).find("iou"), std::string::npos);
  o = {};
  o.max_nms = 0;
  EXPECT_NE(opt_err(o).find("max_nms"), std::string::npos);
  o = {};
  o.classes = {-1};
  EXPECT_NE(opt_err(o).find("class"), std::string::npos);

  // The twin refuses tensors of the wrong dtype or shape with a message naming them.
  Tensor det = Tensor::zeros(Shape{1, 300, 6}), count = Tensor::zeros(Shape{1}, DType::i32);
  const Tensor boxes = random_tensor(Shape{1, 4, 10}), logits = random_tensor(Shape{1, 3, 10});
  EXPECT_NE(error_of([&] { postprocess_e2e_cpu(boxes, logits, {}, det, Tensor::zeros(Shape{1})); }).find("count"),
            std::string::npos);
  EXPECT_NE(error_of([&] { postprocess_nms_cpu(boxes, random_tensor(Shape{1, 3, 11}), {}, det, count); })
                .find("[B, nc, A]"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Letterbox

TEST(Letterbox, TransformMatchesUltralyticsLetterBox) {
  // 1080×810 (H×W) into 640×640: r = 640 / 1080, new size 480×640 → dw = 160 / 2 = 80: left = round(79.9) = 80.
  LetterboxTransform t = letterbox_transform(1080, 810, 640, 640);
  EXPECT_DOUBLE_EQ(t.scale, 640.0 / 1080.0);
  EXPECT_EQ(t.pad_x, 80.0);
  EXPECT_EQ(t.pad_y, 0.0);
  EXPECT_EQ(t.orig_w, 810);
  EXPECT_EQ(t.orig_h, 1080);
  // 480×640 into 640×640: r = 1, new 640 wide × 480 high, dh = 80 → top 80.
  t = letterbox_transform(480, 640, 640, 640);
  EXPECT_EQ(t.scale, 1.0);
  EXPECT_EQ(t.pad_x, 0.0);
  EXPECT_EQ(t.pad_y, 80.0);
  // An odd padding: 300×401 into 640×640: r = 640 / 401, new 479 × 640 (300 · r = 478.8 → 479), dh = 161 / 2 = 80.5
  // → top = round(80.4) = 80 (bottom 81).
  t = letterbox_transform(300, 401, 640, 640);
  EXPECT_EQ(t.pad_y, 80.0);
  EXPECT_EQ(t.pad_x, 0.0);
  // Python rounds half to even: a 2×1 image into 5×5 has r = 2.5 and a new width of round(2.5) = 2 (not 3), so
  // dw = 3 / 2 = 1.5 → left = round(1.4) = 1.
  t = letterbox_transform(2, 1, 5, 5);
  EXPECT_EQ(t.scale, 2.5);
  EXPECT_EQ(t.pad_x, 1.0);
  EXPECT_EQ(t.pad_y, 0.0);
  // No upscaling (validation): a small image keeps scale 1 and is centred.
  t = letterbox_transform(100, 200, 640, 640, /*scaleup=*/false);
  EXPECT_EQ(t.scale, 1.0);
  EXPECT_EQ(t.pad_x, 220.0);
  EXPECT_EQ(t.pad_y, 270.0);
  EXPECT_NE(error_of([] { (void)letterbox_transform(0, 10, 640, 640); }).find("positive"), std::string::npos);
}

TEST(Letterbox, InverseMapsBackAndClips) {
  const LetterboxTransform t = letterbox_transform(1080, 810, 640, 640);  // scale 16/27, pad_x 80
  // A box drawn in the original image, letterboxed by hand, comes back.
  const std::array<float, 4> orig = {81.0f, 270.0f, 405.0f, 540.0f};
  const double s = 640.0 / 1080.0;
  const std::array<float, 4> in = {static_cast<float>(orig[0] * s + 80), static_cast<float>(orig[1] * s),
                                   static_cast<float>(orig[2] * s + 80), static_cast<float>(orig[3] * s)};
  const auto back = t.to_original(in);
  for (int q = 0; q < 4; ++q) EXPECT_NEAR(back[static_cast<size_t>(q)], orig[static_cast<size_t>(q)], 1e-4) << q;
  // Out of the image (in the padding, past the far side): clipped to [0, 810] × [0, 1080].
  const auto clipped = t.to_original({10.0f, -5.0f, 600.0f, 700.0f});
  EXPECT_EQ(clipped[0], 0.0f);
  EXPECT_EQ(clipped[1], 0.0f);
  EXPECT_EQ(clipped[2], 810.0f);
  EXPECT_EQ(clipped[3], 1080.0f);

  // On detections [B, max_det, 6]: rows under count mapped, scores and classes kept, the zero rows left zero.
  Tensor det = Tensor::zeros(Shape{2, 3, 6});
  Tensor count = Tensor::zeros(Shape{2}, DType::i32);
  count.data<int32_t>()[0] = 2;
  count.data<int32_t>()[1] = 1;
  float* d = det.data<float>();
  const float rows[3][6] = {{in[0], in[1], in[2], in[3], 0.9f, 3.0f},
                            {10.0f, -5.0f, 600.0f, 700.0f, 0.8f, 1.0f},
                            {100.0f, 100.0f, 200.0f, 200.0f, 0.7f, 2.0f}};
  std::copy(&rows[0][0], &rows[0][0] + 12, d);         // image 0: rows 0, 1
  std::copy(&rows[2][0], &rows[2][0] + 6, d + 18);     // image 1: row 0
  const LetterboxTransform t1 = letterbox_transform(480, 640, 640, 640);  // pad_y 80
  const std::vector<LetterboxTransform> ts = {t, t1};
  letterbox_inverse_cpu(det, count, ts);
  for (int q = 0; q < 4; ++q) EXPECT_NEAR(d[q], orig[static_cast<size_t>(q)], 1e-4);
  EXPECT_EQ(d[4], 0.9f);
  EXPECT_EQ(d[5], 3.0f);
  EXPECT_EQ(d[6 + 2], 810.0f);
  EXPECT_EQ(d[6 + 3], 1080.0f);
  for (int q = 12; q < 18; ++q) EXPECT_EQ(d[q], 0.0f) << q;  // image 0 row 2: beyond its count
  EXPECT_EQ(d[18], 100.0f);
  EXPECT_EQ(d[19], 20.0f);
  EXPECT_EQ(d[20], 200.0f);
  EXPECT_EQ(d[21], 120.0f);
  for (int q = 24; q < 36; ++q) EXPECT_EQ(d[q], 0.0f) << q;
  EXPECT_NE(error_of([&] { letterbox_inverse_cpu(det, count, std::vector<LetterboxTransform>{t}); }).find("one per"),
            std::string::npos);
}

}  // namespace
