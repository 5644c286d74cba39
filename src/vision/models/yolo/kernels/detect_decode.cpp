#include "vision/models/yolo/kernels/detect_decode.h"

#include <cstring>
#include <vector>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/models/yolo/kernels/detect_decode_math.cuh"
#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/detect_decode_cuda.h"
#endif

namespace vision::models::yolo::kernels {

using core::DType;
using core::Shape;

std::string_view decode_mode_name(DecodeMode mode) {
  switch (mode) {
    case DecodeMode::pixels: return "pixels";
    case DecodeMode::grid: return "grid";
    case DecodeMode::cxcywh: return "cxcywh";
  }
  fail("detect_decode: unknown mode {}", static_cast<int>(mode));
}

namespace {

void check_image_size(int64_t h, int64_t w) {
  VISION_CHECK(h > 0 && w > 0 && h % 32 == 0 && w % 32 == 0,
               "detect_decode: the input size {}×{} (H×W) must be a positive multiple of 32 in both dimensions (the "
               "P5 level has stride 32); resize or pad the image",
               h, w);
}

// [B, 4, A] f32 host tensors of one shape.
void check_boxes_tensor(const Tensor& t, const char* what, const Shape& shape) {
  VISION_CHECK(t.defined() && t.dtype() == DType::f32 && t.device() == core::Device::cpu && t.shape() == shape &&
                   shape.rank() == 3 && shape[1] == 4,
               "detect_decode (CPU): {} must be an f32 host tensor [B, 4, A] of shape {}, got {}", what, shape.str(),
               t.defined() ? t.str() : std::string("an undefined tensor"));
}

}  // namespace

int64_t detect_anchor_count(int64_t image_h, int64_t image_w) {
  check_image_size(image_h, image_w);
  int64_t n = 0;
  for (int64_t s : kDetectStrides) n += (image_h / s) * (image_w / s);
  return n;
}

std::vector<float> detect_anchor_grid(int64_t image_h, int64_t image_w) {
  const auto n = static_cast<size_t>(detect_anchor_count(image_h, image_w));
  std::vector<float> g(3 * n);
  size_t a = 0;
  for (int64_t s : kDetectStrides)
    for (int64_t y = 0; y < image_h / s; ++y)
      for (int64_t x = 0; x < image_w / s; ++x, ++a) {
        g[a] = static_cast<float>(x) + 0.5f;
        g[n + a] = static_cast<float>(y) + 0.5f;
        g[2 * n + a] = static_cast<float>(s);
      }
  return g;
}

std::array<int64_t, 2> detect_image_size(const Shape& p3, const Shape& p4, const Shape& p5) {
  const Shape* levels[3] = {&p3, &p4, &p5};
  for (const Shape* l : levels)
    VISION_CHECK(l->rank() == 4, "detect_decode: the level feature maps must be [B, C, h, w] tensors, got {}",
                 l->str());
  std::array<int64_t, 2> size{};
  for (size_t d = 0; d < 2; ++d) {
    const int64_t h3 = p3[2 + d];
    bool any = false;
    for (const Shape* l : levels) any = any || (*l)[2 + d] == Shape::kAny;
    if (any) {
      size[d] = Shape::kAny;
      continue;
    }
    size[d] = h3 * kDetectStrides[0];
    for (size_t i = 0; i < 3; ++i)
      VISION_CHECK(size[d] % kDetectStrides[i] == 0 && (*levels[i])[2 + d] * kDetectStrides[i] == size[d],
                   "detect_decode: the levels P3 {}, P4 {}, P5 {} are not the stride-8/16/32 maps of one input (P3's "
                   "{} of {} means an input {} of {}, which P{} does not match; the input size must be a "
                   "multiple of 32)",
                   p3.str(), p4.str(), p5.str(), d == 0 ? "height" : "width", h3, d == 0 ? "height" : "width",
                   size[d], i + 3);
  }
  if (size[0] != Shape::kAny && size[1] != Shape::kAny) check_image_size(size[0], size[1]);
  return size;
}

void detect_decode_cpu(const Tensor& ltrb, const Tensor& anchors, DecodeMode mode, const Tensor& boxes) {
  check_boxes_tensor(ltrb, "ltrb", ltrb.shape());
  check_boxes_tensor(boxes, "boxes", ltrb.shape());
  const int64_t batch = ltrb.dim(0), n = ltrb.dim(2);
  VISION_CHECK(anchors.defined() && anchors.dtype() == DType::f32 && anchors.shape() == Shape({3, n}),
               "detect_decode (CPU): the anchor grid must be f32 [3, {}] (as many anchors as ltrb {}), got {}", n,
               ltrb.shape().str(), anchors.defined() ? anchors.str() : std::string("an undefined tensor"));
  const float* in = ltrb.data<float>();
  const float* g = anchors.data<float>();
  float* out = boxes.data<float>();
  cpu::parallel_for(batch * n, [&](int64_t i) {
    const int64_t b = i / n, a = i % n;
    const float* l = in + b * 4 * n + a;
    float* o = out + b * 4 * n + a;
    const float s = mode == DecodeMode::grid ? 1.0f : g[2 * n + a];
    float v[4];
    decode_math::decode_box(g[a], g[n + a], s, l[0], l[n], l[2 * n], l[3 * n], mode == DecodeMode::cxcywh, v);
    for (int c = 0; c < 4; ++c) o[c * n] = v[c];
  });
}

void detect_decode_backward_cpu(const Tensor& grad_boxes, const Tensor& grad_ltrb) {
  check_boxes_tensor(grad_boxes, "grad_boxes", grad_boxes.shape());
  check_boxes_tensor(grad_ltrb, "grad_ltrb", grad_boxes.shape());
  const int64_t n = grad_boxes.dim(2);
  const float* g = grad_boxes.data<float>();
  float* d = grad_ltrb.data<float>();
  cpu::parallel_for(grad_boxes.numel(), [&](int64_t i) { d[i] = decode_math::backward_ltrb(g[i], i, n); });
}

// ---------------------------------------------------------------------------------------------------------------
// Graph op

namespace {

class DetectDecodeCpuRuntime final : public graph::RuntimeOp {
 public:
  explicit DetectDecodeCpuRuntime(DecodeMode mode) : mode_(mode) {}
  std::string name() const override { return "yolo.detect_decode"; }
  int n_activation_inputs() const override { return 4; }
  // f32; ltrb is rank 3 and the level maps are read for their shapes only, so any layout will do.
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  bool reads_input(size_t i) const override { return i == 0; }

  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"anchors", Shape{3, in.at(0)[2]}, DType::f32, graph::StateKind::constant}};
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape&,
                                         uint64_t) const override {
    VISION_CHECK(i == 0, "detect_decode has one state tensor (anchors), asked for {}", i);
    const auto size = detect_image_size(in.at(1), in.at(2), in.at(3));
    return graph::bytes_of(detect_anchor_grid(size[0], size[1]));
  }

  void forward(graph::ForwardCtx& ctx) override {
    detect_decode_cpu(ctx.inputs.at(0), ctx.params.at(0), mode_, ctx.output);
  }

  bool has_backward() const override { return mode_ == DecodeMode::grid; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(mode_ == DecodeMode::grid, "detect_decode has a backward only in grid mode, not in {} mode",
                 decode_mode_name(mode_));
    if (ctx.grad_inputs.at(0).defined()) detect_decode_backward_cpu(ctx.grad_output, ctx.grad_inputs[0]);
    for (size_t i = 1; i < 4; ++i)  // the level maps: only their shapes are used
      if (ctx.grad_inputs.at(i).defined()) std::memset(ctx.grad_inputs[i].raw(), 0, ctx.grad_inputs[i].nbytes());
  }

 private:
  DecodeMode mode_;
};

}  // namespace

Shape DetectDecodeOp::infer_output_shape(const std::vector<Shape>& in) const {
  VISION_CHECK(in.size() == 4, "detect_decode takes 4 inputs (ltrb [B, 4, A] and the level maps P3, P4, P5), got {}",
               in.size());
  const Shape& ltrb = in[0];
  VISION_CHECK(ltrb.rank() == 3 && ltrb[1] == 4,
               "detect_decode: ltrb must be a [B, 4, A] tensor (planes l, t, r, b), got {}", ltrb.str());
  const auto size = detect_image_size(in[1], in[2], in[3]);
  if (size[0] != Shape::kAny && size[1] != Shape::kAny && ltrb[2] != Shape::kAny) {
    const int64_t n = detect_anchor_count(size[0], size[1]);
    VISION_CHECK(ltrb[2] == n,
                 "detect_decode: ltrb {} has {} anchors, but a {}×{} input has {} (P3 {}, P4 {}, P5 {}); concatenate "
                 "the three levels' LTRB maps, flattened, in the order P3, P4, P5",
                 ltrb.str(), ltrb[2], size[0], size[1], n, in[1].str(), in[2].str(), in[3].str());
  }
  for (size_t i = 1; i < 4; ++i) ops::merge_dim(ltrb[0], in[i][0], "detect_decode: batch of ltrb and the level maps");
  return ltrb;
}

std::unique_ptr<graph::RuntimeOp> DetectDecodeOp::lower(graph::Backend backend, graph::Mode) const {
  return ops::lower_cpu_or_cuda<DetectDecodeCpuRuntime>(
      *this, backend, VISION_CUDA_FACTORY(make_detect_decode_cuda(std::move(twin), mode_)), mode_);
}

graph::SymTensor detect_decode(graph::SymTensor ltrb, graph::SymTensor p3, graph::SymTensor p4, graph::SymTensor p5,
                               DecodeMode mode, const std::string& name) {
  VISION_CHECK(ltrb.valid() && p3.valid() && p4.valid() && p5.valid(),
               "detect_decode: ltrb and the level maps must be recorded tensors");
  return ops::record<DetectDecodeOp>({ltrb, p3, p4, p5}, name, mode);
}

}  // namespace vision::models::yolo::kernels
