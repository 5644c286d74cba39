// Re-seeds test::rng() at the start of every test from VISION_TEST_SEED and the test's name, and prints the seed
// that replays a failed test (test_util.h, "Replayable random inputs").
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "test_util.h"

namespace vision::test {
namespace {

std::string full_name(const ::testing::TestInfo& info) {
  return std::string(info.test_suite_name()) + "." + info.name();
}

class SeedListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override { rng().seed(test_seed(full_name(info))); }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result() || !info.result()->Failed()) return;
    std::printf("[   SEED   ] %s: VISION_TEST_SEED=%llu replays its random inputs (test seed %llu)\n",
                full_name(info).c_str(), static_cast<unsigned long long>(base_seed()),
                static_cast<unsigned long long>(test_seed(full_name(info))));
    std::fflush(stdout);
  }
};

// Registered before main() runs the tests (gtest_main's RUN_ALL_TESTS sees it).
const bool kRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
  return true;
}();

}  // namespace
}  // namespace vision::test
