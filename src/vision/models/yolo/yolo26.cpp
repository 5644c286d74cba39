#include "vision/models/yolo/yolo26.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"
#include "vision/models/yolo/blocks/modules.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

namespace vision::models::yolo {

namespace {

// YOLO26.md's table; parameters at nc = 80 with both heads (ultralytics' counts).
constexpr std::array<ScaleInfo, 5> kScales = {{
    {Scale::n, "n", 0.50, 0.25, 1024, 2'572'280},
    {Scale::s, "s", 0.50, 0.50, 1024, 10'009'784},
    {Scale::m, "m", 0.50, 1.00, 512, 21'896'248},
    {Scale::l, "l", 1.00, 1.00, 512, 26'299'704},
    {Scale::x, "x", 1.00, 1.50, 512, 58'993'368},
}};

}  // namespace

const ScaleInfo& scale_info(Scale scale) {
  for (const ScaleInfo& s : kScales)
    if (s.scale == scale) return s;
  fail("unknown YOLO26 scale {}", static_cast<int>(scale));
}

std::string_view scale_name(Scale scale) { return scale_info(scale).name; }

Scale parse_scale(std::string_view name) {
  std::string_view s = name;
  if (s.starts_with("yolo26")) s.remove_prefix(6);
  for (const ScaleInfo& info : kScales)
    if (s == info.name) return info.scale;
  fail("unknown YOLO26 scale '{}': the scales are n, s, m, l and x", name);
}

int64_t Yolo26Spec::channels(int64_t c) const {
  const ScaleInfo& s = scale_info(scale);
  const double scaled = static_cast<double>(std::min(c, s.max_channels)) * s.width;
  return static_cast<int64_t>(std::ceil(scaled / 8.0)) * 8;
}

int64_t Yolo26Spec::repeats(int64_t n) const {
  if (n <= 1) return n;
  // Python's round(): halves to even, as the default floating-point rounding mode does.
  return std::max<int64_t>(static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * scale_info(scale).depth)), 1);
}

void Yolo26Spec::validate() const {
  scale_info(scale);
  VISION_CHECK(nc >= 1 && nc <= kMaxClasses, "YOLO26: the number of classes must be at least 1 and at most {}, got {}",
               kMaxClasses, nc);
}

void check_image_size(int64_t height, int64_t width) {
  VISION_CHECK(height > 0 && width > 0 && height % kSizeMultiple == 0 && width % kSizeMultiple == 0,
               "YOLO26 takes images whose height and width are positive multiples of {}, got {}x{} (H x W): letterbox "
               "or pad them to such a size",
               kSizeMultiple, height, width);
  VISION_CHECK(height <= kMaxImageSize && width <= kMaxImageSize,
               "YOLO26 takes images of at most {} pixels a side, got {}x{} (H x W): a plan's activations grow with the "
               "area (tens of GB at that size); choose a smaller size",
               kMaxImageSize, height, width);
}

Yolo26Outputs record_yolo26(graph::SymTensor images, const Yolo26Spec& spec, Heads heads, bool detach_one2one) {
  using namespace blocks;
  spec.validate();
  VISION_CHECK(images.valid() && images.shape().rank() == 4 && images.dim(1) == 3,
               "YOLO26 takes RGB images [B, 3, H, W], got {}", images.valid() ? images.shape().str() : "nothing");
  graph::Graph& g = *images.graph();
  const ConvNorm norm = spec.norm;
  auto ch = [&](int64_t c) { return spec.channels(c); };
  auto rep = [&](int64_t n) { return spec.repeats(n); };
  const bool c3k = spec.scale == Scale::m || spec.scale == Scale::l || spec.scale == Scale::x;  // forced at m/l/x
  auto _ = g.scope("model");

  // Backbone.
  auto x = conv(images, {.c2 = ch(64), .k = 3, .s = 2}, norm, "0");
  x = conv(x, {.c2 = ch(128), .k = 3, .s = 2}, norm, "1");
  x = c3k2(x, {.c2 = ch(256), .n = rep(2), .c3k = c3k, .e = 0.25}, norm, "2");
  x = conv(x, {.c2 = ch(256), .k = 3, .s = 2}, norm, "3");
  const auto x4 = c3k2(x, {.c2 = ch(512), .n = rep(2), .c3k = c3k, .e = 0.25}, norm, "4");
  x = conv(x4, {.c2 = ch(512), .k = 3, .s = 2}, norm, "5");
  const auto x6 = c3k2(x, {.c2 = ch(512), .n = rep(2), .c3k = true}, norm, "6");
  x = conv(x6, {.c2 = ch(1024), .k = 3, .s = 2}, norm, "7");
  x = c3k2(x, {.c2 = ch(1024), .n = rep(2), .c3k = true}, norm, "8");
  x = sppf(x, {.c2 = ch(1024), .k = 5, .n = 3, .shortcut = true}, norm, "9");
  const auto x10 = c2psa(x, rep(2), norm, "10");

  // Head.
  x = ops::concat({ops::upsample_nearest(x10, 2, "11"), x6}, "12");
  const auto x13 = c3k2(x, {.c2 = ch(512), .n = rep(2), .c3k = true}, norm, "13");
  x = ops::concat({ops::upsample_nearest(x13, 2, "14"), x4}, "15");
  const auto p3 = c3k2(x, {.c2 = ch(256), .n = rep(2), .c3k = true}, norm, "16");
  x = ops::concat({conv(p3, {.c2 = ch(256), .k = 3, .s = 2}, norm, "17"), x13}, "18");
  const auto p4 = c3k2(x, {.c2 = ch(512), .n = rep(2), .c3k = true}, norm, "19");
  x = ops::concat({conv(p4, {.c2 = ch(512), .k = 3, .s = 2}, norm, "20"), x10}, "21");
  const auto p5 = c3k2(x, {.c2 = ch(1024), .n = 1, .c3k = true, .e = 0.5, .attn = true}, norm, "22");

  Yolo26Outputs out;
  out.features = {p3, p4, p5};
  auto detect = g.scope("23");
  if (heads != Heads::one_to_one)
    out.one2many = detect_head(out.features, spec.nc, DetectHead::one_to_many, norm);
  if (heads != Heads::one_to_many) {
    std::array<graph::SymTensor, 3> features = out.features;
    if (detach_one2one)
      for (size_t i = 0; i < features.size(); ++i) features[i] = ops::detach(features[i], fmt::format("detach{}", i));
    out.one2one = detect_head(features, spec.nc, DetectHead::one_to_one, norm);
  }
  return out;
}

Yolo26Outputs record_yolo26_training(graph::SymTensor images, const Yolo26Spec& spec) {
  return record_yolo26(images, spec, Heads::both, /*detach_one2one=*/true);
}

std::shared_ptr<graph::Graph> yolo26_inference_graph(const Yolo26Spec& spec, const InferenceOptions& options) {
  kernels::check_postprocess_options(options.postprocess);
  auto g = std::make_shared<graph::Graph>();
  constexpr int64_t any = core::Shape::kAny;
  auto images = g->input("images", core::Shape{any, 3, any, any}, options.input_format.dtype,
                         options.input_format.layout);
  const Heads heads = options.both_heads ? Heads::both : options.nms ? Heads::one_to_many : Heads::one_to_one;
  const Yolo26Outputs out = record_yolo26(images, spec, heads);
  const HeadOutputs& head = options.nms ? *out.one2many : *out.one2one;
  const auto& [p3, p4, p5] = out.features;
  auto boxes = kernels::detect_decode(head.ltrb, p3, p4, p5, kernels::DecodeMode::pixels, "decode");
  const kernels::DetectionTensors det = options.nms ? kernels::postprocess_nms(boxes, head.logits, options.postprocess)
                                                    : kernels::postprocess_e2e(boxes, head.logits, options.postprocess);
  g->mark_output(det.detections, graph::kInferenceOutput);
  g->mark_output(det.count, graph::kInferenceOutput);
  if (options.raw_outputs)
    for (const auto& h : {out.one2one, out.one2many})
      if (h) {
        g->mark_output(h->ltrb, graph::kInferenceOutput);
        g->mark_output(h->logits, graph::kInferenceOutput);
      }
  return g;
}

}  // namespace vision::models::yolo
