#include "vision/graph/cuda/convert_kernels.h"

#include "vision/core/error.h"

namespace vision::graph::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr core::DType kFloats[] = {core::DType::f32, core::DType::f16, core::DType::bf16};

int64_t dtype_code(core::DType t) {
  switch (t) {
    case core::DType::f32: return 0;
    case core::DType::f16: return 1;
    case core::DType::bf16: return 2;
    default: fail("convert: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", core::dtype_name(t));
  }
}

void register_convert_kernels(cuda::KernelRegistry& r) {
  for (core::DType from : kFloats) {
    for (core::DType to : kFloats) r.add<ConvertCopy>(from, to);
    r.add<ScaleCheckFinite>(from);
  }
  for (int vec : {1, 2, 4, 8, 16}) r.add<CopyRows>(vec);
}
VISION_REGISTER_KERNELS(register_convert_kernels);

}  // namespace

ConvertCopy::ConvertCopy(core::DType from, core::DType to)
    : KernelDescriptor({"convert_copy", "vision/graph/cuda/convert.cuh", from, {{"to", dtype_code(to)}},
                        "const {T}*, void*, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t"}) {
  (void)dtype_code(from);
}

ScaleCheckFinite::ScaleCheckFinite(core::DType t)
    : KernelDescriptor({"scale_check_finite", "vision/graph/cuda/convert.cuh", t, {}, "{T}*, int64_t, float, int32_t*"}) {
  (void)dtype_code(t);
}

CopyRows::CopyRows(int vec)
    : KernelDescriptor({"copy_rows", "vision/graph/cuda/convert.cuh", core::DType::u8, {{"vec", vec}},
                        "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t"}) {
  VISION_CHECK(vec == 1 || vec == 2 || vec == 4 || vec == 8 || vec == 16, "copy_rows: unit of {} bytes", vec);
}

void launch_copy_rows(cudaStream_t stream, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                      size_t rows) {
  if (!width || !rows) return;
  const auto common = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | dst_pitch | src_pitch |
                      width;
  int vec = 16;
  while (common % static_cast<size_t>(vec) != 0) vec /= 2;
  const auto units = [&](size_t bytes) { return static_cast<int64_t>(bytes / static_cast<size_t>(vec)); };
  const int64_t total = units(width) * static_cast<int64_t>(rows);
  cuda::kernel_instance<CopyRows>(vec).launch_over(stream, total, kThreads, src,
                                              dst, units(width), static_cast<int64_t>(rows), units(src_pitch),
                                              units(dst_pitch));
}

void launch_convert(cudaStream_t stream, const core::Tensor& dst, const core::Tensor& src, bool accumulate) {
  VISION_CHECK(dst.shape() == src.shape(), "convert: {} from {}: shapes differ", dst.str(), src.str());
  const int64_t n = dst.numel();
  if (n == 0) return;
  int32_t relayout = 0;
  int64_t c = 1, h = 1, w = 1;
  if (dst.rank() == 4 && dst.layout() != src.layout()) {
    relayout = dst.layout() == core::Layout::nhwc ? 1 : 2;
    c = dst.dim(1), h = dst.dim(2), w = dst.dim(3);
  }
  if (relayout == 0 && dst.dtype() == src.dtype() && !accumulate && dst.raw() == src.raw()) return;
  cuda::kernel_instance<ConvertCopy>(src.dtype(), dst.dtype())
      .launch_over(stream, n, kThreads, static_cast<const void*>(src.raw()), dst.raw(), n, c, h, w,
              relayout, static_cast<int32_t>(accumulate));
}

void launch_scale_check_finite(cudaStream_t stream, const core::Tensor& t, float factor, int32_t* nonfinite) {
  const int64_t n = t.numel();
  if (n == 0) return;
  cuda::kernel_instance<ScaleCheckFinite>(t.dtype())
      .launch_over(stream, n, kThreads, t.raw(), n, factor,
              static_cast<void*>(nonfinite));
}

}  // namespace vision::graph::cuda_kernels
