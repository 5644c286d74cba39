#include "vision/models/yolo/kernels/postprocess.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/models/yolo/kernels/postprocess_math.cuh"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/postprocess_cuda.h"
#endif

namespace vision::models::yolo::kernels {

using core::DType;
using core::Shape;

std::string_view postprocess_method_name(PostprocessMethod method) {
  switch (method) {
    case PostprocessMethod::end_to_end: return "end_to_end";
    case PostprocessMethod::nms: return "nms";
  }
  fail("postprocess: unknown method {}", static_cast<int>(method));
}

void check_postprocess_options(const PostprocessOptions& o) {
  VISION_CHECK(o.max_det >= 1 && o.max_det <= kMaxDetections,
               "postprocess: max_det = {} is out of range; it must be in [1, {}]", o.max_det, kMaxDetections);
  VISION_CHECK(o.conf >= 0.0f && o.conf <= 1.0f,
               "postprocess: conf = {} is out of range; it is a score threshold in [0, 1]", o.conf);
  VISION_CHECK(o.iou >= 0.0f && o.iou <= 1.0f, "postprocess: iou = {} is out of range; it must be in [0, 1]", o.iou);
  VISION_CHECK(o.max_nms >= 1 && o.max_nms <= std::numeric_limits<int32_t>::max(),
               "postprocess: max_nms = {} is out of range; it must be at least 1", o.max_nms);
  for (int64_t c : o.classes)
    VISION_CHECK(c >= 0, "postprocess: the class filter holds {}; class ids are non-negative", c);
}

float conf_logit_threshold(float conf) {
  VISION_CHECK(conf >= 0.0f && conf <= 1.0f, "postprocess: conf = {} is out of range; it must be in [0, 1]", conf);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (conf == 0.0f) return -kInf;  // σ(x) > 0 for every x > −∞
  if (conf == 1.0f) return kInf;   // σ(x) > 1 for none
  // σ(x) > conf ⟺ x > logit(conf) = log(conf) − log1p(−conf), in extended precision (exact 0 for conf = 0.5); the
  // threshold is logit(conf) rounded down to a float.
  const long double c = conf;
  const long double logit = std::log(c) - std::log1p(-c);
  float t = static_cast<float>(logit);
  if (static_cast<long double>(t) > logit) t = std::nextafter(t, -kInf);
  return t;
}

std::vector<float> class_mask(const std::vector<int64_t>& classes, int64_t n_classes) {
  std::vector<float> mask(static_cast<size_t>(n_classes), 0.0f);
  for (int64_t c : classes) {
    VISION_CHECK(c >= 0 && c < n_classes,
                 "postprocess: the class filter holds class {}, but the logits have {} classes (ids 0 to {})", c,
                 n_classes, n_classes - 1);
    mask[static_cast<size_t>(c)] = 1.0f;
  }
  return mask;
}

float box_iou(const std::array<float, 4>& a, const std::array<float, 4>& b) {
  return pp_math::box_iou(a.data(), b.data());
}

namespace {

// Ranking keys: the kernels' own (postprocess_math.cuh).
using pp_math::key_index;
using pp_math::key_logit;
using pp_math::rank_key;
using pp_math::sanitize;


struct Sizes {
  int64_t batch, n_anchors, n_classes;
};

void check_host_f32(const Tensor& t, const char* what, const char* form, std::string_view op) {
  VISION_CHECK(t.defined() && t.dtype() == DType::f32 && t.device() == core::Device::cpu && t.rank() == 3,
               "{} (CPU): {} must be an f32 host tensor {}, got {}", op, what, form,
               t.defined() ? t.str() : std::string("an undefined tensor"));
}

Sizes check_cpu_tensors(const Tensor& boxes, const Tensor& logits, const PostprocessOptions& o, const Tensor& det,
                        const Tensor& count, std::string_view op) {
  check_postprocess_options(o);
  check_host_f32(boxes, "boxes", "[B, 4, A]", op);
  check_host_f32(logits, "logits", "[B, nc, A]", op);
  const int64_t batch = boxes.dim(0), n = boxes.dim(2), nc = logits.dim(1);
  VISION_CHECK(boxes.dim(1) == 4 && logits.dim(0) == batch && logits.dim(2) == n && nc >= 1,
               "{} (CPU): boxes {} and logits {} must be [B, 4, A] and [B, nc, A] with one B and A", op,
               boxes.shape().str(), logits.shape().str());
  VISION_CHECK(n <= std::numeric_limits<int32_t>::max() && n * nc <= int64_t{std::numeric_limits<uint32_t>::max()},
               "{} (CPU): {} anchors × {} classes is more than the postprocess indexes", op, n, nc);
  VISION_CHECK(det.defined() && det.dtype() == DType::f32 && det.device() == core::Device::cpu &&
                   det.shape() == Shape({batch, o.max_det, 6}),
               "{} (CPU): detections must be an f32 host tensor [{}, {}, 6], got {}", op, batch, o.max_det,
               det.defined() ? det.str() : std::string("an undefined tensor"));
  VISION_CHECK(count.defined() && count.dtype() == DType::i32 && count.device() == core::Device::cpu &&
                   count.shape() == Shape({batch}),
               "{} (CPU): count must be an i32 host tensor [{}], got {}", op, batch,
               count.defined() ? count.str() : std::string("an undefined tensor"));
  return {batch, n, nc};
}

// Image b's row r: (x1, y1, x2, y2) of anchor a, σ(logit), class.
void write_row(float* row, const float* boxes_b, int64_t n_anchors, uint32_t anchor, float logit, int64_t cls) {
  for (int q = 0; q < 4; ++q) row[q] = boxes_b[q * n_anchors + anchor];
  row[4] = pp_math::sigmoid(logit);
  row[5] = static_cast<float>(cls);
}

// The best class of anchor a of one image (the lowest on ties; logits sanitized) and its logit.
std::pair<float, int64_t> best_class(const float* logits_b, int64_t n_anchors, int64_t n_classes, int64_t a) {
  float best = sanitize(logits_b[a]);
  int64_t cls = 0;
  for (int64_t c = 1; c < n_classes; ++c) {
    const float x = sanitize(logits_b[c * n_anchors + a]);
    if (x > best) best = x, cls = c;
  }
  return {best, cls};
}

}  // namespace

void postprocess_e2e_cpu(const Tensor& boxes, const Tensor& logits, const PostprocessOptions& o,
                         const Tensor& detections, const Tensor& count) {
  const auto [batch, n, nc] = check_cpu_tensors(boxes, logits, o, detections, count, "postprocess_e2e");
  const float threshold = conf_logit_threshold(o.conf);
  const std::vector<float> mask = o.classes.empty() ? std::vector<float>() : class_mask(o.classes, nc);
  const int64_t k = std::min(o.max_det, n);
  cpu::parallel_for(
      batch,
      [&](int64_t b) {
        const float* lb = logits.data<float>() + b * nc * n;
        const float* bb = boxes.data<float>() + b * 4 * n;
        float* det = detections.data<float>() + b * o.max_det * 6;
        std::memset(det, 0, static_cast<size_t>(o.max_det) * 6 * sizeof(float));
        int32_t kept = 0;
        if (k > 0) {
          // Stage 1: the k anchors of the highest max-class logits. The best logit of every anchor, class by class
          // over contiguous rows (a class replaces the best only when strictly greater: the lowest class on ties,
          // as best_class).
          std::vector<float> best(lb, lb + n);
          for (float& v : best) v = sanitize(v);
          for (int64_t c = 1; c < nc; ++c) {
            const float* row = lb + c * n;
            for (int64_t a = 0; a < n; ++a) {
              const float x = sanitize(row[a]);
              best[static_cast<size_t>(a)] = x > best[static_cast<size_t>(a)] ? x : best[static_cast<size_t>(a)];
            }
          }
          std::vector<uint64_t> anchors(static_cast<size_t>(n));
          for (int64_t a = 0; a < n; ++a)
            anchors[static_cast<size_t>(a)] = rank_key(best[static_cast<size_t>(a)], static_cast<uint32_t>(a));
          std::nth_element(anchors.begin(), anchors.begin() + (k - 1), anchors.end(), std::greater<>());
          // Stage 2: the top k of their k × nc (anchor, class) pairs, sorted. Only pairs above the score threshold
          // can become rows, and they rank above every other pair: the top k of those alone are the rows the top k
          // of all would give (the class filter, applied after, still takes its place among the k).
          std::vector<uint64_t> pairs;
          pairs.reserve(static_cast<size_t>(k * nc));
          for (int64_t s = 0; s < k; ++s) {
            const uint32_t a = key_index(anchors[static_cast<size_t>(s)]);
            for (int64_t c = 0; c < nc; ++c)
              if (lb[c * n + a] > threshold) pairs.push_back(rank_key(lb[c * n + a], static_cast<uint32_t>(a * nc + c)));
          }
          const int64_t ranked = std::min<int64_t>(k, static_cast<int64_t>(pairs.size()));
          std::partial_sort(pairs.begin(), pairs.begin() + ranked, pairs.end(), std::greater<>());
          for (int64_t r = 0; r < ranked; ++r) {
            const uint64_t key = pairs[static_cast<size_t>(r)];
            const float logit = key_logit(key);
            const int64_t a = key_index(key) / nc, c = key_index(key) % nc;
            if (!(logit > threshold) || (!mask.empty() && mask[static_cast<size_t>(c)] == 0.0f)) continue;
            write_row(det + 6 * kept, bb, n, static_cast<uint32_t>(a), logit, c);
            ++kept;
          }
        }
        count.data<int32_t>()[b] = kept;
      },
      batch * n * nc);
}

void postprocess_nms_cpu(const Tensor& boxes, const Tensor& logits, const PostprocessOptions& o,
                         const Tensor& detections, const Tensor& count) {
  const auto [batch, n, nc] = check_cpu_tensors(boxes, logits, o, detections, count, "nms");
  const float threshold = conf_logit_threshold(o.conf);
  const std::vector<float> mask = o.classes.empty() ? std::vector<float>() : class_mask(o.classes, nc);
  cpu::parallel_for(
      batch,
      [&](int64_t b) {
        const float* lb = logits.data<float>() + b * nc * n;
        const float* bb = boxes.data<float>() + b * 4 * n;
        float* det = detections.data<float>() + b * o.max_det * 6;
        std::memset(det, 0, static_cast<size_t>(o.max_det) * 6 * sizeof(float));
        // Candidates: each anchor with its best class, when that passes conf and the class filter.
        struct Candidate {
          uint64_t key;
          int64_t cls;
        };
        std::vector<Candidate> cand;
        for (int64_t a = 0; a < n; ++a) {
          const auto [logit, cls] = best_class(lb, n, nc, a);
          if (logit > threshold && (mask.empty() || mask[static_cast<size_t>(cls)] != 0.0f))
            cand.push_back({rank_key(logit, static_cast<uint32_t>(a)), cls});
        }
        std::sort(cand.begin(), cand.end(), [](const Candidate& x, const Candidate& y) { return x.key > y.key; });
        if (static_cast<int64_t>(cand.size()) > o.max_nms) cand.resize(static_cast<size_t>(o.max_nms));
        // Greedy suppression among boxes of one class.
        struct Kept {
          std::array<float, 4> box;
          int64_t cls;
        };
        std::vector<Kept> kept;
        for (const Candidate& c : cand) {
          if (static_cast<int64_t>(kept.size()) == o.max_det) break;
          const uint32_t a = key_index(c.key);
          const std::array<float, 4> box = {bb[a], bb[n + a], bb[2 * n + a], bb[3 * n + a]};
          bool suppressed = false;
          for (const Kept& k : kept)
            if (k.cls == c.cls && box_iou(k.box, box) > o.iou) {
              suppressed = true;
              break;
            }
          if (suppressed) continue;
          write_row(det + 6 * kept.size(), bb, n, a, key_logit(c.key), c.cls);
          kept.push_back({box, c.cls});
        }
        count.data<int32_t>()[b] = static_cast<int32_t>(kept.size());
      },
      batch * n * nc);
}

// ---------------------------------------------------------------------------------------------------------------
// Letterbox inverse

void letterbox_inverse_cpu(const Tensor& detections, const Tensor& count,
                           std::span<const LetterboxTransform> transforms) {
  VISION_CHECK(detections.defined() && detections.dtype() == DType::f32 &&
                   detections.device() == core::Device::cpu && detections.rank() == 3 && detections.dim(2) == 6,
               "letterbox_inverse: detections must be an f32 host tensor [B, max_det, 6], got {}",
               detections.defined() ? detections.str() : std::string("an undefined tensor"));
  const int64_t batch = detections.dim(0), rows = detections.dim(1);
  VISION_CHECK(count.defined() && count.dtype() == DType::i32 && count.device() == core::Device::cpu &&
                   count.shape() == Shape({batch}),
               "letterbox_inverse: count must be an i32 host tensor [{}], got {}", batch,
               count.defined() ? count.str() : std::string("an undefined tensor"));
  VISION_CHECK(static_cast<int64_t>(transforms.size()) == batch,
               "letterbox_inverse: {} transforms for a batch of {} images; give one per image", transforms.size(),
               batch);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t n = count.data<int32_t>()[b];
    VISION_CHECK(n >= 0 && n <= rows, "letterbox_inverse: image {} has a count of {}, outside [0, {}]", b, n, rows);
    const LetterboxTransform& t = transforms[static_cast<size_t>(b)];
    VISION_CHECK(t.scale > 0 && t.orig_w > 0 && t.orig_h > 0,
                 "letterbox_inverse: the transform of image {} has scale {} and size {}×{}; make it with "
                 "letterbox_transform",
                 b, t.scale, t.orig_w, t.orig_h);
    for (int32_t r = 0; r < n; ++r) {
      float* row = detections.data<float>() + (b * rows + r) * 6;
      const auto box = t.to_original({row[0], row[1], row[2], row[3]});
      std::copy(box.begin(), box.end(), row);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Graph op

namespace {

class PostprocessCpuRuntime final : public graph::RuntimeOp {
 public:
  PostprocessCpuRuntime(PostprocessMethod method, PostprocessOptions options)
      : method_(method), options_(std::move(options)) {}
  std::string name() const override {
    return method_ == PostprocessMethod::end_to_end ? "yolo.postprocess_e2e" : "yolo.nms";
  }
  int n_activation_inputs() const override { return 2; }
  // f32; the activations are rank 3, so the layout does not matter.
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }

  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    if (options_.classes.empty()) return {};
    return {{"class_mask", Shape{in.at(1)[1]}, DType::f32, graph::StateKind::constant}};
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape&,
                                         uint64_t) const override {
    VISION_CHECK(i == 0 && !options_.classes.empty(), "{} has one state tensor (class_mask) with a class filter, "
                 "asked for {}", name(), i);
    return graph::bytes_of(class_mask(options_.classes, in.at(1)[1]));
  }

  void forward(graph::ForwardCtx& ctx) override {
    VISION_CHECK(ctx.inputs.size() == 2 && ctx.outputs.size() == 2, "{}: 2 inputs and 2 outputs, got {} and {}",
                 name(), ctx.inputs.size(), ctx.outputs.size());
    if (method_ == PostprocessMethod::end_to_end)
      postprocess_e2e_cpu(ctx.inputs[0], ctx.inputs[1], options_, ctx.outputs[0], ctx.outputs[1]);
    else
      postprocess_nms_cpu(ctx.inputs[0], ctx.inputs[1], options_, ctx.outputs[0], ctx.outputs[1]);
  }

 private:
  PostprocessMethod method_;
  PostprocessOptions options_;
};

}  // namespace

PostprocessOp::PostprocessOp(PostprocessMethod method, PostprocessOptions options)
    : method_(method), options_(std::move(options)) {
  (void)postprocess_method_name(method_);
  check_postprocess_options(options_);
}

std::string PostprocessOp::name() const {
  return method_ == PostprocessMethod::end_to_end ? "yolo.postprocess_e2e" : "yolo.nms";
}

std::vector<Shape> PostprocessOp::infer_output_shapes(const std::vector<Shape>& in) const {
  const std::string op = name();
  VISION_CHECK(in.size() == 2, "{} takes 2 inputs (boxes [B, 4, A] and class logits [B, nc, A]), got {}", op,
               in.size());
  const Shape &boxes = in[0], &logits = in[1];
  VISION_CHECK(boxes.rank() == 3 && boxes[1] == 4,
               "{}: boxes must be a [B, 4, A] tensor (planes x1, y1, x2, y2 in input pixels: the detect decode in "
               "pixels mode), got {}",
               op, boxes.str());
  VISION_CHECK(logits.rank() == 3, "{}: the class logits must be a [B, nc, A] tensor, got {}", op, logits.str());
  const int64_t batch = ops::merge_dim(boxes[0], logits[0], op + ": batch of boxes and logits");
  const int64_t n = ops::merge_dim(boxes[2], logits[2], op + ": anchors (A) of boxes and logits");
  const int64_t nc = logits[1];
  if (nc != Shape::kAny) {
    VISION_CHECK(nc >= 1, "{}: the logits {} have no classes", op, logits.str());
    for (int64_t c : options_.classes)
      VISION_CHECK(c < nc, "{}: the class filter holds class {}, but the logits {} have {} classes", op, c,
                   logits.str(), nc);
  }
  if (n != Shape::kAny) {
    VISION_CHECK(n <= std::numeric_limits<int32_t>::max(), "{}: {} anchors are more than the postprocess indexes",
                 op, n);
    if (nc != Shape::kAny)
      VISION_CHECK(n * nc <= int64_t{std::numeric_limits<uint32_t>::max()},
                   "{}: {} anchors × {} classes are more (anchor, class) pairs than the postprocess indexes (2^32)",
                   op, n, nc);
  }
  return {Shape{batch, options_.max_det, 6}, Shape{batch}};
}

std::vector<DType> PostprocessOp::infer_output_dtypes(const std::vector<DType>& in) const {
  VISION_CHECK(in.size() == 2 && core::is_floating(in[0]) && core::is_floating(in[1]),
               "{}: boxes and logits must be floating tensors", name());
  return {DType::f32, DType::i32};
}

std::unique_ptr<graph::RuntimeOp> PostprocessOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<PostprocessCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_postprocess_cuda(std::move(twin), method_, options_)), method_,
      options_);
}

namespace {

DetectionTensors record(graph::SymTensor boxes, graph::SymTensor logits, PostprocessMethod method,
                        const PostprocessOptions& options, const std::string& name) {
  VISION_CHECK(boxes.valid() && logits.valid(), "{}: boxes and logits must be recorded tensors",
               PostprocessOp(method, options).name());
  VISION_CHECK(boxes.graph() == logits.graph(), "postprocess: boxes and logits belong to different graphs");
  const auto out =
      boxes.graph()->apply_multi(std::make_shared<PostprocessOp>(method, options), {boxes, logits}, name);
  return {out.at(0), out.at(1)};
}

}  // namespace

DetectionTensors postprocess_e2e(graph::SymTensor boxes, graph::SymTensor logits, const PostprocessOptions& options,
                                 const std::string& name) {
  return record(boxes, logits, PostprocessMethod::end_to_end, options, name);
}

DetectionTensors postprocess_nms(graph::SymTensor boxes, graph::SymTensor logits, const PostprocessOptions& options,
                                 const std::string& name) {
  return record(boxes, logits, PostprocessMethod::nms, options, name);
}

}  // namespace vision::models::yolo::kernels
