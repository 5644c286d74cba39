// The engine's own convolutions for f32 NHWC inference on AVX-512 CPUs: k×k (k odd, padding k/2, stride s, one
// group, no dilation), bias, then SiLU when asked. Each output pixel's channels are a sum over the k·k taps and the
// input channels, computed in 6-pixel × 64-channel register tiles over weights packed once; bias and SiLU are applied
// in registers (the sigmoid through a polynomial exp and a refined reciprocal), where oneDNN 2.6's swish post-op,
// which divides per element, costs up to 40% of its convolution at YOLO26's widest layers (bench/model/NOTES.md,
// seventh session). Every output is one fixed-order sum: deterministic, whatever the thread count.
#pragma once

#include <cstdint>
#include <vector>

namespace vision::cpu {

// Whether this CPU runs these kernels (AVX-512 F), and VISION_CPU_CONV is not 0 (0: oneDNN runs every convolution;
// "all": these kernels every convolution they support, where they are slower too).
bool conv_nhwc_available();

// Whether conv_nhwc takes a convolution of this kernel size, stride, dilation and group count.
bool conv_nhwc_supports(int64_t kernel, int64_t stride, int64_t dilation, int64_t groups);

// Whether the engine's kernel is the faster one for this convolution, as measured against oneDNN 2.6's (with its swish
// post-op) on the 2-core AMD EPYC Zen 5 CI machine at YOLO26n's batch-8 shapes (bench/model/NOTES.md, seventh
// session): on output maps of at least 80 × 80 pixels, every 1×1 (1.0–1.3×) and the k×k with at most 64 input and at
// least 32 output channels (1.03–1.24×: model.1 and model.3); narrower outputs (16 channels: 0.55–0.8×), wider inputs
// (128 channels: 0.86–0.9×) and smaller maps (20–40 pixels a side: 0.87–0.92× for k×k; at batch 1 and 320², the whole
// model 3% slower with every 1×1 on these) stay with oneDNN. The choice depends on one image's map, never on the
// batch, so that an image gives the same detections alone and in a batch (Detector.BatchesOfImagesOfDifferentSizes).
// VISION_CPU_CONV=all: always.
bool conv_nhwc_prefers(int64_t kernel, int64_t cin, int64_t cout, int64_t out_height, int64_t out_width);

// The weights [Cout, Cin, k, k] (row-major) packed for the kernels: panels of 64 output channels, each
// [k][k][Cin][64] with the channels past Cout zero.
std::vector<float> conv_nhwc_pack(const float* w, int64_t cout, int64_t cin, int64_t k);

struct ConvNhwcShape {
  int64_t batch, height, width, cin, cout, kernel, stride;  // input N, H, W, C; output channels; k; s
  int64_t out_height() const { return (height + 2 * (kernel / 2) - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * (kernel / 2) - kernel) / stride + 1; }
};

// y [N, OH, OW, Cout] = conv(x [N, H, W, Cin], W) (+ bias), then SiLU when silu; dense NHWC rows, the weights from
// conv_nhwc_pack. Runs on the OpenMP threads. Requires conv_nhwc_available() and conv_nhwc_supports().
void conv_nhwc(const float* x, const float* packed, const float* bias, float* y, const ConvNhwcShape& s, bool silu);

}  // namespace vision::cpu
