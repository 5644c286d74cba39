// cuDNN, cuBLAS and NVRTC loaded on first use (vision/cuda/lazy_library.h): the loader's errors and lookups, the
// wrappers reaching the real libraries, and the CLI starting (and running on the CPU) without loading any of them.
// None of this needs a GPU.
#include <cublas_api.h>
#include <cudnn.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "vision/core/error.h"
#include "vision/cuda/lazy_library.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_lazy_library_cpp {

using namespace vision;
using cuda::LazyLibrary;
using test::exit_code;
using test::run_command;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no vision::Error thrown)";
}

// The libraries the dynamic loader loads for `vision <args>` (LD_DEBUG=files: one "file=<name> [...]; needed by" or
// "dynamically loaded by" line per library, on standard error), after checking that the command succeeded.
std::set<std::string> libraries_loaded_by_cli(const std::string& args) {
  int status = 0;
  const std::string log =
      run_command("LD_DEBUG=files '" + std::string(VISION_CLI) + "' " + args + " 2>&1 >/dev/null", &status);
  EXPECT_EQ(exit_code(status), 0) << "vision " << args << ":\n" << log.substr(0, 4000);
  std::set<std::string> loaded;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("file=");
    if (at == std::string::npos) continue;
    const size_t end = line.find_first_of(" \t;", at);
    loaded.insert(line.substr(at + 5, end == std::string::npos ? std::string::npos : end - at - 5));
  }
  return loaded;
}

void expect_no_gpu_library(const std::set<std::string>& loaded, const std::string& what) {
  // LD_DEBUG really reported the loading: the C++ runtime is there (an empty set would make the test pass vacuously).
  ASSERT_TRUE(loaded.count("libstdc++.so.6")) << what << ": LD_DEBUG=files listed no libstdc++ (" << loaded.size()
                                              << " libraries listed)";
  for (const std::string& lib : loaded)
    for (const char* gpu : {"libcudnn", "libcublas", "libnvrtc"})
      EXPECT_EQ(lib.find(gpu), std::string::npos) << what << " loaded " << lib;
}

}  // namespace

TEST(LazyLibrary, MissingLibraryIsAnErrorNamingItAndWhatToDo) {
  const std::string message = error_of(
      [] { cuda::open_library("libdoes-not-exist.so.1", "The test library", "install it, or use --device cpu"); });
  EXPECT_NE(message.find("The test library (libdoes-not-exist.so.1) could not be loaded: "), std::string::npos)
      << message;
  EXPECT_NE(message.find("cannot open shared object file"), std::string::npos) << message;  // dlerror()'s reason
  EXPECT_NE(message.find("install it, or use --device cpu"), std::string::npos) << message;

  // Through LazyLibrary: the first use throws, and so does the next (it tries again rather than keeping a null handle).
  LazyLibrary missing("The test library", "libdoes-not-exist.so.1", "install it");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string m = error_of([&] { missing.symbol("cos"); });
    EXPECT_NE(m.find("(libdoes-not-exist.so.1) could not be loaded"), std::string::npos) << attempt << ": " << m;
  }
}

TEST(LazyLibrary, LoadsARealLibraryAndResolvesItsFunctions) {
  LazyLibrary libm("the C math library", "libm.so.6", "install libc6");
  const auto cos_fn = reinterpret_cast<double (*)(double)>(libm.symbol("cos"));
  ASSERT_NE(cos_fn, nullptr);
  for (double x : {0.3, 1.7, -2.9}) EXPECT_EQ(cos_fn(x), std::cos(x)) << x;
  EXPECT_EQ(libm.handle(), libm.handle());

  const std::string message = error_of([&] { libm.symbol("vision_no_such_function"); });
  EXPECT_NE(message.find("libm.so.6 has no function vision_no_such_function"), std::string::npos) << message;
}

TEST(LazyLibrary, ConcurrentFirstUsesAgree) {
  LazyLibrary libm("the C math library", "libm.so.6", "install libc6");
  std::vector<void*> handles(8, nullptr), symbols(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < handles.size(); ++i)
    threads.emplace_back([&, i] {
      symbols[i] = libm.symbol("sin");
      handles[i] = libm.handle();
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_NE(handles[i], nullptr);
    EXPECT_EQ(handles[i], handles[0]);
    EXPECT_EQ(symbols[i], symbols[0]);
  }
}

// The sonames follow the headers the engine was built with, and the wrappers reach the real libraries (functions that
// need no GPU). The CUDA build needs these libraries to configure, so they are present wherever its tests run.
TEST(LazyLibrary, EngineLibrariesLoadThroughTheWrappers) {
  EXPECT_EQ(cuda::cudnn_library().soname(), "libcudnn.so." + std::to_string(CUDNN_MAJOR));
  EXPECT_EQ(cuda::cublas_library().soname(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  EXPECT_EQ(cuda::nvrtc_library().soname(), "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000));

  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  const std::string invalid = cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE);  // "an unsupported value or ..."
  EXPECT_NE(invalid.find("value"), std::string::npos) << invalid;
  EXPECT_NE(invalid, cublasGetStatusString(CUBLAS_STATUS_SUCCESS));
  EXPECT_STREQ(nvrtcGetErrorString(NVRTC_ERROR_INVALID_INPUT), "NVRTC_ERROR_INVALID_INPUT");
  int major = 0, minor = -1;
  ASSERT_EQ(nvrtcVersion(&major, &minor), NVRTC_SUCCESS);
  EXPECT_EQ(major, CUDART_VERSION / 1000);
  EXPECT_GE(minor, 0);
}

// `vision --help` and a CPU run load no cuDNN, cuBLAS or NVRTC: linking one of them again, or a call into one at
// start (a static initialiser) or on the CPU path, would list it.
TEST(LazyLibrary, CliStartsAndRunsOnTheCpuWithoutThem) {
  expect_no_gpu_library(libraries_loaded_by_cli("--help"), "vision --help");
  expect_no_gpu_library(
      libraries_loaded_by_cli("demo --device cpu --batch 1 --size 32 --iters 1 --train-steps 1"),
      "vision demo --device cpu");
}

}  // namespace test_lazy_library_cpp
