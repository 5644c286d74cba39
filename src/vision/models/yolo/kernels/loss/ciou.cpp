#include "vision/models/yolo/kernels/loss/ciou.h"

#include <cstring>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/models/yolo/kernels/loss/ciou_math.cuh"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/loss/ciou_cuda.h"
#endif

namespace vision::models::yolo::kernels::loss {

using core::DType;
using core::Shape;

std::string_view box_format_name(BoxFormat format) {
  switch (format) {
    case BoxFormat::xyxy: return "xyxy";
    case BoxFormat::xywh: return "xywh";
  }
  fail("ciou_loss: unknown box format {}", static_cast<int>(format));
}

namespace {

// The per-box arithmetic is the kernels' own (ciou_math.cuh).
static_assert(ciou_math::eps() == kCiouEps);

// Corners of a box stored as 4 planes `stride` apart.
void corners(const float* p, int64_t stride, BoxFormat format, float c[4]) {
  ciou_math::corners(p[0], p[stride], p[2 * stride], p[3 * stride], format == BoxFormat::xywh, c);
}

void check_host(const Tensor& t, const char* what, const Shape& shape) {
  VISION_CHECK(t.defined() && t.dtype() == DType::f32 && t.device() == core::Device::cpu && t.shape() == shape,
               "ciou_loss (CPU): {} must be an f32 host tensor of shape {}, got {}", what, shape.str(),
               t.defined() ? t.str() : std::string("an undefined tensor"));
}

Shape check_boxes(const Tensor& pred) {
  VISION_CHECK(pred.defined() && pred.rank() == 3 && pred.dim(1) == 4,
               "ciou_loss (CPU): pred must be a [B, 4, A] tensor, got {}",
               pred.defined() ? pred.str() : std::string("an undefined tensor"));
  check_host(pred, "pred", pred.shape());
  return Shape{pred.dim(0), pred.dim(2)};
}

}  // namespace

void ciou_forward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, BoxFormat format,
                      const Tensor& loss, const Tensor& iou, const Tensor& v, const Tensor& alpha) {
  const Shape ba = check_boxes(pred);
  check_host(target, "target", pred.shape());
  check_host(weight, "weight", ba);
  check_host(loss, "loss", ba);
  for (const Tensor* s : {&iou, &v, &alpha})
    if (s->defined()) check_host(*s, "a saved tensor (iou, v, alpha)", ba);
  const int64_t n = pred.dim(2);
  const float* pp = pred.data<float>();
  const float* tp = target.data<float>();
  const float* wp = weight.data<float>();
  float* lp = loss.data<float>();
  float* ip = iou.defined() ? iou.data<float>() : nullptr;
  float* vp = v.defined() ? v.data<float>() : nullptr;
  float* ap = alpha.defined() ? alpha.data<float>() : nullptr;
  cpu::parallel_for(ba.numel(), [&](int64_t i) {
    const int64_t b = i / n, a = i % n;
    const float w = wp[i];
    float out_iou = 0, out_v = 0, out_alpha = 0, out_loss = 0;
    if (w != 0.0f) {
      float p[4], t[4];
      corners(pp + b * 4 * n + a, n, format, p);
      corners(tp + b * 4 * n + a, n, format, t);
      ciou_math::forward(p, t, w, out_iou, out_v, out_alpha, out_loss);
    }
    lp[i] = out_loss;
    if (ip) ip[i] = out_iou;
    if (vp) vp[i] = out_v;
    if (ap) ap[i] = out_alpha;
  });
}

void ciou_backward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& iou,
                       const Tensor& v, const Tensor& alpha, const Tensor& d_loss, const CiouOptions& options,
                       const Tensor& d_pred) {
  const Shape ba = check_boxes(pred);
  check_host(target, "target", pred.shape());
  check_host(weight, "weight", ba);
  check_host(iou, "iou (saved)", ba);
  check_host(v, "v (saved)", ba);
  check_host(alpha, "alpha (saved)", ba);
  check_host(d_loss, "d_loss", ba);
  check_host(d_pred, "d_pred", pred.shape());
  const int64_t n = pred.dim(2);
  const float* pp = pred.data<float>();
  const float* tp = target.data<float>();
  const float* wp = weight.data<float>();
  const float* ip = iou.data<float>();
  const float* vp = v.data<float>();
  const float* ap = alpha.data<float>();
  const float* dl = d_loss.data<float>();
  float* dp = d_pred.data<float>();
  const bool full = options.full_alpha_derivative;
  const BoxFormat format = options.format;
  cpu::parallel_for(ba.numel(), [&](int64_t i) {
    const int64_t b = i / n, a = i % n;
    float* out = dp + b * 4 * n + a;
    const float w = wp[i];
    if (w == 0.0f) {
      for (int c = 0; c < 4; ++c) out[c * n] = 0.0f;
      return;
    }
    float p[4], t[4];
    corners(pp + b * 4 * n + a, n, format, p);
    corners(tp + b * 4 * n + a, n, format, t);
    float gp[4], g[4];
    ciou_math::backward(p, t, w, ip[i], vp[i], ap[i], dl[i], full, gp);
    ciou_math::box_gradient(gp, format == BoxFormat::xywh, g);
    for (int c = 0; c < 4; ++c) out[c * n] = g[c];
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Graph op

namespace {

class CiouLossCpuRuntime final : public graph::RuntimeOp {
 public:
  explicit CiouLossCpuRuntime(CiouOptions options) : options_(options) {}
  std::string name() const override { return "yolo.ciou_loss"; }
  int n_activation_inputs() const override { return 3; }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  // target and weight are taken in f32 whatever the plan's dtype.
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 0 ? std::nullopt : std::optional<DType>(DType::f32);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>&, const Shape& out) const override {
    return {{out, DType::f32}, {out, DType::f32}, {out, DType::f32}};
  }

  void forward(graph::ForwardCtx& ctx) override {
    const bool saved = ctx.saved.size() == 3;
    ciou_forward_cpu(ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2), options_.format, ctx.output,
                     saved ? ctx.saved[0] : Tensor(), saved ? ctx.saved[1] : Tensor(), saved ? ctx.saved[2] : Tensor());
  }

  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(ctx.saved.size() == 3, "ciou_loss: backward needs the forward's saved iou, v and alpha (a training "
                                        "plan); got {} saved tensors",
                 ctx.saved.size());
    if (ctx.grad_inputs.at(0).defined())
      ciou_backward_cpu(ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2), ctx.saved[0], ctx.saved[1],
                        ctx.saved[2], ctx.grad_output, options_, ctx.grad_inputs[0]);
    for (size_t i = 1; i < 3; ++i)  // target and weight are not differentiated
      if (ctx.grad_inputs.at(i).defined()) std::memset(ctx.grad_inputs[i].raw(), 0, ctx.grad_inputs[i].nbytes());
  }

 private:
  CiouOptions options_;
};

}  // namespace

Shape CiouLossOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 3, "ciou_loss takes 3 inputs (pred [B, 4, A], target [B, 4, A], weight [B, A]), got {}",
               in.size());
  VISION_CHECK(in[0].rank() == 3 && in[0][1] == 4 && in[1].rank() == 3 && in[1][1] == 4,
               "ciou_loss: pred and target must be [B, 4, A] box tensors ({} planes), got {} and {}",
               box_format_name(options_.format), in[0].str(), in[1].str());
  VISION_CHECK(in[2].rank() == 2, "ciou_loss: weight must be a [B, A] tensor (0 where an anchor is not a positive), "
                                  "got {}",
               in[2].str());
  const Shape boxes = ops::merge_shapes(in[0], in[1], "ciou_loss: pred and target shapes");
  const int64_t b = ops::merge_dim(boxes[0], in[2][0], "ciou_loss: batch of the boxes and the weight");
  const int64_t a = ops::merge_dim(boxes[2], in[2][1], "ciou_loss: anchors of the boxes and the weight");
  return Shape{b, a};
}

std::unique_ptr<graph::RuntimeOp> CiouLossOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<CiouLossCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_ciou_loss_cuda(std::move(twin), options_)), options_);
}

graph::SymTensor ciou_loss(graph::SymTensor pred, graph::SymTensor target, graph::SymTensor weight,
                           CiouOptions options, const std::string& name) {
  VISION_CHECK(pred.valid() && target.valid() && weight.valid(),
               "ciou_loss: pred, target and weight must be recorded tensors");
  return ops::record<CiouLossOp>({pred, target, weight}, name, options);
}

}  // namespace vision::models::yolo::kernels::loss
