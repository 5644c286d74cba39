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
#include "vision/models/yolo/kernels/attention/flash_attn2_cuda.h"

using namespace vision;
using core::DType;
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
  for (const char* op : {"ops.conv2d", "ops.silu", "ops.maxpool2d", "ops.batchnorm2d", "yolo.flash_attention2"})
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

// FlashAttention-2 lists every kernel its launchers may pick, the sm_90a (wgmma) ones included.
TEST(OpKernels, FlashAttention2ListsEveryVariantItsLaunchersMayPick) {
  using models::yolo::kernels::attention::flash_attention2_kernels;
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
  const Ids train = lowered_ids("yolo.flash_attention2", Mode::train);
  EXPECT_EQ(std::set<std::string>(train.begin(), train.end()), registered);
  EXPECT_EQ(std::set<std::string>(train.begin(), train.end()).size(), train.size()) << "listed twice";
  for (const char* id : {"flash_attention2_forward_sm90__bf16__d32_dv64", "flash_attention2_backward_sm90__bf16__d32_dv64",
                         "flash_attention2_backward_dkv_dq__f16__d64_dv128", "flash_attention2_backward_dq_convert__bf16",
                         "flash_attention2_backward_preprocess__f16__dv256"})
    EXPECT_TRUE(std::find(train.begin(), train.end(), id) != train.end()) << id;
  for (const std::string& id : lowered_ids("yolo.flash_attention2", Mode::inference))
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
  EXPECT_NE(ops.find("\nyolo.flash_attention2"), std::string::npos);
  EXPECT_NE(ops.find("\n  flash_attention2_backward_sm90__bf16__d32_dv64\n"), std::string::npos);
}
