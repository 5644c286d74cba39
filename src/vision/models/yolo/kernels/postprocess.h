// Postprocess — YOLO26's detections from decoded boxes and class logits: the end-to-end top-k (the one-to-one head),
// class-aware NMS (the one-to-many head) and the letterbox inverse; the CPU twins of the GPU kernels
// (postprocess.cuh) and the graph ops "yolo.postprocess_e2e" and "yolo.nms".
//
// Inputs (both ops): boxes [B, 4, A], planes x1, y1, x2, y2 in input pixels (the detect decode's `pixels` mode; NMS
// takes xyxy too, not cxcywh, so both heads decode the same way), and raw class logits [B, nc, A] (sigmoid inside).
// Outputs: detections [B, max_det, 6] f32, rows (x1, y1, x2, y2, score, class) by descending score, and count [B]
// i32, the number of valid rows of each image; rows from count on are all zero.
//
// Ranking. Both ops rank by the logit, not by its f32 sigmoid: σ is strictly increasing, so this is the order of the
// exact scores, and it makes the selection independent of how a device rounds σ (CPU and GPU select the same rows
// bit for bit). Ties break toward the lower anchor index, then (end-to-end pair stage) the lower class: pairs are
// ordered by (logit desc, anchor asc, class asc). NaN logits rank as −∞ and are never kept.
// Confidence. A row is kept iff σ(logit) > conf in exact arithmetic: the logit is compared with
// conf_logit_threshold(conf), computed once in extended precision. The reported score is σ in f32 (so it can round
// to conf itself in the last ulp).
//
// End-to-end (ultralytics' one-to-one postprocess): k = min(max_det, A) anchors by their max class logit, then the top
// k of the k × nc (anchor, class) pairs, sorted; then the conf and class filters drop rows (as ultralytics filters the
// 300 rows), and the rest move up. The result equals the top k of all A × nc pairs in the order above (an anchor
// outside the first stage's k has k pairs ranked before each of its pairs).
// NMS (ultralytics' non_max_suppression, multi_label off): each anchor is a candidate with its best class (the lowest
// on ties) when that passes conf and the class filter; candidates by descending logit, the first max_nms of them;
// greedy: a candidate is dropped when its IoU with a kept box of the same class is > iou; the first max_det kept.
// IoU = inter / (area_a + area_b − inter) in f32 (torchvision's formula), computed in this order on both devices.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vision/data/letterbox.h"
#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels {

using core::Tensor;

// The most rows an op may output per image (its sort runs in one CTA's shared memory on the GPU).
inline constexpr int64_t kMaxDetections = 4096;

struct PostprocessOptions {
  int64_t max_det = 300;  // rows per image, 1 ≤ max_det ≤ kMaxDetections
  float conf = 0.25f;     // keep σ(logit) > conf, 0 ≤ conf ≤ 1 (ultralytics: 0.25 predict, 0.001 val)
  std::vector<int64_t> classes = {};  // keep only these classes; empty: all
  float iou = 0.7f;                   // NMS only: suppress same-class boxes with IoU > iou, 0 ≤ iou ≤ 1
  int64_t max_nms = 30000;            // NMS only: candidates considered, ≥ 1
};

enum class PostprocessMethod : int32_t { end_to_end = 0, nms = 1 };
std::string_view postprocess_method_name(PostprocessMethod method);  // "end_to_end", "nms"

// Throws vision::Error naming the option that is out of range.
void check_postprocess_options(const PostprocessOptions& options);
// The largest f32 logit t with σ(t) ≤ conf (logit(conf) in extended precision, rounded down): a logit x passes conf
// iff x > t. −∞ for conf = 0, +∞ for 1.
float conf_logit_threshold(float conf);
// The class filter as a mask of nc floats (1 keep, 0 drop); throws unless every class is in [0, nc).
std::vector<float> class_mask(const std::vector<int64_t>& classes, int64_t n_classes);

// CPU twins, f32 host tensors: boxes [B, 4, A], logits [B, nc, A] → detections [B, max_det, 6] f32 and count [B] i32
// (both overwritten).
void postprocess_e2e_cpu(const Tensor& boxes, const Tensor& logits, const PostprocessOptions& options,
                         const Tensor& detections, const Tensor& count);
void postprocess_nms_cpu(const Tensor& boxes, const Tensor& logits, const PostprocessOptions& options,
                         const Tensor& detections, const Tensor& count);

// IoU of two xyxy boxes in f32, in the operation order the GPU kernels use (no fused multiply-add).
float box_iou(const std::array<float, 4>& a, const std::array<float, 4>& b);

// ---------------------------------------------------------------------------------------------------------------
// Letterbox inverse

// LetterboxTransform and letterbox_transform live with the letterbox itself (vision/data/letterbox.h).
using data::LetterboxTransform;
using data::letterbox_transform;

// Maps the first count[b] rows of detections [B, max_det, 6] (f32 host) back to image b's original pixels, clipped,
// in place, with transforms[b]; scores, classes and the zero rows are left as they are.
void letterbox_inverse_cpu(const Tensor& detections, const Tensor& count,
                           std::span<const LetterboxTransform> transforms);

// ---------------------------------------------------------------------------------------------------------------
// Graph ops "yolo.postprocess_e2e" (PostprocessMethod::end_to_end) and "yolo.nms" (PostprocessMethod::nms).
// Inputs boxes [B, 4, A] and logits [B, nc, A]; outputs detections [B, max_det, 6] f32 and count [B] i32, whatever
// the inputs' dtype. Inference only (no backward). With a class filter the op holds a per-plan constant
// "class_mask" [nc] f32. CPU backend: f32 through the twins; CUDA backend (CUDA builds): inputs in f32, f16 or bf16,
// the whole batch in a fixed number of launches with no host synchronisation (postprocess_cuda.h), so an inference
// plan captures it in its CUDA graph.
class PostprocessOp : public graph::Op {
 public:
  PostprocessOp(PostprocessMethod method, PostprocessOptions options);
  std::string name() const override;
  size_t n_outputs() const override { return 2; }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::vector<core::DType> infer_output_dtypes(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  PostprocessMethod method() const { return method_; }
  const PostprocessOptions& options() const { return options_; }

 private:
  PostprocessMethod method_;
  PostprocessOptions options_;
};

struct DetectionTensors {
  graph::SymTensor detections;  // [B, max_det, 6] f32
  graph::SymTensor count;       // [B] i32
};
// Records the end-to-end postprocess / NMS of boxes and logits as a node named `name`.
DetectionTensors postprocess_e2e(graph::SymTensor boxes, graph::SymTensor logits, const PostprocessOptions& options = {},
                                 const std::string& name = "postprocess");
DetectionTensors postprocess_nms(graph::SymTensor boxes, graph::SymTensor logits, const PostprocessOptions& options = {},
                                 const std::string& name = "nms");

}  // namespace vision::models::yolo::kernels
