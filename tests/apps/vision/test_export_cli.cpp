// `vision export`: the fixture's full checkpoint → the fused model in f32 and f16, whose predictions match the
// checkpoint's (f32: within float rounding of the fold; f16: the same top detection within f16 weight rounding); a
// model that is already exported is refused with a clear error; an ultralytics .pt is taken as its conversion.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/data/image.h"

namespace vision {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& args, int* code) {
  const test::CliRun r = test::run_cli(fmt::format("'{}' {} 2>&1", VISION_CLI, args));
  *code = r.code;
  return r.out;
}

nlohmann::json predict_json(const fs::path& model, const fs::path& image) {
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("'{}' predict --model '{}' --source '{}' --device cpu --imgsz 128 --conf 0.05 --max-det 10 --json "
                  "2>/dev/null",
                  VISION_CLI, model.string(), image.string()),
      &status);
  EXPECT_EQ(test::exit_code(status), 0) << out;
  return nlohmann::json::parse(out)[0]["detections"];
}

TEST(ExportCli, FusedModelsPredictLikeTheCheckpoint) {
  test::TempDir dir;
  const fs::path full = fs::path(VISION_FIXTURE_DIR) / "yolo26n_random.safetensors";
  const fs::path f32 = dir.path() / "f32.safetensors", f16 = dir.path() / "f16.safetensors";
  int code = -1;
  std::string out = run(fmt::format("export --model '{}' --out '{}' --dtype f32", full.string(), f32.string()), &code);
  ASSERT_EQ(code, 0) << out;
  out = run(fmt::format("export --model '{}' --out '{}'", full.string(), f16.string()), &code);
  ASSERT_EQ(code, 0) << out;
  const core::SafetensorsFile a = core::read_safetensors(f32), b = core::read_safetensors(f16);
  EXPECT_EQ(a.metadata.at("format"), "fused");
  EXPECT_EQ(a.at("model.0.conv.bias").dtype(), core::DType::f32);
  EXPECT_EQ(b.at("model.0.conv.bias").dtype(), core::DType::f16);
  EXPECT_EQ(a.find("model.0.bn.weight"), nullptr);
  EXPECT_EQ(a.find("model.23.cv2.0.0.conv.weight"), nullptr) << "the one-to-many head was kept";

  // An image with structure (smooth colours and blocks).
  data::Image im(128, 96, 3);
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      uint8_t* p = im.at(x, y);
      p[0] = static_cast<uint8_t>(2 * x), p[1] = static_cast<uint8_t>(3 * y), p[2] = ((x / 32 + y / 24) % 2) * 220;
    }
  const fs::path image = dir.path() / "in.png";
  data::write_image(im, image);
  const nlohmann::json want = predict_json(full, image), got32 = predict_json(f32, image),
                       got16 = predict_json(f16, image);
  ASSERT_GT(want.size(), 0u);
  ASSERT_EQ(got32.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got32[i]["class"], want[i]["class"]) << i;
    EXPECT_NEAR(got32[i]["confidence"].get<double>(), want[i]["confidence"].get<double>(), 1e-4) << i;
    for (const char* k : {"x1", "y1", "x2", "y2"})
      EXPECT_NEAR(got32[i]["box"][k].get<double>(), want[i]["box"][k].get<double>(), 1e-2) << i << k;
  }
  ASSERT_GT(got16.size(), 0u);
  EXPECT_EQ(got16[0]["class"], want[0]["class"]);
  EXPECT_NEAR(got16[0]["confidence"].get<double>(), want[0]["confidence"].get<double>(), 2e-2);

  // A training checkpoint (train/checkpoint.h) holds the live model under "train." and the optimizer state under
  // "optimizer." beside the EMA weights: only the model is exported, the same tensors as from the plain weights.
  core::SafetensorsFile ckpt = core::read_safetensors(full);
  const size_t n_model = ckpt.tensors.size();
  for (size_t i = 0; i < n_model; ++i) {
    const auto [name, t] = ckpt.tensors[i];  // copies: the vector grows below
    if (name.find(".bn.") == std::string::npos) continue;
    ckpt.tensors.emplace_back("train." + name, t);
    ckpt.tensors.emplace_back("optimizer." + name + ".momentum_buffer", t);
  }
  const fs::path ckpt_path = dir.path() / "checkpoint.safetensors", from_ckpt = dir.path() / "from_ckpt.safetensors";
  core::write_safetensors(ckpt_path, ckpt.tensors, ckpt.metadata);
  out = run(fmt::format("export --model '{}' --out '{}'", ckpt_path.string(), from_ckpt.string()), &code);
  ASSERT_EQ(code, 0) << out;
  const core::SafetensorsFile c = core::read_safetensors(from_ckpt);
  ASSERT_EQ(c.tensors.size(), b.tensors.size()) << "tensors beside the model were exported";
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    EXPECT_EQ(c.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(c.tensors[i].second.to_vector(), b.tensors[i].second.to_vector()) << c.tensors[i].first;
  }

  // Exporting an exported model, or onto the input itself, is refused.
  out = run(fmt::format("export --model '{}' --out '{}'", f16.string(), (dir.path() / "again.safetensors").string()),
            &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("already an exported model"), std::string::npos) << out;
  out = run(fmt::format("export --model '{}' --out '{}'", f32.string(), f32.string()), &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("input model itself"), std::string::npos) << out;
}

// An ultralytics checkpoint (.pt) is taken as it is, by export and predict: the same exported tensors and the same
// detections as from its conversion (yolo26n_random.safetensors, what tools/convert_ultralytics.py makes of it).
TEST(ExportCli, UltralyticsCheckpointIsTakenAsItsConversion) {
  test::TempDir dir;
  const fs::path pt = fs::path(VISION_FIXTURE_DIR) / "yolo26n_random.pt";
  const fs::path converted = fs::path(VISION_FIXTURE_DIR) / "yolo26n_random.safetensors";
  const fs::path a = dir.path() / "from_pt.safetensors", b = dir.path() / "from_converted.safetensors";
  int code = -1;
  std::string out = run(fmt::format("export --model '{}' --out '{}'", pt.string(), a.string()), &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("YOLO26n, 80 classes"), std::string::npos) << out;
  out = run(fmt::format("export --model '{}' --out '{}'", converted.string(), b.string()), &code);
  ASSERT_EQ(code, 0) << out;
  const core::SafetensorsFile fa = core::read_safetensors(a), fb = core::read_safetensors(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const core::Tensor &x = fa.tensors[i].second, &y = fb.tensors[i].second;
    EXPECT_EQ(fa.tensors[i].first, fb.tensors[i].first);
    EXPECT_TRUE(x.nbytes() == y.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0) << fa.tensors[i].first;
  }

  data::Image im(128, 96, 3);
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      uint8_t* p = im.at(x, y);
      p[0] = static_cast<uint8_t>(3 * x), p[1] = static_cast<uint8_t>(2 * y), p[2] = ((x / 16 + y / 32) % 2) * 200;
    }
  const fs::path image = dir.path() / "in.png";
  data::write_image(im, image);
  const nlohmann::json want = predict_json(converted, image), got = predict_json(pt, image);
  ASSERT_GT(want.size(), 0u);
  EXPECT_EQ(got, want);

  // A foreign file named .pt: the checkpoint reader's error, naming it.
  const fs::path junk = dir.path() / "junk.pt";
  test::write_file(junk, "not a checkpoint");
  out = run(fmt::format("export --model '{}' --out '{}'", junk.string(), (dir.path() / "j.safetensors").string()),
            &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("junk.pt': not a readable zip archive"), std::string::npos) << out;
}

}  // namespace
}  // namespace vision
