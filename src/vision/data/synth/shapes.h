// Synthetic detection data (`vision synth`): square images of coloured shapes of six classes on textured, noisy
// backgrounds, with YOLO-format labels. Every parameter is fixed (below and docs/cli.md); the seed alone decides the
// data, and the same seed gives byte-identical files whatever the thread count (with the same libm, libjpeg-turbo and
// zlib).
//
// An image (imgsz × imgsz):
// * background: a linear gradient between two random colours in a random direction, plus two octaves of smooth
//   value noise (grey, amplitude 10–40 levels, cells of imgsz/12–imgsz/4 and half that);
// * 1–12 objects (uniform), each of a uniform class, size uniform in 4–50% of imgsz (the side of the square the
//   unrotated shape fits, touching two of its sides), centre uniform over the image, rotation uniform in [0, 2π),
//   a flat random colour at least kMinContrast (L1 over R, G, B) from the background at its centre and from every
//   earlier object its box overlaps; drawn in order, each over the earlier ones, anti-aliased by 4×4 supersampling;
// * placement keeps every object at least kMinVisible visible: its coverage inside the image and under no later
//   object — Σ cov_i · Π_{j>i} (1 − cov_j) over the image's pixels — is at least 70% of its whole coverage. A
//   position (and rotation) is drawn up to kPlacementTries times; an object that fits nowhere is left out;
// * per-pixel noise on top: uniform ±a per channel, a uniform in 0–12 per image; JPEG quality 90 (4:2:0) or PNG.
// A label box is the tight axis-aligned box of the whole rotated shape (unoccluded), clipped to the image.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "vision/data/image.h"

namespace vision::data::synth {

enum class ShapeClass : int { circle, square, triangle, star, cross, ring };
inline constexpr std::array<std::string_view, 6> kClassNames = {"circle", "square", "triangle",
                                                                "star",   "cross",  "ring"};

inline constexpr int64_t kMinObjects = 1, kMaxObjects = 12;
inline constexpr double kMinSize = 0.04, kMaxSize = 0.5;  // of the image side
inline constexpr double kMinVisible = 0.7;
inline constexpr int kPlacementTries = 30;
inline constexpr int kSupersampling = 4;  // samples per pixel along each axis
inline constexpr int kMinContrast = 150;  // L1 distance of colours, 0–765
inline constexpr int kJpegQuality = 90;

// Shapes, in units of `size`, centred on (cx, cy) before rotation: circle of diameter 1; square of side 1;
// equilateral triangle of side 1, apex up, centred on its centroid; five-pointed star of outer radius 0.5 and inner
// radius 0.21, a point up; cross (plus sign) of arms 1 long and 1/3 thick; ring of outer diameter 1 and inner 0.55.
struct Object {
  ShapeClass shape = ShapeClass::circle;
  double cx = 0, cy = 0;  // pixels, x right, y down
  double size = 0;        // pixels
  double angle = 0;       // radians; clockwise on screen
  std::array<uint8_t, 3> colour = {0, 0, 0};
};

struct Box {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};
// The tight axis-aligned box of the whole rotated shape, in pixels (not clipped).
Box shape_box(const Object& object);
// shape_box clipped to the imgsz × imgsz image: the label's box.
Box label_box(const Object& object, int64_t imgsz);
// The label's line: "class cx cy w h", normalised by imgsz, six decimals.
std::string label_line(const Object& object, int64_t imgsz);

// An object's anti-aliased coverage: the fraction of each pixel of [x0, x0 + width) × [y0, y0 + height) — the pixels
// shape_box touches, which may reach past the image — that the shape covers (multiples of 1/16).
struct Coverage {
  int64_t x0 = 0, y0 = 0, width = 0, height = 0;
  std::vector<float> values;  // row-major

  // The coverage of pixel (x, y); 0 outside the box.
  float at(int64_t x, int64_t y) const {
    return x < x0 || y < y0 || x >= x0 + width || y >= y0 + height ? 0.0f : values[index(x, y)];
  }
  size_t index(int64_t x, int64_t y) const { return static_cast<size_t>((y - y0) * width + (x - x0)); }
  double total() const;
};
Coverage coverage(const Object& object);

// One image of the dataset and its objects (in drawing order, as its label file lists them).
struct Sample {
  Image image;
  std::vector<Object> objects;
};
// The sample drawn from `seed` (each image of a dataset has its own seed, data::derive_seed).
Sample make_sample(uint64_t seed, int64_t imgsz);

struct DatasetOptions {
  std::filesystem::path out;
  int64_t train = 0, val = 0;  // images per split
  int64_t imgsz = 320;         // 32–4096
  uint64_t seed = 0;
  std::string format = "jpg";  // "jpg" or "png"
  bool overwrite = false;      // replace the images/, labels/ and data.yaml of an earlier run in `out`
};
struct DatasetSummary {
  int64_t images = 0, objects = 0;
};
// Writes out/images/{train,val}/NNNNNN.{jpg,png}, out/labels/{train,val}/NNNNNN.txt and out/data.yaml (ultralytics
// style: train, val, nc, names; paths relative to the file's folder, so the dataset can be moved). Image i of split
// s (0 train, 1 val) is make_sample(derive_seed(seed, s, i)): the val images do not depend on the train count.
DatasetSummary write_dataset(const DatasetOptions& options);

// ---------------------------------------------------------------------------------------------------------------
// Tracking sequences (`vision synth --sequences N`): shapes moving over a fixed background, for multi-object tracking.
//
// A sequence (seed → frames): the background of an image above; 2–`max_objects` objects (uniform) of uniform class,
// size uniform in 10–18% of imgsz, rotation and colour as above (each colour at least kMinContrast from the background
// at its start and from every earlier object's); each starts at a uniform position at least half its size inside the
// image, moves at a uniform 0.5–2% of imgsz per frame in a uniform direction, bouncing off the image's borders (its
// centre reflected at half its size from them), and turns by a uniform ±0.03 rad per frame. Objects are drawn in
// order, later ones over earlier ones, so crossing paths occlude. Per-pixel noise as above, its amplitude uniform in
// 0–8 per sequence.
// Ground truth per frame: each object's label box (clipped) with its id (1, 2, …), class and visibility (the share of
// its coverage inside the image and under no later object).
struct TrackedBox {
  int64_t id = 0;
  ShapeClass shape = ShapeClass::circle;
  Box box;                 // label_box: clipped to the image
  double visibility = 1;   // 0–1
};
struct SequenceFrame {
  Image image;
  std::vector<TrackedBox> boxes;  // by id
};
std::vector<SequenceFrame> make_sequence(uint64_t seed, int64_t imgsz, int64_t frames, int64_t max_objects);

struct SequenceOptions {
  std::filesystem::path out;
  int64_t sequences = 2, frames = 60, imgsz = 320, max_objects = 4;
  uint64_t seed = 0;
  std::string format = "jpg";
  bool overwrite = false;
  bool video = false;  // the frames as out/seq-NN/seq-NN.mp4 (H.264, 30 frames/s) instead of img1/
};
// Writes the MOT Challenge layout: out/seq-NN/img1/000001.{jpg,png} … (or out/seq-NN/seq-NN.mp4), out/seq-NN/gt/gt.txt (frame, id, left, top,
// width, height, 1, class + 1, visibility) and out/seq-NN/seqinfo.ini. Sequence k is make_sequence(derive_seed(seed,
// 2, k)). Returns the frames and boxes written.
DatasetSummary write_sequences(const SequenceOptions& options);

}  // namespace vision::data::synth
