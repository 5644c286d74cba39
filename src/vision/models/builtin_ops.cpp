#include "vision/models/builtin_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "vision/core/error.h"
#include "vision/ops/attention/flash_attn2.h"
#include "vision/models/yolo/kernels/attention/psa.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/postprocess.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

namespace vision::models {
namespace {

using graph::Mode;

std::vector<BuiltinOp> make_builtin_ops() {
  const std::vector<Mode> both = {Mode::inference, Mode::train};
  ops::Conv2dAttrs conv;
  conv.in_channels = 16;
  conv.out_channels = 32;
  conv.kernel = 3;
  const std::string conv_config = "3x3, 16 -> 32 channels";
  const ops::Conv2dOp conv_op(conv);
  // The fusions as the planner makes them: conv → bn, conv → silu, (conv → bn) → silu.
  auto fused = [&](const graph::Op& first, const graph::Op& next) {
    auto op = first.fuse_with(next, Mode::inference, "conv.", "bn.");
    VISION_CHECK(op != nullptr, "{} does not fuse with {}", first.name(), next.name());
    return op;
  };
  const ops::BatchNorm2dOp bn(1e-3f, 0.03f);
  const ops::SiluOp silu;
  const auto conv_bn = fused(conv_op, bn);

  std::vector<BuiltinOp> out = {
      {std::make_shared<ops::Conv2dOp>(conv), conv_config, both},
      {conv_bn, conv_config, {Mode::inference}},
      {fused(*conv_bn, silu), conv_config, {Mode::inference}},
      {fused(conv_op, silu), conv_config, {Mode::inference}},
      {std::make_shared<ops::BatchNorm2dOp>(1e-3f, 0.03f), "eps=1e-3 momentum=0.03", both},
      {bn.fuse_with(silu, Mode::train, "bn.", "act."), "eps=1e-3 momentum=0.03; a training plan's bn -> silu",
       {Mode::train}},
      {std::make_shared<ops::SiluOp>(), "", both},
      {std::make_shared<ops::SigmoidOp>(), "", both},
      {std::make_shared<ops::AddOp>(), "", both},
      {std::make_shared<ops::MulOp>(), "", both},
      {std::make_shared<ops::MaxPool2dOp>(5, 1, 2), "k=5 s=1 p=2, YOLO26's SPPF", both},
      {std::make_shared<ops::UpsampleNearestOp>(2), "scale=2", both},
      {std::make_shared<ops::ConcatOp>(2), "2 inputs", both},
      {std::make_shared<ops::ChannelSliceOp>(0, 16), "channels [0, 16)", both},
      {std::make_shared<ops::SplitOp>(std::vector<int64_t>{16, 16}, 1), "two parts along dim 1", both},
      {std::make_shared<ops::ReshapeOp>(std::vector<int64_t>{0, -1}), "[N, C, H, W] -> [N, C·H·W]", both},
      {std::make_shared<ops::ReshapeOp>(ops::ReshapeOp::flatten(1, -1)), "dims 1.. merged", both},
      {std::make_shared<ops::PermuteOp>(std::vector<int64_t>{0, 2, 3, 1}), "NCHW -> NHWC order", both},
      {std::make_shared<ops::DetachOp>(), "", both},
      {std::make_shared<ops::SumSquaresOp>(), "", both},
      {std::make_shared<ops::MeanOp>(), "", both},
      {std::make_shared<ops::attention::FlashAttention2Op>(1.0f / std::sqrt(32.0f)),
       "scale=32^-0.5; before a plan fixes dtype and head sizes, every registered one", both},
  };
  // YOLO26's own ops, in YOLO26n's configuration (f32 NCHW kernels: a plan's format picks the others).
  namespace att = yolo::kernels::attention;
  const att::PsaConfig psa{32, 2, att::default_psa_form()};
  const std::string psa_config = "key_dim 32, 2 heads, one_pass (YOLO26n)";
  out.push_back({std::make_shared<att::PsaPackQkvOp>(psa), psa_config, both});
  out.push_back({std::make_shared<att::PsaExtractVOp>(psa), psa_config, both});
  out.push_back({std::make_shared<att::PsaMergeAttnOp>(psa, 20, 20), psa_config + ", 20x20", both});
  out.push_back({std::make_shared<att::FlashAttn2PsaOp>(psa), psa_config, both});
  out.push_back({std::make_shared<yolo::kernels::DetectDecodeOp>(yolo::kernels::DecodeMode::grid),
                 "grid mode (the loss's; pixels and cxcywh share the forward kernel)", both});
  out.push_back({std::make_shared<yolo::kernels::PostprocessOp>(yolo::kernels::PostprocessMethod::end_to_end,
                                                                yolo::kernels::PostprocessOptions{}),
                 "end-to-end, max_det 300, conf 0.25", {Mode::inference}});
  out.push_back({std::make_shared<yolo::kernels::PostprocessOp>(yolo::kernels::PostprocessMethod::nms,
                                                                yolo::kernels::PostprocessOptions{}),
                 "NMS, IoU 0.7, max_nms 30000", {Mode::inference}});
  std::sort(out.begin(), out.end(), [](const BuiltinOp& a, const BuiltinOp& b) { return a.op->name() < b.op->name(); });
  return out;
}

}  // namespace

const std::vector<BuiltinOp>& builtin_ops() {
  static const std::vector<BuiltinOp> ops = make_builtin_ops();
  return ops;
}

const BuiltinOp& builtin_op(std::string_view name) {
  std::vector<std::string> names;
  for (const BuiltinOp& b : builtin_ops()) {
    if (b.op->name() == name) return b;
    names.push_back(b.op->name());
  }
  fail("unknown op '{}'; the built-in ops are: {} (`vision kernels ops` lists them with their kernels)", name,
       fmt::join(names, ", "));
}

std::vector<graph::KernelInfo> cuda_kernels(const BuiltinOp& b) {
  std::vector<graph::KernelInfo> out;
  std::set<std::string, std::less<>> seen;
  for (Mode mode : b.modes)
    for (graph::KernelInfo& k : b.op->lower(graph::Backend::cuda, mode)->kernels())
      if (seen.insert(k.id).second) out.push_back(std::move(k));
  return out;
}

}  // namespace vision::models
