// vision synth: the same seed gives byte-identical files and another seed other files; labels parse and lie in the
// image; the box of an unrotated square is its drawn extent; the rasterised areas match the shapes' exact areas;
// every object is at least 70% visible by the coverage masks; objects are drawn in label order; file counts; the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"
#include "vision/data/random.h"
#include "vision/data/synth/shapes.h"

namespace vision::data::synth {
namespace {

namespace fs = std::filesystem;
using test::error_of;

// Every regular file under dir, by path relative to dir, with its bytes.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = test::read_file(e.path());
  return files;
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherImages) {
  test::TempDir a, b, c;
  const DatasetOptions o{.out = a.path(), .train = 6, .val = 3, .imgsz = 96, .seed = 7};
  write_dataset(o);
  DatasetOptions ob = o;
  ob.out = b.path();
  write_dataset(ob);
  const auto ta = tree(a.path()), tb = tree(b.path());
  ASSERT_EQ(ta.size(), 2u * 9 + 1);
  EXPECT_TRUE(ta == tb) << "same seed, different bytes";

  DatasetOptions oc = o;
  oc.out = c.path();
  oc.seed = 8;
  write_dataset(oc);
  const auto tc = tree(c.path());
  ASSERT_EQ(tc.size(), ta.size());
  for (const auto& [name, bytes] : ta)
    if (name.starts_with("images/")) EXPECT_NE(bytes, tc.at(name)) << name << " is the same under another seed";

  // Val images do not depend on the train count; an existing dataset is replaced only with overwrite.
  DatasetOptions od = o;
  od.train = 2;
  EXPECT_NE(error_of([&] { write_dataset(od); }).find("--overwrite"), std::string::npos);
  od.overwrite = true;
  write_dataset(od);
  const auto td = tree(a.path());
  EXPECT_EQ(td.size(), 2u * 5 + 1);
  EXPECT_EQ(td.at("images/val/000002.jpg"), tb.at("images/val/000002.jpg"));
  EXPECT_EQ(td.at("images/train/000001.jpg"), tb.at("images/train/000001.jpg"));
}

TEST(Synth, LabelsParseAndLieInTheImage) {
  test::TempDir dir;
  const int64_t train = 10, val = 4, imgsz = 128;
  const DatasetSummary s = write_dataset({.out = dir.path(), .train = train, .val = val, .imgsz = imgsz, .seed = 3});
  EXPECT_EQ(s.images, train + val);
  int64_t objects = 0;
  for (const auto& [split, count] : {std::pair{"train", train}, std::pair{"val", val}}) {
    const fs::path images = dir.path() / "images" / split, labels = dir.path() / "labels" / split;
    int64_t n_images = 0, n_labels = 0;
    for (const auto& e : fs::directory_iterator(images)) {
      ++n_images;
      EXPECT_EQ(e.path().extension(), ".jpg");
      EXPECT_TRUE(fs::exists(labels / e.path().filename().replace_extension(".txt"))) << e.path();
      const Image im = read_image(e.path());
      EXPECT_EQ(im.width, imgsz);
      EXPECT_EQ(im.height, imgsz);
    }
    for (const auto& e : fs::directory_iterator(labels)) {
      ++n_labels;
      std::ifstream f(e.path());
      std::string line;
      int lines = 0;
      while (std::getline(f, line)) {
        ++lines;
        std::istringstream in(line);
        int cls = -1;
        double cx, cy, w, h;
        std::string rest;
        ASSERT_TRUE(in >> cls >> cx >> cy >> w >> h) << e.path() << ": " << line;
        EXPECT_FALSE(in >> rest) << e.path() << ": more than 5 fields: " << line;
        EXPECT_TRUE(cls >= 0 && cls < 6) << line;
        EXPECT_TRUE(w > 0 && h > 0 && w <= 1 && h <= 1) << line;
        EXPECT_GE(cx - w / 2, -1e-6) << line;
        EXPECT_GE(cy - h / 2, -1e-6) << line;
        EXPECT_LE(cx + w / 2, 1 + 1e-6) << line;
        EXPECT_LE(cy + h / 2, 1 + 1e-6) << line;
        // The smallest object (4% of the side) is at least 70% in the image.
        EXPECT_GE(std::max(w, h), 0.04 * 0.7 - 1e-6) << line;
      }
      EXPECT_GE(lines, kMinObjects) << e.path();
      EXPECT_LE(lines, kMaxObjects) << e.path();
      objects += lines;
    }
    EXPECT_EQ(n_images, count) << split;
    EXPECT_EQ(n_labels, count) << split;
  }
  EXPECT_EQ(objects, s.objects);
  const std::string yaml = test::read_file(dir.path() / "data.yaml");
  EXPECT_NE(yaml.find("\ntrain: images/train\nval: images/val\nnc: 6\nnames:\n  0: circle\n  1: square\n  2: triangle\n"
                      "  3: star\n  4: cross\n  5: ring\n"),
            std::string::npos)
      << yaml;
}

TEST(Synth, UnrotatedSquareBoxIsItsDrawnExtent) {
  const Object square{.shape = ShapeClass::square, .cx = 40.3, .cy = 30.6, .size = 20.2, .angle = 0};
  const Box b = shape_box(square);
  EXPECT_NEAR(b.x1, 30.2, 1e-9);
  EXPECT_NEAR(b.x2, 50.4, 1e-9);
  EXPECT_NEAR(b.y1, 20.5, 1e-9);
  EXPECT_NEAR(b.y2, 40.7, 1e-9);
  EXPECT_EQ(label_line(square, 100), "1 0.403000 0.306000 0.202000 0.202000");
  // The drawn extent from the anti-aliased mask: the first and last touched pixel of each row and column, with the
  // partial coverage of those pixels giving the sub-pixel edge (to half a supersample, 1/8 px).
  const Coverage c = coverage(square);
  const double tolerance = 0.5 / kSupersampling + 1e-9;
  auto edges = [&](bool rows, int64_t line) {
    std::vector<float> v;
    if (rows) {
      for (int64_t x = c.x0 - 2; x < c.x0 + c.width + 2; ++x) v.push_back(c.at(x, line));
    } else {
      for (int64_t y = c.y0 - 2; y < c.y0 + c.height + 2; ++y) v.push_back(c.at(line, y));
    }
    const int64_t origin = (rows ? c.x0 : c.y0) - 2;
    const auto first = std::find_if(v.begin(), v.end(), [](float f) { return f > 0; }) - v.begin();
    const auto last = v.rend() - std::find_if(v.rbegin(), v.rend(), [](float f) { return f > 0; }) - 1;
    for (auto i = first + 1; i < last; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], 1.0f) << "interior pixel " << i;
    return std::pair{static_cast<double>(origin + first + 1) - v[static_cast<size_t>(first)],
                     static_cast<double>(origin + last) + v[static_cast<size_t>(last)]};
  };
  for (int64_t y = 21; y <= 39; ++y) {
    const auto [left, right] = edges(true, y);
    EXPECT_NEAR(left, b.x1, tolerance) << "row " << y;
    EXPECT_NEAR(right, b.x2, tolerance) << "row " << y;
  }
  for (int64_t x = 31; x <= 49; ++x) {
    const auto [top, bottom] = edges(false, x);
    EXPECT_NEAR(top, b.y1, tolerance) << "column " << x;
    EXPECT_NEAR(bottom, b.y2, tolerance) << "column " << x;
  }
  // Clipped at the image border.
  const Object cut{.shape = ShapeClass::square, .cx = 5, .cy = 95, .size = 20, .angle = 0};
  const Box l = label_box(cut, 100);
  EXPECT_EQ(l.x1, 0.0);
  EXPECT_EQ(l.y2, 100.0);
  EXPECT_NEAR(l.x2, 15.0, 1e-9);
  EXPECT_NEAR(l.y1, 85.0, 1e-9);
}

TEST(Synth, RotatedBoxesAreTightAndAreasExact) {
  constexpr double s = 60, pi = std::numbers::pi;
  // A square turned 45° spans its diagonal; a circle ignores rotation.
  const Box d = shape_box({.shape = ShapeClass::square, .cx = 100, .cy = 100, .size = s, .angle = pi / 4});
  EXPECT_NEAR(d.x2 - d.x1, s * std::numbers::sqrt2, 1e-9);
  EXPECT_NEAR(d.y2 - d.y1, s * std::numbers::sqrt2, 1e-9);
  const Box r = shape_box({.shape = ShapeClass::ring, .cx = 100, .cy = 100, .size = s, .angle = 1.0});
  EXPECT_NEAR(r.x1, 70, 1e-9);
  EXPECT_NEAR(r.y2, 130, 1e-9);
  // The triangle, apex up: as wide as its side, √3/2 of it high.
  const Box t = shape_box({.shape = ShapeClass::triangle, .cx = 100, .cy = 100, .size = s, .angle = 0});
  EXPECT_NEAR(t.x2 - t.x1, s, 1e-9);
  EXPECT_NEAR(t.y2 - t.y1, s * std::sqrt(3.0) / 2, 1e-9);

  // The rasterised area (the sum of the coverage) against each shape's exact area, at any rotation; and every box is
  // tight: the pixels next to each side of it are touched.
  const double star = 5 * 0.5 * 0.21 * std::sin(pi / 5);  // ten triangles centre–inner–outer
  const std::map<ShapeClass, double> unit_area = {
      {ShapeClass::circle, pi / 4}, {ShapeClass::square, 1.0},    {ShapeClass::triangle, std::sqrt(3.0) / 4},
      {ShapeClass::star, star},     {ShapeClass::cross, 5.0 / 9}, {ShapeClass::ring, pi / 4 * (1 - 0.55 * 0.55)}};
  Random rng(11);
  for (const auto& [shape, area] : unit_area) {
    for (int k = 0; k < 4; ++k) {
      const Object o{.shape = shape,
                     .cx = rng.uniform(80, 120),
                     .cy = rng.uniform(80, 120),
                     .size = s,
                     .angle = rng.uniform(0, 2 * pi)};
      const Coverage c = coverage(o);
      EXPECT_NEAR(c.total() / (area * s * s), 1.0, 0.01) << kClassNames[static_cast<size_t>(shape)] << " " << k;
      // Tight: the shape reaches into the two outermost pixel columns and rows of its box on each side (a vertex
      // may enter the outermost one by less than a supersample; it then fills part of the next).
      double sides[4] = {0, 0, 0, 0};
      for (int64_t k = 0; k < 2; ++k) {
        for (int64_t i = 0; i < c.height; ++i) {
          sides[0] += c.at(c.x0 + k, c.y0 + i);
          sides[1] += c.at(c.x0 + c.width - 1 - k, c.y0 + i);
        }
        for (int64_t i = 0; i < c.width; ++i) {
          sides[2] += c.at(c.x0 + i, c.y0 + k);
          sides[3] += c.at(c.x0 + i, c.y0 + c.height - 1 - k);
        }
      }
      for (int side = 0; side < 4; ++side)
        EXPECT_GT(sides[side], 0) << kClassNames[static_cast<size_t>(shape)] << " side " << side;
    }
  }
}

TEST(Synth, EveryObjectAtLeast70PercentVisibleAndDrawnInLabelOrder) {
  const int64_t n = 128;
  int64_t total = 0, occluded = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const Sample s = make_sample(derive_seed(99, 0, seed), n);
    ASSERT_GE(static_cast<int64_t>(s.objects.size()), kMinObjects);
    ASSERT_LE(static_cast<int64_t>(s.objects.size()), kMaxObjects);
    std::vector<Coverage> masks;
    for (const Object& o : s.objects) masks.push_back(coverage(o));
    for (size_t i = 0; i < masks.size(); ++i) {
      const Coverage& m = masks[i];
      const Object& o = s.objects[i];
      EXPECT_GE(o.size, kMinSize * n - 1e-9);
      EXPECT_LE(o.size, kMaxSize * n + 1e-9);
      // Visible: in the image and under no later object.
      double visible = 0;
      bool hidden_anywhere = false;
      for (int64_t y = std::max<int64_t>(0, m.y0); y < std::min(n, m.y0 + m.height); ++y) {
        for (int64_t x = std::max<int64_t>(0, m.x0); x < std::min(n, m.x0 + m.width); ++x) {
          double v = m.at(x, y);
          for (size_t j = i + 1; j < masks.size(); ++j) v *= 1.0 - masks[j].at(x, y);
          visible += v;
          hidden_anywhere |= v < m.at(x, y);
          // Where it shows whole, the image has its colour (± the per-pixel noise, at most 12).
          if (v == 1.0)
            for (size_t c = 0; c < 3; ++c) ASSERT_NEAR(s.image.at(x, y)[c], o.colour[c], 12) << seed << " " << i;
        }
      }
      EXPECT_GE(visible, kMinVisible * m.total()) << "seed " << seed << " object " << i;
      ++total;
      occluded += hidden_anywhere;
    }
  }
  EXPECT_GT(occluded, total / 10) << "the visibility rule was never exercised";
}

TEST(Synth, CommandLine) {
  test::TempDir dir;
  const std::string out = (dir.path() / "ds").string();
  int status = 0;
  const std::string cmd = std::string(VISION_CLI) + " synth --out " + out + " --train 3 --val 2 --imgsz 64 --seed 5";
  std::string text = test::run_command(cmd + " 2>&1", &status);
  ASSERT_EQ(test::exit_code(status), 0) << text;
  EXPECT_NE(text.find("5 images (3 train, 2 val, 64×64 px)"), std::string::npos) << text;
  EXPECT_EQ(tree(out).size(), 2u * 5 + 1);
  text = test::run_command(cmd + " 2>&1", &status);
  EXPECT_EQ(test::exit_code(status), 1) << text;
  EXPECT_NE(text.find("vision: error: synth: '" + out + "/images' already exists; pass --overwrite"), std::string::npos)
      << text;
  text = test::run_command(cmd + " --overwrite --format png 2>&1", &status);
  EXPECT_EQ(test::exit_code(status), 0) << text;
  EXPECT_TRUE(fs::exists(dir.path() / "ds" / "images" / "val" / "000001.png"));
  EXPECT_FALSE(fs::exists(dir.path() / "ds" / "images" / "val" / "000001.jpg"));
}

}  // namespace
}  // namespace vision::data::synth
