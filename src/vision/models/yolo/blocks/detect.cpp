#include "vision/models/yolo/blocks/detect.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "vision/core/error.h"
#include "vision/ops/shape_ops.h"

namespace vision::models::yolo::blocks {

HeadOutputs detect_head(const std::array<graph::SymTensor, 3>& features, int64_t nc, DetectHead head, ConvNorm norm) {
  VISION_CHECK(nc >= 1, "Detect: nc must be at least 1, got {}", nc);
  for (const auto& f : features)
    VISION_CHECK(f.valid() && f.shape().rank() == 4, "Detect: each level must be [B, C, h, w], got {}",
                 f.valid() ? f.shape().str() : "nothing");
  const int64_t ch0 = features[0].dim(1);
  const int64_t c2 = std::max<int64_t>({16, ch0 / 4, 4});
  const int64_t c3 = std::max(ch0, std::min<int64_t>(nc, 100));
  const auto [box_prefix, cls_prefix] = detect_head_prefixes(head);
  graph::Graph& g = *features[0].graph();
  std::vector<graph::SymTensor> ltrb, logits;
  for (size_t i = 0; i < features.size(); ++i) {
    const std::string level = std::to_string(i);
    {
      auto _ = g.scope(box_prefix + level);
      auto y = conv(features[i], {.c2 = c2, .k = 3}, norm, "0");
      y = conv(y, {.c2 = c2, .k = 3}, norm, "1");
      ltrb.push_back(ops::flatten(conv1x1_bias(y, 4, "2"), 2, -1, "flat"));
    }
    {
      auto _ = g.scope(cls_prefix + level);
      graph::SymTensor y = features[i];
      for (const char* stage : {"0", "1"}) {
        auto s = g.scope(stage);
        y = dwconv(y, y.dim(1), 3, norm, "0");
        y = conv(y, {.c2 = c3}, norm, "1");
      }
      logits.push_back(ops::flatten(conv1x1_bias(y, nc, "2"), 2, -1, "flat"));
    }
  }
  const std::string name = head == DetectHead::one_to_one ? "one2one" : "one2many";
  return {ops::concat(ltrb, 2, name + "_ltrb"), ops::concat(logits, 2, name + "_logits")};
}

float detect_box_bias_init() { return 2.0f; }

float detect_class_bias_init(int64_t nc, int64_t stride) {
  const double cells = 640.0 / static_cast<double>(stride);
  return static_cast<float>(std::log(5.0 / static_cast<double>(nc) / (cells * cells)));
}

}  // namespace vision::models::yolo::blocks
