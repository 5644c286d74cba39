#include "vision/models/yolo/kernels/loss/ciou.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
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

// The per-box arithmetic, in f32, in the same order as the kernels of ciou.cuh.
constexpr float kFourOverPiSquared = 0.405284735f;  // 4/π²
constexpr float kHalfPi = 1.57079633f;

// atan(w/h), ±π/2 (0 for w = 0) where h is exactly 0.
float atan_ratio(float w, float h) { return h != 0.0f ? std::atan(w / h) : (w > 0 ? kHalfPi : w < 0 ? -kHalfPi : 0.0f); }
float ratio(float w, float h) {
  return h != 0.0f ? w / h : (w > 0 ? INFINITY : w < 0 ? -INFINITY : 0.0f);
}
// The share of d min(a, b) that goes to a (PyTorch: ½ at a tie), and of d max(a, b).
float min_share(float a, float b) { return a < b ? 1.0f : a == b ? 0.5f : 0.0f; }
float max_share(float a, float b) { return a > b ? 1.0f : a == b ? 0.5f : 0.0f; }

// Corners of a box stored as 4 planes `stride` apart.
void corners(const float* p, int64_t stride, BoxFormat format, float c[4]) {
  const float a = p[0], b = p[stride], x = p[2 * stride], y = p[3 * stride];
  if (format == BoxFormat::xywh) {
    const float hw = x * 0.5f, hh = y * 0.5f;
    c[0] = a - hw, c[1] = b - hh, c[2] = a + hw, c[3] = b + hh;
  } else {
    c[0] = a, c[1] = b, c[2] = x, c[3] = y;
  }
}

struct Geometry {
  float w1, h1, w2, h2, iw_raw, ih_raw, inter, uni, cw, ch, c2, dx, dy, rho2;
};

Geometry geometry(const float p[4], const float t[4]) {
  Geometry g;
  g.w1 = p[2] - p[0], g.h1 = p[3] - p[1] + kCiouEps;
  g.w2 = t[2] - t[0], g.h2 = t[3] - t[1] + kCiouEps;
  g.iw_raw = std::min(p[2], t[2]) - std::max(p[0], t[0]);
  g.ih_raw = std::min(p[3], t[3]) - std::max(p[1], t[1]);
  g.inter = std::max(g.iw_raw, 0.0f) * std::max(g.ih_raw, 0.0f);
  g.uni = g.w1 * g.h1 + g.w2 * g.h2 - g.inter + kCiouEps;
  g.cw = std::max(p[2], t[2]) - std::min(p[0], t[0]);
  g.ch = std::max(p[3], t[3]) - std::min(p[1], t[1]);
  g.c2 = g.cw * g.cw + g.ch * g.ch + kCiouEps;
  g.dx = t[0] + t[2] - p[0] - p[2];
  g.dy = t[1] + t[3] - p[1] - p[3];
  g.rho2 = (g.dx * g.dx + g.dy * g.dy) * 0.25f;
  return g;
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
      const Geometry g = geometry(p, t);
      out_iou = g.inter / g.uni;
      const float d = atan_ratio(g.w2, g.h2) - atan_ratio(g.w1, g.h1);
      out_v = kFourOverPiSquared * d * d;
      out_alpha = out_v / (out_v - out_iou + (1.0f + kCiouEps));
      const float ciou = out_iou - (g.rho2 / g.c2 + out_v * out_alpha);
      out_loss = (1.0f - ciou) * w;
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
    const Geometry g = geometry(p, t);
    const float s_iou = ip[i], s_v = vp[i], s_alpha = ap[i];
    const float gc = -dl[i] * w;  // ∂L/∂CIoU
    float g_iou = gc, g_v = -gc * s_alpha;
    if (full) {
      const float den = s_v - s_iou + (1.0f + kCiouEps);
      const float den2 = den * den;
      g_iou -= gc * (s_v * s_v / den2);
      g_v -= gc * (s_v * ((1.0f + kCiouEps) - s_iou) / den2);
    }
    const float g_rho2 = -gc / g.c2;
    const float g_c2 = gc * g.rho2 / (g.c2 * g.c2);
    const float u2 = g.uni * g.uni;
    const float g_inter = g_iou * (g.uni + g.inter) / u2;
    const float g_a1 = -g_iou * g.inter / u2;
    float g_w1 = g_a1 * g.h1, g_h1 = g_a1 * g.w1;
    // v = k·d², d = atan(w2/h2) − atan(w1/h1): |d| from the saved v, its sign from the ratios (atan is increasing).
    const float r1 = ratio(g.w1, g.h1), r2 = ratio(g.w2, g.h2);
    const float sign = r2 > r1 ? 1.0f : r2 < r1 ? -1.0f : 0.0f;
    const float d = sign * std::sqrt(s_v / kFourOverPiSquared);
    const float n1 = g.w1 * g.w1 + g.h1 * g.h1;
    if (n1 > 0.0f) {
      const float g_t1 = g_v * (-2.0f * kFourOverPiSquared * d);  // ∂/∂atan(w1/h1)
      g_w1 += g_t1 * g.h1 / n1;
      g_h1 -= g_t1 * g.w1 / n1;
    }
    const float g_iw = g.iw_raw >= 0.0f ? g_inter * std::max(g.ih_raw, 0.0f) : 0.0f;
    const float g_ih = g.ih_raw >= 0.0f ? g_inter * std::max(g.iw_raw, 0.0f) : 0.0f;
    const float g_cw = 2.0f * g.cw * g_c2, g_ch = 2.0f * g.ch * g_c2;
    const float g_cx = -0.5f * g.dx * g_rho2, g_cy = -0.5f * g.dy * g_rho2;  // ∂ρ²/∂x1 = ∂ρ²/∂x2 = −dx/2
    float gp[4];
    gp[0] = -g_iw * max_share(p[0], t[0]) - g_cw * min_share(p[0], t[0]) + g_cx - g_w1;
    gp[1] = -g_ih * max_share(p[1], t[1]) - g_ch * min_share(p[1], t[1]) + g_cy - g_h1;
    gp[2] = g_iw * min_share(p[2], t[2]) + g_cw * max_share(p[2], t[2]) + g_cx + g_w1;
    gp[3] = g_ih * min_share(p[3], t[3]) + g_ch * max_share(p[3], t[3]) + g_cy + g_h1;
    if (format == BoxFormat::xywh) {
      out[0] = gp[0] + gp[2];
      out[n] = gp[1] + gp[3];
      out[2 * n] = (gp[2] - gp[0]) * 0.5f;
      out[3 * n] = (gp[3] - gp[1]) * 0.5f;
    } else {
      for (int c = 0; c < 4; ++c) out[c * n] = gp[c];
    }
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
