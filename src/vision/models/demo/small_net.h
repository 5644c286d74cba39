// small_net — the small network of the foundation: conv → bn → silu → maxpool → upsample → concat with a skip.
#pragma once

#include <memory>

#include "vision/graph/graph.h"

namespace vision::models::demo {

struct SmallNetConfig {
  int64_t in_channels = 3;
  int64_t width = 8;       // channels of each block
  // The output: the feature map y, the scalar ½·Σy², or the scalar mean(y ∘ r) for a second input r shaped like
  // y (a random projection: its value stays small next to its gradients, which suits finite differences).
  enum class Loss { none, sum_squares, projection };
  Loss loss = Loss::none;
};

// x [?, in, H, W] (H, W even) →
//   a = silu(bn(conv3x3(x)))               [?, w, H, W]      (the skip)
//   b = silu(bn(conv3x3(maxpool2(a))))     [?, w, H/2, W/2]
//   y = conv1x1(concat(a, upsample2(b)))   [?, w, H, W]      (with a bias)
// State keys follow ultralytics' style: "net.0.conv.weight", "net.0.bn.running_mean", ...
std::shared_ptr<graph::Graph> small_net(const SmallNetConfig& cfg = {});

}  // namespace vision::models::demo
