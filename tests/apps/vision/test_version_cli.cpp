// `vision --version` and the version macros (issue #28).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "cli_util.h"
#include "vision/version.h"

namespace vision {
namespace {

TEST(VersionCli, PrintsTheProjectVersionAndTheBuild) {
  const test::CliRun r = test::run_cli(fmt::format("'{}' --version 2>&1", VISION_CLI));
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string want = fmt::format("vision {}.{}.{} ", VISION_VERSION_MAJOR, VISION_VERSION_MINOR,
                                       VISION_VERSION_PATCH);
  EXPECT_EQ(r.out.rfind(want, 0), 0u) << r.out;
  EXPECT_EQ(std::string(kVersion), VISION_VERSION_STRING);
#ifdef VISION_HAS_CUDA
  EXPECT_NE(r.out.find("(CUDA build)"), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("(CPU-only build)"), std::string::npos) << r.out;
#endif
}

}  // namespace
}  // namespace vision
