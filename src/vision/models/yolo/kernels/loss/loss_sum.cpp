#include "vision/models/yolo/kernels/loss/loss_sum.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/loss/host_util.h"
#include "vision/cpu/parallel.h"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/loss/loss_sum_cuda.h"
#endif

namespace vision::models::yolo::kernels::loss {

using core::DType;
using core::Shape;

namespace {

float scalar(const Tensor& t) { return t.data<float>()[0]; }

}  // namespace

void target_score_sum_cpu(const Tensor& scores, const Tensor& weight) {
  VISION_CHECK(scores.defined() && scores.rank() == 3,
               "target_score_sum: the target scores must be a [B, nc, A] tensor, got {}", tensor_str(scores));
  const int64_t batch = scores.dim(0), nc = scores.dim(1), n = scores.dim(2);
  check_host_f32(scores, "target_score_sum", "the target scores", scores.shape());
  check_host_f32(weight, "target_score_sum", "the weight", Shape{batch, n});
  const float* s = scores.data<float>();
  float* w = weight.data<float>();
  // Row by row over runs of anchors (contiguous reads); each element still adds the classes in order, as the GPU does.
  constexpr int64_t kRun = 1024;
  const int64_t runs = (n + kRun - 1) / kRun;
  cpu::parallel_for(
      batch * runs,
      [&](int64_t r) {
        const int64_t b = r / runs, begin = (r % runs) * kRun, end = std::min(n, begin + kRun);
        float* out = w + b * n;
        std::fill(out + begin, out + end, 0.0f);
        for (int64_t c = 0; c < nc; ++c) {
          const float* row = s + (b * nc + c) * n;
          for (int64_t a = begin; a < end; ++a) out[a] += row[a];
        }
      },
      scores.numel());
}

LossSums normalized_sum_cpu(const Tensor& x, const Tensor& w) {
  VISION_CHECK(x.defined(), "normalized_sum: x is an undefined tensor");
  check_host_f32(x, "normalized_sum", "x", x.shape());
  check_host_f32(w, "normalized_sum", "w", x.shape());
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  return {cpu::parallel_sum(x.numel(), [&](int64_t i) { return static_cast<double>(xp[i]); }),
          cpu::parallel_sum(x.numel(), [&](int64_t i) { return static_cast<double>(wp[i]); })};
}

DetectionLossValues detection_loss_sum(float box, float cls, float l1, int64_t batch, const LossGains& g) {
  const double b = double(g.box) * box, c = double(g.cls) * cls, l = double(g.l1) * l1;
  return {static_cast<float>(static_cast<double>(batch) * (b + c + l)),
          {static_cast<float>(b), static_cast<float>(c), static_cast<float>(l)}};
}

// ---------------------------------------------------------------------------------------------------------------
// CPU RuntimeOps

namespace {

// f32 in any layout (no rank-4 value is read).
class F32CpuRuntime : public graph::RuntimeOp {
 public:
  F32CpuRuntime(std::string name, int n_inputs) : name_(std::move(name)), n_inputs_(n_inputs) {}
  std::string name() const override { return name_; }
  int n_activation_inputs() const override { return n_inputs_; }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }

 private:
  std::string name_;
  int n_inputs_;
};

class TargetScoreSumCpuRuntime final : public F32CpuRuntime {
 public:
  TargetScoreSumCpuRuntime() : F32CpuRuntime("yolo.target_score_sum", 1) {}
  void forward(graph::ForwardCtx& ctx) override { target_score_sum_cpu(ctx.inputs.at(0), ctx.output); }
};

class NormalizedSumCpuRuntime final : public F32CpuRuntime {
 public:
  explicit NormalizedSumCpuRuntime(graph::Mode mode) : F32CpuRuntime("yolo.normalized_sum", 2), mode_(mode) {}
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>&, const Shape&) const override {
    return normalizer_saved_specs(mode_);
  }
  void forward(graph::ForwardCtx& ctx) override {
    write_normalized_loss(ctx, normalized_sum_cpu(ctx.inputs.at(0), ctx.inputs.at(1)));
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const auto g = static_cast<float>(normalized_loss_scale(ctx, "normalized_sum"));
    if (const Tensor& d = ctx.grad_inputs.at(0); d.defined()) {
      check_host_f32(d, "normalized_sum", "grad_x", ctx.inputs.at(0).shape());
      std::fill_n(d.data<float>(), d.numel(), g);
    }
    zero_if_defined(ctx.grad_inputs.at(1));  // w is a constant to the sum
  }

 private:
  graph::Mode mode_;
};

class DetectionLossCpuRuntime final : public F32CpuRuntime {
 public:
  explicit DetectionLossCpuRuntime(LossGains gains) : F32CpuRuntime("yolo.detection_loss", 4), gains_(gains) {}
  bool reads_input(size_t i) const override { return i < 3; }
  void forward(graph::ForwardCtx& ctx) override {
    const DetectionLossValues v = detection_loss_sum(scalar(ctx.inputs.at(0)), scalar(ctx.inputs.at(1)),
                                                     scalar(ctx.inputs.at(2)), ctx.inputs.at(3).dim(0), gains_);
    ctx.outputs.at(0).data<float>()[0] = v.loss;
    std::memcpy(ctx.outputs.at(1).raw(), v.items.data(), sizeof(v.items));
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const double batch = static_cast<double>(ctx.inputs.at(3).dim(0));
    const double d_loss = ctx.grad_outputs.at(0).defined() ? scalar(ctx.grad_outputs[0]) : 0.0;
    const Tensor& d_items = ctx.grad_outputs.at(1);
    const float gains[3] = {gains_.box, gains_.cls, gains_.l1};
    for (size_t k = 0; k < 3; ++k)
      if (const Tensor& d = ctx.grad_inputs.at(k); d.defined()) {
        const double item = d_items.defined() ? d_items.data<float>()[k] : 0.0;
        d.data<float>()[0] = static_cast<float>(gains[k] * (batch * d_loss + item));
      }
    zero_if_defined(ctx.grad_inputs.at(3));
  }

 private:
  LossGains gains_;
};

class E2ELossSumCpuRuntime final : public F32CpuRuntime {
 public:
  E2ELossSumCpuRuntime() : F32CpuRuntime("yolo.e2e_loss_sum", 3) {}
  void forward(graph::ForwardCtx& ctx) override {
    const float* w = ctx.inputs.at(2).data<float>();
    ctx.output.data<float>()[0] = static_cast<float>(double(w[0]) * scalar(ctx.inputs.at(0)) +
                                                     double(w[1]) * scalar(ctx.inputs.at(1)));
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const double dy = scalar(ctx.grad_output);
    const float* w = ctx.inputs.at(2).data<float>();
    for (size_t k = 0; k < 2; ++k)
      if (const Tensor& d = ctx.grad_inputs.at(k); d.defined()) d.data<float>()[0] = static_cast<float>(w[k] * dy);
    if (const Tensor& dw = ctx.grad_inputs.at(2); dw.defined())
      for (size_t k = 0; k < 2; ++k) dw.data<float>()[k] = static_cast<float>(scalar(ctx.inputs[k]) * dy);
  }
};

void check_scalar(const Shape& s, const char* op, const char* what) {
  VISION_CHECK(s.rank() == 0, "{}: {} must be a scalar (shape []), got {}", op, what, s.str());
}

void check_f32(const std::vector<DType>& in, size_t count, const char* op) {
  VISION_CHECK(in.size() >= count, "{}: {} inputs expected, got {}", op, count, in.size());
  for (size_t i = 0; i < count; ++i)
    VISION_CHECK(in[i] == DType::f32, "{}: input {} must be f32 (the loss is computed in f32), got {}", op, i,
                 core::dtype_name(in[i]));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Graph ops

Shape TargetScoreSumOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 1 && in[0].rank() == 3,
               "target_score_sum takes one input, the target scores [B, nc, A]; got {} input(s){}", in.size(),
               in.empty() ? std::string() : ", the first " + in[0].str());
  return Shape{in[0][0], in[0][2]};
}

DType TargetScoreSumOp::infer_output_dtype(const std::vector<DType>& in) const {
  check_f32(in, 1, "target_score_sum");
  return DType::f32;
}

Shape NormalizedSumOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 2, "normalized_sum takes 2 inputs (x and the weights w of its normaliser), got {}",
               in.size());
  (void)ops::merge_shapes(in[0], in[1], "normalized_sum: x and w");
  return Shape{};
}

DType NormalizedSumOp::infer_output_dtype(const std::vector<DType>& in) const {
  check_f32(in, 2, "normalized_sum");
  return DType::f32;
}

std::vector<Shape> DetectionLossOp::infer_output_shapes(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 4,
               "detection_loss takes 4 inputs (box, cls, l1 as scalars and a [B, ...] tensor giving the batch size), "
               "got {}",
               in.size());
  check_scalar(in[0], "detection_loss", "the box term");
  check_scalar(in[1], "detection_loss", "the cls term");
  check_scalar(in[2], "detection_loss", "the l1 term");
  VISION_CHECK(in[3].rank() >= 1, "detection_loss: input 3 gives the batch size as its first dimension; got {}",
               in[3].str());
  return {Shape{}, Shape{3}};
}

std::vector<DType> DetectionLossOp::infer_output_dtypes(const std::vector<DType>& in) const {
  check_f32(in, 3, "detection_loss");
  return {DType::f32, DType::f32};
}

Shape E2ELossSumOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 3, "e2e_loss_sum takes 3 inputs (loss_o2m, loss_o2o and the weights (o2m, o2o)), got {}",
               in.size());
  check_scalar(in[0], "e2e_loss_sum", "the one-to-many loss");
  check_scalar(in[1], "e2e_loss_sum", "the one-to-one loss");
  VISION_CHECK(in[2].rank() == 1 && (in[2][0] == 2 || in[2][0] == Shape::kAny),
               "e2e_loss_sum: the weights must be a [2] tensor (o2m, o2o), got {}", in[2].str());
  return Shape{};
}

DType E2ELossSumOp::infer_output_dtype(const std::vector<DType>& in) const {
  check_f32(in, 3, "e2e_loss_sum");
  return DType::f32;
}

std::unique_ptr<graph::RuntimeOp> TargetScoreSumOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<TargetScoreSumCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_target_score_sum_cuda(std::move(twin))));
}

std::unique_ptr<graph::RuntimeOp> NormalizedSumOp::lower(graph::Backend backend, graph::Mode mode) const {
  return ops::lower_cpu_or_cuda<NormalizedSumCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_normalized_sum_cuda(std::move(twin))), mode);
}

std::unique_ptr<graph::RuntimeOp> DetectionLossOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<DetectionLossCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_detection_loss_cuda(std::move(twin), gains_)), gains_);
}

std::unique_ptr<graph::RuntimeOp> E2ELossSumOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<E2ELossSumCpuRuntime>(*this, backend,
                                                      VISION_CUDA_FACTORY(make_e2e_loss_sum_cuda(std::move(twin))));
}

graph::SymTensor target_score_sum(graph::SymTensor scores, const std::string& name) {
  VISION_CHECK(scores.valid(), "target_score_sum: the target scores must be a recorded tensor");
  return ops::record<TargetScoreSumOp>({scores}, name);
}

graph::SymTensor normalized_sum(graph::SymTensor x, graph::SymTensor w, const std::string& name) {
  VISION_CHECK(x.valid() && w.valid(), "normalized_sum: x and w must be recorded tensors");
  return ops::record<NormalizedSumOp>({x, w}, name);
}

DetectionLossTensors detection_loss(graph::SymTensor box, graph::SymTensor cls, graph::SymTensor l1,
                                    graph::SymTensor batch_ref, const LossGains& gains, const std::string& name) {
  VISION_CHECK(box.valid() && cls.valid() && l1.valid() && batch_ref.valid(),
               "detection_loss: every input must be a recorded tensor");
  const auto out = box.graph()->apply_multi(std::make_shared<DetectionLossOp>(gains), {box, cls, l1, batch_ref}, name);
  return {out.at(0), out.at(1)};
}

graph::SymTensor e2e_loss_sum(graph::SymTensor loss_o2m, graph::SymTensor loss_o2o, graph::SymTensor weights,
                              const std::string& name) {
  VISION_CHECK(loss_o2m.valid() && loss_o2o.valid() && weights.valid(),
               "e2e_loss_sum: every input must be a recorded tensor");
  return ops::record<E2ELossSumOp>({loss_o2m, loss_o2o, weights}, name);
}

}  // namespace vision::models::yolo::kernels::loss
