// Helpers for GPU kernel tests: device buffers, element-type encoding of host values, poisoned outputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "test_util.h"
#include "vision/core/dtype.h"
#include "vision/cuda/check.h"

namespace vision::test {

// Host values stored as dtype (rounded to nearest even), and back to float.
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

// The values as dtype can hold them.
inline std::vector<float> rounded(const std::vector<float>& values, core::DType dtype) {
  return decode(encode(values, dtype), dtype);
}

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

// Bound on ‖out − ref‖ / ‖ref‖ for a kernel that computes in f32 and rounds once to dtype.
inline double rounding_bound(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32: return 1e-5;
    case core::DType::f16: return 1e-3;  // unit roundoff 2^-11
    default: return 8e-3;                // bf16: unit roundoff 2^-8
  }
}

}  // namespace vision::test
