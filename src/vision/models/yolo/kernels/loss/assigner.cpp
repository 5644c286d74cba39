#include "vision/models/yolo/kernels/loss/assigner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/loss/assigner_math.cuh"
#include "vision/models/yolo/kernels/loss/host_util.h"
#include "vision/cpu/parallel.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/loss/assigner_cuda.h"
#endif

namespace vision::models::yolo::kernels::loss {

using core::DType;
using core::Shape;

void check_assigner_options(const AssignerOptions& o) {
  VISION_CHECK(o.topk >= 1 && o.topk <= kAssignerMaxTopk,
               "task_aligned_assigner: topk = {} is out of range; it must be in [1, {}]", o.topk, kAssignerMaxTopk);
  VISION_CHECK(o.topk2 >= 0 && o.topk2 <= o.topk,
               "task_aligned_assigner: topk2 = {} is out of range; it must be 0 (none) or in [1, topk = {}]", o.topk2,
               o.topk);
  VISION_CHECK(std::isfinite(o.alpha) && o.alpha > 0 && std::isfinite(o.beta) && o.beta > 0,
               "task_aligned_assigner: alpha = {} and beta = {} must be positive and finite", o.alpha, o.beta);
  VISION_CHECK(std::isfinite(o.eps) && o.eps >= 0, "task_aligned_assigner: eps = {} must be finite and ≥ 0", o.eps);
  VISION_CHECK(std::isfinite(o.small_side) && std::isfinite(o.widened_side) && o.small_side >= 0 && o.widened_side >= 0,
               "task_aligned_assigner: the STAL sides {} and {} must be finite and ≥ 0", o.small_side, o.widened_side);
}

float assigner_ciou(const float* b1, const float* b2) { return tal_math::ciou(b1, b2); }

namespace {

void check_host(const Tensor& t, const char* what, DType dtype, const Shape& shape) {
  VISION_CHECK(t.defined() && t.dtype() == dtype && t.device() == core::Device::cpu && t.shape() == shape,
               "task_aligned_assigner (CPU): {} must be a {} host tensor {}, got {}", what, core::dtype_name(dtype),
               shape.str(), tensor_str(t));
}

// Ranking key of one anchor for one gt: the align value (≥ 0, so its bits order it) above, ~anchor below, so that a
// larger key ranks first and equal values go to the lower anchor.
uint64_t align_key(float align, int64_t anchor) {
  return (static_cast<uint64_t>(std::bit_cast<uint32_t>(align)) << 32) | static_cast<uint32_t>(~anchor);
}

struct Positive {
  int32_t anchor;
  float align, overlap;
};

// One gt of one image, for the candidate test and the metrics of any anchor.
struct GtView {
  float box[4];   // x1, y1, x2, y2 in pixels
  float cand[4];  // the STAL candidate box
  const float* logits;  // [A] of the gt's class
};

// Whether anchor a is a candidate of the gt, and then its overlap and align (0 otherwise); the operations of stage 1,
// so that every call for one (gt, anchor) gives the same bits.
bool anchor_metrics(const GtView& gt, const float* boxes_b, const float* an, int64_t n, int64_t a,
                    const AssignerOptions& o, float& align, float& overlap) {
  const float s = an[2 * n + a];
  const float x = an[a] * s, y = an[n + a] * s;
  align = 0.0f;
  overlap = 0.0f;
  if (!tal_math::is_candidate(x, y, gt.cand, o.eps)) return false;
  const float pred[4] = {boxes_b[a] * s, boxes_b[n + a] * s, boxes_b[2 * n + a] * s, boxes_b[3 * n + a] * s};
  overlap = tal_math::overlap(gt.box, pred);
  align = tal_math::align(gt.logits[a], overlap, o.alpha, o.beta);
  return true;
}

GtView gt_view(const float* row, const float* logits_b, int64_t n, const AssignerOptions& o) {
  GtView v;
  for (int q = 0; q < 4; ++q) v.box[q] = row[1 + q];
  tal_math::stal_box(v.box, o.small_side, o.widened_side, v.cand);  // the STAL candidate box
  v.logits = logits_b + static_cast<int64_t>(row[0]) * n;
  return v;
}

}  // namespace

void task_aligned_assign_cpu(const Tensor& logits, const Tensor& boxes, const Tensor& anchors, const Tensor& targets,
                             const Tensor& count, const AssignerOptions& o, const Tensor& target_boxes,
                             const Tensor& target_scores, const Tensor& fg_mask, const Tensor& gt_index) {
  check_assigner_options(o);
  VISION_CHECK(logits.defined() && logits.rank() == 3 && boxes.defined() && boxes.rank() == 3 && targets.defined() &&
                   targets.rank() == 3,
               "task_aligned_assigner (CPU): logits [B, nc, A], boxes [B, 4, A] and targets [B, M, 5] expected, got "
               "{}, {} and {}",
               tensor_str(logits), tensor_str(boxes), tensor_str(targets));
  const int64_t batch = logits.dim(0), nc = logits.dim(1), n = logits.dim(2), m = targets.dim(1);
  VISION_CHECK(nc >= 1 && n <= std::numeric_limits<int32_t>::max() && m <= std::numeric_limits<int32_t>::max(),
               "task_aligned_assigner (CPU): {} classes, {} anchors, {} target rows are out of range", nc, n, m);
  check_host(logits, "logits", DType::f32, Shape{batch, nc, n});
  check_host(boxes, "boxes", DType::f32, Shape{batch, 4, n});
  check_host(anchors, "anchors", DType::f32, Shape{3, n});
  check_host(targets, "targets", DType::f32, Shape{batch, m, 5});
  check_host(count, "count", DType::i32, Shape{batch});
  check_host(target_boxes, "target_boxes", DType::f32, Shape{batch, 4, n});
  check_host(target_scores, "target_scores", DType::f32, Shape{batch, nc, n});
  check_host(fg_mask, "fg_mask", DType::u8, Shape{batch, n});
  check_host(gt_index, "gt_index", DType::i32, Shape{batch, n});

  const float* lg = logits.data<float>();
  const float* bx = boxes.data<float>();
  const float* an = anchors.data<float>();
  const float* tg = targets.data<float>();
  const int32_t* cnt = count.data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    VISION_CHECK(cnt[b] >= 0 && cnt[b] <= m,
                 "task_aligned_assigner (CPU): image {} has a box count of {}, outside [0, {}] (the rows of targets)",
                 b, cnt[b], m);
    for (int64_t g = 0; g < cnt[b]; ++g) {
      const float c = tg[(b * m + g) * 5];
      VISION_CHECK(c >= 0 && c < static_cast<float>(nc) && c == std::floor(c),
                   "task_aligned_assigner (CPU): target row {} of image {} has class {}; classes are integers in "
                   "[0, {})",
                   g, b, c, nc);
    }
  }

  // Zeroed outputs; positives are written below.
  std::memset(target_boxes.raw(), 0, target_boxes.nbytes());
  std::memset(target_scores.raw(), 0, target_scores.nbytes());
  std::memset(fg_mask.raw(), 0, fg_mask.nbytes());
  std::fill_n(gt_index.data<int32_t>(), batch * n, -1);
  if (batch == 0 || n == 0 || m == 0) return;

  const int64_t k = std::min(o.topk, n);
  // Stage 1, per (image, gt): the top k anchors by align key over all A anchors; the candidates among them are the
  // gt's claims.
  std::vector<int32_t> claims(static_cast<size_t>(batch * m * k));
  std::vector<int32_t> n_claims(static_cast<size_t>(batch * m), 0);
  cpu::parallel_for(
      batch * m,
      [&](int64_t bg) {
        const int64_t b = bg / m, g = bg % m;
        if (g >= cnt[b]) return;
        const GtView gt = gt_view(tg + bg * 5, lg + b * nc * n, n, o);
        const float* pb = bx + b * 4 * n;
        struct Entry {
          uint64_t key;
          bool candidate;
        };
        std::vector<Entry> top;  // descending keys, at most k
        top.reserve(static_cast<size_t>(k) + 1);
        for (int64_t a = 0; a < n; ++a) {
          float align, overlap;
          const bool candidate = anchor_metrics(gt, pb, an, n, a, o, align, overlap);
          const uint64_t key = align_key(align, a);
          if (static_cast<int64_t>(top.size()) == k && key <= top.back().key) continue;
          auto it = std::upper_bound(top.begin(), top.end(), key, [](uint64_t v, const Entry& e) { return v > e.key; });
          top.insert(it, Entry{key, candidate});
          if (static_cast<int64_t>(top.size()) > k) top.pop_back();
        }
        int32_t* out = claims.data() + bg * k;
        int32_t nk = 0;
        for (const Entry& e : top)
          if (e.candidate) out[nk++] = static_cast<int32_t>(~static_cast<uint32_t>(e.key));
        n_claims[static_cast<size_t>(bg)] = nk;
      },
      batch * m * n);

  // Stage 2, per image: shared anchors (argmax over all gts), topk2, the normalisation and the outputs.
  const bool use_topk2 = o.topk2 > 0 && o.topk2 != o.topk;
  float* out_boxes = target_boxes.data<float>();
  float* out_scores = target_scores.data<float>();
  uint8_t* out_fg = fg_mask.data<uint8_t>();
  int32_t* out_idx = gt_index.data<int32_t>();
  cpu::parallel_for(
      batch,
      [&](int64_t b) {
        const int64_t count_b = cnt[b];
        const float* pb = bx + b * 4 * n;
        std::vector<GtView> gts(static_cast<size_t>(count_b));
        for (int64_t g = 0; g < count_b; ++g) gts[static_cast<size_t>(g)] = gt_view(tg + (b * m + g) * 5, lg + b * nc * n, n, o);
        // Owner of each anchor: its claiming gt when one claims it; when several do, the argmax over all gts of the
        // overlap (0 off a gt's candidates), the first maximum (key (0, ~0) to start: gt 0 when every overlap is 0).
        std::vector<int32_t> claimers(static_cast<size_t>(n), 0), owner(static_cast<size_t>(n), -1);
        for (int64_t g = 0; g < count_b; ++g) {
          const int32_t* c = claims.data() + (b * m + g) * k;
          for (int32_t j = 0; j < n_claims[static_cast<size_t>(b * m + g)]; ++j) {
            ++claimers[static_cast<size_t>(c[j])];
            owner[static_cast<size_t>(c[j])] = static_cast<int32_t>(g);
          }
        }
        for (int64_t a = 0; a < n; ++a) {
          if (claimers[static_cast<size_t>(a)] < 2) continue;
          uint64_t best = align_key(0.0f, 0);
          for (int64_t g = 0; g < count_b; ++g) {
            float align, overlap;
            if (anchor_metrics(gts[static_cast<size_t>(g)], pb, an, n, a, o, align, overlap))
              best = std::max(best, align_key(overlap, g));
          }
          owner[static_cast<size_t>(a)] = static_cast<int32_t>(~static_cast<uint32_t>(best));
        }
        // Each gt's positives, in anchor order.
        std::vector<std::vector<int32_t>> positives(static_cast<size_t>(count_b));
        for (int64_t a = 0; a < n; ++a)
          if (owner[static_cast<size_t>(a)] >= 0)
            positives[static_cast<size_t>(owner[static_cast<size_t>(a)])].push_back(static_cast<int32_t>(a));
        std::vector<uint64_t> keys;
        for (int64_t g = 0; g < count_b; ++g) {
          const GtView& gt = gts[static_cast<size_t>(g)];
          std::vector<Positive> pos;
          for (int32_t a : positives[static_cast<size_t>(g)]) {
            Positive c{a, 0.0f, 0.0f};
            anchor_metrics(gt, pb, an, n, a, o, c.align, c.overlap);
            pos.push_back(c);
          }
          if (use_topk2 && !pos.empty()) {
            // Kept: the positives among the top topk2 of align · mask over all A anchors by key (the gt's other anchors
            // count as 0, so the lowest-indexed of them are the only ones that can rank among the top).
            keys.clear();
            for (const Positive& c : pos) keys.push_back(align_key(c.align, c.anchor));
            size_t others = 0, p = 0;
            const auto& own = positives[static_cast<size_t>(g)];
            for (int64_t a = 0; a < n && others < static_cast<size_t>(o.topk2); ++a) {
              if (p < own.size() && own[p] == a) {
                ++p;
                continue;
              }
              keys.push_back(align_key(0.0f, a));
              ++others;
            }
            if (keys.size() > static_cast<size_t>(o.topk2)) {
              std::nth_element(keys.begin(), keys.begin() + (o.topk2 - 1), keys.end(), std::greater<>());
              const uint64_t threshold = keys[static_cast<size_t>(o.topk2 - 1)];
              std::erase_if(pos, [&](const Positive& c) { return align_key(c.align, c.anchor) < threshold; });
            }
          }
          float max_align = 0.0f, max_overlap = 0.0f;
          for (const Positive& c : pos) {
            max_align = std::fmax(max_align, c.align);
            max_overlap = std::fmax(max_overlap, c.overlap);
          }
          const float* row = tg + (b * m + g) * 5;
          const auto cls = static_cast<int64_t>(row[0]);
          for (const Positive& c : pos) {
            const int64_t a = c.anchor;
            const float s = an[2 * n + a];
            out_idx[b * n + a] = static_cast<int32_t>(g);
            out_fg[b * n + a] = 1;
            for (int q = 0; q < 4; ++q) out_boxes[(b * 4 + q) * n + a] = row[1 + q] / s;
            out_scores[(b * nc + cls) * n + a] = c.align * max_overlap / (max_align + o.eps);
          }
        }
      },
      batch * m * k);
}

// ---------------------------------------------------------------------------------------------------------------
// Graph op

namespace {

class AssignerCpuRuntime final : public graph::RuntimeOp {
 public:
  explicit AssignerCpuRuntime(AssignerOptions options) : options_(options) {}
  std::string name() const override { return "yolo.task_aligned_assigner"; }
  int n_activation_inputs() const override { return 7; }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  bool reads_input(size_t i) const override { return i < 4; }
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 2 ? std::optional<DType>(DType::f32) : std::nullopt;
  }

  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"anchors", Shape{3, in.at(0)[2]}, DType::f32, graph::StateKind::constant}};
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape&,
                                         uint64_t) const override {
    VISION_CHECK(i == 0, "task_aligned_assigner has one state tensor (anchors), asked for {}", i);
    const auto size = detect_image_size(in.at(4), in.at(5), in.at(6));
    return graph::bytes_of(detect_anchor_grid(size[0], size[1]));
  }

  void forward(graph::ForwardCtx& ctx) override {
    VISION_CHECK(ctx.inputs.size() == 7 && ctx.outputs.size() == 4,
                 "task_aligned_assigner: 7 inputs and 4 outputs, got {} and {}", ctx.inputs.size(), ctx.outputs.size());
    task_aligned_assign_cpu(ctx.inputs[0], ctx.inputs[1], ctx.params.at(0), ctx.inputs[2], ctx.inputs[3], options_,
                            ctx.outputs[0], ctx.outputs[1], ctx.outputs[2], ctx.outputs[3]);
  }

 private:
  AssignerOptions options_;
};

}  // namespace

TaskAlignedAssignerOp::TaskAlignedAssignerOp(AssignerOptions options) : options_(options) {
  check_assigner_options(options_);
}

std::vector<Shape> TaskAlignedAssignerOp::infer_output_shapes(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 7,
               "task_aligned_assigner takes 7 inputs (logits [B, nc, A], boxes [B, 4, A], targets [B, M, 5], count "
               "[B] and the level maps P3, P4, P5), got {}",
               in.size());
  const Shape &logits = in[0], &boxes = in[1], &targets = in[2], &count = in[3];
  VISION_CHECK(logits.rank() == 3, "task_aligned_assigner: logits must be [B, nc, A], got {}", logits.str());
  VISION_CHECK(boxes.rank() == 3 && boxes[1] == 4,
               "task_aligned_assigner: boxes must be [B, 4, A] (xyxy in grid units: the detect decode's grid mode), "
               "got {}",
               boxes.str());
  VISION_CHECK(targets.rank() == 3 && targets[2] == 5,
               "task_aligned_assigner: targets must be [B, M, 5] (class, x1, y1, x2, y2 in input pixels), got {}",
               targets.str());
  VISION_CHECK(count.rank() == 1, "task_aligned_assigner: count must be [B] (boxes per image), got {}", count.str());
  int64_t batch = ops::merge_dim(logits[0], boxes[0], "task_aligned_assigner: batch of logits and boxes");
  batch = ops::merge_dim(batch, targets[0], "task_aligned_assigner: batch of logits and targets");
  batch = ops::merge_dim(batch, count[0], "task_aligned_assigner: batch of logits and count");
  for (size_t i = 4; i < 7; ++i)
    batch = ops::merge_dim(batch, in[i][0], "task_aligned_assigner: batch of logits and the level maps");
  const int64_t n = ops::merge_dim(logits[2], boxes[2], "task_aligned_assigner: anchors (A) of logits and boxes");
  const auto size = detect_image_size(in[4], in[5], in[6]);
  if (size[0] != Shape::kAny && size[1] != Shape::kAny && n != Shape::kAny)
    VISION_CHECK(n == detect_anchor_count(size[0], size[1]),
                 "task_aligned_assigner: {} anchors, but a {}×{} input has {} (P3 {}, P4 {}, P5 {})", n, size[0],
                 size[1], detect_anchor_count(size[0], size[1]), in[4].str(), in[5].str(), in[6].str());
  return {Shape{batch, 4, n}, Shape{batch, logits[1], n}, Shape{batch, n}, Shape{batch, n}};
}

std::vector<DType> TaskAlignedAssignerOp::infer_output_dtypes(const std::vector<DType>& in) const {
  VISION_CHECK(in.size() == 7 && core::is_floating(in[0]) && core::is_floating(in[1]) && in[2] == DType::f32 &&
                   in[3] == DType::i32,
               "task_aligned_assigner: logits and boxes must be floating, targets f32 and count i32");
  return {DType::f32, DType::f32, DType::u8, DType::i32};
}

std::unique_ptr<graph::RuntimeOp> TaskAlignedAssignerOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<AssignerCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_task_aligned_assigner_cuda(std::move(twin), options_)), options_);
}

AssignerTensors task_aligned_assigner(graph::SymTensor logits, graph::SymTensor boxes, graph::SymTensor targets,
                                      graph::SymTensor count, graph::SymTensor p3, graph::SymTensor p4,
                                      graph::SymTensor p5, const AssignerOptions& options, const std::string& name) {
  VISION_CHECK(
      logits.valid() && boxes.valid() && targets.valid() && count.valid() && p3.valid() && p4.valid() && p5.valid(),
      "task_aligned_assigner: every input must be a recorded tensor");
  const auto out = logits.graph()->apply_multi(std::make_shared<TaskAlignedAssignerOp>(options),
                                               {logits, boxes, targets, count, p3, p4, p5}, name);
  return {out.at(0), out.at(1), out.at(2), out.at(3)};
}

}  // namespace vision::models::yolo::kernels::loss
