#include "vision/models/yolo/kernels/loss/cls.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/loss/cls_math.cuh"
#include "vision/models/yolo/kernels/loss/host_util.h"
#include "vision/cpu/parallel.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/loss/cls_cuda.h"
#endif

namespace vision::models::yolo::kernels::loss {

using core::DType;
using core::Shape;

void check_host_f32(const Tensor& t, const char* op, const char* what, const Shape& shape) {
  VISION_CHECK(t.defined() && t.dtype() == DType::f32 && t.device() == core::Device::cpu && t.shape() == shape,
               "{} (CPU): {} must be an f32 host tensor of shape {}, got {}", op, what, shape.str(),
               t.defined() ? t.str() : std::string("an undefined tensor"));
}

namespace {

void check_logits(const Tensor& logits, const char* op) {
  VISION_CHECK(logits.defined() && logits.rank() == 3,
               "{}: the logits must be a [B, nc, A] tensor (the detect head's channel-major layout), got {}", op,
               logits.defined() ? logits.str() : std::string("an undefined tensor"));
}

void check_distances(const Tensor& pred, const char* op) {
  VISION_CHECK(pred.defined() && pred.rank() == 3 && pred.dim(1) == 4,
               "{}: the predicted distances must be a [B, 4, A] tensor (planes l, t, r, b), got {}", op,
               pred.defined() ? pred.str() : std::string("an undefined tensor"));
}


}  // namespace

LossSums bce_cls_forward_cpu(const Tensor& logits, const Tensor& targets) {
  check_logits(logits, "bce_cls_loss");
  check_host_f32(logits, "bce_cls_loss", "logits", logits.shape());
  check_host_f32(targets, "bce_cls_loss", "targets", logits.shape());
  const float* x = logits.data<float>();
  const float* t = targets.data<float>();
  const int64_t n = logits.numel();
  LossSums s;
  s.loss = cpu::parallel_sum(n, [&](int64_t i) { return cls_math::bce_with_logits<double>(x[i], t[i]); });
  s.norm = cpu::parallel_sum(n, [&](int64_t i) { return static_cast<double>(t[i]); });
  return s;
}

void bce_cls_backward_cpu(const Tensor& logits, const Tensor& targets, double scale, const Tensor& grad_logits) {
  check_logits(logits, "bce_cls_loss");
  check_host_f32(logits, "bce_cls_loss", "logits", logits.shape());
  check_host_f32(targets, "bce_cls_loss", "targets", logits.shape());
  check_host_f32(grad_logits, "bce_cls_loss", "grad_logits", logits.shape());
  const float* x = logits.data<float>();
  const float* t = targets.data<float>();
  float* d = grad_logits.data<float>();
  cpu::parallel_for(logits.numel(), [&](int64_t i) {
    d[i] = static_cast<float>((cls_math::stable_sigmoid<double>(x[i]) - t[i]) * scale);
  });
}

namespace {

struct L1Args {
  const float *p, *t, *w, *stride;
  int64_t n;
  double inv_w, inv_h;
};

L1Args l1_args(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& anchors, int64_t image_h,
               int64_t image_w) {
  check_distances(pred, "l1_distance_loss");
  check_host_f32(pred, "l1_distance_loss", "pred", pred.shape());
  check_host_f32(target, "l1_distance_loss", "target", pred.shape());
  const int64_t batch = pred.dim(0), n = pred.dim(2);
  check_host_f32(weight, "l1_distance_loss", "weight", Shape{batch, n});
  check_host_f32(anchors, "l1_distance_loss", "anchors", Shape{3, n});
  VISION_CHECK(image_h > 0 && image_w > 0, "l1_distance_loss: the input size {}×{} must be positive", image_h,
               image_w);
  return {pred.data<float>(), target.data<float>(), weight.data<float>(), anchors.data<float>() + 2 * n, n,
          1.0 / static_cast<double>(image_w), 1.0 / static_cast<double>(image_h)};
}

}  // namespace

LossSums l1_distance_forward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight,
                                 const Tensor& anchors, int64_t image_h, int64_t image_w) {
  const L1Args a = l1_args(pred, target, weight, anchors, image_h, image_w);
  const int64_t rows = pred.dim(0) * a.n;
  LossSums s;
  s.loss = cpu::parallel_sum(rows, [&](int64_t i) {
    const int64_t b = i / a.n, k = i % a.n;
    const float* p = a.p + b * 4 * a.n + k;
    const float* t = a.t + b * 4 * a.n + k;
    const double dx = std::abs(double(p[0]) - t[0]) + std::abs(double(p[2 * a.n]) - t[2 * a.n]);
    const double dy = std::abs(double(p[a.n]) - t[a.n]) + std::abs(double(p[3 * a.n]) - t[3 * a.n]);
    return cls_math::l1_term<double>(a.w[i], a.stride[k], a.inv_w, a.inv_h, dx, dy);
  });
  s.norm = cpu::parallel_sum(rows, [&](int64_t i) { return static_cast<double>(a.w[i]); });
  return s;
}

void l1_distance_backward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& anchors,
                              int64_t image_h, int64_t image_w, double scale, const Tensor& grad_pred) {
  const L1Args a = l1_args(pred, target, weight, anchors, image_h, image_w);
  check_host_f32(grad_pred, "l1_distance_loss", "grad_pred", pred.shape());
  float* d = grad_pred.data<float>();
  cpu::parallel_for(pred.numel(), [&](int64_t i) {
    const int64_t k = i % a.n, c = (i / a.n) % 4, b = i / (4 * a.n);
    const double s = a.stride[k] * (c % 2 == 0 ? a.inv_w : a.inv_h);
    d[i] = static_cast<float>(cls_math::l1_gradient<double>(scale, a.w[b * a.n + k], s, double(a.p[i]) - a.t[i]));
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Graph ops

std::vector<graph::TensorSpec> normalizer_saved_specs(graph::Mode mode) {
  if (mode != graph::Mode::train) return {};
  return {{Shape{1}, DType::f32}};  // N
}

void write_normalized_loss(graph::ForwardCtx& ctx, const LossSums& sums) {
  const double n = loss_normalizer(sums.norm);
  ctx.output.data<float>()[0] = static_cast<float>(sums.loss / n);
  if (!ctx.saved.empty()) ctx.saved[0].data<float>()[0] = static_cast<float>(n);
}

double normalized_loss_scale(const graph::BackwardCtx& ctx, const char* op) {
  VISION_CHECK(!ctx.saved.empty(), "{}: backward needs a plan built for training", op);
  return double(ctx.grad_output.data<float>()[0]) / ctx.saved[0].data<float>()[0];
}

namespace {

class BceClsCpuRuntime final : public graph::RuntimeOp {
 public:
  explicit BceClsCpuRuntime(graph::Mode mode) : mode_(mode) {}
  std::string name() const override { return "yolo.bce_cls_loss"; }
  int n_activation_inputs() const override { return 2; }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 0 ? std::nullopt : std::optional<DType>(DType::f32);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>&, const Shape&) const override {
    return normalizer_saved_specs(mode_);
  }
  void forward(graph::ForwardCtx& ctx) override {
    write_normalized_loss(ctx, bce_cls_forward_cpu(ctx.inputs.at(0), ctx.inputs.at(1)));
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const double scale = normalized_loss_scale(ctx, "bce_cls_loss");
    if (ctx.grad_inputs.at(0).defined())
      bce_cls_backward_cpu(ctx.inputs.at(0), ctx.inputs.at(1), scale, ctx.grad_inputs[0]);
    zero_if_defined(ctx.grad_inputs.at(1));  // the targets are constants to the loss
  }

 private:
  graph::Mode mode_;
};

class L1DistanceCpuRuntime final : public graph::RuntimeOp {
 public:
  explicit L1DistanceCpuRuntime(graph::Mode mode) : mode_(mode) {}
  std::string name() const override { return "yolo.l1_distance_loss"; }
  int n_activation_inputs() const override { return 6; }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  bool reads_input(size_t i) const override { return i < 3; }
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 0 ? std::nullopt : std::optional<DType>(DType::f32);
  }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"anchors", Shape{3, in.at(0)[2]}, DType::f32, graph::StateKind::constant}};
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape&,
                                         uint64_t) const override {
    VISION_CHECK(i == 0, "l1_distance_loss has one state tensor (anchors), asked for {}", i);
    const auto size = detect_image_size(in.at(3), in.at(4), in.at(5));
    return graph::bytes_of(detect_anchor_grid(size[0], size[1]));
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>&, const Shape&) const override {
    return normalizer_saved_specs(mode_);
  }
  void forward(graph::ForwardCtx& ctx) override {
    const auto size = image_size(ctx.inputs);
    write_normalized_loss(ctx, l1_distance_forward_cpu(ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2),
                                                       ctx.params.at(0), size[0], size[1]));
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const double scale = normalized_loss_scale(ctx, "l1_distance_loss");
    if (ctx.grad_inputs.at(0).defined()) {
      const auto size = image_size(ctx.inputs);
      l1_distance_backward_cpu(ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2), ctx.params.at(0), size[0],
                               size[1], scale, ctx.grad_inputs[0]);
    }
    for (size_t i = 1; i < 6; ++i) zero_if_defined(ctx.grad_inputs.at(i));  // constants to the loss
  }

 private:
  static std::array<int64_t, 2> image_size(const std::vector<Tensor>& in) {
    return detect_image_size(in.at(3).shape(), in.at(4).shape(), in.at(5).shape());
  }
  graph::Mode mode_;
};

}  // namespace

Shape BceClsLossOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 2, "bce_cls_loss takes 2 inputs (logits and target scores, [B, nc, A] each), got {}",
               in.size());
  VISION_CHECK(in[0].rank() == 3,
               "bce_cls_loss: the logits must be a [B, nc, A] tensor (the detect head's channel-major layout), got {}",
               in[0].str());
  VISION_CHECK(in[1].rank() == 3, "bce_cls_loss: the target scores must be [B, nc, A] like the logits {}, got {}",
               in[0].str(), in[1].str());
  (void)ops::merge_shapes(in[0], in[1], "bce_cls_loss: logits and target scores");
  return Shape{};
}

Shape L1DistanceLossOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 6,
               "l1_distance_loss takes 6 inputs (pred [B, 4, A], target [B, 4, A], weight [B, A] and the level maps "
               "P3, P4, P5), got {}",
               in.size());
  const Shape& p = in[0];
  VISION_CHECK(p.rank() == 3 && p[1] == 4,
               "l1_distance_loss: pred must be a [B, 4, A] tensor (planes l, t, r, b), got {}", p.str());
  VISION_CHECK(in[1].rank() == 3, "l1_distance_loss: target must be [B, 4, A] like pred {}, got {}", p.str(),
               in[1].str());
  const Shape merged = ops::merge_shapes(p, in[1], "l1_distance_loss: pred and target");
  VISION_CHECK(in[2].rank() == 2, "l1_distance_loss: weight must be a [B, A] tensor, got {}", in[2].str());
  (void)ops::merge_shapes(Shape{merged[0], merged[2]}, in[2], "l1_distance_loss: weight [B, A] and pred [B, 4, A]");
  const auto size = detect_image_size(in[3], in[4], in[5]);
  if (size[0] != Shape::kAny && size[1] != Shape::kAny && merged[2] != Shape::kAny) {
    const int64_t n = detect_anchor_count(size[0], size[1]);
    VISION_CHECK(merged[2] == n, "l1_distance_loss: pred {} has {} anchors, but a {}×{} input has {} (P3 {}, P4 {}, P5 {})",
                 p.str(), merged[2], size[0], size[1], n, in[3].str(), in[4].str(), in[5].str());
  }
  for (size_t i = 3; i < 6; ++i) ops::merge_dim(merged[0], in[i][0], "l1_distance_loss: batch of pred and the level maps");
  return Shape{};
}

std::unique_ptr<graph::RuntimeOp> BceClsLossOp::lower(graph::Backend backend, graph::Mode mode) const {
  return ops::lower_cpu_or_cuda<BceClsCpuRuntime>(*this, backend,
                                                  VISION_CUDA_FACTORY(make_bce_cls_loss_cuda(std::move(twin), mode)),
                                                  mode);
}

std::unique_ptr<graph::RuntimeOp> L1DistanceLossOp::lower(graph::Backend backend, graph::Mode mode) const {
  return ops::lower_cpu_or_cuda<L1DistanceCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_l1_distance_loss_cuda(std::move(twin), mode)), mode);
}

graph::SymTensor bce_cls_loss(graph::SymTensor logits, graph::SymTensor targets, const std::string& name) {
  VISION_CHECK(logits.valid() && targets.valid(), "bce_cls_loss: logits and targets must be recorded tensors");
  return ops::record<BceClsLossOp>({logits, targets}, name);
}

graph::SymTensor l1_distance_loss(graph::SymTensor pred, graph::SymTensor target, graph::SymTensor weight,
                                  graph::SymTensor p3, graph::SymTensor p4, graph::SymTensor p5,
                                  const std::string& name) {
  VISION_CHECK(pred.valid() && target.valid() && weight.valid() && p3.valid() && p4.valid() && p5.valid(),
               "l1_distance_loss: every input must be a recorded tensor");
  return ops::record<L1DistanceLossOp>({pred, target, weight, p3, p4, p5}, name);
}

}  // namespace vision::models::yolo::kernels::loss
