// The bundled model (assets/yolo26n_synth.safetensors, trained by `vision train` on a `vision synth` set:
// tools/train_synth.sh) and the README's main job: an exported f16 YOLO26n of the six shape classes, at most 10 MB,
// that finds the shapes of the sample images (assets/samples, unseen in training) — `vision val` on them gives
// mAP50-95 above 0.9 on the CPU (0.955 when the model was bundled) — and `vision predict --save` annotates every one.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_util.h"
#include "test_util.h"
#include "vision/core/safetensors.h"

namespace vision {
namespace {

namespace fs = std::filesystem;

const fs::path kAssets = fs::path(VISION_SOURCE_DIR) / "assets";
const fs::path kModel = kAssets / "yolo26n_synth.safetensors";

test::CliRun cli(const std::string& args) { return test::run_cli(fmt::format("'{}' {} 2>&1", VISION_CLI, args)); }

TEST(BundledModel, IsAnExportedF16Yolo26nOfTheShapes) {
  ASSERT_TRUE(fs::is_regular_file(kModel)) << kModel;
  EXPECT_LE(fs::file_size(kModel), 10'000'000u);
  const core::SafetensorsFile f = core::read_safetensors(kModel);
  EXPECT_EQ(f.metadata.at("format"), "fused");
  EXPECT_EQ(f.metadata.at("scale"), "n");
  EXPECT_EQ(f.metadata.at("nc"), "6");
  EXPECT_EQ(f.metadata.at("names"), R"(["circle","square","triangle","star","cross","ring"])");
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(t.dtype(), core::DType::f16) << name;
    EXPECT_TRUE(name.starts_with("model.")) << name;
  }
}

// The "all" row of the val table: Images, Instances, P, R, mAP50, mAP50-95.
std::vector<double> all_row(const std::string& out) {
  const size_t at = out.find("                   all ");
  if (at == std::string::npos) return {};
  std::istringstream row(out.substr(at + 23, out.find('\n', at) - at - 23));
  std::vector<double> v;
  for (double x; row >> x;) v.push_back(x);
  return v;
}

TEST(BundledModel, FindsTheShapesOfTheSamples) {
  test::TempDir dir;  // a copy: vision val writes its label cache beside the labels
  fs::copy(kAssets / "samples", dir.path() / "samples", fs::copy_options::recursive);
  const test::CliRun r = cli(fmt::format("val --model '{}' --data '{}' --device cpu --quiet", kModel.string(),
                                         (dir.path() / "samples" / "data.yaml").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<double> all = all_row(r.out);
  ASSERT_EQ(all.size(), 6u) << r.out;
  EXPECT_EQ(all[0], 6);   // images
  EXPECT_EQ(all[1], 33);  // labels
  EXPECT_GT(all[4], 0.95) << "mAP50\n" << r.out;
  EXPECT_GT(all[5], 0.90) << "mAP50-95\n" << r.out;

  // The same labels as COCO annotations (pixel boxes of the 320×320 images, category ids 1–6): the same table.
  nlohmann::json coco{{"images", nlohmann::json::array()}, {"annotations", nlohmann::json::array()},
                      {"categories", nlohmann::json::array()}};
  for (int c = 0; c < 6; ++c) coco["categories"].push_back({{"id", c + 1}, {"name", fmt::format("c{}", c)}});
  int64_t image_id = 0, box_id = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "samples" / "images")) {
    coco["images"].push_back({{"id", ++image_id}, {"file_name", "images/" + e.path().filename().string()}, {"width", 320},
                              {"height", 320}});
    std::istringstream lines(test::read_file(dir.path() / "samples" / "labels" / e.path().filename().replace_extension(".txt")));
    for (double c, x, y, w, h; lines >> c >> x >> y >> w >> h;)
      coco["annotations"].push_back({{"id", ++box_id}, {"image_id", image_id}, {"category_id", c + 1},
                                     {"bbox", {(x - w / 2) * 320, (y - h / 2) * 320, w * 320, h * 320}},
                                     {"iscrowd", 0}});
  }
  EXPECT_EQ(box_id, 33);
  test::write_file(dir.path() / "samples" / "instances_samples.json", coco.dump());
  test::write_file(dir.path() / "samples" / "coco.yaml",
                   "train: instances_samples.json\nval: instances_samples.json\n"
                   "names: [circle, square, triangle, star, cross, ring]\n");
  const test::CliRun c = cli(fmt::format("val --model '{}' --data '{}' --device cpu --quiet", kModel.string(),
                                         (dir.path() / "samples" / "coco.yaml").string()));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(all_row(c.out), all) << c.out;
}

TEST(BundledModel, PredictAnnotatesEverySample) {
  test::TempDir dir;
  const test::CliRun r = cli(fmt::format("predict --model '{}' --source '{}' --device cpu --save '{}' --quiet",
                                         kModel.string(), (kAssets / "samples" / "images").string(),
                                         dir.path().string()));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const auto& e : fs::directory_iterator(kAssets / "samples" / "images")) {
    const fs::path out = dir.path() / e.path().filename();
    ASSERT_TRUE(fs::is_regular_file(out)) << out;
    EXPECT_GT(fs::file_size(out), 1000u) << out;
    // One line per detection, "FILE: class score x1 y1 x2 y2": every sample has some.
    EXPECT_NE(r.out.find(e.path().string() + ": "), std::string::npos) << e.path() << "\n" << r.out;
  }
}

}  // namespace
}  // namespace vision
