// The kernel disk cache: keys, hits, corrupt entries, concurrent builders (threads and processes), locations. Host
// code, tested in every build (the CPU-only ones under ASan and TSan too); compiling a real kernel through it:
// tests/cuda/test_kernel_cache_nvrtc.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/cuda/kernel_cache.h"

using namespace vision;
using namespace vision::cuda;
namespace fs = std::filesystem;
using vision::test::read_file;
using vision::test::ScopedEnv;
using vision::test::TempDir;
using vision::test::write_file;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

}  // namespace

TEST(KernelCacheKey, ChangesWithEveryInput) {
  const std::vector<std::string> opts{"--gpu-architecture=sm_90a", "--std=c++17"};
  const std::string base = kernel_cache_key("src", opts, "sm_90a", "13.0", "k<float>");
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, kernel_cache_key("src", opts, "sm_90a", "13.0", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src ", opts, "sm_90a", "13.0", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src", {"--gpu-architecture=sm_90a", "--std=c++20"}, "sm_90a", "13.0", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src", {"--gpu-architecture=sm_90a"}, "sm_90a", "13.0", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src", opts, "sm_90", "13.0", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src", opts, "sm_90a", "13.1", "k<float>"));
  EXPECT_NE(base, kernel_cache_key("src", opts, "sm_90a", "13.0", "k<__half>"));
  // Field boundaries are part of the key: moving a character between fields changes it.
  EXPECT_NE(kernel_cache_key("ab", {"c"}, "sm_80", "13.0"), kernel_cache_key("a", {"bc"}, "sm_80", "13.0"));
}

TEST(KernelCache, DefaultLocation) {
  {
    ScopedEnv env({{"VISION_CACHE_DIR", "/somewhere/kernels"}, {"XDG_CACHE_HOME", "/xdg"}});
    EXPECT_EQ(default_kernel_cache_dir(), fs::path("/somewhere/kernels"));
  }
  {
    ScopedEnv env({{"VISION_CACHE_DIR", std::nullopt}, {"XDG_CACHE_HOME", "/xdg"}});
    EXPECT_EQ(default_kernel_cache_dir(), fs::path("/xdg/vision-cpp/kernels"));
  }
  {
    ScopedEnv env({{"VISION_CACHE_DIR", std::nullopt}, {"XDG_CACHE_HOME", std::nullopt}, {"HOME", "/home/me"}});
    EXPECT_EQ(default_kernel_cache_dir(), fs::path("/home/me/.cache/vision-cpp/kernels"));
  }
}

TEST(KernelCache, MissThenHit) {
  TempDir dir;
  const KernelCache cache(dir.path() / "nested" / "kernels");  // created on demand
  int builds = 0;
  auto build = [&] {
    ++builds;
    return std::string("payload\0with nul", 16);
  };
  CacheOutcome outcome{};
  EXPECT_EQ(cache.get_or_build(kKey, build, &outcome), std::string("payload\0with nul", 16));
  EXPECT_EQ(outcome, CacheOutcome::built);
  EXPECT_EQ(cache.get_or_build(kKey, build, &outcome), std::string("payload\0with nul", 16));
  EXPECT_EQ(outcome, CacheOutcome::hit);
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(fs::exists(cache.entry_path(kKey)));
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(cache.dir()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(KernelCache, CorruptEntriesAreRebuilt) {
  TempDir dir;
  const KernelCache cache(dir.path());
  const std::string payload(5000, 'x');
  int builds = 0;
  auto build = [&] {
    ++builds;
    return payload;
  };
  cache.get_or_build(kKey, build);
  const fs::path entry = cache.entry_path(kKey);
  const std::string good = read_file(entry);
  ASSERT_EQ(good.size(), 48 + payload.size());

  std::string flipped = good;
  flipped[100] ^= 1;
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::string bad_length = good;
  bad_length[8] ^= 1;
  const std::vector<std::pair<const char*, std::string>> damage = {
      {"truncated payload", good.substr(0, good.size() - 10)},
      {"truncated header", good.substr(0, 20)},
      {"empty", ""},
      {"flipped payload byte", flipped},
      {"bad magic", bad_magic},
      {"bad length", bad_length},
      {"trailing bytes", good + "zz"},
  };
  for (const auto& [what, bytes] : damage) {
    write_file(entry, bytes);
    bool corrupt = false;
    EXPECT_FALSE(cache.load(kKey, &corrupt).has_value()) << what;
    EXPECT_TRUE(corrupt) << what;
    const int before = builds;
    CacheOutcome outcome{};
    EXPECT_EQ(cache.get_or_build(kKey, build, &outcome), payload) << what;
    EXPECT_EQ(outcome, CacheOutcome::rebuilt_corrupt) << what;
    EXPECT_EQ(builds, before + 1) << what;
    EXPECT_EQ(read_file(entry), good) << what;  // repaired
  }
}

TEST(KernelCache, ThreadsBuildingOneKeyAreSerialised) {
  TempDir dir;
  const KernelCache cache(dir.path());
  std::atomic<int> builds{0}, inside{0}, max_inside{0};
  auto build = [&] {
    ++builds;
    const int now = ++inside;
    int seen = max_inside.load();
    while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    --inside;
    return std::string("built once");
  };
  constexpr int kThreads = 4;
  std::vector<std::string> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { results[t] = cache.get_or_build(kKey, build); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(max_inside.load(), 1);
  for (const auto& r : results) EXPECT_EQ(r, "built once");
}

TEST(KernelCache, ProcessesBuildingOneKeyAreSerialised) {
  TempDir dir;
  const fs::path log = dir.path() / "builds.log";
  const KernelCache cache(dir.path() / "kernels");
  // Each build appends a line to the log and holds the lock for a while; only one of the two processes may build.
  auto build = [&] {
    {
      std::ofstream f(log, std::ios::app);
      f << ::getpid() << "\n";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return std::string("payload from a process");
  };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    try {
      code = cache.get_or_build(kKey, build) == "payload from a process" ? 0 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  const std::string mine = cache.get_or_build(kKey, build);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(mine, "payload from a process");
  std::ifstream f(log);
  int lines = 0;
  for (std::string line; std::getline(f, line);) ++lines;
  EXPECT_EQ(lines, 1);
}

TEST(KernelCache, UnusableDirectoryStillBuilds) {
  TempDir dir;
  write_file(dir.path() / "file", "not a directory");
  const KernelCache cache(dir.path() / "file" / "kernels");
  CacheOutcome outcome{};
  auto build = [] { return std::string("ok"); };
  EXPECT_EQ(cache.get_or_build(kKey, build, &outcome), "ok");
  EXPECT_EQ(outcome, CacheOutcome::uncached);
  EXPECT_THROW(cache.store(kKey, "x"), Error);
}

TEST(KernelCache, CompiledKernelRoundTrip) {
  const std::string elf{'\x7f', 'E', 'L', 'F', '\0', '\1'};
  CompiledKernel k{"sm_90a", "_Z1kPf", ".version 9.0\n", elf, ""};
  const std::optional<CompiledKernel> back = deserialize(serialize(k));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->arch, k.arch);
  EXPECT_EQ(back->lowered_name, k.lowered_name);
  EXPECT_EQ(back->ptx, k.ptx);
  EXPECT_EQ(back->cubin, k.cubin);
  const std::string s = serialize(k);
  EXPECT_FALSE(deserialize(s.substr(0, s.size() - 1)).has_value());
  EXPECT_FALSE(deserialize(s + "x").has_value());
}
