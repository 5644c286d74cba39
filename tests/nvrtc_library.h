// NvrtcLibrary — NVRTC loaded at run time (dlopen), for tests that compile kernel sources in the CPU-only build too,
// which links no CUDA library (the engine's own NVRTC wrapper, vision/cuda/nvrtc.h, exists only with CUDA).
#pragma once

#include <dlfcn.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace vision::test {

class NvrtcLibrary {
 public:
  using Program = void*;
  static std::unique_ptr<NvrtcLibrary> load(std::string* why) {
    std::vector<std::string> candidates;
    if (const char* e = std::getenv("VISION_NVRTC_LIBRARY")) candidates.emplace_back(e);
    for (const char* n : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}) candidates.emplace_back(n);
    candidates.push_back(cuda_home() + "/lib64/libnvrtc.so");
    for (const auto& c : candidates) {
      void* lib;
      {
#if defined(__SANITIZE_ADDRESS__)
        // NVRTC's copy of the C++ runtime allocates its exception-handling pool in a static constructor and never frees
        // it (vision/cuda/lazy_library.cpp says more): not ours, and LeakSanitizer cannot name it in a suppression.
        __lsan::ScopedDisabler nvrtc_allocations_are_not_ours;
#endif
        lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      }
      if (!lib) continue;
      auto n = std::unique_ptr<NvrtcLibrary>(new NvrtcLibrary(lib));
      if (n->ok()) return n;
    }
    *why = "no usable libnvrtc (set VISION_NVRTC_LIBRARY or CUDA_HOME)";
    return nullptr;
  }
  ~NvrtcLibrary() { dlclose(lib_); }
  NvrtcLibrary(const NvrtcLibrary&) = delete;
  NvrtcLibrary& operator=(const NvrtcLibrary&) = delete;
  static std::string cuda_home() {
    const char* h = std::getenv("CUDA_HOME");
    return h ? h : "/usr/local/cuda";
  }

  // Compiles source for arch with the given name expressions; returns "" or the error and NVRTC's log.
  std::string compile(const std::string& source, const std::string& program_name, const std::vector<std::string>& names,
                      const std::vector<std::string>& options) const {
    Program prog = nullptr;
    if (int r = create_(&prog, source.c_str(), program_name.c_str(), 0, nullptr, nullptr))
      return std::string("nvrtcCreateProgram: ") + error_(r);
    for (const auto& n : names)
      if (int r = add_name_(prog, n.c_str())) return std::string("nvrtcAddNameExpression: ") + error_(r);
    std::vector<const char*> opts;
    for (const auto& o : options) opts.push_back(o.c_str());
    const int r = compile_(prog, static_cast<int>(opts.size()), opts.data());

    size_t n = 0;
    log_size_(prog, &n);
    std::string log(n, '\0');
    if (n) log_(prog, log.data());
    std::string out;
    if (r != 0) {
      out = std::string("nvrtcCompileProgram: ") + error_(r) + "\n" + log;
    } else {
      size_t cubin = 0;
      cubin_size_(prog, &cubin);
      if (cubin == 0) out = "no cubin produced\n" + log;
    }
    destroy_(&prog);
    return out;
  }

 private:
  explicit NvrtcLibrary(void* lib) : lib_(lib) {
    create_ = reinterpret_cast<decltype(create_)>(dlsym(lib, "nvrtcCreateProgram"));
    destroy_ = reinterpret_cast<decltype(destroy_)>(dlsym(lib, "nvrtcDestroyProgram"));
    compile_ = reinterpret_cast<decltype(compile_)>(dlsym(lib, "nvrtcCompileProgram"));
    log_size_ = reinterpret_cast<decltype(log_size_)>(dlsym(lib, "nvrtcGetProgramLogSize"));
    log_ = reinterpret_cast<decltype(log_)>(dlsym(lib, "nvrtcGetProgramLog"));
    add_name_ = reinterpret_cast<decltype(add_name_)>(dlsym(lib, "nvrtcAddNameExpression"));
    cubin_size_ = reinterpret_cast<decltype(cubin_size_)>(dlsym(lib, "nvrtcGetCUBINSize"));
    error_ = reinterpret_cast<decltype(error_)>(dlsym(lib, "nvrtcGetErrorString"));
  }
  bool ok() const { return create_ && destroy_ && compile_ && log_size_ && log_ && add_name_ && cubin_size_ && error_; }

  void* lib_;
  int (*create_)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*destroy_)(Program*) = nullptr;
  int (*compile_)(Program, int, const char* const*) = nullptr;
  int (*log_size_)(Program, size_t*) = nullptr;
  int (*log_)(Program, char*) = nullptr;
  int (*add_name_)(Program, const char*) = nullptr;
  int (*cubin_size_)(Program, size_t*) = nullptr;
  const char* (*error_)(int) = nullptr;
};

}  // namespace vision::test
