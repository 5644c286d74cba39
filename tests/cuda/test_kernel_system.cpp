// The kernel system without a GPU: embedding, descriptors, registry, NVRTC compile, status checks, device probe.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/cuda/embedded.h"
#include "vision/cuda/kernel.h"
#include "vision/cuda/sha256.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"
#include "vision/ops/kernels/maxpool_cuda.h"

using namespace vision;
using namespace vision::cuda;
using vision::core::DType;

using vision::test::error_of;
using vision::test::read_file;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CudaCheck, NamesTheCallAndTheError) {
  auto fake_malloc = [] { return cudaErrorMemoryAllocation; };
  const std::string msg = error_of([&] { VISION_CUDA_CHECK(fake_malloc()); });
  EXPECT_EQ(msg.rfind("fake_malloc() failed: out of memory (cudaErrorMemoryAllocation) at test_kernel_system.cpp:", 0),
            0u)
      << msg;
  EXPECT_NO_THROW(VISION_CUDA_CHECK(cudaSuccess));

  auto fake_compile = [] { return NVRTC_ERROR_INVALID_OPTION; };
  const std::string nv = error_of([&] { VISION_NVRTC_CHECK(fake_compile()); });
  EXPECT_EQ(nv.rfind("fake_compile() failed: NVRTC_ERROR_INVALID_OPTION", 0), 0u) << nv;
}

// Runs in a child process that sees no GPU (CUDA_VISIBLE_DEVICES empty), on a GPU host too.
TEST(CudaCheck, RealCallWithoutGpu) {
  VISION_RUN_WITHOUT_GPU();
  ASSERT_FALSE(gpu_available()) << "CUDA_VISIBLE_DEVICES is empty, yet a GPU is usable";
  void* p = nullptr;
  const std::string msg = error_of([&] { VISION_CUDA_CHECK(cudaMalloc(&p, 16)); });
  EXPECT_EQ(msg.rfind("cudaMalloc(&p, 16) failed: ", 0), 0u) << msg;
}

TEST(Device, ProbeAndArch) {
  if (gpu_available()) {
    EXPECT_TRUE(gpu_unavailable_reason().empty());
    const std::string arch = current_arch();
    EXPECT_NO_THROW(check_arch(arch)) << arch;
  } else {
    EXPECT_FALSE(gpu_unavailable_reason().empty());
    const std::string msg = error_of([] { current_arch(); });
    EXPECT_NE(msg.find("no usable CUDA GPU"), std::string::npos) << msg;
  }
  EXPECT_EQ(arch_for_compute_capability(9, 0), "sm_90a");
  EXPECT_EQ(arch_for_compute_capability(8, 6), "sm_86");
  EXPECT_EQ(arch_for_compute_capability(8, 0), "sm_80");
  EXPECT_EQ(arch_for_compute_capability(10, 0), "sm_100");
}

TEST(Nvrtc, ArchValidation) {
  for (const char* ok : {"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_120f", "compute_90", "compute_90a"})
    EXPECT_NO_THROW(check_arch(ok)) << ok;
  for (const char* bad : {"", "sm_9", "90", "sm_90x", "sm_", "compute", "sm_1000", "--gpu-architecture=sm_90"})
    EXPECT_THROW(check_arch(bad), Error) << bad;
  EXPECT_TRUE(is_real_arch("sm_90a"));
  EXPECT_FALSE(is_real_arch("compute_90a"));
  EXPECT_EQ(compile_options("sm_90a"), (std::vector<std::string>{"--gpu-architecture=sm_90a", "--std=c++17"}));
  // Only the architecture option follows the arch (the options are part of the kernel cache key).
  EXPECT_EQ(compile_options("sm_80"), (std::vector<std::string>{"--gpu-architecture=sm_80", "--std=c++17"}));
  EXPECT_EQ(compile_options("compute_90a"),
            (std::vector<std::string>{"--gpu-architecture=compute_90a", "--std=c++17"}));
  EXPECT_NE(compile_options("sm_80"), compile_options("sm_90a"));
  EXPECT_THROW(compile_options("sm_9"), Error);
  const std::string v = nvrtc_version();
  EXPECT_NE(v.find('.'), std::string::npos) << v;
}

TEST(Embedded, KernelSourcesMatchTheTree) {
  const auto files = embedded_kernel_sources();
  ASSERT_FALSE(files.empty());
  std::set<std::string> names;
  for (const EmbeddedFile& f : files) {
    EXPECT_TRUE(std::string_view(f.name).ends_with(".cuh")) << f.name;
    EXPECT_EQ(f.text, read_file(std::string(VISION_SOURCE_DIR) + "/src/" + std::string(f.name))) << f.name;
    names.insert(std::string(f.name));
  }
  EXPECT_TRUE(names.count("vision/ops/kernels/elementwise.cuh"));
  EXPECT_TRUE(names.count("vision/cuda/kernel_common.cuh"));
  EXPECT_EQ(embedded_kernel_source("vision/ops/kernels/elementwise.cuh"),
            read_file(std::string(VISION_SOURCE_DIR) + "/src/vision/ops/kernels/elementwise.cuh"));
  EXPECT_TRUE(embedded_kernel_source("vision/ops/kernels/nope.cuh").empty());
}

TEST(Embedded, ToolkitHeaders) {
  for (const char* name : {"cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp"}) {
    const std::string_view text = embedded_toolkit_header(name);
    EXPECT_GT(text.size(), 1000u) << name;
  }
  EXPECT_NE(embedded_toolkit_header("cuda_fp16.h").find("__CUDA_FP16_H__"), std::string_view::npos);
  EXPECT_TRUE(embedded_toolkit_header("cuda_runtime.h").empty());
}

TEST(KernelDescriptor, IdNameExpressionAndSource) {
  const ops::kernels::SiluForward silu(DType::f16);
  EXPECT_EQ(silu.name(), "silu_forward");
  EXPECT_EQ(silu.id(), "silu_forward__f16");
  EXPECT_EQ(silu.name_expression(), "silu_forward<__half>");
  EXPECT_EQ(silu.arg_types(), (std::vector<std::string>{"const void*", "void*", "int64_t"}));
  static_assert(std::is_same_v<ops::kernels::SiluForward::Args, std::tuple<const void*, void*, int64_t>>);

  const ops::kernels::MaxPool2dForward pool(DType::f32, {5, 1, 2});
  EXPECT_EQ(pool.id(), "maxpool2d_forward__f32__k5_s1_p2");
  EXPECT_EQ(pool.name_expression(), "maxpool2d_forward<float, 5, 1, 2>");

  const std::string& src = silu.source();
  EXPECT_TRUE(src.starts_with("// silu_forward__f16: kernel silu_forward from vision/ops/kernels/elementwise.cuh"));
  EXPECT_TRUE(src.ends_with("template __global__ void silu_forward<__half>(const __half*, __half*, int64_t);\n"))
      << src.substr(src.size() - 200);
  // The included vision header is inlined (once), toolkit includes are kept, #pragma once is gone.
  EXPECT_NE(src.find("// ---- vision/cuda/kernel_common.cuh ----"), std::string::npos);
  EXPECT_EQ(src.find("#include \"vision/"), std::string::npos);
  EXPECT_NE(src.find("#include <cuda_fp16.h>"), std::string::npos);
  EXPECT_EQ(src.find("#pragma once"), std::string::npos);
  // Deterministic, and free of paths.
  EXPECT_EQ(ops::kernels::SiluForward(DType::f16).source(), src);
  EXPECT_EQ(src.find(VISION_SOURCE_DIR), std::string::npos);

  const graph::KernelInfo info = graph::kernel_info(silu);
  EXPECT_EQ(info.name, "silu_forward");
  EXPECT_EQ(info.id, "silu_forward__f16");
  EXPECT_EQ(info.source, src);
}

namespace {
struct Mismatched : KernelDescriptor<const void*, void*, int64_t> {
  explicit Mismatched(const char* params)
      : KernelDescriptor(KernelSpec{"silu_forward", "vision/ops/kernels/elementwise.cuh", DType::f32, {}, params}) {}
};
}  // namespace

TEST(KernelDescriptor, ParamsMustAgreeWithArgs) {
  EXPECT_NO_THROW(Mismatched("const {T}*, {T}*, int64_t"));
  EXPECT_THROW(Mismatched("const {T}*, {T}*"), Error);                         // count
  EXPECT_THROW(Mismatched("{T}*, {T}*, int64_t"), Error);                      // constness
  EXPECT_THROW(Mismatched("const {T}*, {T}*, int"), Error);                    // width
  EXPECT_THROW(Mismatched("const {T}*, const {T}*, int64_t"), Error);          // output declared const
  EXPECT_THROW(ops::kernels::SiluForward(DType::i32), Error);                  // no kernel for that dtype
  EXPECT_THROW(ops::kernels::MaxPool2dForward(DType::f32, {3, 1, 2}), Error);  // p > k / 2
}

TEST(KernelRegistry, ListsEveryKernelOnce) {
  const auto kernels = KernelRegistry::global().kernels();
  ASSERT_GE(kernels.size(), 50u);
  std::set<std::string> ids;
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_TRUE(ids.insert(kernels[i]->id()).second) << kernels[i]->id();
    if (i > 0) EXPECT_LT(kernels[i - 1]->id(), kernels[i]->id());
    EXPECT_EQ(KernelRegistry::global().find(kernels[i]->id()), kernels[i]);
  }
  for (const char* id :
       {"silu_forward__f32", "silu_backward__bf16", "sigmoid_forward__f16", "add_backward__f32", "mul_backward__bf16",
        "permute_copy__f16", "permute_copy__bf16", "upsample_nearest2x_forward__f16",
        "upsample_nearest2x_backward__bf16", "maxpool2d_forward__f32__k5_s1_p2", "maxpool2d_backward__f16__k5_s1_p2"})
    EXPECT_TRUE(ids.count(id)) << id;
  EXPECT_EQ(KernelRegistry::global().find("silu_forward"), nullptr);
  EXPECT_THROW(KernelRegistry::global().add<ops::kernels::SiluForward>(DType::f32), Error);  // duplicate id
}

TEST(Nvrtc, CompilesAKernelToPtxAndCubin) {
  const ops::kernels::SiluForward silu(DType::bf16);
  const CompiledKernel k = compile({"silu_forward__bf16.cu", silu.source(), silu.name_expression(), "sm_90a"});
  EXPECT_EQ(k.arch, "sm_90a");
  EXPECT_EQ(k.lowered_name.rfind("_Z12silu_forward", 0), 0u) << k.lowered_name;
  EXPECT_NE(k.ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_NE(k.ptx.find(k.lowered_name), std::string::npos);
  EXPECT_GT(k.cubin.size(), 100u);
  EXPECT_EQ(k.cubin.substr(0, 4), (std::string{'\x7f', 'E', 'L', 'F'}));  // an ELF object

  const CompiledKernel v = compile({"silu_forward__bf16.cu", silu.source(), silu.name_expression(), "compute_90"});
  EXPECT_TRUE(v.cubin.empty());
  EXPECT_NE(v.ptx.find(".target sm_90"), std::string::npos);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  const std::string msg = error_of([] {
    compile({"broken.cu",
             "template <typename T> __global__ void k(T* p) { p[0] = undeclared; }\n"
             "template __global__ void k<float>(float*);\n",
             "k<float>", "sm_80"});
  });
  EXPECT_NE(msg.find("NVRTC could not compile broken.cu for sm_80"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--gpu-architecture=sm_80"), std::string::npos) << msg;
  EXPECT_NE(msg.find("identifier \"undeclared\" is undefined"), std::string::npos) << msg;
  EXPECT_THROW(compile({"x.cu", "__global__ void k() {}", "k", "sm_9"}), Error);
}

// One program holding several instantiations of one source: each name expression is lowered, all in one cubin, and
// each equals what the one-kernel compile of the same source lowers.
TEST(Nvrtc, CompilesSeveralKernelsOfOneProgram) {
  const std::string src =
      "template <typename T> __global__ void k(T* p) { p[0] = p[0] * T(2); }\n"
      "template __global__ void k<float>(float*);\n"
      "template __global__ void k<double>(double*);\n";
  const std::vector<std::string> exprs = {"k<float>", "k<double>"};
  const CompiledProgram p = compile_program("two.cu", src, exprs, "sm_80");
  ASSERT_EQ(p.lowered_names.size(), 2u);
  EXPECT_NE(p.lowered_names[0], p.lowered_names[1]);
  for (size_t i = 0; i < exprs.size(); ++i) {
    EXPECT_NE(p.ptx.find(p.lowered_names[i]), std::string::npos) << exprs[i];
    EXPECT_EQ(p.lowered_names[i], compile({"one.cu", src, exprs[i], "sm_80"}).lowered_name);
  }
  EXPECT_EQ(p.cubin.substr(0, 4), (std::string{'\x7f', 'E', 'L', 'F'}));
  EXPECT_THROW(compile_program("none.cu", src, {}, "sm_80"), Error);
  const std::string msg = error_of([&] {
    compile_program("broken.cu", src + "template __global__ void k<int>(undeclared*);\n", exprs, "sm_80");
  });
  EXPECT_NE(msg.find("NVRTC could not compile broken.cu for sm_80"), std::string::npos) << msg;
}

TEST(LaunchHelpers, RejectBadArgumentsBeforeAnyCudaCall) {
  using namespace ops::kernels;
  EXPECT_THROW(launch_silu_forward(nullptr, DType::i32, nullptr, nullptr, 4), Error);
  EXPECT_THROW(launch_silu_forward(nullptr, DType::f32, nullptr, nullptr, -1), Error);
  EXPECT_NO_THROW(launch_silu_forward(nullptr, DType::f32, nullptr, nullptr, 0));  // nothing to do, no launch
  EXPECT_THROW(launch_maxpool2d_forward(nullptr, DType::f32, core::Layout::nchw, {3, 1, 2}, nullptr, nullptr, nullptr,
                                        1, 1, 4, 4),
               Error);
  EXPECT_THROW(launch_maxpool2d_forward(nullptr, DType::f32, core::Layout::nhwc, {5, 1, 0}, nullptr, nullptr, nullptr,
                                        1, 1, 3, 3),
               Error);
  EXPECT_EQ(maxpool2d_output_size(20, {5, 1, 2}), 20);
  EXPECT_EQ(maxpool2d_output_size(7, {2, 2, 0}), 3);
  EXPECT_EQ(maxpool2d_output_size(7, {3, 2, 1}), 4);
}
