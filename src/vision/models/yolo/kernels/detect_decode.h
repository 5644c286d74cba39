// Detect decode — YOLO26's box decode (reg_max = 1, no DFL): raw LTRB distances [B, 4, A] plus the anchor grid →
// boxes [B, 4, A]; the CPU twin of the GPU kernels (detect_decode.cuh) and the graph op "yolo.detect_decode".
//
// Layout: channel-major, planes l, t, r, b of A anchors each (P3, then P4, then P5, each row-major). Anchor grid:
// a constant [3, A] f32 tensor, rows anchor_x, anchor_y, stride; anchor (x + 0.5, y + 0.5) in grid units of its
// level, strides 8, 16, 32, levels of (H/s)×(W/s) for an input of H×W (multiples of 32, rectangular allowed).
// With x1y1 = anchor − lt, x2y2 = anchor + rb:
//   pixels: (x1, y1, x2, y2) · stride (the inference path, xyxy in input pixels);
//   grid:   (x1, y1, x2, y2) in grid units (what the loss consumes); backward dl = −dx1, dt = −dy1, dr = dx2, db = dy2;
//   cxcywh: ((x1 + x2)/2, (y1 + y2)/2, x2 − x1, y2 − y1) · stride (the one-to-many NMS path).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels {

using core::Tensor;

enum class DecodeMode : int32_t { pixels = 0, grid = 1, cxcywh = 2 };
std::string_view decode_mode_name(DecodeMode mode);  // "pixels", "grid", "cxcywh"

inline constexpr std::array<int64_t, 3> kDetectStrides = {8, 16, 32};

// The number of anchors of an H×W input: Σ (H/s)·(W/s) over the strides; throws unless H and W are positive
// multiples of 32.
int64_t detect_anchor_count(int64_t image_h, int64_t image_w);
// The anchor grid of an H×W input: 3·A floats, rows anchor_x, anchor_y, stride (same checks).
std::vector<float> detect_anchor_grid(int64_t image_h, int64_t image_w);
// The input size H×W of three level shapes [B, C, h_i, w_i] (P3, P4, P5): H = 8·h_P3, checking h_P4 = H/16,
// h_P5 = H/32 (and so for W) and that H, W are multiples of 32. Symbolic sizes (Shape::kAny) give kAny.
std::array<int64_t, 2> detect_image_size(const core::Shape& p3, const core::Shape& p4, const core::Shape& p5);

// CPU twin, f32 host tensors: ltrb [B, 4, A], anchors [3, A] → boxes [B, 4, A] (overwritten).
void detect_decode_cpu(const Tensor& ltrb, const Tensor& anchors, DecodeMode mode, const Tensor& boxes);
// Backward of grid mode: grad_ltrb [B, 4, A] (overwritten) from grad_boxes [B, 4, A].
void detect_decode_backward_cpu(const Tensor& grad_boxes, const Tensor& grad_ltrb);

// ---------------------------------------------------------------------------------------------------------------
// Graph op "yolo.detect_decode". Inputs: ltrb [B, 4, A] and the three level feature maps P3, P4, P5 [B, C_i, h_i,
// w_i] (any of the head's outputs at that level: only their shapes are read). The levels give the input size, so one
// graph decodes every input size that is a multiple of 32 (rectangular too), and each plan gets the anchor grid of
// its own size as a per-plan constant "anchors" [3, A] (StateKind::constant: neither trained nor checkpointed).
// Output boxes [B, 4, A] of ltrb's dtype. Backward only in grid mode: ltrb's gradient as above, zeros for the level
// maps (their values do not reach the output). CPU backend: f32 through the twin; CUDA backend (CUDA builds): the
// kernels of detect_decode.cuh (detect_decode_cuda.h).
class DetectDecodeOp : public graph::Op {
 public:
  explicit DetectDecodeOp(DecodeMode mode) : mode_(mode) {}
  std::string name() const override { return "yolo.detect_decode"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  DecodeMode mode() const { return mode_; }

 private:
  DecodeMode mode_;
};

// Records decode(ltrb) with the anchor grid of the levels p3, p4, p5 as a node named `name`.
graph::SymTensor detect_decode(graph::SymTensor ltrb, graph::SymTensor p3, graph::SymTensor p4, graph::SymTensor p5,
                               DecodeMode mode, const std::string& name = "decode");

}  // namespace vision::models::yolo::kernels
