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
