// `vision bench` on the CPU at a tiny size: a row per batch size on stdout and a JSON line per batch, random initial
// weights (--scale) or a weights file (--model), and clear errors for a size that is not a multiple of 32, a 16-bit
// dtype on the CPU, and a missing model.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"

namespace vision {
namespace {

using test::CliRun;

CliRun bench(const std::string& args) { return test::run_cli(fmt::format("'{}' bench {} 2>&1", VISION_CLI, args)); }

std::vector<nlohmann::json> json_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The table row of a batch: the batch right-aligned in 6 columns, then four numbers and the call count.
bool has_row(const std::string& out, int64_t batch, int calls) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    int64_t b = 0;
    double median = 0, p90 = 0, min = 0, img_s = 0;
    int n = 0;
    if ((cells >> b >> median >> p90 >> min >> img_s >> n) && b == batch && n == calls && median > 0 &&
        p90 >= median && min <= median && img_s > 0)
      return true;
  }
  return false;
}

TEST(BenchCli, CpuRandomWeightsPrintsARowPerBatch) {
  test::TempDir dir;
  const auto json = dir.path() / "ours.jsonl";
  const CliRun r = bench(fmt::format("--device cpu --scale n --imgsz 64 --batch 1,2 --iters 2 --warmup 1 --json '{}'",
                                  json.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("YOLO26n (80 classes, random initial weights), 64x64 (H x W), f32 nhwc on cpu"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("detections [B, 300, 6]"), std::string::npos) << r.out;
  EXPECT_TRUE(has_row(r.out, 1, 2)) << r.out;
  EXPECT_TRUE(has_row(r.out, 2, 2)) << r.out;
  const auto rows = json_lines(json);
  ASSERT_EQ(rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rows[i]["impl"], "ours");
    EXPECT_EQ(rows[i]["scale"], "n");
    EXPECT_EQ(rows[i]["batch"], static_cast<int64_t>(i + 1));
    EXPECT_EQ(rows[i]["imgsz"], nlohmann::json::array({64, 64}));
    EXPECT_EQ(rows[i]["dtype"], "f32");
    EXPECT_EQ(rows[i]["device"], "cpu");
    EXPECT_EQ(rows[i]["iters"], 2);
    EXPECT_GT(rows[i]["median_ms"].get<double>(), 0.0);
    EXPECT_GE(rows[i]["p90_ms"].get<double>(), rows[i]["median_ms"].get<double>());
    EXPECT_NEAR(rows[i]["img_s"].get<double>(), 1000.0 * double(i + 1) / rows[i]["median_ms"].get<double>(), 1e-6);
  }
}

// --layout and --threads: the plan in NCHW on one thread, said so in the header and the JSON row.
TEST(BenchCli, CpuLayoutAndThreads) {
  test::TempDir dir;
  const auto json = dir.path() / "ours.jsonl";
  const CliRun r = bench(fmt::format(
      "--device cpu --scale n --imgsz 64 --batch 1 --iters 2 --warmup 1 --layout nchw --threads 1 --json '{}'",
      json.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("f32 nchw on cpu (CPU, 1 thread)"), std::string::npos) << r.out;
  EXPECT_TRUE(has_row(r.out, 1, 2)) << r.out;
  const auto rows = json_lines(json);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["layout"], "nchw");
  EXPECT_EQ(rows[0]["threads"], 1);
  const CliRun bad = bench("--device cpu --scale n --imgsz 64 --iters 2 --layout nhcw");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--layout"), std::string::npos) << bad.out;
}

// --profile: after the row, the plan's per-op profile (stderr): every step of YOLO26n's CPU plan timed apart, the
// slowest first, and the time per op kind (YOLO26n has 102 convolutions: 87 with BatchNorm and SiLU folded in, 9
// with BatchNorm alone, 6 plain).
TEST(BenchCli, CpuProfilePrintsEveryOpKind) {
  const CliRun r = bench("--device cpu --scale n --imgsz 64 --batch 1 --iters 2 --warmup 1 --profile");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has_row(r.out, 1, 2)) << r.out;
  EXPECT_NE(r.out.find("--- batch 1: per-op profile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("175 steps, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ops.conv2d_bn_silu (f32 nhwc) x87"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ops.conv2d_bn (f32 nhwc) x9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("yolo.postprocess_e2e"), std::string::npos) << r.out;
}

TEST(BenchCli, CpuWeightsFileAndRectangularSize) {
  test::TempDir dir;
  const auto weights = dir.path() / "w.safetensors";
  int status = 0;
  const std::string init =
      test::run_command(fmt::format("'{}' init --scale n --nc 3 --out '{}' 2>&1", VISION_CLI, weights.string()), &status);
  ASSERT_EQ(test::exit_code(status), 0) << init;
  const CliRun r = bench(fmt::format("--device cpu --model '{}' --imgsz 32,64 --batch 1 --iters 1", weights.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(fmt::format("YOLO26n (3 classes, {}), 32x64 (H x W)", weights.string())), std::string::npos)
      << r.out;
  EXPECT_TRUE(has_row(r.out, 1, 1)) << r.out;
}

TEST(BenchCli, BadArgumentsFailWithAClearMessage) {
  CliRun r = bench("--device cpu --scale n --imgsz 100 --batch 1 --iters 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("vision: error: bench: --imgsz 100: every side must be a positive multiple of 32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("e.g. 96 or 128"), std::string::npos) << r.out;

  r = bench("--device cpu --scale n --imgsz 64,100 --batch 1 --iters 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--imgsz 64,100: every side must be a positive multiple of 32"), std::string::npos) << r.out;

  r = bench("--device cpu --scale n --imgsz 6x4x --batch 1 --iters 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--imgsz takes one side or H,W"), std::string::npos) << r.out;

  r = bench("--device cpu --scale n --imgsz 64 --dtype f16 --iters 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bench: the CPU backend computes in f32 only, --dtype f16 cannot be benchmarked there"),
            std::string::npos)
      << r.out;

  r = bench("--device cpu --imgsz 64 --iters 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("pass either --model FILE"), std::string::npos) << r.out;

  r = bench("--device cpu --scale n --model x.safetensors --imgsz 64");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--model excludes --scale"), std::string::npos) << r.out;

  r = bench("--device cpu --scale n --dtype f8");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--dtype"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vision
