// Helpers for GPU kernel tests: device buffers with poisoned outputs (element types: test_util.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "test_util.h"
#include "vision/cuda/check.h"

namespace vision::test {

// One cudaMalloc'd block, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { VISION_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1)); }
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  // ptr + byte offset (to make misaligned views).
  void* at(size_t byte_offset) const { return static_cast<char*>(ptr_) + byte_offset; }
  size_t bytes() const { return bytes_; }

  // All bytes 0xff: NaN in f32, f16 and bf16, -1 in i32. No correct kernel leaves that in an output.
  void poison() {
    VISION_CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes_));
    VISION_CUDA_CHECK(cudaDeviceSynchronize());  // ordered before work on any stream that follows
  }
  void upload(const std::vector<uint8_t>& host, size_t byte_offset = 0) {
    VISION_CUDA_CHECK(cudaMemcpy(at(byte_offset), host.data(), host.size(), cudaMemcpyHostToDevice));
    // A pageable upload may return before its DMA completes: finish it before kernels on other streams read.
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<uint8_t> download(size_t bytes, size_t byte_offset = 0) const {
    std::vector<uint8_t> host(bytes);
    VISION_CUDA_CHECK(cudaMemcpy(host.data(), at(byte_offset), bytes, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace vision::test
