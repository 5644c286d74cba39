// FlashAttention-2 on CUDA: the kernel descriptors (no GPU needed), every kernel through its launch helper against a
// float64 reference (and, in f32, the CPU twin) in f32, f16 and bf16 with poisoned outputs, a CUDA-graph capture of
// the launches, and the graph op on the CUDA backend against the CPU backend (forward_train + backward through
// graph::Executor, and inference replayed as a CUDA graph). GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "error_bounds.h"
#include "models/yolo/attention_reference.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/ops/attention/flash_attn2.h"
#include "vision/ops/attention/flash_attn2_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"
#include "vision/ops/reduce.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_flash_attn2_gpu_cpp {

using namespace vision;
using namespace vision::test;
using namespace vision::ops::attention;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

constexpr std::pair<int, int> kHeadSizes[] = {{16, 16}, {32, 32}, {64, 64},  {128, 128},
                                              {16, 32}, {32, 64}, {64, 128}, {128, 256}};
constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// ---------------------------------------------------------------------------------------------------------------
// Descriptors (no GPU)

TEST(FlashAttention2Descriptors, IdsNameExpressionsSharedMemoryAndRegistry) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("flash_attention2_")) ids.insert(k->id());
  // forward, dQ, dK/dV per (dtype, d, d_v); preprocess per (dtype, d_v); for f16/bf16 also dK/dV+dQ per (d, d_v),
  // the wgmma forward and backward per (d, d_v ≤ 128) (7 pairs) and the dQ conversion.
  EXPECT_EQ(ids.size(), 3u * (3 * 8 + 5) + 2u * (8 + 2 * 7 + 1));

  for (DType dt : kDtypes) {
    const std::string t(core::dtype_name(dt));
    for (const auto& [d, dv] : kHeadSizes) {
      const std::string sizes = "__d" + std::to_string(d) + "_dv" + std::to_string(dv);
      const FlashAttention2Forward f(dt, d, dv);
      const FlashAttention2BackwardDq q(dt, d, dv);
      const FlashAttention2BackwardDkv kv(dt, d, dv);
      EXPECT_EQ(f.id(), "flash_attention2_forward__" + t + sizes);
      EXPECT_EQ(q.id(), "flash_attention2_backward_dq__" + t + sizes);
      EXPECT_EQ(kv.id(), "flash_attention2_backward_dkv__" + t + sizes);
      const std::pair<const cuda::Kernel*, const FlashAttention2Instance*> all[] = {
          {&f, &f.instance}, {&q, &q.instance}, {&kv, &kv.instance}};
      for (const auto& [k, in] : all) {
        EXPECT_TRUE(ids.count(k->id())) << k->id();
        EXPECT_EQ(in->tiles.block_m, flash_attention2_tiles(in->kernel, dt, d, dv).block_m);
        // The name expression is what the .cuh's templates expect, tiles included.
        EXPECT_EQ(k->name_expression(), flash_attention2_kernel_name(in->kernel, dt, d, dv, in->tiles)) << k->id();
        EXPECT_EQ(in->smem_bytes, flash_attention2_smem_bytes(in->kernel, dt, d, dv, in->tiles)) << k->id();
        EXPECT_NE(k->source().find("template __global__ void " + k->name_expression() + "("), std::string::npos);
      }
    }
    for (int dv : {16, 32, 64, 128, 256}) {
      const FlashAttention2BackwardPreprocess p(dt, dv);
      EXPECT_EQ(p.id(), "flash_attention2_backward_preprocess__" + t + "__dv" + std::to_string(dv));
      EXPECT_TRUE(ids.count(p.id())) << p.id();
      EXPECT_EQ(p.name_expression(), flash_attention2_kernel_name(FlashAttention2Kernel::backward_preprocess, dt, 16,
                                                                  dv, p.instance.tiles));
    }
  }
  const FlashAttention2Forward f(DType::bf16, 32, 64);
  EXPECT_EQ(f.name_expression(),
            "vision::ops::attention::flash_attention2_forward<__nv_bfloat16, 32, 64, 64, 64, 4>");
  EXPECT_TRUE(f.source().starts_with(
      "// flash_attention2_forward__bf16__d32_dv64: kernel flash_attention2_forward from "
      "vision/ops/attention/flash_attn2.cuh, element type __nv_bfloat16, d = 32, dv = 64, bm = 64, "
      "bn = 64, w = 4.\n"));
  EXPECT_EQ(f.arg_types(), (std::vector<std::string>{"const void*", "const void*", "const void*", "void*", "void*",
                                                     "int32_t", "int32_t", "float"}));
  // Some instantiations need more than the default 48 KiB (their launches raise the limit).
  EXPECT_GT(FlashAttention2Forward(DType::f32, 128, 256).instance.smem_bytes, cuda::Kernel::kDefaultMaxDynamicSharedBytes);
  EXPECT_THROW(FlashAttention2Forward(DType::f16, 24, 48), Error);
  EXPECT_THROW(FlashAttention2BackwardDkv(DType::i32, 32, 32), Error);
}

TEST(FlashAttention2Descriptors, LaunchHelpersRejectBadArgumentsBeforeAnyCudaCall) {
  auto* a = reinterpret_cast<void*>(uintptr_t{0x10000});  // aligned, never dereferenced: every call fails first
  auto* mis = reinterpret_cast<void*>(uintptr_t{0x10008});
  auto* f = static_cast<float*>(a);
  EXPECT_NE(error_of([&] { launch_flash_attention2_forward(nullptr, DType::f16, 24, 24, a, a, a, a, f, 1, 8, 8, 1.f); })
                .find("head size 24 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { launch_flash_attention2_forward(nullptr, DType::f16, 32, 40, a, a, a, a, f, 1, 8, 8, 1.f); })
                .find("value head size 40"),
            std::string::npos);
  EXPECT_THROW(launch_flash_attention2_forward(nullptr, DType::f32, 32, 32, a, a, a, a, f, 0, 8, 8, 1.f), Error);
  EXPECT_THROW(launch_flash_attention2_forward(nullptr, DType::f32, 32, 32, a, a, a, a, f, 70000, 8, 8, 1.f), Error);
  EXPECT_THROW(launch_flash_attention2_forward(nullptr, DType::f32, 32, 32, a, a, a, a, f, 1, 0, 8, 1.f), Error);
  EXPECT_NE(error_of([&] { launch_flash_attention2_forward(nullptr, DType::bf16, 32, 64, a, mis, a, a, f, 1, 8, 8, 1.f); })
                .find("k (0x10008) is not 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              launch_flash_attention2_forward(nullptr, DType::bf16, 32, 64, a, a, nullptr, a, f, 1, 8, 8, 1.f);
            }).find("v is null"),
            std::string::npos);
  EXPECT_THROW(launch_flash_attention2_backward_preprocess(nullptr, DType::f16, 64, a, a, f, 0), Error);
  EXPECT_THROW(launch_flash_attention2_backward_dq(nullptr, DType::f16, 32, 64, a, a, a, a, f, f, mis, 1, 8, 8, 1.f),
               Error);
  EXPECT_THROW(
      launch_flash_attention2_backward_dkv(nullptr, DType::f16, 32, 64, a, a, a, a, f, f, a, nullptr, 1, 8, 8, 1.f),
      Error);
  EXPECT_NE(error_of([&] {
              launch_flash_attention2_backward(nullptr, DType::f16, 32, 64, a, a, a, a, a, f, f, f, a, a, nullptr, 1,
                                               8, 8, 1.f);
            }).find("writes both gradients"),
            std::string::npos);
  EXPECT_THROW(launch_flash_attention2_backward(nullptr, DType::f16, 32, 64, a, a, a, a, a, f, f, f, a, a, a, 1, 8, 0,
                                                1.f),
               Error);
  EXPECT_NE(error_of([&] {
              launch_flash_attention2_backward_dkv_dq(nullptr, DType::f32, 32, 64, a, a, a, a, f, f, a, a, f, a, 1, 8,
                                                      8, 1.f);
            }).find("f16 or bf16"),
            std::string::npos);
  if (!flash_attention2_sm90_usable(DType::f16, 32, 64))  // no sm_90a device here: forcing the wgmma kernel fails
    EXPECT_NE(error_of([&] {
                launch_flash_attention2_forward(nullptr, DType::f16, 32, 64, a, a, a, a, f, 1, 8, 8, 1.f,
                                                FlashAttention2Path::sm90);
              }).find("needs an sm_90a GPU"),
              std::string::npos);
  EXPECT_NE(error_of([&] {
              launch_flash_attention2_forward(nullptr, DType::f16, 128, 256, a, a, a, a, f, 1, 8, 8, 1.f,
                                              FlashAttention2Path::sm90);
            }).find("d_v in {16, 32, 64, 128}"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Kernels on the GPU

// Compiles every registered FA2 kernel for this GPU into the disk cache on all cores, once, so that the tests below
// load them instead of compiling 87 programs one after another.
void warm_kernel_cache() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string arch = cuda::current_arch();
    std::vector<const cuda::Kernel*> kernels;
    for (const cuda::Kernel* k : cuda::KernelRegistry::global().kernels())
      if (k->id().starts_with("flash_attention2_")) kernels.push_back(k);
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::vector<std::string> failures;
    std::vector<std::thread> threads;
    const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
    for (unsigned t = 0; t < n; ++t)
      threads.emplace_back([&] {
        for (size_t i = next++; i < kernels.size(); i = next++) {
          try {
            kernels[i]->compile(arch);
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            failures.push_back(kernels[i]->id() + ": " + e.what());
          }
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& f : failures) ADD_FAILURE() << f;
  });
}

struct Problem {
  int bh, nq, nk;
};

// Every N ∈ {1, 7, 97, 400, 1025} and BH ∈ {1, 3} for every (d, d_v), with N_q ≠ N_k and N_k = 1 among them; the
// largest sizes only where the float64 reference stays cheap (BH 3 at N 400 for d + d_v ≤ 192; N 1025 for the
// d_v = 2d pairs, which cover every d).
// Under compute-sanitizer (tools/compute-sanitizer.sh sets VISION_TEST_SMALL=1) only the small ones, which still
// span several query and key tiles: racecheck instruments every shared-memory access, and the full set outruns a call.
std::vector<Problem> problems_for(int d, int dv) {
  std::vector<Problem> p = {{1, 1, 1}, {3, 7, 7}, {1, 97, 97}, {3, 97, 7}, {3, 97, 1}, {1, 7, 400}};
  if (const char* small = std::getenv("VISION_TEST_SMALL"); small != nullptr && std::string_view(small) == "1") {
    p.push_back({1, 200, 300});
    return p;
  }
  p.push_back(d + dv <= 192 ? Problem{3, 400, 400} : Problem{1, 400, 400});
  if (dv == 2 * d) p.push_back({1, 1025, 1025});
  return p;
}

// ‖out − ref‖ (NaN in out gives +inf).
double abs_norm_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
  }
  return std::sqrt(num);
}

// f32: IEEE arithmetic on both sides, only the order of operations differs (the relative norm the f32 kernels have
// always met; the rounding model below adds the element-wise check).
constexpr double kF32Bound = 1e-5;

std::vector<float> rounded_random(size_t n, DType dt) { return rounded(random_values(n), dt); }

// Device tensors of one problem: inputs uploaded, outputs poisoned (NaN).
struct DeviceProblem {
  DeviceProblem(DType dt, int d, int dv, const Problem& p)
      : elem(core::dtype_size(dt)),
        q(size_t(p.bh) * p.nq * d * elem),
        k(size_t(p.bh) * p.nk * d * elem),
        v(size_t(p.bh) * p.nk * dv * elem),
        go(size_t(p.bh) * p.nq * dv * elem),
        o(size_t(p.bh) * p.nq * dv * elem),
        dq(q.bytes()),
        dk(k.bytes()),
        dv(v.bytes()),
        lse(size_t(p.bh) * p.nq * 4),
        delta(size_t(p.bh) * p.nq * 4),
        dq_accum(size_t(p.bh) * p.nq * d * 4) {}
  void poison_outputs() {
    for (DeviceBuffer* b : {&o, &dq, &dk, &dv, &lse, &delta, &dq_accum}) b->poison();
  }
  size_t elem;
  DeviceBuffer q, k, v, go, o, dq, dk, dv, lse, delta, dq_accum;
};

class FlashAttention2Gpu : public testing::TestWithParam<std::tuple<DType, std::pair<int, int>>> {
 protected:
  void SetUp() override {
    VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
    warm_kernel_cache();
    VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// The kernel combinations a problem runs through: the mma.sync forward with the dQ and dK/dV kernels; on 16-bit
// types also the fused dK/dV + atomic dQ backward; on an sm_90a GPU also the wgmma forward and backward.
struct Variant {
  const char* name;
  FlashAttention2Path forward;
  bool fused_backward;
};
std::vector<Variant> variants_for(DType dt, int d, int dv) {
  std::vector<Variant> v{{"mma_sync forward, separate dQ and dK/dV", FlashAttention2Path::mma_sync, false}};
  if (dt != DType::f32) v.push_back({"mma_sync forward, fused dK/dV/dQ", FlashAttention2Path::mma_sync, true});
  if (flash_attention2_sm90_usable(dt, d, dv)) v.push_back({"sm90 forward and backward", FlashAttention2Path::sm90, true});
  return v;
}

std::vector<float> download(const DeviceBuffer& b, DType dt) {
  return decode(b.download(b.bytes()), dt);
}

TEST_P(FlashAttention2Gpu, EveryKernelMatchesFloat64AndTheCpuTwin) {
  const auto [dt, sizes] = GetParam();
  const auto [d, dv] = sizes;
  for (const Problem& pr : problems_for(d, dv))
  for (const Variant& variant : variants_for(dt, d, dv)) {
    SCOPED_TRACE(testing::Message() << core::dtype_name(dt) << " d " << d << " dv " << dv << " bh " << pr.bh
                                    << " nq " << pr.nq << " nk " << pr.nk << " " << variant.name);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const auto q = rounded_random(size_t(pr.bh) * pr.nq * d, dt), k = rounded_random(size_t(pr.bh) * pr.nk * d, dt),
               v = rounded_random(size_t(pr.bh) * pr.nk * dv, dt), go = rounded_random(size_t(pr.bh) * pr.nq * dv, dt);
    DeviceProblem g(dt, d, dv, pr);
    g.q.upload(encode(q, dt));
    g.k.upload(encode(k, dt));
    g.v.upload(encode(v, dt));
    g.go.upload(encode(go, dt));
    g.poison_outputs();

    launch_flash_attention2_forward(stream_, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.o.get(),
                                    static_cast<float*>(g.lse.get()), pr.bh, pr.nq, pr.nk, scale, variant.forward);
    launch_flash_attention2_backward_preprocess(stream_, dt, dv, g.o.get(), g.go.get(),
                                                static_cast<float*>(g.delta.get()), int64_t{pr.bh} * pr.nq);
    const auto* lse = static_cast<const float*>(g.lse.get());
    const auto* delta = static_cast<const float*>(g.delta.get());
    if (variant.fused_backward) {
      launch_flash_attention2_backward_dkv_dq(stream_, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.go.get(), lse,
                                              delta, g.dk.get(), g.dv.get(), static_cast<float*>(g.dq_accum.get()),
                                              g.dq.get(), pr.bh, pr.nq, pr.nk, scale, variant.forward);
    } else {
      launch_flash_attention2_backward_dq(stream_, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.go.get(), lse, delta,
                                          g.dq.get(), pr.bh, pr.nq, pr.nk, scale);
      launch_flash_attention2_backward_dkv(stream_, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.go.get(), lse,
                                           delta, g.dk.get(), g.dv.get(), pr.bh, pr.nq, pr.nk, scale);
    }
    VISION_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto o = download(g.o, dt), dq = download(g.dq, dt), dk = download(g.dk, dt), dvv = download(g.dv, dt),
               lse_out = download(g.lse, DType::f32), delta_out = download(g.delta, DType::f32);

    const AttentionSizes sizes{pr.bh, pr.nq, pr.nk, d, dv};
    const std::vector<double> go_ref = to_double(go);
    const AttentionReference r =
        attention_reference(to_double(q), to_double(k), to_double(v), &go_ref, sizes, scale, dt);
    // Every output against float64 within the rounding model of the dtype (error_bounds.h, attention_reference.h: P
    // and dS rounded to the dtype, o rounded before delta, f32 elsewhere), element by element and as a norm.
    const int64_t chain = attention_reduction_length(sizes);
    EXPECT_TRUE(within_rounding(o, r.o, r.o_terms, dt, chain)) << "o";
    EXPECT_TRUE(within_rounding(delta_out, r.delta, r.delta_terms, dt, chain)) << "delta";
    EXPECT_TRUE(within_rounding(dq, r.dq, r.dq_terms, dt, chain)) << "dq";
    EXPECT_TRUE(within_rounding(dk, r.dk, r.dk_terms, dt, chain)) << "dk";
    EXPECT_TRUE(within_rounding(dvv, r.dv, r.dv_terms, dt, chain)) << "dv";
    // lse is f32 arithmetic on exactly representable inputs in every dtype (the row sums add P̃ before it is rounded):
    // the f32 kernels' absolute bound.
    EXPECT_LT(max_abs_error(lse_out, r.lse), 1e-5) << "lse";

    if (dt == DType::f32) {  // also the relative norms the f32 kernels have always met
      EXPECT_LT(rel_error(o, r.o), kF32Bound) << "o";
      // delta is one sum per row that may cancel: over a handful of rows its norm is the relative error of single
      // near-zero sums, which no f32 bound holds. Each row is held to its rounding bound above.
      if (delta_out.size() >= 64) EXPECT_LT(rel_error(delta_out, r.delta), kF32Bound) << "delta";
      // With one key, dq and dk are exactly 0: their error is then an absolute norm.
      const double bound_qk = pr.nk == 1 ? 1e-4 : kF32Bound;
      EXPECT_LT(rel_error(dq, r.dq), bound_qk) << "dq";
      EXPECT_LT(rel_error(dk, r.dk), bound_qk) << "dk";
      EXPECT_LT(rel_error(dvv, r.dv), kF32Bound) << "dv";

      // The CPU twin on the same inputs.
      const Tensor tq = Tensor::from_vector(Shape{pr.bh, pr.nq, d}, q), tk = Tensor::from_vector(Shape{pr.bh, pr.nk, d}, k),
                   tv = Tensor::from_vector(Shape{pr.bh, pr.nk, dv}, v),
                   tgo = Tensor::from_vector(Shape{pr.bh, pr.nq, dv}, go);
      const Tensor to = Tensor::zeros(Shape{pr.bh, pr.nq, dv}), tl = Tensor::zeros(Shape{pr.bh, pr.nq}),
                   td = Tensor::zeros(Shape{pr.bh, pr.nq}), tdq = Tensor::zeros(tq.shape()),
                   tdk = Tensor::zeros(tk.shape()), tdv = Tensor::zeros(tv.shape());
      flash_attention2_forward_cpu(tq, tk, tv, scale, to, tl);
      flash_attention2_backward_preprocess_cpu(to, tgo, td);
      flash_attention2_backward_dq_cpu(tq, tk, tv, tgo, tl, td, scale, tdq);
      flash_attention2_backward_dkv_cpu(tq, tk, tv, tgo, tl, td, scale, tdk, tdv);
      EXPECT_LT(rel_error(o, to.to_vector()), 1e-5) << "o vs CPU twin";
      // lse may be near 0 (one key): an absolute bound, as against float64 above.
      EXPECT_LT(max_abs_error(lse_out, tl.to_vector()), 1e-5) << "lse vs CPU twin";
      // With one key both are rounding noise around 0: compared as an absolute norm.
      const auto grad_error = [&](const std::vector<float>& out, const Tensor& twin) {
        return pr.nk == 1 ? abs_norm_error(out, twin.to_vector()) : rel_error(out, twin.to_vector());
      };
      EXPECT_LT(grad_error(dq, tdq), pr.nk == 1 ? 1e-4 : 1e-5) << "dq vs CPU twin";
      EXPECT_LT(grad_error(dk, tdk), pr.nk == 1 ? 1e-4 : 1e-5) << "dk vs CPU twin";
      EXPECT_LT(rel_error(dvv, tdv.to_vector()), 1e-5) << "dv vs CPU twin";
    }
  }
}

std::string gpu_case_name(const testing::TestParamInfo<std::tuple<DType, std::pair<int, int>>>& info) {
  const auto& [dt, s] = info.param;
  return std::string(core::dtype_name(dt)) + "_d" + std::to_string(s.first) + "_dv" + std::to_string(s.second);
}

INSTANTIATE_TEST_SUITE_P(AllHeadSizes, FlashAttention2Gpu,
                         testing::Combine(testing::ValuesIn(kDtypes), testing::ValuesIn(kHeadSizes)), gpu_case_name);

// The launches, captured into a CUDA graph after one eager run (which loads the kernels and raises shared-memory
// limits), replay to the eager results, bit for bit. f32 at (128, 256) needs more than 48 KiB per CTA.
TEST(FlashAttention2GpuCapture, ForwardAndBackwardReplayFromACudaGraph) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  warm_kernel_cache();
  for (const auto& [dt, d, dv] : {std::tuple{DType::bf16, 32, 64}, std::tuple{DType::f32, 128, 256}}) {
    SCOPED_TRACE(core::dtype_name(dt));
    const Problem pr{3, 97, 130};
    DeviceProblem g(dt, d, dv, pr);
    g.q.upload(encode(rounded_random(size_t(pr.bh) * pr.nq * d, dt), dt));
    g.k.upload(encode(rounded_random(size_t(pr.bh) * pr.nk * d, dt), dt));
    g.v.upload(encode(rounded_random(size_t(pr.bh) * pr.nk * dv, dt), dt));
    g.go.upload(encode(rounded_random(size_t(pr.bh) * pr.nq * dv, dt), dt));
    cudaStream_t s = nullptr;
    VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto run = [&] {
      launch_flash_attention2_forward(s, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.o.get(),
                                      static_cast<float*>(g.lse.get()), pr.bh, pr.nq, pr.nk, 0.125f);
      // Deterministic mode (no dq_accum), so that the replay can be compared bit for bit.
      launch_flash_attention2_backward(s, dt, d, dv, g.q.get(), g.k.get(), g.v.get(), g.o.get(), g.go.get(),
                                       static_cast<const float*>(g.lse.get()), static_cast<float*>(g.delta.get()),
                                       nullptr, g.dq.get(), g.dk.get(), g.dv.get(), pr.bh, pr.nq, pr.nk, 0.125f);
    };
    auto results = [&] {
      VISION_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<std::vector<uint8_t>> r;
      for (DeviceBuffer* b : {&g.o, &g.lse, &g.dq, &g.dk, &g.dv}) r.push_back(b->download(b->bytes()));
      return r;
    };
    g.poison_outputs();
    run();
    const auto eager = results();
    for (size_t i = 0; i < eager.size(); ++i)
      for (float x : decode(eager[i], i == 1 ? DType::f32 : dt)) ASSERT_TRUE(std::isfinite(x)) << "output " << i;

    g.poison_outputs();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    VISION_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      run();
    } catch (...) {
      (void)cudaStreamEndCapture(s, &graph);
      throw;
    }
    VISION_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    VISION_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    VISION_CUDA_CHECK(cudaGraphLaunch(exec, s));
    EXPECT_EQ(results(), eager);
    VISION_CUDA_CHECK(cudaGraphExecDestroy(exec));
    VISION_CUDA_CHECK(cudaGraphDestroy(graph));
    VISION_CUDA_CHECK(cudaStreamDestroy(s));
  }
}

TEST(FlashAttention2GpuCapture, SharedMemoryBeyondTheDeviceIsAnError) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  warm_kernel_cache();
  const FlashAttention2Forward& f = cuda::kernel_instance<FlashAttention2Forward>(DType::f32, 128, 256);
  EXPECT_NO_THROW(f.set_max_dynamic_shared_memory(f.instance.smem_bytes));
  EXPECT_NO_THROW(f.set_max_dynamic_shared_memory(1024));  // within the default: nothing to do
  const std::string msg = error_of([&] { f.set_max_dynamic_shared_memory(size_t{4} << 20); });
  EXPECT_NE(msg.find("needs 4194304 bytes of dynamic shared memory"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// The graph op on the CUDA backend against the CPU backend

// y[b] = x[b] + p for b < BH, p a trainable [N, C] parameter "p" (CPU: loops; CUDA: the element-wise add kernels),
// so that the gradient of p is the sum over BH of the gradient of y.
class AddParamRuntime : public graph::RuntimeOp {
 public:
  explicit AddParamRuntime(graph::Backend backend) : backend_(backend) {}
  std::string name() const override { return "test.add_param"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"p", Shape{in[0][1], in[0][2]}}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&,
                                         uint64_t seed) const override {
    return graph::bytes_of(graph::uniform_init(Shape{in[0][1], in[0][2]}, 1.0f, seed));
  }
  void forward(graph::ForwardCtx& ctx) override {
    const Tensor &x = ctx.inputs[0], &p = ctx.params[0];
    const int64_t bh = x.dim(0), n = p.numel();
    if (backend_ == graph::Backend::cpu) {
      for (int64_t i = 0; i < x.numel(); ++i)
        ctx.output.data<float>()[i] = x.data<float>()[i] + p.data<float>()[i % n];
      return;
    }
    for (int64_t b = 0; b < bh; ++b)
      ops::kernels::launch_add_forward(stream(ctx.backend), DType::f32, x.data<float>() + b * n, p.raw(),
                                       ctx.output.data<float>() + b * n, n);
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const Tensor &gy = ctx.grad_output, &gp = ctx.grad_params[0];
    const int64_t bh = gy.dim(0), n = gp.numel();
    if (backend_ == graph::Backend::cpu) {
      if (ctx.grad_inputs[0].defined()) ctx.grad_inputs[0].copy_from(gy);
      for (int64_t i = 0; i < n; ++i) gp.data<float>()[i] = 0;
      for (int64_t i = 0; i < gy.numel(); ++i) gp.data<float>()[i % n] += gy.data<float>()[i];
      return;
    }
    const cudaStream_t s = stream(ctx.backend);
    if (ctx.grad_inputs[0].defined())
      VISION_CUDA_CHECK(cudaMemcpyAsync(ctx.grad_inputs[0].raw(), gy.raw(), gy.nbytes(), cudaMemcpyDeviceToDevice, s));
    VISION_CUDA_CHECK(cudaMemcpyAsync(gp.raw(), gy.raw(), gp.nbytes(), cudaMemcpyDeviceToDevice, s));
    for (int64_t b = 1; b < bh; ++b)
      ops::kernels::launch_add_forward(s, DType::f32, gp.raw(), gy.data<float>() + b * n, gp.raw(), n);
  }

 private:
  static cudaStream_t stream(graph::BackendContext* b) { return graph::CudaBackendContext::of(b).stream(); }
  graph::Backend backend_;
};

class AddParamOp : public graph::Op {
 public:
  std::string name() const override { return "test.add_param"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode) const override {
    return std::make_unique<AddParamRuntime>(backend);
  }
};

// x_q, x_k, x_v [?, N, d | d | d_v] → q = x_q + p_q, k = x_k + p_k (or x_k itself), v = x_v + p_v →
// o = attention(q, k, v) → loss = ½ Σ o².
struct AttentionGraph {
  std::shared_ptr<graph::Graph> graph;
  graph::SymTensor o;
};
AttentionGraph attention_graph(int64_t n, int64_t d, int64_t dv, float scale, bool k_param) {
  AttentionGraph a;
  a.graph = std::make_shared<graph::Graph>();
  graph::Graph& g = *a.graph;
  auto xq = g.input("xq", Shape{Shape::kAny, n, d});
  auto xk = g.input("xk", Shape{Shape::kAny, n, d});
  auto xv = g.input("xv", Shape{Shape::kAny, n, dv});
  auto q = g.apply(std::make_shared<AddParamOp>(), {xq}, "q");
  auto k = k_param ? g.apply(std::make_shared<AddParamOp>(), {xk}, "k") : xk;
  auto v = g.apply(std::make_shared<AddParamOp>(), {xv}, "v");
  a.o = flash_attention2(q, k, v, scale);
  g.mark_output(ops::sum_squares(a.o, "loss"));
  return a;
}

void check_graph_on_cuda(int64_t bh, int64_t n, int64_t d, int64_t dv, bool k_param) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionGraph a = attention_graph(n, d, dv, scale, k_param);
  graph::Executor cpu(a.graph, graph::cpu_backend());
  graph::Executor gpu(a.graph, graph::cuda_backend());
  const std::vector<Tensor> x = {random_tensor(Shape{bh, n, d}), random_tensor(Shape{bh, n, d}),
                                 random_tensor(Shape{bh, n, dv})};

  const std::vector<float> loss_cpu = to_host(cpu, cpu.forward_train(x)[0]);
  cpu.backward();
  const std::vector<float> loss_gpu = to_host(gpu, gpu.forward_train(x)[0]);
  gpu.backward();
  EXPECT_LT(rel_error(loss_gpu, loss_cpu), 1e-5) << "loss";
  EXPECT_LT(rel_error(to_host(gpu, gpu.last_train_plan()->value(a.o.id())),
                      to_host(cpu, cpu.last_train_plan()->value(a.o.id()))),
            1e-5)
      << "o";
  std::vector<std::string> params = {"q.p", "v.p"};
  if (k_param) params.push_back("k.p");
  for (const std::string& p : params) {
    // Both backends start from the same initial state (seeded by name).
    EXPECT_EQ(to_host(gpu, gpu.state().tensor(p)), to_host(cpu, cpu.state().tensor(p))) << p;
    EXPECT_LT(rel_error(to_host(gpu, gpu.state().grad(p)), to_host(cpu, cpu.state().grad(p))), 1e-5) << "grad " << p;
  }
  const auto& kernels = gpu.last_train_plan()->steps();
  bool listed = false;
  for (const auto& s : kernels)
    if (s.runtime->name() == "ops.flash_attention2") {
      const auto infos = s.runtime->kernels();
      ASSERT_EQ(infos.size(), 4u);
      EXPECT_EQ(infos[0].id, "flash_attention2_forward__f32__d" + std::to_string(d) + "_dv" + std::to_string(dv));
      listed = true;
    }
  EXPECT_TRUE(listed);

  // Inference: the third forward replays a captured CUDA graph.
  const float ref = to_host(cpu, cpu.forward(x)[0])[0];
  for (int run = 0; run < 3; ++run) EXPECT_NEAR(to_host(gpu, gpu.forward(x)[0])[0], ref, 1e-5 * std::abs(ref)) << run;
  EXPECT_TRUE(gpu.plan(graph::Mode::inference, {x[0].shape(), x[1].shape(), x[2].shape()}).graph_replayed());
}

TEST(FlashAttention2GraphCuda, TrainingAndInferenceMatchTheCpuBackend) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  warm_kernel_cache();
  check_graph_on_cuda(/*bh=*/3, /*n=*/97, /*d=*/32, /*dv=*/64, /*k_param=*/true);
}

// k needs no gradient: the dK/dV kernel writes dK into the op's workspace scratch.
TEST(FlashAttention2GraphCuda, InputWithoutGradientUsesScratch) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  warm_kernel_cache();
  check_graph_on_cuda(/*bh=*/2, /*n=*/400, /*d=*/16, /*dv=*/16, /*k_param=*/false);
}

}  // namespace

}  // namespace test_flash_attn2_gpu_cpp
