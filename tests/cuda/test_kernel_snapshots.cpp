// Kernel snapshots and whole-registry compiles (NVRTC only, no GPU): tests/snapshots/<id>.cu holds a kernel's exact
// source and <id>.sm_90a.ptx its PTX with the compiler's version lines removed. VISION_BLESS=1 rewrites them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cli_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/cuda/kernel.h"
#include "vision/cuda/nvrtc.h"

using namespace vision;
using namespace vision::cuda;
using vision::test::run_command;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSnapshotArch = "sm_90a";

// A representative set: each kernel family, each element type and memory order, a compile-time window.
const std::vector<std::string> kSnapshotIds = {
    "silu_forward__f16",
    "silu_backward__bf16",
    "sigmoid_backward__f32",
    "add_forward__f32",
    "mul_backward__bf16",
    "permute_copy__f16",
    "upsample_nearest2x_forward__bf16",
    "upsample_nearest2x_backward__f16",
    "maxpool2d_forward__f32__k5_s1_p2",
    "letterbox_normalize__f16",
    "hsv_jitter__u8",
    "maxpool2d_backward__f16__k5_s1_p2",
    // NHWC: upsampling and pooling with consecutive threads on consecutive channels.
    "upsample_nearest2x_forward_nhwc__f16",
    "upsample_nearest2x_backward_nhwc__bf16",
    "maxpool2d_forward_nhwc__bf16__k5_s1_p2",
    "maxpool2d_backward_nhwc__f32__k2_s2_p0",
    // Our BatchNorm (per-channel reductions over units × columns of vectors, scalar and 16-byte accesses) and
    // convolution-bias kernels.
    "batchnorm_stats__bf16__v8",
    "batchnorm_stats_nhwc__bf16__v8",
    "batchnorm_stats_nhwc__f32__v1",
    "batchnorm_stats_finalize__f32",
    "batchnorm_apply_nhwc__bf16__v8",
    "batchnorm_apply__f32__v4",
    "batchnorm_backward_sums_nhwc__bf16__v8",
    "batchnorm_backward_finalize__f32",
    "batchnorm_backward_apply__bf16__v8",
    "batchnorm_apply_silu_nhwc__bf16__v8",
    "batchnorm_backward_sums_silu_nhwc__bf16__v8",
    "batchnorm_backward_apply_silu__f32__v4",
    "bias_act_nhwc__f16__silu1",
    "bias_act__bf16__silu0",
    "channel_sum_partials_nhwc__bf16",
    "channel_sum_finalize__f16",
    // FlashAttention-2: each code path once (tensor-core and f32 forward, preprocessing, dQ, tensor-core and f32
    // dK/dV, the fused dK/dV + atomic dQ and its conversion, the Hopper wgmma forward and backward), at YOLO26's PSA
    // head sizes (32, 64) and the largest f32 instantiation (over 48 KiB of shared memory).
    "flash_attention2_forward__bf16__d32_dv64",
    "flash_attention2_forward__f32__d64_dv64",
    "flash_attention2_backward_preprocess__f16__dv64",
    "flash_attention2_backward_dq__f16__d32_dv64",
    "flash_attention2_backward_dkv__bf16__d32_dv64",
    "flash_attention2_backward_dkv__f32__d128_dv256",
    "flash_attention2_backward_dkv_dq__f16__d32_dv64",
    "flash_attention2_backward_dq_convert__bf16",
    "flash_attention2_forward_sm90__bf16__d32_dv64",
    "flash_attention2_backward_sm90__f16__d32_dv64",
    // YOLO26's box decode: the forward (every mode, a kernel argument) and the grid mode's backward.
    "detect_decode_forward__f32",
    "detect_decode_backward__bf16",
    // PSA data movement (psa.cuh): channels → rows and back at YOLO26's widths, V extraction forward and backward,
    // NCHW and NHWC.
    "psa_channels_to_rows__f32__w32_nhwc0",
    "psa_rows_to_channels__bf16__w64_nhwc1",
    "psa_extract_v_forward__f16__kd32_nhwc1",
    "psa_attention_forward_sm90__f16__kd32",  // FlashAttention-2's wgmma forward reading NHWC qkv directly
    "copy_rows__u8__vec16",                   // concat / split in NHWC
    "depthwise_conv2d_nhwc__f16__k3_s1_silu0_vec8",
    "psa_extract_v_backward__f32__kd32_nhwc0",
    // YOLO26's postprocess (postprocess.cuh): the end-to-end selection (radix select, bitonic sort) and the NMS
    // suppression, the two kernels that hold each op's logic.
    "postprocess_e2e_select__f32",
    "postprocess_nms_select__bf16",
    // YOLO26's CIoU box loss (loss/ciou.cuh): the backward, which holds the forward's geometry too.
    "ciou_backward__bf16__block256",
    // YOLO26's classification loss (loss/cls.cuh): the BCE forward's per-block partial sums (no atomics).
    "bce_cls_forward_partial__bf16",
    // YOLO26's task-aligned assigner (loss/assigner.cuh): the per-gt top-k (candidates, CIoU, align, block merge), the
    // shared-anchor resolution (argmax of the overlap over all gts) and the per-gt finalisation (topk2, normalisation).
    "assigner_topk__bf16",
    "assigner_resolve__f16",
    "assigner_finalize__f32",
    // The optimizers (train/optim.cuh): the fused SGD step (with MuSGD's Muon update) and the per-matrix Frobenius
    // normalisation (a fixed-order block reduction).
    "sgd_step__f32",
    "muon_normalize__bf16",
    // MuSGD's Newton–Schulz (train/newton_schulz.cuh): the grouped tensor-core GEMM of all three products.
    "ns_gemm__bf16",
};

bool blessing() {
  const char* b = std::getenv("VISION_BLESS");
  return b && std::string(b) == "1";
}

// PTX without the lines that name the compiler's build, under a header naming the kernel, arch and NVRTC version.
std::string ptx_snapshot(const std::string& id, const std::string& ptx) {
  std::string out = "// vision-cpp PTX snapshot: " + id + " for " + kSnapshotArch + ", NVRTC " + nvrtc_version() + "\n";
  std::istringstream in(ptx);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("// Generated by NVIDIA NVVM Compiler") || line.starts_with("// Compiler Build ID:") ||
        line.starts_with("// Cuda compilation tools") || line.starts_with("// Based on NVVM"))
      continue;
    out += line + "\n";
  }
  return out;
}

// Compares text with the snapshot file, or rewrites it when blessing.
void check_snapshot(const fs::path& path, const std::string& text) {
  if (blessing()) {
    test::write_file(path, text);
    return;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: run the tests with VISION_BLESS=1 to write it";
  const std::string expected = test::read_file(path);
  if (expected != text) {
    const std::string actual_path = path.string() + ".actual";
    test::write_file(actual_path, text);
    FAIL() << path << " differs from the current output (written to " << actual_path
           << "); if the change is intended, run the tests with VISION_BLESS=1";
  }
}

const Kernel& kernel(const std::string& id) {
  const Kernel* k = KernelRegistry::global().find(id);
  if (!k) throw std::runtime_error("no kernel " + id);
  return *k;
}

// Runs f(i) for i in [0, n) on two threads (NVRTC compiles independent programs concurrently).
template <typename F>
void parallel_for(size_t n, F f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) f(i);
  };
  std::thread other(worker);
  worker();
  other.join();
}

}  // namespace

class KernelSnapshot : public testing::TestWithParam<std::string> {};

TEST_P(KernelSnapshot, Source) {
  const std::string id = GetParam();
  check_snapshot(fs::path(VISION_SNAPSHOT_DIR) / (id + ".cu"), kernel(id).source());
}

TEST_P(KernelSnapshot, Ptx) {
  const std::string id = GetParam();
  const fs::path path = fs::path(VISION_SNAPSHOT_DIR) / (id + "." + kSnapshotArch + ".ptx");
  if (!blessing() && fs::exists(path)) {
    // PTX is NVRTC's output: compare only with snapshots made by the same NVRTC version.
    // Under VISION_REQUIRE_GPU=1 (the GPU host) another version is a failure: bless the snapshots with this NVRTC.
    const std::string text = test::read_file(path);
    const std::string first_line = text.substr(0, text.find('\n'));
    const std::string version = "NVRTC " + nvrtc_version();
    if (!first_line.ends_with(version))
      VISION_SKIP_OR_FAIL(path.string() + " was made by another NVRTC (" + first_line + "); this is " + version +
                          " (VISION_BLESS=1 rewrites it)");
  }
  // Compile without the disk cache, so that the snapshot reflects NVRTC's output now.
  const Kernel& k = kernel(id);
  const CompiledKernel c = compile({id + ".cu", k.source(), k.name_expression(), kSnapshotArch});
  check_snapshot(path, ptx_snapshot(id, c.ptx));
}

INSTANTIATE_TEST_SUITE_P(Representative, KernelSnapshot, testing::ValuesIn(kSnapshotIds),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// Every registered kernel compiles for the archs the engine targets (straight through NVRTC: no cache). A kernel's
// source is its two header lines, the inlined .cuh text (the body) and its explicit instantiation
// (Kernel::source()); the kernels of one body — a family's dtypes and constants — are compiled as one program with
// every instantiation (at most kPerProgram), so the toolkit headers are parsed once per program instead of once per
// kernel (494 kernels make 21 bodies): each instantiation still compiles, is lowered and lands in the cubin. A
// program that fails is compiled again one kernel at a time, so the failure names the kernel.
TEST(KernelRegistry, EveryKernelCompilesForSm80AndSm90a) {
  constexpr size_t kPerProgram = 16;
  const std::string marker = "// ---- instantiation ----\n";
  struct Program {
    std::string body;
    std::vector<const Kernel*> kernels;
  };
  std::map<std::string, std::vector<const Kernel*>> by_body;
  for (const Kernel* k : KernelRegistry::global().kernels()) {
    const std::string& src = k->source();
    const size_t head = src.find('\n', src.find('\n') + 1) + 1, inst = src.rfind(marker);
    ASSERT_TRUE(head > 0 && inst != std::string::npos && inst > head) << k->id() << ": unexpected source layout";
    by_body[src.substr(head, inst - head)].push_back(k);
  }
  std::vector<Program> programs;
  for (const auto& [body, kernels] : by_body)
    for (size_t i = 0; i < kernels.size(); i += kPerProgram)
      programs.push_back({body, std::vector<const Kernel*>(kernels.begin() + static_cast<std::ptrdiff_t>(i),
                                                           kernels.begin() + static_cast<std::ptrdiff_t>(
                                                                                 std::min(i + kPerProgram, kernels.size())))});
  // The largest programs first: the threads end together.
  std::stable_sort(programs.begin(), programs.end(),
                   [](const Program& a, const Program& b) { return a.kernels.size() > b.kernels.size(); });
  const std::vector<std::string> archs = {"sm_80", "sm_90a"};
  std::mutex mutex;
  std::vector<std::string> failures;
  size_t compiled = 0;
  parallel_for(programs.size() * archs.size(), [&](size_t i) {
    const Program& p = programs[i / archs.size()];
    const std::string& arch = archs[i % archs.size()];
    std::string source = p.body + marker;
    std::vector<std::string> exprs;
    for (const Kernel* k : p.kernels) {
      const std::string& src = k->source();
      source += src.substr(src.rfind(marker) + marker.size());
      exprs.push_back(k->name_expression());
    }
    try {
      const CompiledProgram c = compile_program(p.kernels.front()->id() + "+.cu", source, exprs, arch);
      if (c.cubin.empty()) throw Error("no cubin");
      for (size_t j = 0; j < exprs.size(); ++j)
        if (c.lowered_names[j].empty()) throw Error("no lowered name for " + exprs[j]);
      std::lock_guard lock(mutex);
      compiled += exprs.size();
    } catch (const std::exception&) {
      for (const Kernel* k : p.kernels) {  // one at a time, to name the kernel that fails
        try {
          const CompiledKernel c = compile({k->id() + ".cu", k->source(), k->name_expression(), arch});
          if (c.cubin.empty() || c.lowered_name.empty()) throw Error("no cubin or lowered name");
          std::lock_guard lock(mutex);
          ++compiled;
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          failures.push_back(k->id() + " for " + arch + ": " + e.what());
        }
      }
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(compiled + failures.size(), KernelRegistry::global().kernels().size() * archs.size());
}

// The kernels whose per-element arithmetic their CPU twins share take it from the shared header, one source for both
// (docs/architecture.md): the source of every registered kernel of each family inlines that header.
TEST(KernelRegistry, TwinnedKernelsInlineTheirSharedMath) {
  const std::vector<std::pair<std::string, std::string>> families = {
      {"ciou_", "vision/models/yolo/kernels/loss/ciou_math.cuh"},
      {"bce_cls_", "vision/models/yolo/kernels/loss/cls_math.cuh"},
      {"l1_distance_", "vision/models/yolo/kernels/loss/cls_math.cuh"},
      {"assigner_", "vision/models/yolo/kernels/loss/assigner_math.cuh"},
      {"detect_decode_", "vision/models/yolo/kernels/detect_decode_math.cuh"},
      {"postprocess_", "vision/models/yolo/kernels/postprocess_math.cuh"},
      {"sgd_step_", "vision/train/optim_math.cuh"},
      {"adamw_step_", "vision/train/optim_math.cuh"},
      {"muon_prepare_", "vision/train/optim_math.cuh"},
      {"muon_normalize_", "vision/train/optim_math.cuh"},
      {"ema_update_", "vision/train/optim_math.cuh"},
  };
  const std::vector<const Kernel*> kernels = KernelRegistry::global().kernels();
  for (const auto& [prefix, header] : families) {
    int count = 0;
    for (const Kernel* k : kernels) {
      if (!k->id().starts_with(prefix)) continue;
      ++count;
      EXPECT_NE(k->source().find("// ---- " + header + " ----\n"), std::string::npos)
          << k->id() << " does not take its arithmetic from " << header;
    }
    EXPECT_GT(count, 0) << "no registered kernel starts with " << prefix;
  }
}

// What `vision kernels source ID…` prints is each kernel's source, one after the other (every kernel, in one run),
// and `vision kernels list` lists every kernel.
TEST(KernelsCommand, SourceOutputIsTheKernelSource) {
  if (!fs::exists(VISION_CLI)) VISION_SKIP_OR_FAIL(std::string(VISION_CLI) + " is not built (the vision_cli target)");
  int status = 0;
  const std::string help = run_command(std::string(VISION_CLI) + " --help 2>&1", &status);
  if (help.find("\n  kernels ") == std::string::npos)  // listed under Subcommands
    VISION_SKIP_OR_FAIL("this vision binary has no `kernels` command (not wired into apps/vision/main.cpp)");

  const std::vector<const Kernel*> all_kernels = KernelRegistry::global().kernels();
  ASSERT_GT(all_kernels.size(), 20u) << "too few kernels registered";
  std::string command = std::string(VISION_CLI) + " kernels source", expected;
  for (const Kernel* k : all_kernels) {
    command += " " + k->id();
    expected += k->source();
  }
  const std::string printed = run_command(command, &status);
  EXPECT_EQ(status, 0);
  if (printed != expected) {  // name the first kernel whose text differs
    size_t at = 0;
    for (const Kernel* k : all_kernels) {
      if (printed.compare(at, k->source().size(), k->source()) != 0) {
        ADD_FAILURE() << "`vision kernels source` printed another text for " << k->id();
        break;
      }
      at += k->source().size();
    }
    EXPECT_EQ(printed.size(), expected.size());
  }
  // One unknown name among known ones: an error, and nothing printed.
  const std::string bad = run_command(std::string(VISION_CLI) + " kernels source " + all_kernels.front()->id() +
                                          " no_such_kernel 2>/dev/null",
                                      &status);
  EXPECT_NE(status, 0);
  EXPECT_EQ(bad, "");

  const std::string list = run_command(std::string(VISION_CLI) + " kernels list", &status);
  EXPECT_EQ(status, 0);
  std::string ids;
  for (const Kernel* k : all_kernels) ids += k->id() + "\n";
  EXPECT_EQ(list, ids);
}
