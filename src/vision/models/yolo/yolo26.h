// YOLO26 — the five scales n/s/m/l/x of the detector (YOLO26.md), recorded with SymTensor under the ultralytics names:
// every state key is the ultralytics state_dict key ("model.4.m.0.cv1.bn.running_var", "model.23.one2one_cv2.0.2.bias").
// One recording gives the inference graph (the one-to-one head, decode and the end-to-end top-k → [B, max_det, 6] and
// a count; or with nms the one-to-many head and NMS) and the training forward (both heads' raw outputs, the one-to-one
// head on detached features) that the training graph adds E2ELoss to.
//
// Any input size that is a multiple of 32, rectangular too: the graph's image size is symbolic, and each plan binds
// one (the anchor grid and the attention's feature-map size follow from it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "vision/graph/graph.h"
#include "vision/models/yolo/blocks/conv.h"
#include "vision/models/yolo/blocks/detect.h"
#include "vision/models/yolo/kernels/postprocess.h"
#include "vision/models/yolo/yolo26_spec.h"

namespace vision::models::yolo {

using blocks::HeadOutputs;

enum class Heads : uint8_t { one_to_one, one_to_many, both };

// What a recording gives: the Detect layer's input features and the raw outputs of the heads recorded.
struct Yolo26Outputs {
  // P3, P4, P5 [B, C_i, H/s_i, W/s_i] for the strides 8, 16, 32: their sizes give the anchor grid (what
  // kernels::detect_decode takes besides the LTRB distances).
  std::array<graph::SymTensor, 3> features;
  std::optional<HeadOutputs> one2one;
  std::optional<HeadOutputs> one2many;
};

// Records YOLO26 on images [B, 3, H, W] (RGB in [0, 1]) under the scope "model": layers 0–22 and the Detect layer 23
// with the heads asked for. detach_one2one: the one-to-one head sees the features detached (training: its loss does
// not reach the backbone).
Yolo26Outputs record_yolo26(graph::SymTensor images, const Yolo26Spec& spec, Heads heads, bool detach_one2one = false);

// The training forward: both heads, the one-to-one head on detached features (ultralytics' Detect in training). The
// training issue's loss takes its outputs.
Yolo26Outputs record_yolo26_training(graph::SymTensor images, const Yolo26Spec& spec);

struct InferenceOptions {
  // One-to-many head and NMS instead of the one-to-one head and the end-to-end top-k.
  bool nms = false;
  kernels::PostprocessOptions postprocess = {};
  // Also output the raw LTRB and logits of each head recorded (after the detections; tests and tools).
  bool raw_outputs = false;
  // Record both heads (with raw_outputs: the raw outputs of both), whichever drives the postprocess.
  bool both_heads = false;
  // The dtype and layout the images are given in.
  graph::Format input_format = {};
};

// The inference graph: input "images" [?, 3, ?, ?]; outputs detections [B, max_det, 6] f32 (x1, y1, x2, y2 in input
// pixels, score, class) and count [B] i32, then with raw_outputs the one-to-one head's ltrb and logits (when recorded)
// and the one-to-many head's (when recorded), each pair in that order.
std::shared_ptr<graph::Graph> yolo26_inference_graph(const Yolo26Spec& spec, const InferenceOptions& options = {});

}  // namespace vision::models::yolo
