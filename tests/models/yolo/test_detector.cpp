// vision::Detector on the CPU: end to end against the independent reference's detections (a 320×320 image, which the
// letterbox passes through unchanged), boxes mapped back to the image's pixels (a 2× larger image whose letterbox is
// exactly the 320 one), batches of images of different sizes, and the errors a user can cause.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "models/yolo/detector_test_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/detector.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_detector_cpp {

using namespace vision;
using namespace vision::test;
using namespace vision::test::yolo26_fixture;

namespace {

std::string weights_path() { return fixture_path("yolo26n_random.safetensors"); }

DetectorOptions cpu_options(float conf) {
  return {.device = "cpu", .imgsz = std::array<int64_t, 2>{320, 320}, .conf = conf};
}

TEST(Detector, MatchesTheReferenceDetectionsOnTheCpu) {
  const float conf = metadata_float("e2e_conf");
  const core::Tensor reference = clipped_reference_detections();
  Detector detector(weights_path(), cpu_options(conf));
  EXPECT_EQ(detector.device(), "cpu");
  EXPECT_EQ(detector.dtype(), core::DType::f32);
  EXPECT_EQ(detector.names().size(), 80u);
  const std::vector<data::Detection> found = detector.detect(fixture_image("image_320"));
  const FoundTensors t = as_tensors(found);
  expect_same_detections({t.dets, t.count}, {reference, output("e2e.count")}, score_tolerance(),
                         box_tolerance(), "detector");
  // Scores descend and pass conf; boxes lie in the image.
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_GT(found[i].score, conf);
    if (i > 0) EXPECT_LE(found[i].score, found[i - 1].score);
    for (float v : found[i].box) EXPECT_TRUE(v >= 0.0f && v <= 320.0f) << v;
  }
}

// A 640×640 image made of 2×2 blocks letterboxes (bilinear, half size) to exactly the 320 image: the detections are
// the reference's with boxes twice as large.
TEST(Detector, BoxesComeBackInTheImagesOwnPixels) {
  const float conf = metadata_float("e2e_conf");
  const core::Tensor reference = clipped_reference_detections();
  Detector detector(weights_path(), cpu_options(conf));
  const std::vector<data::Detection> found = detector.detect(upscale_nearest(fixture_image("image_320"), 2));
  const FoundTensors t = as_tensors(found, 0.5);
  expect_same_detections({t.dets, t.count}, {reference, output("e2e.count")}, score_tolerance(),
                         box_tolerance(), "2x image");
  bool beyond_320 = false;
  for (const data::Detection& d : found) beyond_320 = beyond_320 || d.box[2] > 320.0f || d.box[3] > 320.0f;
  EXPECT_TRUE(beyond_320) << "boxes were not scaled back to the 640-pixel image";
}

// Images of different sizes in one call: each is padded to the whole imgsz square. The 320 image is then unchanged
// (the same detections as alone); the 192×320 one is padded above and below, and its boxes map back inside it.
TEST(Detector, BatchesOfImagesOfDifferentSizes) {
  Detector detector(weights_path(), cpu_options(0.05f));
  const data::Image square = fixture_image("image_320"), wide = fixture_image("image_192x320");
  const std::vector<data::Detection> alone = detector.detect(square);
  const std::vector<data::Image> both = {wide, square};
  const std::vector<std::vector<data::Detection>> found = detector.detect(both);
  ASSERT_EQ(found.size(), 2u);
  ASSERT_FALSE(alone.empty());
  const FoundTensors a = as_tensors(alone), b = as_tensors(found[1]);
  expect_same_detections({b.dets, b.count}, {a.dets, a.count}, 1e-5, 1e-3, "in a batch and alone");
  ASSERT_FALSE(found[0].empty()) << "no detections on the 192×320 image to check";
  for (const data::Detection& d : found[0]) {
    EXPECT_TRUE(d.box[1] >= 0.0f && d.box[3] <= 192.0f && d.box[0] >= 0.0f && d.box[2] <= 320.0f);
  }
  // Alone, the wide image is padded only to a multiple of 32 (192 already is): a different input, other scores.
  const std::vector<data::Detection> wide_alone = detector.detect(wide);
  ASSERT_FALSE(wide_alone.empty());
  EXPECT_NE(wide_alone, found[0]);
}

TEST(Detector, ClassFilterMaxDetAndConf) {
  Detector all(weights_path(), cpu_options(0.01f));
  const std::vector<data::Detection> every = all.detect(fixture_image("image_320"));
  ASSERT_GT(every.size(), 3u);
  const int64_t cls = every.front().cls;
  DetectorOptions o = cpu_options(0.01f);
  o.classes = {cls};
  o.max_det = 2;
  Detector filtered(weights_path(), o);
  const std::vector<data::Detection> some = filtered.detect(fixture_image("image_320"));
  ASSERT_FALSE(some.empty());
  EXPECT_LE(some.size(), 2u);
  for (const data::Detection& d : some) EXPECT_EQ(d.cls, cls);
  EXPECT_EQ(some.front(), every.front());
}

TEST(Detector, ErrorsNameTheProblem) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Detector d("/nonexistent/model.safetensors", {.device = "cpu"}); })
                .find("/nonexistent/model.safetensors"),
            std::string::npos);
  EXPECT_NE(message([] {
              Detector d(weights_path(), {.device = "cpu", .imgsz = std::array<int64_t, 2>{100, 100}});
            }).find("32"),
            std::string::npos);
  EXPECT_NE(message([] { Detector d(weights_path(), {.device = "cpu", .dtype = core::DType::f16}); }).find("f32"),
            std::string::npos);
  EXPECT_NE(message([] { Detector d(weights_path(), {.device = "cpu", .classes = {80}}); }).find("class 80"),
            std::string::npos);
  EXPECT_NE(message([] { Detector d(weights_path(), {.device = "tpu"}); }).find("tpu"), std::string::npos);
  EXPECT_NE(message([] { Detector d(weights_path(), {.device = "cpu", .threads = -1}); }).find("threads"),
            std::string::npos);
  Detector detector(weights_path(), cpu_options(0.25f));
  EXPECT_NE(message([&] { detector.detect(data::Image(64, 64, 4)); }).find("4 channels"), std::string::npos);
}

// DetectorOptions::threads: a call on one thread gives the detections of a call on every core, and leaves the calling
// thread's own OpenMP setting as it was; cpu::ThreadLimit (what the call holds) sets the count and restores it.
TEST(Detector, ThreadsOptionLimitsEachCallOnly) {
  const float conf = metadata_float("e2e_conf");
  DetectorOptions one = cpu_options(conf);
  one.threads = 1;
  Detector all(weights_path(), cpu_options(conf)), single(weights_path(), one);
  const int before = cpu::max_threads();
  const auto a = all.detect(fixture_image("image_320")), b = single.detect(fixture_image("image_320"));
  EXPECT_EQ(cpu::max_threads(), before);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].cls, b[i].cls);
    EXPECT_NEAR(a[i].score, b[i].score, 1e-5);
  }
  {
    const cpu::ThreadLimit limit(1);
    EXPECT_EQ(cpu::max_threads(), 1);
    const cpu::ThreadLimit unchanged(0);
    EXPECT_EQ(cpu::max_threads(), 1);
  }
  EXPECT_EQ(cpu::max_threads(), before);
}

TEST(Detector, MovedFromIsAClearErrorAndAssignableAgain) {
  Detector a(weights_path(), cpu_options(0.25f));
  Detector b(std::move(a));
  const data::Image image(64, 48, 3);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { a.detect(image); }, [&] { (void)a.info(); }, [&] { (void)a.names(); }, [&] { (void)a.device(); },
           [&] { (void)a.dtype(); }, [&] { (void)a.imgsz(); }, [&] { (void)a.options(); },
           [&] { (void)a.last_timing(); }, [&] { a.set_weights(core::read_safetensors(weights_path())); }}) {
    try {
      call();
      ADD_FAILURE() << "a moved-from Detector answered";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(b.detect(image));  // the model went with the move
  a = std::move(b);                   // a moved-from Detector takes a model again
  EXPECT_NO_THROW(a.detect(image));
}

}  // namespace

}  // namespace test_detector_cpp
