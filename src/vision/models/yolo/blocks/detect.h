// YOLO26's Detect head (YOLO26.md, Detect head; reg_max = 1, no DFL): per level a box branch cv2[i] = Conv3 → Conv3 →
// Conv2d 1×1 → 4 raw LTRB distances, and a class branch cv3[i] = [DWConv3 → Conv1] → [DWConv3 → Conv1] → Conv2d 1×1 →
// nc logits; c2 = max(16, ch0 / 4, 4) and c3 = max(ch0, min(nc, 100)) channels, ch0 those of P3. The one-to-many head
// is cv2/cv3, the one-to-one head its copy one2one_cv2/one2one_cv3 (keys "model.23.one2one_cv3.0.1.0.conv.weight", …).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/blocks/conv.h"

namespace vision::models::yolo::blocks {

// A head's raw outputs over all anchors (P3, then P4, then P5, each row-major).
struct HeadOutputs {
  graph::SymTensor ltrb;    // [B, 4, A] distances to the box sides, in grid units of the anchor's level
  graph::SymTensor logits;  // [B, nc, A] class logits (sigmoid gives the scores)
};

// Records one head on the features P3, P4, P5 [B, ch_i, H/8·2^-i, W/8·2^-i] in the current scope (the Detect
// layer's, "model.23").
HeadOutputs detect_head(const std::array<graph::SymTensor, 3>& features, int64_t nc, DetectHead head, ConvNorm norm);

// YOLO26's initial biases of the last convolutions of a head's branches at a level of this stride: box 2.0, class
// log(5 / nc / (640 / stride)²).
float detect_box_bias_init();
float detect_class_bias_init(int64_t nc, int64_t stride);

}  // namespace vision::models::yolo::blocks
