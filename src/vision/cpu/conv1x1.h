// The engine's own 1×1 convolution for f32 NHWC inference on AVX-512 CPUs: y[p, :] = W · x[p, :] + b, then SiLU when
// asked, over every pixel p. In NHWC a 1×1 convolution is the GEMM [pixels, Cin] × [Cin, Cout]; its bias and SiLU are
// applied in registers (the sigmoid through a polynomial exp and a refined reciprocal), where oneDNN 2.6's swish
// post-op, which divides per element, costs up to 40% of the convolution at YOLO26's widest 1×1 layers
// (bench/model/NOTES.md, seventh session). Each output is one fixed-order sum over Cin: deterministic, whatever the
// thread count.
#pragma once

#include <cstdint>
#include <vector>

namespace vision::cpu {

// Whether this CPU runs the kernel (AVX-512 F), and VISION_CPU_CONV1X1 is not 0.
bool conv1x1_available();

// The weights [Cout, Cin] (a 1×1 convolution's [Cout, Cin, 1, 1], row-major) packed for the kernel: panels of 64
// output channels, each [Cin][64] with the channels past Cout zero.
std::vector<float> conv1x1_pack(const float* w, int64_t cout, int64_t cin);

// y [pixels, cout] = x [pixels, cin] · Wᵀ (+ bias), then SiLU when silu; x and y are dense rows (NHWC), packed from
// conv1x1_pack. Runs on the OpenMP threads. Requires conv1x1_available().
void conv1x1_nhwc(const float* x, const float* packed, const float* bias, float* y, int64_t pixels, int64_t cin,
                  int64_t cout, bool silu);

}  // namespace vision::cpu
