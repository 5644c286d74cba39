// Launches that must not compile: KernelDescriptor::launch (and launch_over, which forwards to it) checks its
// arguments against the kernel's declared Args.
// tests/CMakeLists.txt compiles this file once per VISION_CASE_* (each must fail with the static_assert message) and
// once with none (which must compile, proving the setup itself is sound).
#include <cstdint>

#include "vision/ops/kernels/elementwise_cuda.h"

using vision::ops::kernels::SiluForward;  // Args = std::tuple<const void*, void*, int64_t>

void launch_cases(cudaStream_t s, const SiluForward& k, const float* x, float* y, const float* const_y) {
#if defined(VISION_CASE_TOO_FEW)
  k.launch(s, dim3(1), dim3(32), 0, x, y);  // n is missing
#elif defined(VISION_CASE_TOO_MANY)
  k.launch(s, dim3(1), dim3(32), 0, x, y, int64_t{8}, int64_t{8});
#elif defined(VISION_CASE_INT_FOR_INT64)
  k.launch(s, dim3(1), dim3(32), 0, x, y, 8);  // an int where the kernel takes int64_t
#elif defined(VISION_CASE_CONST_OUTPUT)
  k.launch(s, dim3(1), dim3(32), 0, x, const_y, int64_t{8});  // a const pointer for the output
#elif defined(VISION_CASE_VALUE_FOR_POINTER)
  k.launch(s, dim3(1), dim3(32), 0, 1.0f, y, int64_t{8});  // a float where a pointer goes
#elif defined(VISION_CASE_OVER_TOO_FEW)
  k.launch_over(s, 8, 256, x, y);  // the grid-stride launch: n is still the kernel's argument
#else
  k.launch(s, dim3(1), dim3(32), 0, x, y, int64_t{8});
  k.launch(s, dim3(1), dim3(32), 0, static_cast<const void*>(x), static_cast<void*>(y), int64_t{8});
  k.launch(s, dim3(1), dim3(32), 0, y, nullptr, int64_t{0});  // T* to const void*, nullptr to void*
  k.launch_over(s, 8, 256, x, y, int64_t{8});
  (void)const_y;
#endif
}
