// Helpers for tests of GPU work in a format (dtype × memory order): device tensors from host f32 NCHW values and
// back, poisoned device tensors, and the formats a parameterised test runs.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/graph/op.h"

namespace vision::test {

// A device tensor of dtype in layout (rank-4 shapes; others are row-major) holding the NCHW-ordered f32 values,
// rounded to nearest even.
inline core::Tensor to_device(graph::BackendContext& b, const std::vector<float>& values, const core::Shape& shape,
                              core::DType dtype, core::Layout layout) {
  return b.upload(to_format(core::Tensor::from_vector(shape, values), graph::Format{dtype, layout}));
}
inline core::Tensor to_device(graph::BackendContext& b, const core::Tensor& host_f32_nchw, core::DType dtype,
                              core::Layout layout) {
  return to_device(b, host_f32_nchw.to_vector(), host_f32_nchw.shape(), dtype, layout);
}

// A device tensor's values as f32 in NCHW order.
inline std::vector<float> to_host_nchw(graph::BackendContext& b, const core::Tensor& device) {
  return to_f32_nchw(b.download(device)).to_vector();
}

// A device tensor whose bytes are all 0xff (NaN in f32, f16 and bf16; -1 in integers): what no correct op leaves in
// an output.
inline core::Tensor poisoned_device(graph::BackendContext& b, const core::Shape& shape, core::DType dtype,
                                    core::Layout layout = core::Layout::nchw) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * core::dtype_size(dtype);
  auto mem = b.allocate(std::max<size_t>(bytes, 1));
  void* p = mem.get();
  const std::vector<uint8_t> nan(bytes, 0xff);
  b.copy_to_device(p, nan.data(), nan.size());
  return core::Tensor::wrap(std::move(mem), p, shape, dtype, b.device(),
                            shape.rank() == 4 ? layout : core::Layout::nchw);
}

// The formats of a parameterised test, named "f16_nhwc".
inline std::string format_test_name(const graph::Format& f) {
  return std::string(core::dtype_name(f.dtype)) + "_" + std::string(core::layout_name(f.layout));
}

}  // namespace vision::test
