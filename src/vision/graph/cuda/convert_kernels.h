// The CUDA backend's conversion kernels (convert.cuh): descriptors and launches.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::graph::cuda_kernels {

// Source element type `from`, destination `to` (f32, f16 or bf16).
struct ConvertCopy : cuda::KernelDescriptor<const void* /*src*/, void* /*dst*/, int64_t /*total*/, int64_t /*c*/,
                                            int64_t /*h*/, int64_t /*w*/, int32_t /*relayout*/, int32_t /*accumulate*/> {
  ConvertCopy(core::DType from, core::DType to);
};
struct ScaleCheckFinite
    : cuda::KernelDescriptor<void* /*p*/, int64_t /*n*/, float /*factor*/, void* /*nonfinite (i32)*/> {
  explicit ScaleCheckFinite(core::DType dtype);
};

// Runs of bytes between two pitched buffers, `vec` bytes per unit (1, 2, 4, 8 or 16).
struct CopyRows : cuda::KernelDescriptor<const void* /*src*/, void* /*dst*/, int64_t /*width*/, int64_t /*rows*/,
                                         int64_t /*src_pitch*/, int64_t /*dst_pitch*/> {
  explicit CopyRows(int vec);
};

// dst = src (or +=), element types converted, rank-4 tensors each in its own layout; shapes must match.
void launch_convert(cudaStream_t stream, const core::Tensor& dst, const core::Tensor& src, bool accumulate);
// rows runs of width bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart), in the widest units
// (up to 16 bytes) that divide both addresses, the width and the pitches.
void launch_copy_rows(cudaStream_t stream, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                      size_t rows);
// t *= factor; sets *nonfinite (device i32) to 1 when a result is not finite.
void launch_scale_check_finite(cudaStream_t stream, const core::Tensor& t, float factor, int32_t* nonfinite);

}  // namespace vision::graph::cuda_kernels
