// One source for a kernel's per-element math and its CPU twin's. A function marked VISION_HD compiles as a device
// function under NVRTC (the header is inlined into each kernel's source, see cuda/kernel.cpp) and as a plain inline
// function in the host's C++ (the CPU twins, in the CPU-only builds too), so the kernel and its twin cannot drift
// apart. Such functions use only what both sides have: float arithmetic, the C math functions (atanf, sqrtf, expf,
// fminf, fmaxf, …), the fixed-width integers (kernel_common.cuh defines them under NVRTC, so a kernel includes it
// first), vision::hd::infinity() and the correctly rounded operations below.
#pragma once

#ifdef __CUDACC_RTC__
#define VISION_HD __device__ __forceinline__
#else
#include <math.h>

#include <bit>
#include <cstdint>
#include <limits>
#define VISION_HD inline
#endif

namespace vision::hd {

// Device and host spellings of the same primitives: +∞, a float's bits and the float of bits, and correctly rounded f32
// operations that are never contracted into an FMA with a neighbour (the _rn intrinsics on the device; on the host the
// plain operators: x86-64's baseline has no FMA, so GCC contracts nothing there).
#ifdef __CUDACC_RTC__
VISION_HD float infinity() { return __int_as_float(0x7f800000); }
VISION_HD uint32_t float_bits(float x) { return __float_as_uint(x); }
VISION_HD float bits_float(uint32_t u) { return __uint_as_float(u); }
VISION_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
VISION_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
VISION_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
VISION_HD float div_rn(float a, float b) { return __fdiv_rn(a, b); }
VISION_HD float sqrt_rn(float a) { return __fsqrt_rn(a); }
VISION_HD float rcp_rn(float a) { return __frcp_rn(a); }
#else
VISION_HD float infinity() { return std::numeric_limits<float>::infinity(); }
VISION_HD uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }
VISION_HD float bits_float(uint32_t u) { return std::bit_cast<float>(u); }
VISION_HD float add_rn(float a, float b) { return a + b; }
VISION_HD float sub_rn(float a, float b) { return a - b; }
VISION_HD float mul_rn(float a, float b) { return a * b; }
VISION_HD float div_rn(float a, float b) { return a / b; }
VISION_HD float sqrt_rn(float a) { return sqrtf(a); }
VISION_HD float rcp_rn(float a) { return 1.0f / a; }
#endif

// a·b + c with the product fused on the device (__fmaf_rn: rounded once) and the two operations on the host (rounded
// twice, as the host's plain operators are). For a sum of products that NVRTC may contract either way (x·x + y·y fuses
// one product or the other, as the code around it happens to fall): writing the FMA out pins which one, so that moving
// the arithmetic into a shared header cannot change a kernel's numbers.
#ifdef __CUDACC_RTC__
VISION_HD float fma_device(float a, float b, float c) { return __fmaf_rn(a, b, c); }
#else
VISION_HD float fma_device(float a, float b, float c) { return a * b + c; }
#endif

// The C math functions a twin may call in f32 or f64 (a template over the float type): fabsf/fabs, fmaxf/fmax,
// expf/exp, log1pf/log1p.
VISION_HD float abs(float x) { return fabsf(x); }
VISION_HD double abs(double x) { return fabs(x); }
VISION_HD float max(float a, float b) { return fmaxf(a, b); }
VISION_HD double max(double a, double b) { return fmax(a, b); }
VISION_HD float exp(float x) { return expf(x); }
VISION_HD double exp(double x) { return ::exp(x); }
VISION_HD float log1p(float x) { return log1pf(x); }
VISION_HD double log1p(double x) { return ::log1p(x); }

}  // namespace vision::hd
