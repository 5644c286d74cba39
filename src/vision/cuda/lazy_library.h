// LazyLibrary — a shared library (cuDNN, cuBLAS, NVRTC) opened with dlopen() on its first use instead of at start.
//
// The engine links none of these libraries: lazy_cudnn.cpp, lazy_cublas.cpp and lazy_nvrtc.cpp define every function
// of theirs that it calls, with the signature the toolkit header declares (so the compiler checks each one), and
// forward to the library's own, looked up on the first call. `vision --help` and CPU runs never map them; the first
// cuDNN/cuBLAS/NVRTC call (building a CUDA plan, compiling a kernel) loads the library, or throws a vision::Error that
// names it and says what to do.
#pragma once

#include <mutex>
#include <string>

namespace vision::cuda {

// dlopen(soname, RTLD_NOW | RTLD_LOCAL), searched as the dynamic loader searches (LD_LIBRARY_PATH, the executable's
// RUNPATH, ld.so.cache). A failure throws vision::Error: "<what> (<soname>) could not be loaded: <dlerror()> —
// <advice>". Each call opens the library again (the loader counts references); never closed by the engine.
void* open_library(const std::string& soname, const std::string& what, const std::string& advice);

// dlsym(library, name); a missing symbol throws vision::Error naming it and the library.
void* library_symbol(void* library, const char* name, const std::string& soname);

class LazyLibrary {
 public:
  // what: the library's name for people ("cuDNN"); advice: what to do when it cannot be loaded.
  LazyLibrary(std::string what, std::string soname, std::string advice);
  LazyLibrary(const LazyLibrary&) = delete;
  LazyLibrary& operator=(const LazyLibrary&) = delete;

  // The library's handle, loaded by the first call (once, thread-safe). A failure throws, and the next call tries
  // again.
  void* handle();
  // A symbol of the library (loading it first); throws when the library or the symbol is missing.
  void* symbol(const char* name) { return library_symbol(handle(), name, soname_); }
  const std::string& soname() const { return soname_; }

 private:
  std::string what_, soname_, advice_;
  std::mutex mutex_;
  void* handle_ = nullptr;
};

// The engine's three, by soname: libcudnn.so.<CUDNN_MAJOR>, libcublas.so.<CUBLAS_VER_MAJOR> (which loads
// libcublasLt itself) and libnvrtc.so.<CUDA major>, the versions of the headers the engine was built with.
LazyLibrary& cudnn_library();
LazyLibrary& cublas_library();
LazyLibrary& nvrtc_library();
// NCCL (libnccl.so.<NCCL_MAJOR>), for the gradient all-reduce of data-parallel GPU ranks (dist/nccl_reducer_cuda.h).
LazyLibrary& nccl_library();

// Calls the function `name` of `library` with Fn's type. Fn is the address of the wrapper being defined: it gives the
// type, and each wrapper gets its own instantiation, so its own cached pointer. The pointer is looked up by the first
// call (a thread-safe static); a failure throws, and the next call looks again.
template <auto Fn, typename... Args>
auto lazy_call(LazyLibrary& (*library)(), const char* name, Args... args) {
  static const auto real = reinterpret_cast<decltype(Fn)>(library().symbol(name));
  return real(args...);
}

}  // namespace vision::cuda

// VISION_LAZY_CALL(library, fn, args...) forwards a wrapper's arguments to `fn` of `library` (cudnn_library, ...).
// `fn` is written as the header spells it and expanded before it is turned into the symbol name, so that cuBLAS's
// `#define cublasCreate cublasCreate_v2` looks up "cublasCreate_v2", the name the wrapper is defined under too.
#define VISION_LAZY_STRING_(x) #x
#define VISION_LAZY_STRING(x) VISION_LAZY_STRING_(x)
#define VISION_LAZY_CALL(library, fn, ...) \
  ::vision::cuda::lazy_call<&fn>(&::vision::cuda::library, VISION_LAZY_STRING(fn) __VA_OPT__(, ) __VA_ARGS__)
