// CUDA kernels of the element-wise ops — SiLU, sigmoid, add, mul (forward and backward): descriptors and the launch
// helpers the CUDA RuntimeOps call. Kernel text: elementwise.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

// Descriptors, one per kernel; dtype is f32, f16 or bf16. Arguments in the kernel's order.
struct SiluForward : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*n*/> {
  explicit SiluForward(DType dtype);
};
struct SiluBackward : cuda::KernelDescriptor<const void* /*x*/, const void* /*dy*/, void* /*dx*/, int64_t /*n*/> {
  explicit SiluBackward(DType dtype);
};
struct SigmoidForward : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*n*/> {
  explicit SigmoidForward(DType dtype);
};
struct SigmoidBackward : cuda::KernelDescriptor<const void* /*y*/, const void* /*dy*/, void* /*dx*/, int64_t /*n*/> {
  explicit SigmoidBackward(DType dtype);
};
struct AddForward : cuda::KernelDescriptor<const void* /*a*/, const void* /*b*/, void* /*y*/, int64_t /*n*/> {
  explicit AddForward(DType dtype);
};
struct AddBackward : cuda::KernelDescriptor<const void* /*dy*/, void* /*da*/, void* /*db*/, int64_t /*n*/> {
  explicit AddBackward(DType dtype);
};
struct MulForward : cuda::KernelDescriptor<const void* /*a*/, const void* /*b*/, void* /*y*/, int64_t /*n*/> {
  explicit MulForward(DType dtype);
};
struct MulBackward : cuda::KernelDescriptor<const void* /*dy*/, const void* /*a*/, const void* /*b*/, void* /*da*/,
                                            void* /*db*/, int64_t /*n*/> {
  explicit MulBackward(DType dtype);
};

// Launch helpers: n contiguous elements of dtype on stream; n == 0 launches nothing. Throw vision::Error on a
// dtype the kernels do not cover or a CUDA failure.
void launch_silu_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t n);
void launch_silu_backward(cudaStream_t stream, DType dtype, const void* x, const void* dy, void* dx, int64_t n);
void launch_sigmoid_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t n);
// From the forward's output y.
void launch_sigmoid_backward(cudaStream_t stream, DType dtype, const void* y, const void* dy, void* dx, int64_t n);
void launch_add_forward(cudaStream_t stream, DType dtype, const void* a, const void* b, void* y, int64_t n);
// da or db may be null (that input needs no gradient).
void launch_add_backward(cudaStream_t stream, DType dtype, const void* dy, void* da, void* db, int64_t n);
void launch_mul_forward(cudaStream_t stream, DType dtype, const void* a, const void* b, void* y, int64_t n);
void launch_mul_backward(cudaStream_t stream, DType dtype, const void* dy, const void* a, const void* b, void* da,
                         void* db, int64_t n);

}  // namespace vision::ops::kernels
