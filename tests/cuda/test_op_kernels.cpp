// What each built-in op's CUDA RuntimeOp says it may launch (RuntimeOp::kernels(), no GPU needed: lowering builds
// the RuntimeOps only), and the `vision kernels ops|list --op` commands that print it; the CLI's error prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cli_util.h"
#include "vision/core/error.h"
#include "vision/cuda/kernel.h"
#include "vision/models/builtin_ops.h"
#include "vision/ops/attention/flash_attn2_cuda.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"

using namespace vision;
using core::DType;
using core::Shape;
using graph::Mode;
using test::exit_code;
using test::run_command;

namespace {

std::vector<std::string> ids_of(const std::vector<graph::KernelInfo>& kernels) {
  std::vector<std::string> ids;
  for (const graph::KernelInfo& k : kernels) ids.push_back(k.id);
  return ids;
}

std::vector<std::string> ids_of(const std::vector<const cuda::Kernel*>& kernels) {
  std::vector<std::string> ids;
  for (const cuda::Kernel* k : kernels) ids.push_back(k->id());
  return ids;
}

// The kernel ids of the op's CUDA RuntimeOp for one mode.
std::vector<std::string> lowered_ids(const std::string& op, Mode mode) {
  return ids_of(models::builtin_op(op).op->lower(graph::Backend::cuda, mode)->kernels());
}

std::string cli(const std::string& args, int* code) {
  int status = 0;
  std::string out = run_command(std::string(VISION_CLI) + " " + args + " 2>&1", &status);
  *code = exit_code(status);
  return out;
}

using Ids = std::vector<std::string>;

}  // namespace

// Every kernel an op lists is a registered kernel (what `vision kernels build` compiles ahead), with the very source
// the registry holds.
TEST(OpKernels, EveryListedKernelIsRegistered) {
  auto& registry = cuda::KernelRegistry::global();
  ASSERT_FALSE(models::builtin_ops().empty());
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    for (const graph::KernelInfo& k : models::cuda_kernels(b)) {
      const cuda::Kernel* registered = registry.find(k.id);
      ASSERT_NE(registered, nullptr) << b.op->name() << " lists " << k.id << ", which is not registered";
      EXPECT_EQ(k.name, registered->name()) << k.id;
      EXPECT_EQ(k.source, registered->source()) << k.id;
    }
  }
}

// Each op lists the NVRTC kernels its forward and backward launch; cuDNN work lists none.
TEST(OpKernels, OpsListTheKernelsTheyLaunch) {
  std::set<std::string> names;
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    EXPECT_TRUE(names.insert(b.op->name()).second) << "duplicate op " << b.op->name();
    const std::vector<graph::KernelInfo> kernels = models::cuda_kernels(b);
    // cuDNN only, or the backend's copies (views, cudaMemcpy2DAsync along an axis).
    static const std::set<std::string> no_nvrtc = {"ops.conv2d", "ops.concat", "ops.split", "ops.channel_slice",
                                                   "ops.reshape", "ops.flatten", "ops.detach"};
    if (no_nvrtc.count(b.op->name()))
      EXPECT_TRUE(kernels.empty()) << b.op->name() << " launches no NVRTC kernel";
    else
      EXPECT_FALSE(kernels.empty()) << b.op->name() << " launches NVRTC kernels but lists none";
  }
  for (const char* op : {"ops.conv2d", "ops.silu", "ops.maxpool2d", "ops.batchnorm2d", "ops.flash_attention2"})
    EXPECT_EQ(names.count(op), 1u) << op;

  EXPECT_EQ(lowered_ids("ops.silu", Mode::train), (Ids{"silu_forward__f32", "silu_backward__f32"}));
  EXPECT_EQ(lowered_ids("ops.sigmoid", Mode::inference), (Ids{"sigmoid_forward__f32", "sigmoid_backward__f32"}));
  EXPECT_EQ(lowered_ids("ops.add", Mode::train), (Ids{"add_forward__f32", "add_backward__f32"}));
  EXPECT_EQ(lowered_ids("ops.mul", Mode::train), (Ids{"mul_forward__f32", "mul_backward__f32"}));
  EXPECT_EQ(lowered_ids("ops.maxpool2d", Mode::inference), (Ids{"maxpool2d_forward__f32__k5_s1_p2"}));
  EXPECT_EQ(lowered_ids("ops.maxpool2d", Mode::train),
            (Ids{"maxpool2d_forward__f32__k5_s1_p2", "maxpool2d_backward__f32__k5_s1_p2"}));
  EXPECT_EQ(lowered_ids("ops.upsample_nearest", Mode::train),
            (Ids{"upsample_nearest2x_forward__f32", "upsample_nearest2x_backward__f32"}));
  EXPECT_EQ(lowered_ids("ops.permute", Mode::train), (Ids{"permute_copy__f32"}));
  EXPECT_EQ(lowered_ids("ops.sum_squares", Mode::train), (Ids{"reduce_sum_forward__f32__sq1", "reduce_sum_backward__f32__sq1"}));
  EXPECT_EQ(lowered_ids("ops.mean", Mode::train), (Ids{"reduce_sum_forward__f32__sq0", "reduce_sum_backward__f32__sq0"}));
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::inference), Ids{});  // cuDNN
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::train), (Ids{"increment_counter__i64"}));
  EXPECT_EQ(lowered_ids("ops.conv2d", Mode::train), Ids{});
  EXPECT_EQ(lowered_ids("ops.conv2d_bn", Mode::inference), (Ids{"batchnorm_fold__f32"}));
  EXPECT_EQ(lowered_ids("ops.conv2d_bn_silu", Mode::inference), (Ids{"batchnorm_fold__f32", "silu_forward__f32"}));
  EXPECT_EQ(lowered_ids("ops.conv2d_silu", Mode::inference), (Ids{"silu_forward__f32"}));
}

namespace {

const std::vector<graph::Format> kAllFormats = {
    {DType::f32, core::Layout::nchw},  {DType::f32, core::Layout::nhwc},  {DType::f16, core::Layout::nchw},
    {DType::f16, core::Layout::nhwc},  {DType::bf16, core::Layout::nchw}, {DType::bf16, core::Layout::nhwc}};

// The op's CUDA RuntimeOp for mode in format f (supports(f) checked).
std::unique_ptr<graph::RuntimeOp> lowered_in(const graph::Op& op, Mode mode, const graph::Format& f) {
  auto rt = op.lower(graph::Backend::cuda, mode);
  EXPECT_TRUE(rt->supports(f)) << op.name() << " in " << graph::format_name(f);
  rt->set_format(f);
  return rt;
}
std::vector<std::string> lowered_ids(const std::string& op, Mode mode, const graph::Format& f) {
  return ids_of(lowered_in(*models::builtin_op(op).op, mode, f)->kernels());
}

ops::Conv2dAttrs conv_attrs(bool bias) {
  ops::Conv2dAttrs a;
  a.in_channels = 8;
  a.out_channels = 16;
  a.kernel = 3;
  a.bias = bias;
  return a;
}

}  // namespace

// The formats each built-in CUDA op computes in (Foundation 4b): f32, f16 and bf16 in NCHW and NHWC for the
// convolutions, BatchNorm, the element-wise ops, max pooling and upsampling; permute in NCHW only; the scalar
// reductions in f32 only (either layout).
TEST(OpFormats, WhatEachOpSupports) {
  const std::set<std::string> everywhere = {"ops.conv2d", "ops.conv2d_bn", "ops.conv2d_bn_silu", "ops.conv2d_silu",
                                            "ops.batchnorm2d", "ops.silu", "ops.sigmoid", "ops.add", "ops.mul",
                                            "ops.maxpool2d", "ops.upsample_nearest"};
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    const std::string name = b.op->name();
    for (const graph::Format& f : kAllFormats) {
      const bool supported = b.op->lower(graph::Backend::cuda, b.modes.front())->supports(f);
      if (everywhere.count(name))
        EXPECT_TRUE(supported) << name << " in " << graph::format_name(f);
      else if (name == "ops.permute")
        EXPECT_EQ(supported, f.layout == core::Layout::nchw) << name << " in " << graph::format_name(f);
      else if (name == "ops.sum_squares" || name == "ops.mean")
        EXPECT_EQ(supported, f.dtype == DType::f32) << name << " in " << graph::format_name(f);
    }
    // The CPU RuntimeOps of these ops stay f32 NCHW.
    if (!everywhere.count(name) && name != "ops.permute" && name != "ops.sum_squares" && name != "ops.mean") continue;
    const auto cpu = b.op->lower(graph::Backend::cpu, b.modes.front());
    EXPECT_TRUE(cpu->supports(graph::Format{})) << name;
    EXPECT_FALSE(cpu->supports({DType::f16, core::Layout::nhwc})) << name;
  }
}

// In every format it supports, each of our ops lists the instantiations of that format, and every one of them is
// registered: `vision kernels build` compiles them all ahead of time.
TEST(OpFormats, KernelsOfEveryFormatAreRegistered) {
  auto& registry = cuda::KernelRegistry::global();
  const std::set<std::string> ours = {"ops.conv2d", "ops.conv2d_bn", "ops.conv2d_bn_silu", "ops.conv2d_silu",
                                      "ops.batchnorm2d", "ops.silu", "ops.sigmoid", "ops.add", "ops.mul",
                                      "ops.maxpool2d", "ops.upsample_nearest", "ops.permute", "ops.sum_squares",
                                      "ops.mean"};
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    if (!ours.count(b.op->name())) continue;
    for (Mode mode : b.modes)
      for (const graph::Format& f : kAllFormats) {
        auto rt = b.op->lower(graph::Backend::cuda, mode);
        if (!rt->supports(f)) continue;
        rt->set_format(f);
        for (const graph::KernelInfo& k : rt->kernels()) {
          const cuda::Kernel* registered = registry.find(k.id);
          ASSERT_NE(registered, nullptr) << b.op->name() << " in " << graph::format_name(f) << " lists " << k.id
                                         << ", which is not registered";
          EXPECT_EQ(k.source, registered->source()) << k.id;
          if (f.dtype != DType::f32 && !k.id.starts_with("batchnorm_fold") && !k.id.starts_with("increment_counter") &&
              !k.id.ends_with("_finalize__f32") && !k.id.starts_with("reduce_sum"))
            EXPECT_NE(k.id.find(std::string("__") + std::string(core::dtype_name(f.dtype))), std::string::npos)
                << b.op->name() << " in " << graph::format_name(f) << " lists " << k.id;
        }
      }
  }
}

TEST(OpFormats, KernelIdsFollowTheFormat) {
  const graph::Format bf16_nhwc{DType::bf16, core::Layout::nhwc}, f16_nhwc{DType::f16, core::Layout::nhwc},
      f16_nchw{DType::f16, core::Layout::nchw}, f32_nhwc{DType::f32, core::Layout::nhwc},
      bf16_nchw{DType::bf16, core::Layout::nchw};
  EXPECT_EQ(lowered_ids("ops.silu", Mode::train, bf16_nhwc), (Ids{"silu_forward__bf16", "silu_backward__bf16"}));
  EXPECT_EQ(lowered_ids("ops.mul", Mode::train, f16_nchw), (Ids{"mul_forward__f16", "mul_backward__f16"}));
  EXPECT_EQ(lowered_ids("ops.maxpool2d", Mode::train, bf16_nhwc),
            (Ids{"maxpool2d_forward_nhwc__bf16__k5_s1_p2", "maxpool2d_backward_nhwc__bf16__k5_s1_p2"}));
  EXPECT_EQ(lowered_ids("ops.maxpool2d", Mode::inference, f32_nhwc), (Ids{"maxpool2d_forward_nhwc__f32__k5_s1_p2"}));
  EXPECT_EQ(lowered_ids("ops.upsample_nearest", Mode::train, f16_nhwc),
            (Ids{"upsample_nearest2x_forward_nhwc__f16", "upsample_nearest2x_backward_nhwc__f16"}));
  EXPECT_EQ(lowered_ids("ops.permute", Mode::train, bf16_nchw), (Ids{"permute_copy__bf16"}));
  EXPECT_EQ(lowered_ids("ops.mean", Mode::train, f32_nhwc),
            (Ids{"reduce_sum_forward__f32__sq0", "reduce_sum_backward__f32__sq0"}));
  // BatchNorm: cuDNN in f32 NCHW, our kernels in every other format, each in a scalar and a 16-byte access width.
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::train, graph::Format{}), (Ids{"increment_counter__i64"}));
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::inference, graph::Format{}), Ids{});
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::inference, f16_nhwc),
            (Ids{"batchnorm_apply_nhwc__f16__v1", "batchnorm_apply_nhwc__f16__v8"}));
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::inference, f32_nhwc),
            (Ids{"batchnorm_apply_nhwc__f32__v1", "batchnorm_apply_nhwc__f32__v4"}));
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::inference, bf16_nchw),
            (Ids{"batchnorm_apply__bf16__v1", "batchnorm_apply__bf16__v8"}));
  EXPECT_EQ(lowered_ids("ops.batchnorm2d", Mode::train, bf16_nhwc),
            (Ids{"batchnorm_stats_nhwc__bf16__v1", "batchnorm_apply_nhwc__bf16__v1",
                 "batchnorm_backward_sums_nhwc__bf16__v1", "batchnorm_backward_apply_nhwc__bf16__v1",
                 "batchnorm_stats_nhwc__bf16__v8", "batchnorm_apply_nhwc__bf16__v8",
                 "batchnorm_backward_sums_nhwc__bf16__v8", "batchnorm_backward_apply_nhwc__bf16__v8",
                 "batchnorm_stats_finalize__f32", "batchnorm_backward_finalize__f32", "increment_counter__i64"}));
  // Convolutions: cuDNN; the bias and SiLU epilogue by cuDNN and our SiLU kernel in f32, by our kernel in f16/bf16.
  EXPECT_EQ(lowered_ids("ops.conv2d", Mode::train, f16_nhwc), Ids{});  // no bias
  EXPECT_EQ(ids_of(lowered_in(ops::Conv2dOp(conv_attrs(true)), Mode::train, bf16_nhwc)->kernels()),
            (Ids{"bias_act_nhwc__bf16__silu0", "channel_sum_partials_nhwc__bf16", "channel_sum_finalize__bf16"}));
  EXPECT_EQ(ids_of(lowered_in(ops::Conv2dOp(conv_attrs(true)), Mode::train, f32_nhwc)->kernels()), Ids{});
  EXPECT_EQ(lowered_ids("ops.conv2d_bn_silu", Mode::inference, f16_nhwc),
            (Ids{"batchnorm_fold__f32", "bias_act_nhwc__f16__silu1"}));
  EXPECT_EQ(lowered_ids("ops.conv2d_bn", Mode::inference, bf16_nchw),
            (Ids{"batchnorm_fold__f32", "bias_act__bf16__silu0"}));
  EXPECT_EQ(lowered_ids("ops.conv2d_bn_silu", Mode::inference, f32_nhwc),
            (Ids{"batchnorm_fold__f32", "silu_forward__f32"}));
  EXPECT_EQ(lowered_ids("ops.conv2d_silu", Mode::inference, bf16_nhwc), (Ids{"silu_forward__bf16"}));  // no bias
}

// The state a convolution reads in its format (ParamSpec::compute_format) and the folded copies of a fused one.
TEST(OpFormats, ConvolutionStateFormats) {
  const Shape x{2, 8, 10, 10}, y{2, 16, 10, 10};
  const graph::Format f16_nhwc{DType::f16, core::Layout::nhwc}, f32_nhwc{DType::f32, core::Layout::nhwc},
      bf16_nchw{DType::bf16, core::Layout::nchw};
  const ops::Conv2dOp conv(conv_attrs(true));
  {
    const auto specs = lowered_in(conv, Mode::train, f16_nhwc)->param_specs({x}, y);
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[0].dtype, DType::f32);  // the master copy stays f32
    EXPECT_EQ(specs[0].compute_format, f16_nhwc);
    EXPECT_EQ(specs[1].compute_format, (graph::Format{DType::f16, core::Layout::nchw}));
  }
  {
    const auto specs = lowered_in(conv, Mode::train, f32_nhwc)->param_specs({x}, y);
    EXPECT_EQ(specs[0].compute_format, f32_nhwc);  // the weight in KRSC order
    EXPECT_FALSE(specs[1].compute_format.has_value());
  }
  {
    const auto specs = lowered_in(conv, Mode::train, graph::Format{})->param_specs({x}, y);
    EXPECT_FALSE(specs[0].compute_format.has_value());
    EXPECT_FALSE(specs[1].compute_format.has_value());
  }
  ops::ConvFusion bn_silu{true, 1e-3f, true, "conv.", "bn."};
  const ops::FusedConv2dOp fused(conv_attrs(false), bn_silu);
  const Shape w = conv_attrs(false).weight_shape(), b{16};
  for (const graph::Format& f : kAllFormats) {
    auto rt = lowered_in(fused, Mode::inference, f);
    for (const auto& s : rt->param_specs({x}, y))
      EXPECT_FALSE(s.compute_format.has_value()) << s.name << ": BatchNorm is folded from the f32 state";
    std::vector<std::pair<Shape, DType>> derived;
    for (const auto& d : rt->derived_specs({x}, y)) derived.emplace_back(d.shape, d.dtype);
    std::vector<std::pair<Shape, DType>> want = {{w, DType::f32}, {b, DType::f32}};
    if (f != graph::Format{}) want.emplace_back(w, f.dtype);
    if (f.dtype != DType::f32) want.emplace_back(b, f.dtype);
    EXPECT_EQ(derived, want) << graph::format_name(f);
  }
  ops::ConvFusion silu_only{false, 1e-3f, true, "conv.", ""};
  const auto specs = lowered_in(ops::FusedConv2dOp(conv_attrs(true), silu_only), Mode::inference, bf16_nchw)
                         ->param_specs({x}, y);
  EXPECT_EQ(specs[0].compute_format, bf16_nchw);
  EXPECT_EQ(specs[1].compute_format, bf16_nchw);
  // BatchNorm keeps its state in f32 in every format; outside f32 NCHW (cuDNN) our kernels need a workspace in training.
  const ops::BatchNorm2dOp bn(1e-3f, 0.03f);
  for (const graph::Format& f : kAllFormats) {
    auto rt = lowered_in(bn, Mode::train, f);
    for (const auto& s : rt->param_specs({x}, x)) EXPECT_FALSE(s.compute_format.has_value()) << s.name;
    for (const auto& s : rt->saved_specs({x}, x)) EXPECT_EQ(s.dtype, DType::f32);
    EXPECT_EQ(rt->workspace_bytes({nullptr, Mode::train, false}, {x}, x) > 0, !(f == graph::Format{}))
        << graph::format_name(f);
  }
}

// FlashAttention-2 lists every kernel its launchers may pick, the sm_90a (wgmma) ones included.
TEST(OpKernels, FlashAttention2ListsEveryVariantItsLaunchersMayPick) {
  using ops::attention::flash_attention2_kernels;
  EXPECT_EQ(ids_of(flash_attention2_kernels(DType::bf16, 32, 64, Mode::inference)),
            (Ids{"flash_attention2_forward__bf16__d32_dv64", "flash_attention2_forward_sm90__bf16__d32_dv64"}));
  EXPECT_EQ(ids_of(flash_attention2_kernels(DType::f16, 32, 64, Mode::train)),
            (Ids{"flash_attention2_forward__f16__d32_dv64", "flash_attention2_forward_sm90__f16__d32_dv64",
                 "flash_attention2_backward_preprocess__f16__dv64", "flash_attention2_backward_dq__f16__d32_dv64",
                 "flash_attention2_backward_dkv__f16__d32_dv64", "flash_attention2_backward_dkv_dq__f16__d32_dv64",
                 "flash_attention2_backward_sm90__f16__d32_dv64", "flash_attention2_backward_dq_convert__f16"}));
  // f32 has no fused or wgmma kernels; d_v = 256 has no wgmma kernels.
  EXPECT_EQ(ids_of(flash_attention2_kernels(DType::f32, 64, 64, Mode::train)),
            (Ids{"flash_attention2_forward__f32__d64_dv64", "flash_attention2_backward_preprocess__f32__dv64",
                 "flash_attention2_backward_dq__f32__d64_dv64", "flash_attention2_backward_dkv__f32__d64_dv64"}));
  const Ids bf16_256 = ids_of(flash_attention2_kernels(DType::bf16, 128, 256, Mode::train));
  EXPECT_EQ(std::count_if(bf16_256.begin(), bf16_256.end(), [](const std::string& id) { return id.find("sm90") != std::string::npos; }), 0)
      << "d_v = 256 has no wgmma kernels";
  EXPECT_TRUE(std::find(bf16_256.begin(), bf16_256.end(), "flash_attention2_backward_dkv_dq__bf16__d128_dv256") != bf16_256.end());

  // The op, before a plan fixes its shapes, may launch every registered FA2 kernel; in inference only forwards.
  std::set<std::string> registered;
  for (const cuda::Kernel* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("flash_attention2_")) registered.insert(k->id());
  const Ids train = lowered_ids("ops.flash_attention2", Mode::train);
  EXPECT_EQ(std::set<std::string>(train.begin(), train.end()), registered);
  EXPECT_EQ(std::set<std::string>(train.begin(), train.end()).size(), train.size()) << "listed twice";
  for (const char* id : {"flash_attention2_forward_sm90__bf16__d32_dv64", "flash_attention2_backward_sm90__bf16__d32_dv64",
                         "flash_attention2_backward_dkv_dq__f16__d64_dv128", "flash_attention2_backward_dq_convert__bf16",
                         "flash_attention2_backward_preprocess__f16__dv256"})
    EXPECT_TRUE(std::find(train.begin(), train.end(), id) != train.end()) << id;
  for (const std::string& id : lowered_ids("ops.flash_attention2", Mode::inference))
    EXPECT_TRUE(id.starts_with("flash_attention2_forward")) << id;
}

TEST(OpKernels, UnknownOpNamesTheKnownOnes) {
  try {
    models::builtin_op("ops.no_such_op");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown op 'ops.no_such_op'"), std::string::npos) << what;
    EXPECT_NE(what.find("ops.silu"), std::string::npos) << what;
  }
}

// Every error of `vision kernels …` is printed as docs/cli.md says: "vision: error: …", exit code 1.
TEST(KernelsCommand, ErrorsCarryTheDocumentedPrefix) {
  int code = 0;
  for (const char* args : {"kernels source no_such_kernel", "kernels ptx no_such_kernel --arch sm_90a"}) {
    const std::string out = cli(args, &code);
    EXPECT_EQ(code, 1) << args;
    EXPECT_EQ(out.rfind("vision: error: unknown kernel 'no_such_kernel'; run `vision kernels list`", 0), 0u)
        << args << ": " << out;
  }
  const std::string out = cli("kernels list --op ops.no_such_op", &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out.rfind("vision: error: unknown op 'ops.no_such_op'", 0), 0u) << out;
}

// `vision kernels list --op NAME` prints that op's kernel ids (sorted, like `list`); `vision kernels ops` prints each
// op with its kernels indented below it.
TEST(KernelsCommand, ListOpAndOps) {
  int code = 0;
  const std::string list = cli("kernels list --op ops.maxpool2d", &code);
  EXPECT_EQ(code, 0) << list;
  EXPECT_EQ(list, "maxpool2d_backward__f32__k5_s1_p2\nmaxpool2d_forward__f32__k5_s1_p2\n");

  const std::string ops = cli("kernels ops", &code);
  ASSERT_EQ(code, 0) << ops;
  std::string expected;
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    expected += b.op->name() + (b.config.empty() ? "" : "  (" + b.config + ")") + "\n";
    const std::vector<graph::KernelInfo> kernels = models::cuda_kernels(b);
    if (kernels.empty()) expected += "  (cuDNN only: no NVRTC kernels)\n";
    for (const graph::KernelInfo& k : kernels) expected += "  " + k.id + "\n";
  }
  EXPECT_EQ(ops, expected);
  EXPECT_NE(ops.find("\nops.flash_attention2"), std::string::npos);
  EXPECT_NE(ops.find("\n  flash_attention2_backward_sm90__bf16__d32_dv64\n"), std::string::npos);
}
