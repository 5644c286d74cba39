// CUDA device probe — whether a usable GPU is present (and why not), and the NVRTC architecture of the current one.
#pragma once

#include <string>

namespace vision::cuda {

// True when the CUDA runtime finds a device it can use. Probed once per process; any CUDA error during the probe
// (no driver, driver too old, no device, ...) makes it false, with the reason in gpu_unavailable_reason().
bool gpu_available();
// Why gpu_available() is false ("cudaGetDeviceCount(&count) failed: CUDA driver version is insufficient ..."),
// empty when a GPU is available.
const std::string& gpu_unavailable_reason();

// The current device's name ("NVIDIA H200"). Throws vision::Error when no GPU is usable.
std::string current_device_name();
// The architecture NVRTC compiles for on the current device: "sm_90a" on compute capability 9.0 (Hopper, with its
// architecture-specific instructions), "sm_XY" otherwise. Throws vision::Error when no GPU is usable.
std::string current_arch();
// The same mapping for a given compute capability.
std::string arch_for_compute_capability(int major, int minor);

}  // namespace vision::cuda
