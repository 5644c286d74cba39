#include "vision/ops/kernels/elementwise_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kElementwiseThreads = 256;
constexpr const char* kUnary = "const {T}*, {T}*, int64_t";
constexpr const char* kBinary = "const {T}*, const {T}*, {T}*, int64_t";

cuda::KernelSpec make_spec(const char* name, DType dtype, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  return {name, "vision/ops/kernels/elementwise.cuh", dtype, {}, params};
}

// Launches kernel D for dtype over n elements; args are the kernel's arguments before n.
template <typename D, typename... A>
void launch_flat(cudaStream_t stream, DType dtype, int64_t n, A... args) {
  VISION_CHECK(n >= 0, "{}: negative element count {}", cuda::kernel_instance<D>(dtype).name(), n);
  if (n == 0) return;
  const int64_t per_thread = 16 / static_cast<int64_t>(core::dtype_size(dtype));  // the kernels' 16-byte accesses
  cuda::kernel_instance<D>(dtype).launch_over(stream, (n + per_thread - 1) / per_thread, kElementwiseThreads, args..., n);
}

void register_elementwise_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    r.add<SiluForward>(t);
    r.add<SiluBackward>(t);
    r.add<SigmoidForward>(t);
    r.add<SigmoidBackward>(t);
    r.add<AddForward>(t);
    r.add<AddBackward>(t);
    r.add<MulForward>(t);
    r.add<MulBackward>(t);
  }
}
VISION_REGISTER_KERNELS(register_elementwise_kernels);

}  // namespace

SiluForward::SiluForward(DType t) : KernelDescriptor(make_spec("silu_forward", t, kUnary)) {}
SiluBackward::SiluBackward(DType t)
    : KernelDescriptor(make_spec("silu_backward", t, "const {T}*, const {T}*, {T}*, int64_t")) {}
SigmoidForward::SigmoidForward(DType t) : KernelDescriptor(make_spec("sigmoid_forward", t, kUnary)) {}
SigmoidBackward::SigmoidBackward(DType t)
    : KernelDescriptor(make_spec("sigmoid_backward", t, "const {T}*, const {T}*, {T}*, int64_t")) {}
AddForward::AddForward(DType t) : KernelDescriptor(make_spec("add_forward", t, kBinary)) {}
AddBackward::AddBackward(DType t) : KernelDescriptor(make_spec("add_backward", t, "const {T}*, {T}*, {T}*, int64_t")) {}
MulForward::MulForward(DType t) : KernelDescriptor(make_spec("mul_forward", t, kBinary)) {}
MulBackward::MulBackward(DType t)
    : KernelDescriptor(make_spec("mul_backward", t, "const {T}*, const {T}*, const {T}*, {T}*, {T}*, int64_t")) {}

void launch_silu_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t n) {
  launch_flat<SiluForward>(stream, dtype, n, x, y);
}
void launch_silu_backward(cudaStream_t stream, DType dtype, const void* x, const void* dy, void* dx, int64_t n) {
  launch_flat<SiluBackward>(stream, dtype, n, x, dy, dx);
}
void launch_sigmoid_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t n) {
  launch_flat<SigmoidForward>(stream, dtype, n, x, y);
}
void launch_sigmoid_backward(cudaStream_t stream, DType dtype, const void* y, const void* dy, void* dx, int64_t n) {
  launch_flat<SigmoidBackward>(stream, dtype, n, y, dy, dx);
}
void launch_add_forward(cudaStream_t stream, DType dtype, const void* a, const void* b, void* y, int64_t n) {
  launch_flat<AddForward>(stream, dtype, n, a, b, y);
}
void launch_add_backward(cudaStream_t stream, DType dtype, const void* dy, void* da, void* db, int64_t n) {
  launch_flat<AddBackward>(stream, dtype, n, dy, da, db);
}
void launch_mul_forward(cudaStream_t stream, DType dtype, const void* a, const void* b, void* y, int64_t n) {
  launch_flat<MulForward>(stream, dtype, n, a, b, y);
}
void launch_mul_backward(cudaStream_t stream, DType dtype, const void* dy, const void* a, const void* b, void* da,
                         void* db, int64_t n) {
  launch_flat<MulBackward>(stream, dtype, n, dy, a, b, da, db);
}

}  // namespace vision::ops::kernels
