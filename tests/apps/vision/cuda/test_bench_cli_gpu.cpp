// `vision bench` on the GPU at a tiny size, in each dtype: a row per batch, the timed calls replay the plan's CUDA
// graph (the JSON line says so). Skips without a usable GPU (fails under VISION_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"

namespace vision {
namespace {

TEST(BenchCliGpu, CudaTinyRunsReplayTheGraphInEachDtype) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (const char* dtype : {"f16", "bf16", "f32"}) {
    SCOPED_TRACE(dtype);
    test::TempDir dir;
    const auto json = dir.path() / "ours.jsonl";
    int status = 0;
    const std::string out = test::run_command(
        fmt::format("'{}' bench --device cuda --dtype {} --scale n --imgsz 64 --batch 1,2 --iters 3 --json '{}' 2>&1",
                    VISION_CLI, dtype, json.string()),
        &status);
    ASSERT_EQ(test::exit_code(status), 0) << out;
    EXPECT_NE(out.find(fmt::format("{} nhwc on cuda ({})", dtype, cuda::current_device_name())), std::string::npos)
        << out;
    std::vector<nlohmann::json> rows;
    std::ifstream f(json);
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(rows.size(), 2u) << out;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i]["batch"], static_cast<int64_t>(i + 1));
      EXPECT_EQ(rows[i]["device"], "cuda");
      EXPECT_EQ(rows[i]["dtype"], dtype);
      EXPECT_EQ(rows[i]["graph_replayed"], true);
      EXPECT_EQ(rows[i]["iters"], 3);
      EXPECT_GT(rows[i]["median_ms"].get<double>(), 0.0);
    }
  }
}

}  // namespace
}  // namespace vision
