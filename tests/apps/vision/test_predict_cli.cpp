// `vision predict` on the CPU at a small size with the fixture's YOLO26n weights: one line per detection for a
// folder, JSON, annotated images and YOLO label files that agree with the printed detections, a corrupt image in a
// folder reported (and the exit status non-zero) while the others are processed, and clear errors for an empty
// folder, a missing model, a size that is not a multiple of 32 and --save-txt without --save.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"
#include "vision/data/image.h"

namespace vision {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

// stdout only (stderr to a file) or both.
CliRun predict(const std::string& args, bool with_stderr = true) {
  return test::run_cli(
      fmt::format("'{}' predict --model '{}/yolo26n_random.safetensors' --device cpu {} {}", VISION_CLI,
                  VISION_FIXTURE_DIR, args, with_stderr ? "2>&1" : "2>/dev/null"));
}

// A folder of three small images (JPEG and PNG, of two sizes) with smooth random content.
fs::path make_images(const fs::path& dir) {
  const fs::path images = dir / "images";
  fs::create_directories(images);
  std::mt19937 rng(7);
  const std::pair<int64_t, int64_t> sizes[] = {{96, 64}, {64, 64}, {80, 120}};
  int k = 0;
  for (auto [w, h] : sizes) {
    data::Image im(w, h, 3);
    const int r = static_cast<int>(rng() % 200), g = static_cast<int>(rng() % 200);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        uint8_t* p = im.at(x, y);
        p[0] = static_cast<uint8_t>((r + 2 * x) % 256);
        p[1] = static_cast<uint8_t>((g + 3 * y) % 256);
        p[2] = static_cast<uint8_t>(((x / 16 + y / 16) % 2) * 200);
      }
    data::write_image(im, images / fmt::format("img{}.{}", k, k == 1 ? "png" : "jpg"));
    ++k;
  }
  return images;
}

size_t count_lines(const std::string& s, const std::string& needle) {
  size_t n = 0;
  std::istringstream lines(s);
  for (std::string line; std::getline(lines, line);) n += line.find(needle) != std::string::npos;
  return n;
}

TEST(PredictCli, FolderLinesJsonImagesAndLabels) {
  test::TempDir dir;
  const fs::path images = make_images(dir.path());
  const fs::path save = dir.path() / "out";
  const CliRun r = predict(fmt::format("--source '{}' --imgsz 64 --conf 0.01 --max-det 5 --batch 2 --save '{}' "
                                       "--save-txt --save-conf",
                                       images.string(), save.string()),
                           false);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* name : {"img0.jpg", "img1.png", "img2.jpg"}) {
    SCOPED_TRACE(name);
    const size_t printed = count_lines(r.out, std::string(name) + ": ");
    EXPECT_GE(printed, 1u) << r.out;
    EXPECT_LE(printed, 5u) << r.out;
    // The annotated image exists, has the original's size and differs from it (boxes were drawn).
    const data::Image original = data::read_image(images / name);
    const data::Image annotated = data::read_image(save / name);
    EXPECT_EQ(annotated.width, original.width);
    EXPECT_EQ(annotated.height, original.height);
    if (r.out.find(std::string(name) + ": no detections") == std::string::npos) {
      size_t changed = 0;
      for (size_t i = 0; i < original.pixels.size(); ++i)
        changed += std::abs(int(original.pixels[i]) - int(annotated.pixels[i])) > 40;
      EXPECT_GT(changed, 30u) << "no boxes drawn on " << name;
      // One label line per printed detection, each "cls cx cy w h conf" in [0, 1].
      const std::string labels = test::read_file(save / "labels" / fs::path(name).replace_extension(".txt"));
      EXPECT_EQ(count_lines(labels, " "), printed) << labels;
      std::istringstream lines(labels);
      for (std::string line; std::getline(lines, line);) {
        std::istringstream f(line);
        int cls = -1;
        double cx, cy, w, h, conf;
        ASSERT_TRUE(f >> cls >> cx >> cy >> w >> h >> conf) << line;
        EXPECT_TRUE(cls >= 0 && cls < 80 && cx >= 0 && cx <= 1 && cy >= 0 && cy <= 1 && w >= 0 && w <= 1 &&
                    h >= 0 && h <= 1 && conf > 0.01 && conf <= 1)
            << line;
      }
    }
  }

  // JSON: an entry per image with its size and the same number of detections as the lines.
  const CliRun j = predict(fmt::format("--source '{}' --imgsz 64 --conf 0.01 --max-det 5 --json", images.string()),
                           false);
  ASSERT_EQ(j.code, 0) << j.out;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc.size(), 3u);
  EXPECT_EQ(doc[2]["width"], 80);
  EXPECT_EQ(doc[2]["height"], 120);
  for (const auto& entry : doc) {
    const std::string name = fs::path(entry["image"].get<std::string>()).filename().string();
    EXPECT_EQ(entry["detections"].size(), count_lines(r.out, name + ": ") - count_lines(r.out, name + ": no det"))
        << name;
  }
}

TEST(PredictCli, ACorruptImageIsReportedAndTheOthersProcessed) {
  test::TempDir dir;
  const fs::path images = make_images(dir.path());
  // A truncated JPEG and a text file with an image extension.
  const std::string jpeg = test::read_file(images / "img0.jpg");
  test::write_file(images / "bad_truncated.jpg", jpeg.substr(0, jpeg.size() / 3));
  test::write_file(images / "bad_text.png", "not an image\n");
  const CliRun r = predict(fmt::format("--source '{}' --imgsz 64 --conf 0.01 --max-det 2", images.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad_truncated.jpg"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bad_text.png"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 of 5 images could not be read"), std::string::npos) << r.out;
  for (const char* name : {"img0.jpg: ", "img1.png: ", "img2.jpg: "})
    EXPECT_GE(count_lines(r.out, name), 1u) << name << "\n" << r.out;
}

TEST(PredictCli, ClearErrors) {
  test::TempDir dir;
  const fs::path empty = dir.path() / "empty";
  fs::create_directories(empty);
  const fs::path images = make_images(dir.path());
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {fmt::format("--source '{}'", empty.string()), "no images"},
      {fmt::format("--source '{}/missing.jpg'", dir.path().string()), "no such file"},
      {fmt::format("--source '{}/*.webp'", dir.path().string()), "matches no files"},
      {fmt::format("--source '{}' --imgsz 100", images.string()), "multiples of 32"},
      {fmt::format("--source '{}' --save-txt", images.string()), "--save"},
      {fmt::format("--source '{}' --dtype f16", images.string()), "f32"},
      {fmt::format("--source '{}' --classes 80", images.string()), "class 80"},
      // An output folder that cannot be written (tests run as root too, where permissions do not stop a write).
      {fmt::format("--source '{}' --save /proc/self/vision-out", images.string()), "cannot create the folder"},
      {fmt::format("--source '{}' --max-pixels 0", images.string()), "--max-pixels"},
  };
  for (const Case& c : cases) {
    const CliRun r = predict(c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("'{}' predict --model '{}/nope.safetensors' --source '{}' 2>&1", VISION_CLI, dir.path().string(),
                  images.string()),
      &status);
  EXPECT_NE(test::exit_code(status), 0);
  EXPECT_NE(out.find("nope.safetensors"), std::string::npos) << out;
}


// Issue #33: --save never writes over an input; decompression bombs in a folder are reported at once, with memory
// bounded, while the others are processed; --max-pixels is the pixel limit.
TEST(PredictCli, SaveNeverWritesOverAnInput) {
  test::TempDir dir;
  const fs::path images = make_images(dir.path());
  const std::string before = test::read_file(images / "img0.jpg");
  CliRun r = predict(fmt::format("--source '{}' --imgsz 64 --save '{}'", images.string(), images.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("would overwrite the image itself"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_file(images / "img0.jpg"), before);
  // The same folder written another way (a trailing "/."), and --save-txt into a dataset's root, where the labels of
  // the images are.
  r = predict(fmt::format("--source '{}' --imgsz 64 --save '{}/.'", images.string(), images.string()));
  EXPECT_NE(r.out.find("would overwrite"), std::string::npos) << r.out;
  const fs::path root = dir.path() / "dataset";
  fs::create_directories(root / "images");
  fs::create_directories(root / "labels");
  fs::copy_file(images / "img0.jpg", root / "images" / "img0.jpg");
  test::write_file(root / "labels" / "img0.txt", "0 0.5 0.5 0.2 0.2\n");
  r = predict(fmt::format("--source '{}/images' --imgsz 64 --save '{}' --save-txt", root.string(), root.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("would overwrite the label file"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_file(root / "labels" / "img0.txt"), "0 0.5 0.5 0.2 0.2\n");
}

TEST(PredictCli, DecompressionBombsAreReportedAtOnce) {
  test::TempDir dir;
  const fs::path images = make_images(dir.path());
  // Eight JPEGs of ~1 KB whose headers claim 12000 × 12000 (432 MB each decoded, within the default pixel limit):
  // with --batch 4 --workers 1 such bombs reached 7.2 GB and took seconds each before.
  std::string bomb = test::read_file(images / "img0.jpg");
  for (size_t at = 2; at + 9 < bomb.size(); ++at)
    if (static_cast<uint8_t>(bomb[at]) == 0xFF && static_cast<uint8_t>(bomb[at + 1]) == 0xC0) {
      bomb[at + 5] = bomb[at + 7] = '\x2e', bomb[at + 6] = bomb[at + 8] = '\xe0';  // 0x2EE0 = 12000
      break;
    }
  for (int i = 0; i < 8; ++i) test::write_file(images / fmt::format("bomb{}.jpg", i), bomb);
  const auto t0 = std::chrono::steady_clock::now();
  const bool gnu_time = fs::exists("/usr/bin/time");  // Debian's `time`, for the peak memory (not always installed)
  const CliRun r = test::run_cli(fmt::format(
      "{} '{}' predict --model '{}/yolo26n_random.safetensors' --device cpu --source '{}' --imgsz 64 --batch 4 "
      "--workers 1 2>&1",
      gnu_time ? "/usr/bin/time -f 'peak %M KB'" : "", VISION_CLI, VISION_FIXTURE_DIR, images.string()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.out.find("8 of 11 images could not be read"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(r.out, "cannot hold the 12000×12000 JPEG"), 8u) << r.out;
  for (const char* name : {"img0.jpg: ", "img1.png: ", "img2.jpg: "})
    EXPECT_GE(count_lines(r.out, name), 1u) << name << "\n" << r.out;
  EXPECT_LT(seconds, 60.0);
  if (const size_t at = r.out.find("peak "); at != std::string::npos)  // GNU time present
    EXPECT_LT(std::stoll(r.out.substr(at + 5)), 2'000'000) << r.out;  // KB: the model and three small images
  // --max-pixels: the 80×120 image (9600 pixels) is over 8000, the 96×64 (6144) and 64×64 ones are not.
  const CliRun limited =
      predict(fmt::format("--source '{}/img*' --imgsz 64 --max-pixels 8000", images.string()));
  EXPECT_EQ(limited.code, 1) << limited.out;
  EXPECT_NE(limited.out.find("80×120 pixels is more than the 8000 accepted (--max-pixels)"), std::string::npos) << limited.out;
  EXPECT_NE(limited.out.find("1 of 3 images could not be read"), std::string::npos) << limited.out;
}

}  // namespace
}  // namespace vision
