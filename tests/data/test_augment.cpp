// Training augmentation (vision/data/augment.h): boxes follow the image through mosaic + affine (coloured rectangles
// stay under their boxes), the mosaic's placement, the training load, the warp and box transform, the box-candidate
// rule, OpenCV's 8-bit HSV conversions and lookup-table jitter, and the flips.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/augment.h"

namespace vision::data {
namespace {

const std::array<std::array<uint8_t, 3>, 4> kColours = {{{220, 30, 30}, {30, 200, 40}, {40, 60, 230}, {240, 220, 20}}};

bool near_colour(const uint8_t* p, const std::array<uint8_t, 3>& c, int tol = 40) {
  return std::abs(p[0] - c[0]) + std::abs(p[1] - c[1]) + std::abs(p[2] - c[2]) <= tol;
}

void fill_rect(Image& im, int64_t x1, int64_t y1, int64_t x2, int64_t y2, const std::array<uint8_t, 3>& c) {
  for (int64_t y = y1; y < y2; ++y)
    for (int64_t x = x1; x < x2; ++x) std::copy(c.begin(), c.end(), im.at(x, y));
}

// A grey 160 × 120 image with one filled rectangle per class (kept 12 px apart and from the edges) and its labels.
LabeledImage rectangles() {
  LabeledImage x;
  x.image = Image(160, 120, 3, 128);
  const int64_t r[4][4] = {{12, 12, 60, 50}, {80, 14, 146, 40}, {14, 70, 40, 106}, {60, 62, 148, 104}};
  for (int c = 0; c < 4; ++c) {
    fill_rect(x.image, r[c][0], r[c][1], r[c][2], r[c][3], kColours[c]);
    x.boxes.push_back({c, static_cast<float>(r[c][0]), static_cast<float>(r[c][1]), static_cast<float>(r[c][2]),
                       static_cast<float>(r[c][3])});
  }
  return x;
}

// Fraction of the pixels of [x1, x2) × [y1, y2) (clipped to the image) near colour c; -1 when the region is empty.
double colour_fraction(const Image& im, double x1, double y1, double x2, double y2, const std::array<uint8_t, 3>& c) {
  int64_t n = 0, hit = 0;
  for (int64_t y = std::max<int64_t>(0, std::lround(y1)); y < std::min<int64_t>(im.height, std::lround(y2)); ++y)
    for (int64_t x = std::max<int64_t>(0, std::lround(x1)); x < std::min<int64_t>(im.width, std::lround(x2)); ++x) {
      ++n;
      hit += near_colour(im.at(x, y), c);
    }
  return n ? static_cast<double>(hit) / static_cast<double>(n) : -1;
}

// Every box covers its class's colour (inside, shrunk by 2 px) and is tight: a ring 2–5 px outside it is mostly not.
void expect_boxes_follow(const LabeledImage& out, uint64_t seed) {
  for (const TargetBox& b : out.boxes) {
    ASSERT_GE(b.cls, 0);
    ASSERT_LT(b.cls, 4);
    const auto& c = kColours[static_cast<size_t>(b.cls)];
    const double inside = colour_fraction(out.image, b.x1 + 2, b.y1 + 2, b.x2 - 2, b.y2 - 2, c);
    if (inside >= 0) EXPECT_GT(inside, 0.9) << "seed " << seed << " class " << b.cls;
    int64_t n = 0, hit = 0;
    for (int64_t y = std::lround(b.y1) - 5; y < std::lround(b.y2) + 5; ++y)
      for (int64_t x = std::lround(b.x1) - 5; x < std::lround(b.x2) + 5; ++x) {
        const bool ring = x < b.x1 - 2 || x >= b.x2 + 2 || y < b.y1 - 2 || y >= b.y2 + 2;
        if (!ring || x < 0 || y < 0 || x >= out.image.width || y >= out.image.height) continue;
        ++n;
        hit += near_colour(out.image.at(x, y), c);
      }
    if (n) EXPECT_LT(static_cast<double>(hit) / static_cast<double>(n), 0.1) << "seed " << seed << " class " << b.cls;
  }
}

TEST(Augment, BoxesFollowTheImageThroughMosaicAndAffine) {
  const LabeledImage src = rectangles();
  AugmentOptions o;
  o.hsv_h = o.hsv_s = o.hsv_v = 0;  // colours stay put
  o.fliplr = 0.5;
  o.flipud = 0.5;
  const SampleLoader load = [&](size_t) { return src; };
  int64_t kept = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    for (bool mosaic : {true, false}) {
      Random rng(derive_seed(7, seed, mosaic));
      const LabeledImage out = augment_sample(0, 5, load, 160, o, mosaic, rng);
      ASSERT_EQ(out.image.width, 160);
      ASSERT_EQ(out.image.height, 160);
      expect_boxes_follow(out, seed);
      kept += static_cast<int64_t>(out.boxes.size());
    }
  }
  EXPECT_GT(kept, 24 * 4);  // the rule keeps most boxes
}

TEST(Augment, RotationAndShearKeepBoxesOnTheirObjects) {
  const LabeledImage src = rectangles();
  AugmentOptions o;
  o.hsv_h = o.hsv_s = o.hsv_v = 0;
  o.degrees = 10;
  o.shear = 5;
  const SampleLoader load = [&](size_t) { return src; };
  for (uint64_t seed = 0; seed < 8; ++seed) {
    Random rng(seed);
    const LabeledImage out = augment_sample(0, 1, load, 160, o, false, rng);
    // Rotated rectangles do not fill their boxes: check the box centre is the class colour.
    for (const TargetBox& b : out.boxes) {
      if (b.x2 >= 158 || b.y2 >= 158 || b.x1 <= 2 || b.y1 <= 2) continue;  // clipped: the centre may be off the object
      const auto& c = kColours[static_cast<size_t>(b.cls)];
      EXPECT_TRUE(near_colour(out.image.at(std::lround((b.x1 + b.x2) / 2), std::lround((b.y1 + b.y2) / 2)), c))
          << "seed " << seed << " class " << b.cls;
    }
  }
}

TEST(Augment, MosaicPlacesFourImagesAroundTheCentre) {
  std::vector<LabeledImage> four(4);
  for (int i = 0; i < 4; ++i) {
    four[i].image = Image(64 - 8 * i, 48 + 4 * i, 3, 0);
    fill_rect(four[i].image, 0, 0, four[i].image.width, four[i].image.height, kColours[i]);
    four[i].boxes = {{i, 0, 0, static_cast<float>(four[i].image.width), static_cast<float>(four[i].image.height)}};
  }
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Random rng(seed);
    const LabeledImage m = mosaic4(four, 64, rng);
    ASSERT_EQ(m.image.width, 128);
    ASSERT_EQ(m.image.height, 128);
    ASSERT_EQ(m.boxes.size(), 4u);
    Random again(seed);
    const auto xc = static_cast<float>(static_cast<int64_t>(again.uniform(32, 96)));
    const auto yc = static_cast<float>(static_cast<int64_t>(again.uniform(32, 96)));
    EXPECT_EQ(m.boxes[0].x2, xc);
    EXPECT_EQ(m.boxes[0].y2, yc);
    EXPECT_EQ(m.boxes[1].x1, xc);
    EXPECT_EQ(m.boxes[1].y2, yc);
    EXPECT_EQ(m.boxes[2].x2, xc);
    EXPECT_EQ(m.boxes[2].y1, yc);
    EXPECT_EQ(m.boxes[3].x1, xc);
    EXPECT_EQ(m.boxes[3].y1, yc);
    EXPECT_EQ(m.boxes[0].x1, std::max(0.0f, xc - 64));
    EXPECT_EQ(m.boxes[3].x2, std::min(128.0f, xc + 40));
    for (int i = 0; i < 4; ++i) {
      const TargetBox& b = m.boxes[static_cast<size_t>(i)];
      EXPECT_EQ(colour_fraction(m.image, b.x1, b.y1, b.x2, b.y2, kColours[i]), 1.0) << i;
    }
    // Outside the four images: the fill.
    for (int64_t y = 0; y < 128; ++y)
      for (int64_t x = 0; x < 128; ++x) {
        bool in = false;
        for (const TargetBox& b : m.boxes) in = in || (x >= b.x1 && x < b.x2 && y >= b.y1 && y < b.y2);
        if (!in) ASSERT_EQ(m.image.at(x, y)[0], 114) << x << "," << y;
      }
  }
}

TEST(Augment, LoadForTrainingResizesTheLongSide) {
  Image im(200, 100, 3, 50);
  const std::vector<LabelBox> labels = {{3, 0.5, 0.5, 0.2, 0.4}};
  const LabeledImage x = load_for_training(im, labels, 64);
  EXPECT_EQ(x.image.width, 64);
  EXPECT_EQ(x.image.height, 32);
  ASSERT_EQ(x.boxes.size(), 1u);
  EXPECT_EQ(x.boxes[0].cls, 3);
  EXPECT_FLOAT_EQ(x.boxes[0].x1, 0.4f * 64);
  EXPECT_FLOAT_EQ(x.boxes[0].y1, 0.3f * 32);
  EXPECT_FLOAT_EQ(x.boxes[0].x2, 0.6f * 64);
  EXPECT_FLOAT_EQ(x.boxes[0].y2, 0.7f * 32);
  EXPECT_EQ(load_for_training(Image(64, 20, 3, 1), labels, 64).image, Image(64, 20, 3, 1));
}

TEST(Augment, WarpAndTransformBox) {
  Image im(8, 6, 3, 0);
  for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>(i * 7 % 251);
  const Matrix3 id = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  EXPECT_EQ(warp(im, id, 8, 6), im);
  // A shift by (+2, −1): output (x, y) is input (x − 2, y + 1), the fill where that is outside.
  const Matrix3 shift = {1, 0, 2, 0, 1, -1, 0, 0, 1};
  const Image s = warp(im, shift, 8, 6, 114);
  for (int64_t y = 0; y < 6; ++y)
    for (int64_t x = 0; x < 8; ++x)
      for (int c = 0; c < 3; ++c) {
        const bool in = x - 2 >= 0 && y + 1 < 6;
        EXPECT_EQ(s.at(x, y)[c], in ? im.at(x - 2, y + 1)[c] : 114) << x << "," << y;
      }
  // Half-pixel shift: the mean of two neighbours, rounded.
  const Image h = warp(im, {1, 0, -0.5, 0, 1, 0, 0, 0, 1}, 7, 6);
  EXPECT_EQ(h.at(3, 2)[1], (im.at(3, 2)[1] + im.at(4, 2)[1] + 1) / 2);

  const Matrix3 m = {2, 0, 5, 0, 2, -3, 0, 0, 1};
  const TargetBox t = transform_box({4, 1, 1, 4, 5}, m, 12, 100);
  EXPECT_EQ(t, (TargetBox{4, 7, 0, 12, 7}));  // y1 −1 and x2 13 clipped
  // A 90° rotation about the origin, then a shift: corners swap axes.
  const Matrix3 rot = {0, -1, 10, 1, 0, 0, 0, 0, 1};
  EXPECT_EQ(transform_box({0, 1, 2, 3, 6}, rot, 100, 100), (TargetBox{0, 4, 1, 8, 3}));
}

TEST(Augment, AffineWithNothingDrawnIsTheIdentity) {
  const LabeledImage src = rectangles();
  AugmentOptions o;
  o.scale = 0;
  o.translate = 0;
  Random rng(3);
  const LabeledImage out = random_affine(src, rng, o, 160, 120);
  EXPECT_EQ(out.image, src.image);
  EXPECT_EQ(out.boxes, src.boxes);
}

TEST(Augment, BoxCandidateRule) {
  const TargetBox ten{0, 0, 0, 10, 10};
  EXPECT_TRUE(box_candidate(ten, {0, 5, 5, 15, 15}, 1.0));
  EXPECT_FALSE(box_candidate(ten, {0, 0, 0, 2, 10}, 1.0));     // width 2: not > 2
  EXPECT_TRUE(box_candidate(ten, {0, 0, 0, 4, 3}, 1.0));       // 12 / 100 = 0.12
  EXPECT_FALSE(box_candidate(ten, {0, 0, 0, 3, 3}, 1.0));      // 9 / 100 = 0.09
  EXPECT_TRUE(box_candidate(ten, {0, 0, 0, 10, 10}, 2.0));     // 100 / 400 = 0.25
  EXPECT_FALSE(box_candidate(ten, {0, 0, 0, 5, 7}, 2.0));      // 35 / 400
  EXPECT_TRUE(box_candidate(ten, {0, 0, 0, 5, 7}, 1.0));       // 35 / 100
  const TargetBox wide{0, 0, 0, 1000, 10};
  EXPECT_FALSE(box_candidate(wide, {0, 0, 0, 500, 4.9f}, 1.0));  // aspect 102
  EXPECT_TRUE(box_candidate(wide, {0, 0, 0, 300, 3.5f}, 1.0));   // aspect 86, area 0.105
}

TEST(Augment, HsvConversionsFollowOpenCv) {
  using T = std::array<uint8_t, 3>;
  EXPECT_EQ(rgb_to_hsv(255, 0, 0), (T{0, 255, 255}));
  EXPECT_EQ(rgb_to_hsv(0, 255, 0), (T{60, 255, 255}));
  EXPECT_EQ(rgb_to_hsv(0, 0, 255), (T{120, 255, 255}));
  EXPECT_EQ(rgb_to_hsv(128, 128, 128), (T{0, 0, 128}));
  EXPECT_EQ(rgb_to_hsv(255, 128, 0), (T{15, 255, 255}));
  EXPECT_EQ(rgb_to_hsv(255, 0, 1)[0], 0);    // −1/255 of a sector rounds to 0
  EXPECT_EQ(rgb_to_hsv(20, 0, 1)[0], 179);  // a small negative hue wraps
  EXPECT_EQ(rgb_to_hsv(100, 50, 0), (T{15, 255, 100}));
  EXPECT_EQ(hsv_to_rgb(15, 255, 255), (T{255, 128, 0}));
  EXPECT_EQ(hsv_to_rgb(90, 255, 255), (T{0, 255, 255}));
  EXPECT_EQ(hsv_to_rgb(0, 0, 77), (T{77, 77, 77}));
  // Round trip: 8-bit hue holds 2° steps, so saturated colours move by a few levels. OpenCV 4.6's own
  // RGB → HSV → RGB over the whole cube: worst 5 levels, mean 1.046 (and ours equals it: rgb_to_hsv matched
  // cv2.cvtColor on all 2^24 colours, hsv_to_rgb on all but 257 of 180·256·256 inputs, those by 1 level). Greys are
  // exact.
  int worst = 0;
  double sum = 0;
  int64_t n = 0;
  for (int r = 0; r < 256; r += 3)
    for (int g = 0; g < 256; g += 3)
      for (int b = 0; b < 256; b += 3) {
        const auto hsv = rgb_to_hsv(static_cast<uint8_t>(r), static_cast<uint8_t>(g), static_cast<uint8_t>(b));
        ASSERT_LT(hsv[0], 180);
        const auto rgb = hsv_to_rgb(hsv[0], hsv[1], hsv[2]);
        const int e = std::max({std::abs(rgb[0] - r), std::abs(rgb[1] - g), std::abs(rgb[2] - b)});
        worst = std::max(worst, e);
        sum += e;
        ++n;
        if (r == g && g == b) ASSERT_EQ(e, 0);
      }
  EXPECT_LE(worst, 5);
  EXPECT_LT(sum / static_cast<double>(n), 1.1);
}

TEST(Augment, HsvJitter) {
  Image im = rectangles().image;
  const Image before = im;
  AugmentOptions zero;
  zero.hsv_h = zero.hsv_s = zero.hsv_v = 0;
  Random rng(5), fresh(5);
  random_hsv(im, rng, zero);
  EXPECT_EQ(im, before);
  EXPECT_EQ(rng.bits(), fresh.bits());  // nothing drawn
  apply_hsv(im, 1, 1, 1);
  EXPECT_EQ(im, before);

  Image px(2, 1, 3, 0);
  px.at(0, 0)[1] = 255;                            // green: H 60
  std::fill_n(px.at(1, 0), 3, uint8_t{200});       // grey 200
  apply_hsv(px, 1.5, 1, 0.5);
  EXPECT_EQ(px.at(0, 0)[0], 0);                    // H 90 (cyan), V 127
  EXPECT_EQ(px.at(0, 0)[1], 127);
  EXPECT_EQ(px.at(0, 0)[2], 127);
  EXPECT_EQ(px.at(1, 0)[0], 100);
  // Saturation and value clip at 255; hue wraps mod 180.
  Image sat(1, 1, 3, 0);
  sat.pixels = {200, 100, 100};  // H 0, S 128, V 200
  apply_hsv(sat, 1, 3, 2);
  EXPECT_EQ(sat.pixels, (std::vector<uint8_t>{255, 0, 0}));

  AugmentOptions o;  // defaults: the image changes, deterministically per seed
  Image a = before, b = before;
  Random r1(9), r2(9);
  random_hsv(a, r1, o);
  random_hsv(b, r2, o);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, before);
}

TEST(Augment, FlipsMirrorImageAndBoxes) {
  LabeledImage x;
  x.image = Image(10, 4, 3, 0);
  for (size_t i = 0; i < x.image.pixels.size(); ++i) x.image.pixels[i] = static_cast<uint8_t>(i);
  x.boxes = {{1, 2, 3, 5, 4}, {2, 0, 0, 10, 1.5f}};
  const LabeledImage orig = x;
  flip_lr(x);
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t px = 0; px < 10; ++px)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(x.image.at(px, y)[c], orig.image.at(9 - px, y)[c]);
  EXPECT_EQ(x.boxes[0], (TargetBox{1, 5, 3, 8, 4}));
  EXPECT_EQ(x.boxes[1], (TargetBox{2, 0, 0, 10, 1.5f}));
  flip_lr(x);
  EXPECT_EQ(x.image, orig.image);
  EXPECT_EQ(x.boxes, orig.boxes);
  flip_ud(x);
  for (int64_t y = 0; y < 4; ++y) ASSERT_EQ(x.image.at(7, y)[2], orig.image.at(7, 3 - y)[2]);
  EXPECT_EQ(x.boxes[0], (TargetBox{1, 2, 0, 5, 1}));
  EXPECT_EQ(x.boxes[1], (TargetBox{2, 0, 2.5f, 10, 4}));
}

}  // namespace
}  // namespace vision::data

namespace vision::data {
namespace {

// augment_sample as its steps compose (header comment): the reference for the one-pass pipeline.
LabeledImage augment_step_by_step(size_t index, size_t n, const SampleLoader& load, int64_t imgsz,
                                  const AugmentOptions& o, bool mosaic, Random& rng) {
  LabeledImage x;
  if (mosaic && o.mosaic > 0 && rng.chance(o.mosaic)) {
    std::array<LabeledImage, 4> four;
    four[0] = load(index);
    for (size_t i = 1; i < 4; ++i) four[i] = load(static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1)));
    x = random_affine(mosaic4(four, imgsz, rng), rng, o, imgsz, imgsz);
  } else {
    x = random_affine(letterbox_square(load(index), imgsz), rng, o, imgsz, imgsz);
  }
  random_hsv(x.image, rng, o);
  if (o.flipud > 0 && rng.chance(o.flipud)) flip_ud(x);
  if (o.fliplr > 0 && rng.chance(o.fliplr)) flip_lr(x);
  return x;
}

// A w × h image of noise (every pixel independent, so a sample taken from a neighbour shows) with three boxes.
LabeledImage noise_image(int64_t w, int64_t h, uint64_t seed) {
  LabeledImage x;
  x.image = Image(w, h, 3);
  Random rng(seed);
  for (uint8_t& p : x.image.pixels) p = static_cast<uint8_t>(rng.integer(0, 255));
  const float fw = static_cast<float>(w), fh = static_cast<float>(h);
  x.boxes = {{0, 0.1f * fw, 0.1f * fh, 0.4f * fw, 0.5f * fh},
             {1, 0.5f * fw, 0.2f * fh, 0.95f * fw, 0.6f * fh},
             {2, 0.2f * fw, 0.6f * fh, 0.7f * fw, 0.98f * fh}};
  return x;
}

}  // namespace

// The one-pass pipeline (warp, flips and HSV fused, into the caller's buffer, buffers reused) gives exactly the
// pixels, boxes and random draws of its steps composed: mosaic on and off, every option set below, the flips forced
// and random, an identity affine (the composed path copies, the one-pass one warps), one scratch reused throughout.
TEST(Augment, OnePassEqualsTheStepsComposed) {
  constexpr int64_t imgsz = 96;
  const std::vector<LabeledImage> images = {noise_image(96, 72, 1), noise_image(50, 96, 2), noise_image(96, 96, 3),
                                            noise_image(80, 61, 4), noise_image(96, 90, 5)};
  const SampleLoader load = [&](size_t i) { return images[i]; };
  std::vector<AugmentOptions> options(6);
  options[1].degrees = 10, options[1].shear = 5, options[1].perspective = 0.0008;
  options[2].flipud = 1, options[2].fliplr = 1;
  options[3].flipud = 0.5, options[3].hsv_h = options[3].hsv_s = options[3].hsv_v = 0;
  options[4].scale = 0, options[4].translate = 0, options[4].hsv_h = 0.5;  // identity affine for the 96 × 96 image
  options[5].fliplr = 0, options[5].hsv_s = 0.9, options[5].degrees = 180;
  AugmentScratch scratch;
  std::vector<uint8_t> out(imgsz * imgsz * 3);
  int64_t compared = 0;
  for (size_t k = 0; k < options.size(); ++k)
    for (uint64_t seed = 0; seed < 12; ++seed)
      for (const bool mosaic : {true, false}) {
        SCOPED_TRACE(testing::Message() << "options " << k << " seed " << seed << " mosaic " << mosaic);
        const size_t index = seed % images.size();
        Random a(derive_seed(3, seed, k)), b(derive_seed(3, seed, k));
        const LabeledImage want = augment_step_by_step(index, images.size(), load, imgsz, options[k], mosaic, a);
        std::fill(out.begin(), out.end(), uint8_t{7});
        const std::vector<TargetBox> boxes =
            augment_sample_into(index, images.size(), load, imgsz, options[k], mosaic, b, out.data(), scratch);
        ASSERT_EQ(want.image.pixels.size(), out.size());
        EXPECT_TRUE(want.image.pixels == out);
        ASSERT_EQ(want.boxes.size(), boxes.size());
        for (size_t i = 0; i < boxes.size(); ++i) {
          EXPECT_EQ(want.boxes[i].cls, boxes[i].cls);
          EXPECT_EQ(want.boxes[i].x1, boxes[i].x1);
          EXPECT_EQ(want.boxes[i].y1, boxes[i].y1);
          EXPECT_EQ(want.boxes[i].x2, boxes[i].x2);
          EXPECT_EQ(want.boxes[i].y2, boxes[i].y2);
        }
        EXPECT_EQ(a.integer(0, 1 << 30), b.integer(0, 1 << 30));  // the same number of draws
        Random c(derive_seed(3, seed, k));
        EXPECT_EQ(augment_sample(index, images.size(), load, imgsz, options[k], mosaic, c).image, want.image);
        compared += static_cast<int64_t>(boxes.size());
      }
  EXPECT_GT(compared, 100);
}

// The pipeline as a plan (plan_sample), rendered pixel by pixel through warp_math.cuh (warp_plan_cpu: the GPU
// kernel's twin) and then HSV-jittered with the plan's gains, gives the one-pass pipeline's bytes, boxes and draws:
// mosaic on and off, the options above (a perspective among them), and an image larger than imgsz (the letterbox
// resizes it on the host: the plan's single tile is the letterboxed image) beside smaller ones (pasted with a border).
TEST(Augment, PlanRenderedPixelByPixelEqualsTheOnePass) {
  constexpr int64_t imgsz = 96;
  const std::vector<LabeledImage> images = {noise_image(96, 72, 1), noise_image(50, 96, 2), noise_image(130, 101, 3),
                                            noise_image(80, 61, 4), noise_image(96, 90, 5)};
  const SampleLoader load = [&](size_t i) { return images[i]; };
  int64_t loads = 0;
  const SourceLoader shared = [&](size_t i) {
    ++loads;
    return SourceImage{std::make_shared<const Image>(images[i].image), images[i].boxes, true};
  };
  std::vector<AugmentOptions> options(4);
  options[1].degrees = 10, options[1].shear = 5, options[1].perspective = 0.0008;
  options[2].flipud = 1, options[2].fliplr = 1, options[2].scale = 0.9;  // far zoom-outs: the fill around the canvas
  options[3].scale = 0, options[3].translate = 0, options[3].hsv_h = 0.5;
  AugmentScratch scratch;
  std::vector<uint8_t> want(imgsz * imgsz * 3), got(imgsz * imgsz * 3);
  int64_t compared = 0, tiles[5] = {};
  for (size_t k = 0; k < options.size(); ++k)
    for (uint64_t seed = 0; seed < 10; ++seed)
      for (const bool mosaic : {true, false}) {
        SCOPED_TRACE(testing::Message() << "options " << k << " seed " << seed << " mosaic " << mosaic);
        const size_t index = seed % images.size();
        Random a(derive_seed(5, seed, k)), b(derive_seed(5, seed, k));
        std::fill(want.begin(), want.end(), uint8_t{7});
        const std::vector<TargetBox> want_boxes =
            augment_sample_into(index, images.size(), load, imgsz, options[k], mosaic, a, want.data(), scratch);
        SamplePlan plan;
        const std::vector<TargetBox> boxes =
            plan_sample(index, images.size(), shared, imgsz, options[k], mosaic, b, plan);
        ASSERT_GE(plan.warp.tiles, 1);
        ++tiles[plan.warp.tiles];
        EXPECT_EQ(plan.warp.affine, options[k].perspective == 0 ? 1 : 0);
        std::fill(got.begin(), got.end(), uint8_t{7});
        warp_plan_cpu(host_warp_plan(plan), got.data());
        apply_hsv(got.data(), imgsz * imgsz, plan.hsv);
        EXPECT_TRUE(want == got);
        EXPECT_EQ(want_boxes, boxes);
        EXPECT_EQ(a.integer(0, 1 << 30), b.integer(0, 1 << 30));  // the same number of draws
        compared += static_cast<int64_t>(boxes.size());
      }
  EXPECT_GT(compared, 60);
  EXPECT_GT(tiles[4], 20);  // mosaics
  EXPECT_GT(tiles[1], 20);  // letterboxes
  EXPECT_GT(loads, 100);
}

// A source that is not a 3-channel image is refused, naming the sample.
TEST(Augment, PlanRefusesABadSource) {
  const SourceLoader bad = [](size_t) { return SourceImage{std::make_shared<const Image>(Image(8, 8, 1)), {}, false}; };
  SamplePlan plan;
  Random rng(1);
  AugmentOptions o;
  o.mosaic = 0;
  EXPECT_THROW(
      {
        try {
          plan_sample(0, 1, bad, 32, o, false, rng, plan);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("sample 0 did not load as a 3-channel image"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace vision::data
