#include "vision/cuda/check.h"

#include <fmt/format.h>

namespace vision::cuda {
namespace {

std::string where(const char* file, int line) {
  if (!file) return {};
  std::string_view f(file);
  if (auto slash = f.rfind('/'); slash != std::string_view::npos) f.remove_prefix(slash + 1);
  return fmt::format(" at {}:{}", f, line);
}

}  // namespace

std::string cuda_error_message(cudaError_t status, std::string_view call, const char* file, int line) {
  (void)cudaGetLastError();  // reset a non-sticky error so that it is reported once
  return fmt::format("{} failed: {} ({}){}", call, cudaGetErrorString(status), cudaGetErrorName(status),
                     where(file, line));
}

std::string nvrtc_error_message(nvrtcResult status, std::string_view call, const char* file, int line) {
  return fmt::format("{} failed: {}{}", call, nvrtcGetErrorString(status), where(file, line));
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Memory running out is the caller's to handle (a smaller batch); anything else is the device's.
  throw Error(cuda_error_message(status, call, file, line),
              status == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::device);
}

void throw_nvrtc_error(nvrtcResult status, const char* call, const char* file, int line) {
  throw Error(nvrtc_error_message(status, call, file, line),
              status == NVRTC_ERROR_OUT_OF_MEMORY ? ErrorKind::out_of_memory : ErrorKind::device);
}

}  // namespace vision::cuda
