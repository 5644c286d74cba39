// Shared helpers for the test suite: random inputs, float64 comparisons, element types, files, errors, GPU skips and
// tests that must run without a GPU.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/tensor.h"
#include "vision/graph/backend.h"

extern char** environ;

namespace vision::test {

// ---------------------------------------------------------------------------------------------------------------
// Random inputs

// Replayable random inputs. The suite's base seed is VISION_TEST_SEED (0 when unset; tools/test.sh sets a fresh one
// each run, so inputs stay fresh). rng() is re-seeded at the start of every test from the base and the test's full
// name (tests/test_seed.cpp), so a test's inputs do not depend on which tests ran before it, and a failing test prints
// the VISION_TEST_SEED that replays it, alone or in the whole suite.
inline uint64_t base_seed() {
  const char* s = std::getenv("VISION_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 0;
}
inline uint64_t test_seed(std::string_view test_name, uint64_t base = base_seed()) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name, then mixed with the base (splitmix64's finaliser)
  for (const char c : test_name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  uint64_t z = h ^ (base + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline std::mt19937_64& rng() {
  static std::mt19937_64 r(test_seed(""));
  return r;
}

// Rows [begin, begin + n) of a host tensor along its first dimension (a batch's images, targets or counts).
inline core::Tensor batch_rows(const core::Tensor& t, int64_t begin, int64_t n) {
  core::Shape shape = t.shape();
  shape[0] = n;
  core::Tensor out = core::Tensor::zeros(shape, t.dtype(), t.layout());
  const size_t per = t.nbytes() / static_cast<size_t>(t.dim(0));
  std::memcpy(out.raw(), static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(begin) * per,
              per * static_cast<size_t>(n));
  return out;
}

inline std::vector<float> random_values(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

inline core::Tensor random_tensor(core::Shape shape, float lo = -1.0f, float hi = 1.0f) {
  auto v = random_values(static_cast<size_t>(shape.numel()), lo, hi);
  return core::Tensor::from_vector(std::move(shape), v);
}

// ---------------------------------------------------------------------------------------------------------------
// Comparisons with float64 references

// ‖out − ref‖ / ‖ref‖ in float64 (NaN in out gives +inf).
template <typename A, typename B>
double rel_error(const A& out, const B& ref) {
  double num = 0, den = 0;
  EXPECT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double o = static_cast<double>(out[i]), r = static_cast<double>(ref[i]);
    if (!std::isfinite(o)) return INFINITY;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// max |out − ref| (NaN in out gives +inf).
template <typename A, typename B>
double max_abs_error(const A& out, const B& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double m = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double o = static_cast<double>(out[i]);
    if (!std::isfinite(o)) return INFINITY;
    m = std::max(m, std::abs(o - static_cast<double>(ref[i])));
  }
  return m;
}

// max |x| (the scale of a reference).
template <typename T>
double max_abs(const std::vector<T>& v) {
  double m = 0;
  for (const T& x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}
inline std::vector<double> to_double(const core::Tensor& t) { return to_double(t.to_vector()); }

// A tensor of an executor's (or any holder of a BackendContext's) backend — a plan's output view, a state tensor — as
// host floats.
template <typename Executor>
std::vector<float> to_host(Executor& ex, const core::Tensor& t) {
  return ex.backend().download(t).to_vector();
}

// A value no correct kernel writes: outputs are filled with it before each run.
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// A host tensor filled with kPoison.
inline core::Tensor poisoned(core::Shape shape) {
  core::Tensor t = core::Tensor::zeros(std::move(shape));
  t.fill(kPoison);
  return t;
}

// ---------------------------------------------------------------------------------------------------------------
// Element types: host values stored as dtype (rounded to nearest even), and back to float.

inline std::vector<uint8_t> encode(const std::vector<float>& values, core::DType dtype) {
  std::vector<uint8_t> out(values.size() * core::dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == core::DType::f32) {
      std::memcpy(&out[4 * i], &values[i], 4);
    } else {
      const uint16_t h = dtype == core::DType::f16 ? core::float_to_half(values[i]) : core::float_to_bf16(values[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

inline std::vector<float> decode(const std::vector<uint8_t>& bytes, core::DType dtype) {
  const size_t n = bytes.size() / core::dtype_size(dtype);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == core::DType::f32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = dtype == core::DType::f16 ? core::half_to_float(h) : core::bf16_to_float(h);
    }
  }
  return out;
}

// The values as dtype can hold them (the inputs a device really sees).
inline std::vector<float> rounded(const std::vector<float>& values, core::DType dtype) {
  return decode(encode(values, dtype), dtype);
}

// A host f32 NCHW tensor in format f (a rank-4 tensor in f.layout; values rounded to f.dtype), and any floating host
// tensor back to f32 NCHW; rounded_to: the values as format f holds them, in f32 NCHW.
inline core::Tensor to_format(const core::Tensor& host, const graph::Format& f) {
  core::Tensor out = core::Tensor::zeros(host.shape(), f.dtype, host.rank() == 4 ? f.layout : core::Layout::nchw);
  graph::cpu_backend()->convert(out, host);
  return out;
}
inline core::Tensor to_f32_nchw(const core::Tensor& host) {
  core::Tensor out = core::Tensor::zeros(host.shape());
  graph::cpu_backend()->convert(out, host);
  return out;
}
inline core::Tensor rounded_to(const core::Tensor& host, const graph::Format& f) {
  return to_f32_nchw(to_format(host, f));
}

// ---------------------------------------------------------------------------------------------------------------
// Errors and files

// The message of the vision::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A fresh directory under the system temp dir, removed with everything in it afterwards.
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("vision-test-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets environment variables for the scope — each to a value, or unset (std::nullopt) — and restores every previous
// value, or its absence, afterwards.
class ScopedEnv {
 public:
  using Vars = std::vector<std::pair<std::string, std::optional<std::string>>>;
  explicit ScopedEnv(Vars vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      set(name, value);
    }
  }
  ScopedEnv(std::string name, std::optional<std::string> value) : ScopedEnv(Vars{{std::move(name), std::move(value)}}) {}
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) set(it->first, it->second);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  Vars saved_;
};

// A whole file's bytes ("" when it cannot be read), and a file replaced by bytes.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// ---------------------------------------------------------------------------------------------------------------
// Skips, and tests of behaviour without a GPU

// VISION_REQUIRE_GPU=1 (set on the GPU host) turns every skip of the suite into a failure, so that a broken setup
// cannot pass as all-green.
inline bool require_gpu() {
  const char* s = std::getenv("VISION_REQUIRE_GPU");
  return s && std::string(s) == "1";
}

// The environment variable that marks the child process of run_current_test_without_gpu().
constexpr const char* kNoGpuChildVariable = "VISION_TEST_NO_GPU_CHILD";
inline bool in_no_gpu_child() {
  const char* s = std::getenv(kNoGpuChildVariable);
  return s && std::string(s) == "1";
}

// Runs the current test again in a child process of this test binary that sees no GPU (CUDA_VISIBLE_DEVICES empty)
// and expects it to run there and pass. The child's output is printed on failure.
inline void run_current_test_without_gpu() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  // The parent's environment, minus what would redirect the child (GPU selection, gtest output and sharding).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string var(*e);
    const std::string name = var.substr(0, var.find('='));
    if (name == "CUDA_VISIBLE_DEVICES" || name == kNoGpuChildVariable || name.rfind("GTEST_", 0) == 0) continue;
    env.push_back(var);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=");
  env.push_back(std::string(kNoGpuChildVariable) + "=1");
  std::vector<char*> envp;
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", color = "--gtest_color=no";
  std::vector<char*> argv = {exe.data(), const_cast<char*>(filter.c_str()), color.data(), nullptr};

  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0) << std::strerror(errno);  // the child gets them through dup2 alone
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addclose(&actions, out[1]);
  pid_t child = -1;
  const int spawned = ::posix_spawn(&child, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string output;
  if (spawned == 0) {
    char buffer[4096];
    for (ssize_t got; (got = ::read(out[0], buffer, sizeof buffer)) != 0;) {
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) break;
      output.append(buffer, static_cast<size_t>(got));
    }
  }
  ::close(out[0]);
  ASSERT_EQ(spawned, 0) << "posix_spawn of " << exe << ": " << std::strerror(spawned);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child without a GPU failed:\n" << output;
  // It ran this one test, which passed there (not filtered out, not skipped).
  EXPECT_NE(output.find("[  PASSED  ] 1 test."), std::string::npos) << output;
  EXPECT_EQ(output.find("[  SKIPPED ]"), std::string::npos) << output;
}

}  // namespace vision::test

// Skips the test with a reason, or fails it when VISION_REQUIRE_GPU=1. Every skip of the suite goes through here.
#define VISION_SKIP_OR_FAIL(reason)                                                                 \
  do {                                                                                              \
    const std::string vision_skip_reason_ = (reason);                                               \
    if (::vision::test::require_gpu())                                                              \
      FAIL() << "VISION_REQUIRE_GPU=1 turns this skip into a failure: " << vision_skip_reason_;     \
    GTEST_SKIP() << vision_skip_reason_;                                                            \
  } while (0)

// Skips the test when no usable GPU is present, or fails it when VISION_REQUIRE_GPU=1.
#define VISION_SKIP_WITHOUT_GPU(has_gpu)                  \
  do {                                                    \
    if (!(has_gpu)) VISION_SKIP_OR_FAIL("no usable GPU"); \
  } while (0)

// First statement of a test of behaviour without a GPU: in the test process it runs this test in a child process
// that sees no GPU and returns with its verdict (so the test runs, and must pass, on a GPU host too); in that child
// it falls through to the test body.
#define VISION_RUN_WITHOUT_GPU()                      \
  do {                                                \
    if (!::vision::test::in_no_gpu_child()) {         \
      ::vision::test::run_current_test_without_gpu(); \
      return;                                         \
    }                                                 \
  } while (0)
