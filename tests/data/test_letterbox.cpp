// Letterbox geometry against hand-computed cases (rectangular inputs, ultralytics' `auto` stride padding and the
// full-square padding, the batch rule of predict), the letterboxed pixels, and boxes mapped back to the original.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"
#include "vision/data/letterbox.h"

namespace vision::data::test_letterbox_cpp {
namespace {

using test::error_of;

struct Expected {
  int64_t resized_w, resized_h, input_w, input_h;
  double pad_x, pad_y;
};

void expect_transform(const LetterboxTransform& t, const Expected& e, const std::string& what) {
  EXPECT_EQ(t.resized_w, e.resized_w) << what;
  EXPECT_EQ(t.resized_h, e.resized_h) << what;
  EXPECT_EQ(t.input_w, e.input_w) << what;
  EXPECT_EQ(t.input_h, e.input_h) << what;
  EXPECT_EQ(t.pad_x, e.pad_x) << what;
  EXPECT_EQ(t.pad_y, e.pad_y) << what;
}

TEST(LetterboxGeometry, PadToTheSquareTarget) {
  // 720×1280 (H×W) into 640: r = 0.5, 640×360 resized, dh = 280 → 140 above, 140 below.
  LetterboxTransform t = letterbox_transform(720, 1280, 640, 640);
  EXPECT_EQ(t.scale, 0.5);
  expect_transform(t, {640, 360, 640, 640, 0, 140}, "720x1280");
  // 1080×810 (portrait): r = 640 / 1080, width round(480) = 480, dw = 160 → 80 left.
  expect_transform(letterbox_transform(1080, 810, 640, 640), {480, 640, 640, 640, 80, 0}, "1080x810");
  // An odd padding: 300×401 → 640 × round(478.8) = 479, dh = 161 → top round(80.4) = 80, bottom 81.
  expect_transform(letterbox_transform(300, 401, 640, 640), {640, 479, 640, 640, 0, 80}, "300x401");
  // Upscaling a small image (predict), and not (validation: scaleup = false keeps it and centres it).
  expect_transform(letterbox_transform(100, 200, 640, 640), {640, 320, 640, 640, 0, 160}, "100x200 up");
  expect_transform(letterbox_transform(100, 200, 640, 640, false), {200, 100, 640, 640, 220, 270}, "100x200 kept");
  // A rectangular target: 480×640 (H×W) into 384×640: r = min(0.8, 1) → 512×384, dw = 128 → 64 each side.
  expect_transform(letterbox_transform(480, 640, 384, 640), {512, 384, 640, 384, 64, 0}, "rect target");
}

TEST(LetterboxGeometry, MinimalStrideAlignedPadding) {
  // 720×1280 with stride 32: dh = 280 mod 32 = 24 → a 640×384 input, 12 above and below (ultralytics' 384×640).
  expect_transform(letterbox_transform(720, 1280, 640, 640, true, 32), {640, 360, 640, 384, 0, 12}, "720x1280");
  // 1080×810: dw = 160 mod 32 = 0: no padding at all, a 480×640 input.
  expect_transform(letterbox_transform(1080, 810, 640, 640, true, 32), {480, 640, 480, 640, 0, 0}, "1080x810");
  // 300×401: dh = 161 mod 32 = 1 → 480 high, the odd pixel below (top round(0.4) = 0).
  expect_transform(letterbox_transform(300, 401, 640, 640, true, 32), {640, 479, 640, 480, 0, 0}, "300x401");
  // 333×500: r = 1.28, 640 × round(426.24) = 426, dh = 214 mod 32 = 22 → 448 high, 11 above.
  expect_transform(letterbox_transform(333, 500, 640, 640, true, 32), {640, 426, 640, 448, 0, 11}, "333x500");
  // 500×333 with stride 64: width 426, dw = 214 mod 64 = 22 → 448 wide, 11 left.
  expect_transform(letterbox_transform(500, 333, 640, 640, true, 64), {426, 640, 448, 640, 11, 0}, "500x333/64");
  EXPECT_NE(error_of([] { (void)letterbox_transform(10, 10, 640, 640, true, -1); }).find("stride"), std::string::npos);
}

TEST(LetterboxGeometry, BatchRuleOfPredict) {
  // All of one shape: stride-aligned minimal padding, one input size for the batch.
  const std::vector<std::pair<int64_t, int64_t>> same = {{720, 1280}, {720, 1280}, {720, 1280}};
  for (const LetterboxTransform& t : letterbox_batch(same, 640, 640, 32))
    expect_transform(t, {640, 360, 640, 384, 0, 12}, "same shapes");
  // Mixed shapes: every image padded to the full square.
  const std::vector<std::pair<int64_t, int64_t>> mixed = {{720, 1280}, {1080, 810}};
  const auto ts = letterbox_batch(mixed, 640, 640, 32);
  ASSERT_EQ(ts.size(), 2u);
  expect_transform(ts[0], {640, 360, 640, 640, 0, 140}, "mixed 0");
  expect_transform(ts[1], {480, 640, 640, 640, 80, 0}, "mixed 1");
}

TEST(LetterboxImage, PixelsAndPadding) {
  // A 4×2 (W×H) image into 8×8: scale 2, resized 8×4, 2 rows of grey above and below.
  Image im(4, 2, 3);
  for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>(10 * i);
  const LetterboxTransform t = letterbox_transform(2, 4, 8, 8);
  expect_transform(t, {8, 4, 8, 8, 0, 2}, "4x2");
  const Image out = letterbox(im, t);
  ASSERT_EQ(out.width, 8);
  ASSERT_EQ(out.height, 8);
  const Image resized = resize_bilinear(im, 8, 4);
  for (int64_t y = 0; y < 8; ++y) {
    for (int64_t x = 0; x < 8; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        const bool pad = y < 2 || y >= 6;
        EXPECT_EQ(out.at(x, y)[c], pad ? kLetterboxFill : resized.at(x, y - 2)[c]) << x << "," << y << "," << c;
      }
    }
  }
  // An odd left/right padding: 5×6 (W×H) into 8×8 → round(6.67) = 7 wide, dw = 1 → 0 left, 1 right.
  const Image tall(5, 6, 3, 200);
  const LetterboxTransform tt = letterbox_transform(6, 5, 8, 8);
  expect_transform(tt, {7, 8, 8, 8, 0, 0}, "5x6");
  const Image o2 = letterbox(tall, tt);
  for (int64_t y = 0; y < 8; ++y) {
    for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(o2.at(x, y)[0], x == 7 ? kLetterboxFill : 200) << x << "," << y;
  }
  // The same size and stride padding: a copy, no resize.
  const Image same(32, 64, 3, 9);
  EXPECT_EQ(letterbox(same, letterbox_transform(64, 32, 64, 64, true, 32)), same);
  EXPECT_NE(error_of([&] { (void)letterbox(same, t); }).find("does not fit"), std::string::npos);
}

TEST(LetterboxImage, BoxesMapBackToTheOriginal) {
  // A box drawn in a 720×1280 frame, letterboxed with stride padding (r = 0.5, 12 above), maps back.
  const LetterboxTransform t = letterbox_transform(720, 1280, 640, 640, true, 32);
  const std::array<float, 4> orig = {100, 200, 700, 650};
  const std::array<float, 4> in = {50, 100 + 12, 350, 325 + 12};
  const auto back = t.to_original(in);
  for (size_t k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(back[k], orig[k]) << k;
  // In the padding: clipped to the image.
  const auto clipped = t.to_original({-5, 0, 700, 384});
  EXPECT_EQ(clipped[0], 0.0f);
  EXPECT_EQ(clipped[1], 0.0f);
  EXPECT_EQ(clipped[2], 1280.0f);
  EXPECT_EQ(clipped[3], 720.0f);
}

}  // namespace
}  // namespace vision::data::test_letterbox_cpp
