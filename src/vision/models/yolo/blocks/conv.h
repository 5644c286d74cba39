// YOLO26's convolution blocks (YOLO26.md, Modules): Conv = Conv2d (no bias, "same" padding) → BatchNorm2d(eps 1e-3,
// momentum 0.03) → SiLU, DWConv = Conv with groups = gcd(c1, c2), and the plain Conv2d with a bias that ends each
// Detect branch. State keys as ultralytics': "<name>.conv.weight", "<name>.bn.running_var", "<name>.weight", …
#pragma once

#include <cstdint>
#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/yolo26_spec.h"

namespace vision::models::yolo::blocks {

inline constexpr float kBatchNormEps = 1e-3f;
inline constexpr float kBatchNormMomentum = 0.03f;

struct ConvArgs {
  int64_t c2 = 0;      // output channels
  int64_t k = 1;       // kernel size (odd: "same" padding k / 2)
  int64_t s = 1;       // stride
  int64_t g = 1;       // groups
  bool act = true;     // SiLU at the end
};

// x [B, c1, H, W] → [B, c2, H/s, W/s], recorded under scope `name`.
graph::SymTensor conv(graph::SymTensor x, const ConvArgs& a, ConvNorm norm, const std::string& name);
// Conv with groups = gcd(c1, c2) (depthwise when c1 == c2).
graph::SymTensor dwconv(graph::SymTensor x, int64_t c2, int64_t k, ConvNorm norm, const std::string& name);
// A plain 1×1 Conv2d with a bias (keys "<name>.weight", "<name>.bias"), no normalisation, no activation.
graph::SymTensor conv1x1_bias(graph::SymTensor x, int64_t c2, const std::string& name);

}  // namespace vision::models::yolo::blocks
