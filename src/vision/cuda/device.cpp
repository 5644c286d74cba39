#include "vision/cuda/device.h"

#include <fmt/format.h>

#include "vision/cuda/check.h"

namespace vision::cuda {
namespace {

struct Probe {
  bool ok = false;
  std::string reason;
};

Probe run_probe() {
  try {
    int count = 0;
    VISION_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count == 0) return {false, "the CUDA runtime found no device"};
    int device = 0, major = 0;
    VISION_CUDA_CHECK(cudaGetDevice(&device));
    VISION_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    VISION_CUDA_CHECK(cudaFree(nullptr));  // creates the primary context: the first call that needs a working driver
    return {true, {}};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

const Probe& probe() {
  static const Probe p = run_probe();
  return p;
}

}  // namespace

bool gpu_available() { return probe().ok; }

const std::string& gpu_unavailable_reason() { return probe().reason; }

std::string arch_for_compute_capability(int major, int minor) {
  if (major == 9 && minor == 0) return "sm_90a";
  return fmt::format("sm_{}{}", major, minor);
}

std::string current_device_name() {
  VISION_CHECK(gpu_available(), "no usable CUDA GPU: {}", gpu_unavailable_reason());
  int device = 0;
  cudaDeviceProp prop{};
  VISION_CUDA_CHECK(cudaGetDevice(&device));
  VISION_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::string current_arch() {
  VISION_CHECK(gpu_available(), "no usable CUDA GPU: {}", gpu_unavailable_reason());
  int device = 0, major = 0, minor = 0;
  VISION_CUDA_CHECK(cudaGetDevice(&device));
  VISION_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  VISION_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return arch_for_compute_capability(major, minor);
}

}  // namespace vision::cuda
