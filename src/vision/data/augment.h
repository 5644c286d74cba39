// Augment — ultralytics' training augmentation (YOLO26.md, "Augmentation"), on 8-bit RGB images with boxes in pixels:
// the training load (long side resized to imgsz), the 4-image mosaic on a 2·imgsz canvas, the random affine
// (M = T·S·R·P·C, bilinear warp, fill 114) with the box-candidate filter, the HSV jitter in OpenCV's 8-bit HSV space
// (lookup tables per channel), and the vertical and horizontal flips. Every random draw comes from a data::Random the
// caller seeds per sample (random.h derive_seed), so a sample's result does not depend on threads or order.
//
// augment_sample runs the whole pipeline for one sample:
//   mosaic on (a draw with probability `mosaic`): mosaic4 of the sample and three uniform others, then random_affine
//     with border −imgsz/2 (2·imgsz canvas → imgsz × imgsz);
//   mosaic off: letterbox to imgsz × imgsz (no upscaling), then random_affine with border 0;
//   then HSV, flipud, fliplr.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/random.h"
#include "vision/data/warp_math.cuh"

namespace vision::data {

struct AugmentOptions {
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;  // HSV gains (fractions)
  double degrees = 0;                              // rotation, ± degrees
  double translate = 0.1;                          // ± fraction of the output size
  double scale = 0.5;                              // scale gain: uniform in [1 − scale, 1 + scale]
  double shear = 0;                                // ± degrees
  double perspective = 0;                          // ± (0–0.001 is the useful range)
  double flipud = 0, fliplr = 0.5;                 // probabilities
  double mosaic = 1.0;                             // probability
};

// A box in the pixels of the image it belongs to.
struct TargetBox {
  int64_t cls = 0;
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  bool operator==(const TargetBox&) const = default;
};

// An image and its boxes.
struct LabeledImage {
  Image image;
  std::vector<TargetBox> boxes;
};

// The training load: the image resized (bilinear) so its long side is imgsz, keeping the aspect ratio (each side
// ceil(side · r), at most imgsz; an image already that size is kept), the normalised labels as boxes in its pixels.
LabeledImage load_for_training(Image image, std::span<const LabelBox> labels, int64_t imgsz);
// The normalised labels as boxes in the pixels of a width × height image (the training load's boxes).
std::vector<TargetBox> training_boxes(std::span<const LabelBox> labels, int64_t width, int64_t height);

// ---------------------------------------------------------------------------------------------------------------
// Geometry

// A 3×3 matrix, row-major; points are columns (x, y, 1).
using Matrix3 = std::array<double, 9>;
Matrix3 matmul(const Matrix3& a, const Matrix3& b);

// The random affine's matrix for an in_w × in_h input and an out_w × out_h output, drawn in this order: perspective
// (P[2][0], P[2][1] uniform in ±perspective), rotation a uniform in ±degrees and scale s uniform in
// [1 − scale, 1 + scale] (R = [[s·cos a, s·sin a], [−s·sin a, s·cos a]]), shear (S[0][1], S[1][0] = tan of uniform
// ±shear degrees), translation (T = uniform in [0.5 − translate, 0.5 + translate] · out_w, likewise · out_h); C moves
// the input's centre to the origin. M = T·S·R·P·C; `scale` receives s.
Matrix3 random_affine_matrix(Random& rng, const AugmentOptions& o, int64_t in_w, int64_t in_h, int64_t out_w,
                             int64_t out_h, double* scale);

// The image warped by M (output pixel (x, y) samples the input at M⁻¹·(x, y, 1), divided by its third coordinate
// when M is a perspective) into out_w × out_h: bilinear, with input positions in 1/32 pixel steps and neighbours
// outside the input taken as `fill` — OpenCV's warpAffine / warpPerspective with INTER_LINEAR and BORDER_CONSTANT
// (the affine case reproduces its fixed-point arithmetic).
Image warp(const Image& image, const Matrix3& m, int64_t out_w, int64_t out_h, uint8_t fill = 114);

// A box through M: its four corners transformed (and divided by their third coordinate), the min/max, clipped to
// [0, width] × [0, height].
TargetBox transform_box(const TargetBox& box, const Matrix3& m, int64_t width, int64_t height);

// YOLO26.md's box-candidate rule: `after` (the warped box) is kept when its width and height exceed 2 px, its area
// over the area of `before` scaled by `scale` (both sides) exceeds 0.10, and its aspect ratio (long side over short)
// is below 100.
bool box_candidate(const TargetBox& before, const TargetBox& after, double scale);

// The random affine (random_affine_matrix) of `in` into out_w × out_h — ultralytics' border is (out − in) / 2: −imgsz/2
// after a mosaic, 0 after a letterbox. The warp is skipped when the sizes agree and M is the identity; the boxes are
// transformed (transform_box) and filtered by box_candidate.
LabeledImage random_affine(const LabeledImage& in, Random& rng, const AugmentOptions& o, int64_t out_w, int64_t out_h);

// ---------------------------------------------------------------------------------------------------------------
// Mosaic

// ultralytics' 4-mosaic: a 2·imgsz canvas of 114, a centre (xc, yc) drawn uniform in [imgsz/2, 3·imgsz/2] (x first,
// whole pixels), images[0] placed with its bottom-right corner on the centre, images[1] its bottom-left, images[2]
// its top-right, images[3] its top-left, each cropped to the canvas; boxes moved with their image, clipped to the
// canvas, and those left with no area dropped.
LabeledImage mosaic4(std::span<const LabeledImage> images, int64_t imgsz, Random& rng);

// Letterbox to imgsz × imgsz without upscaling (centred, fill 114); boxes moved with the image.
LabeledImage letterbox_square(const LabeledImage& in, int64_t imgsz);

// ---------------------------------------------------------------------------------------------------------------
// Colour

// OpenCV's 8-bit RGB → HSV (COLOR_RGB2HSV): H in [0, 180) (degrees / 2), S and V in [0, 255], fixed-point with
// 12 fractional bits, rounded.
std::array<uint8_t, 3> rgb_to_hsv(uint8_t r, uint8_t g, uint8_t b);
// OpenCV's 8-bit HSV → RGB (COLOR_HSV2RGB): H in degrees / 2, S and V / 255 as floats, the six-sector formula,
// rounded to the nearest.
std::array<uint8_t, 3> hsv_to_rgb(uint8_t h, uint8_t s, uint8_t v);

using HsvGains = std::array<double, 3>;  // (gain_h, gain_s, gain_v)

// HSV jitter with the multipliers (gain_h, gain_s, gain_v): through lookup tables, hue (x · gain_h) mod 180, saturation
// and value min(x · gain, 255), each truncated to an integer. Gains of exactly 1 leave the image unchanged.
void apply_hsv(Image& image, double gain_h, double gain_s, double gain_v);
// The same on `pixels` RGB pixels (3 bytes each, back to back) in place: one image of a u8 NHWC batch.
void apply_hsv(uint8_t* rgb, int64_t pixels, const HsvGains& gains);
// The random HSV step: multipliers uniform(−1, 1) · (hsv_h, hsv_s, hsv_v) + 1 (three draws, h first); nothing is drawn
// or changed when all three options are 0.
void random_hsv(Image& image, Random& rng, const AugmentOptions& o);

// apply_hsv's jitter as the GPU kernel takes it (hsv.cuh, data/hsv_cuda.h): a record of kHsvRecordBytes — the three
// lookup tables (hue, saturation, value, 256 bytes each) and then one byte, 1 when the jitter changes the image and 0
// when apply_hsv would leave it as it is (every gain exactly 1).
inline constexpr size_t kHsvRecordBytes = 1024;
inline constexpr size_t kHsvRecordApplies = 768;  // the flag byte's offset
void hsv_record(const HsvGains& gains, uint8_t* record);

// Mirror left–right / upside down, boxes with the image.
void flip_lr(LabeledImage& x);
void flip_ud(LabeledImage& x);

// ---------------------------------------------------------------------------------------------------------------
// The pipeline

// The training-loaded sample `index` (load_for_training of dataset sample `index`, or of its replacement when that is
// unreadable); called from worker threads.
using SampleLoader = std::function<LabeledImage(size_t index)>;

// One augmented imgsz × imgsz sample (see the header comment). `n` is the dataset size (mosaic partners are drawn
// uniform in [0, n)); `mosaic` false (close_mosaic) turns the mosaic off whatever o.mosaic says.
LabeledImage augment_sample(size_t index, size_t n, const SampleLoader& load, int64_t imgsz, const AugmentOptions& o,
                            bool mosaic, Random& rng);

// A buffer augment_sample_into reuses from one sample to the next (one per thread): the mosaic's canvas (2·imgsz
// square), which would otherwise be allocated — and its pages faulted in — for every sample.
struct AugmentScratch {
  Image canvas;
};

// augment_sample's pixels written to `out` (imgsz × imgsz × 3 bytes, RGB, rows back to back; e.g. a batch slot) and
// its boxes returned — the same draws, pixels and boxes: the random draws come first, then each pixel is warped and
// written at its flipped place, then the HSV jitter. With `defer_hsv`, the jitter is drawn but not applied: its gains
// go there ({1, 1, 1} when none are drawn) for the caller to apply (apply_hsv, or the GPU's hsv_jitter), which gives
// the same pixels (the jitter is per pixel, so it commutes with the flips).
std::vector<TargetBox> augment_sample_into(size_t index, size_t n, const SampleLoader& load, int64_t imgsz,
                                           const AugmentOptions& o, bool mosaic, Random& rng, uint8_t* out,
                                           AugmentScratch& scratch, HsvGains* defer_hsv = nullptr);

// ---------------------------------------------------------------------------------------------------------------
// The pipeline as a plan: the draws and the boxes on the host, the pixels wherever the sources are (warp_math.cuh)

// A training-loaded image for a plan, shared rather than copied (a ram cache's own image is used in place), with its
// boxes; `lasting` when the image stays as it is for the loader's life (a ram cache's), so a device may keep a copy.
struct SourceImage {
  std::shared_ptr<const Image> image;
  std::vector<TargetBox> boxes;
  bool lasting = false;
};
using SourceLoader = std::function<SourceImage(size_t index)>;

// One augmented sample with its pixels not computed yet: the warp of a canvas that the sources' tiles make up (the
// mosaic's four, or the letterboxed image), its flips, and the HSV jitter's gains ({1, 1, 1} when none were drawn).
// warp.source is left 0: whoever renders the plan points it at the sources' pixels (host_warp_plan, or a device's
// copies of them).
struct SamplePlan {
  WarpPlan warp;
  std::array<std::shared_ptr<const Image>, kWarpMaxTiles> sources;  // tile i's image
  std::array<bool, kWarpMaxTiles> lasting{};
  HsvGains hsv{1, 1, 1};
};

// augment_sample_into's draws, in its order, and its boxes; the pixels as a plan. warp_plan_cpu of the plan (or the
// GPU's augment_warp, data/warp_cuda.h) followed by the HSV jitter with plan.hsv gives augment_sample_into's bytes.
std::vector<TargetBox> plan_sample(size_t index, size_t n, const SourceLoader& load, int64_t imgsz,
                                   const AugmentOptions& o, bool mosaic, Random& rng, SamplePlan& plan);

// plan.warp with its sources' host addresses.
WarpPlan host_warp_plan(const SamplePlan& plan);

// The plan's out × out × 3 pixels, one at a time through warp_math.cuh: the GPU kernel's CPU twin (plan.source must
// hold host addresses). augment_sample_into composes the canvas and warps it row by row instead, with the same
// arithmetic.
void warp_plan_cpu(const WarpPlan& plan, uint8_t* out);

}  // namespace vision::data
