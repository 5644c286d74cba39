// small_net — the small network of the foundation: conv → bn → silu → maxpool → upsample → concat with a skip.
#pragma once

#include <memory>

#include "vision/graph/graph.h"

namespace vision::models::demo {

struct SmallNetConfig {
  int64_t in_channels = 3;
  int64_t width = 8;       // channels of each block
  bool with_loss = false;  // output the scalar loss ½·Σy² instead of the feature map y
};

// x [?, in, H, W] (H, W even) →
//   a = silu(bn(conv3x3(x)))               [?, w, H, W]      (the skip)
//   b = silu(bn(conv3x3(maxpool2(a))))     [?, w, H/2, W/2]
//   y = conv1x1(concat(a, upsample2(b)))   [?, w, H, W]      (with a bias)
// State keys follow ultralytics' style: "net.0.conv.weight", "net.0.bn.running_mean", ...
std::shared_ptr<graph::Graph> small_net(const SmallNetConfig& cfg = {});

}  // namespace vision::models::demo
