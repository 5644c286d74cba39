#include "vision/cuda/lazy_library.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "vision/core/error.h"

namespace vision::cuda {

void* open_library(const std::string& soname, const std::string& what, const std::string& advice) {
  void* library;
  {
#if defined(__SANITIZE_ADDRESS__)
    // NVRTC carries its own copy of the C++ runtime, whose static constructor allocates an exception-handling pool
    // (72,704 bytes) that is never freed; LeakSanitizer reports it from a module it cannot name, so no suppression
    // could. What the libraries' constructors allocate is not ours to free.
    __lsan::ScopedDisabler library_allocations_are_not_ours;
#endif
    library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (library) return library;
  const char* why = dlerror();
  fail("{} ({}) could not be loaded: {} — {}", what, soname, why ? why : "dlopen failed", advice);
}

void* library_symbol(void* library, const char* name, const std::string& soname) {
  dlerror();  // clear a stale error, so that the one read below is dlsym's
  if (void* address = dlsym(library, name)) return address;
  const char* why = dlerror();
  fail("{} has no function {} ({}): the library is not the version the engine was built for", soname, name,
       why ? why : "dlsym returned null");
}

LazyLibrary::LazyLibrary(std::string what, std::string soname, std::string advice)
    : what_(std::move(what)), soname_(std::move(soname)), advice_(std::move(advice)) {}

void* LazyLibrary::handle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!handle_) handle_ = open_library(soname_, what_, advice_);
  return handle_;
}

LazyLibrary& cudnn_library() {
  static LazyLibrary library("cuDNN", fmt::format("libcudnn.so.{}", CUDNN_MAJOR),
                             fmt::format("install cuDNN {} (or add its folder to LD_LIBRARY_PATH), or use --device cpu",
                                         CUDNN_MAJOR));
  return library;
}

LazyLibrary& cublas_library() {
  static LazyLibrary library(
      "cuBLAS", fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR),
      fmt::format("install cuBLAS from CUDA {} (or add its folder to LD_LIBRARY_PATH), or use --device cpu",
                  CUBLAS_VER_MAJOR));
  return library;
}

LazyLibrary& nvrtc_library() {
  // NVRTC's soname follows the toolkit's major version (libnvrtc.so.12, .13); nvrtc.h has no version macro.
  static LazyLibrary library(
      "NVRTC", fmt::format("libnvrtc.so.{}", CUDART_VERSION / 1000),
      fmt::format("install NVRTC from CUDA {} (or add its folder to LD_LIBRARY_PATH), or use --device cpu",
                  CUDART_VERSION / 1000));
  return library;
}

LazyLibrary& nccl_library() {
  static LazyLibrary library(
      "NCCL", fmt::format("libnccl.so.{}", NCCL_MAJOR),
      "install NCCL (it ships with the CUDA toolkit; or add its folder to LD_LIBRARY_PATH), or set VISION_DIST_BACKEND=mpi "
      "to reduce the gradients through host memory and MPI");
  return library;
}

}  // namespace vision::cuda
