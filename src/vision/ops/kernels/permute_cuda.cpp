#include "vision/ops/kernels/permute_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kPermuteThreads = 256;

void register_permute_kernels(cuda::KernelRegistry& r) {
  for (core::DType t : {core::DType::f32, core::DType::f16, core::DType::bf16}) r.add<PermuteCopy>(t);
}
VISION_REGISTER_KERNELS(register_permute_kernels);

}  // namespace

PermuteCopy::PermuteCopy(core::DType t)
    : KernelDescriptor({"permute_copy", "vision/ops/kernels/permute.cuh", t, {},
                        "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t"}) {
  VISION_CHECK(core::is_floating(t), "permute: no CUDA kernel for {} tensors (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

void launch_permute(cudaStream_t stream, core::DType dtype, const void* x, void* y, const core::Shape& out_shape,
                    const std::vector<int64_t>& in_strides) {
  const size_t rank = out_shape.rank();
  VISION_CHECK(rank <= 4 && in_strides.size() == rank, "permute on CUDA takes tensors of rank ≤ 4, got {}",
               out_shape.str());
  int64_t d[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
  for (size_t k = 0; k < rank; ++k) {
    d[4 - rank + k] = out_shape[k];
    s[4 - rank + k] = in_strides[k];
  }
  const int64_t n = out_shape.numel();
  if (n == 0) return;
  cuda::kernel_instance<PermuteCopy>(dtype).launch_over(stream, n, kPermuteThreads, x,
                                                   y, n, d[1], d[2], d[3], s[0], s[1], s[2], s[3]);
}

}  // namespace vision::ops::kernels
