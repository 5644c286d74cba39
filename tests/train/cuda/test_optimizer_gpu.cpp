// The optimizer and EMA kernels on CUDA: their descriptors (no GPU needed); each fused kernel through its launch helper
// against its CPU twin (written outputs poisoned first; f32 arithmetic bit for bit, since both sides round every
// operation once in the same order); the batched bf16 Newton–Schulz on cuBLAS against the CPU twin; whole optimizers
// (SGD, AdamW, MuSGD, clipping, the non-finite skip) and the EMA on the CUDA backend against the CPU backend, and a
// MuSGD step over YOLO26n's real state. GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "train/optim_test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/cuda/memory.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/graph.h"
#include "vision/models/yolo/optim_rules.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/train/ema.h"
#include "vision/train/optim_kernels.h"
#include "vision/train/optim_kernels_cuda.h"
#include "vision/train/optim_math.cuh"
#include "vision/train/optimizer.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::optim;
using core::Shape;
using core::Tensor;
using train::EmaChunk;
using train::OptimChunk;
using train::OptimGroup;
using train::OptimStatus;
using train::OptimTensor;

namespace {

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return {p, p + v.size() * sizeof(T)};
}
template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
template <typename T>
struct Dev {
  explicit Dev(const std::vector<T>& v) : buf(std::max<size_t>(v.size(), 1) * sizeof(T)), n(v.size()) {
    if (!v.empty()) buf.upload(bytes_of(v));
  }
  T* get() const { return static_cast<T*>(buf.get()); }
  std::vector<T> download() const { return values_of<T>(buf.download(n * sizeof(T))); }
  DeviceBuffer buf;
  size_t n;
};

// A table of tensors in 3 groups, several of more than one chunk, two of them Muon tensors (one transposed).
struct Tables {
  std::vector<OptimTensor> tensors;
  std::vector<OptimChunk> chunks, muon_chunks;
  std::vector<int64_t> muon;
  std::vector<OptimGroup> groups;
  int64_t numel = 0, ns = 0;
};

Tables make_tables() {
  Tables t;
  auto add = [&](int64_t rows, int64_t cols, int64_t group, bool muon_tensor) {
    OptimTensor r{t.numel, rows * cols, group, -1, rows, cols, 0, 1.0f, 0.0f};
    if (muon_tensor) {
      r.ns_offset = t.ns;
      r.transposed = rows > cols;
      r.muon_scale = rows > cols ? 1.5f : 1.0f;
      t.ns += rows * cols;
      t.muon.push_back(static_cast<int64_t>(t.tensors.size()));
    }
    const int64_t index = static_cast<int64_t>(t.tensors.size());
    for (int64_t s = 0; s < r.numel; s += train::kOptimChunk) {
      const OptimChunk c{index, s, std::min<int64_t>(train::kOptimChunk, r.numel - s)};
      t.chunks.push_back(c);
      if (muon_tensor) t.muon_chunks.push_back(c);
    }
    t.numel += r.numel;
    t.tensors.push_back(r);
  };
  add(10000, 1, 0, false);
  add(5, 1, 1, false);
  add(64, 96, 2, true);    // 6144 elements, 2 chunks
  add(300, 20, 2, true);   // rows > cols: transposed
  add(4097, 1, 1, false);  // one element past a chunk
  for (int g = 0; g < 3; ++g) {
    OptimGroup G{};
    G.lr = 0.01f * (g + 1);
    G.momentum = 0.9f - 0.05f * g;
    G.weight_decay = g == 1 ? 0.0f : 5e-4f * (g + 1);
    G.one_minus_momentum = 1.0f - G.momentum;
    G.muon_lr = G.lr * 0.2f;
    G.decay_factor = 1.0f - G.lr * G.weight_decay;
    G.beta2 = 0.999f;
    G.one_minus_beta2 = 0.001f;
    G.eps = 1e-8f;
    G.step_size = G.lr / (1.0f - G.momentum * G.momentum * G.momentum);
    G.bc2_sqrt = std::sqrt(1.0f - 0.999f * 0.999f * 0.999f);
    t.groups.push_back(G);
  }
  return t;
}

std::vector<uint16_t> random_bf16(size_t n) {
  std::vector<uint16_t> v(n);
  const auto f = random_values(n);
  for (size_t i = 0; i < n; ++i) v[i] = train::to_bf16(f[i]);
  return v;
}

// Newton–Schulz without any rounding, in float64 (the size of the bf16 effect), on row-major m × n.
std::vector<double> newton_schulz_f64(std::vector<double> x, int64_t m, int64_t n, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  std::vector<double> A(static_cast<size_t>(m * m)), B(A.size()), Y(x.size());
  for (int it = 0; it < steps; ++it) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += x[static_cast<size_t>(i * n + k)] * x[static_cast<size_t>(j * n + k)];
        A[static_cast<size_t>(i * m + j)] = s;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t k = 0; k < m; ++k) s += A[static_cast<size_t>(i * m + k)] * A[static_cast<size_t>(k * m + j)];
        B[static_cast<size_t>(i * m + j)] = c * s + b * A[static_cast<size_t>(i * m + j)];
      }
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> acc(static_cast<size_t>(n), 0.0);
      for (int64_t k = 0; k < m; ++k)
        for (int64_t j = 0; j < n; ++j)
          acc[static_cast<size_t>(j)] += B[static_cast<size_t>(i * m + k)] * x[static_cast<size_t>(k * n + j)];
      for (int64_t j = 0; j < n; ++j)
        Y[static_cast<size_t>(i * n + j)] = acc[static_cast<size_t>(j)] + a * x[static_cast<size_t>(i * n + j)];
    }
    x.swap(Y);
  }
  return x;
}

// The tables on the device.
struct DevTables {
  explicit DevTables(const Tables& t)
      : tensors(t.tensors), chunks(t.chunks), muon_chunks(t.muon_chunks), muon(t.muon), groups(t.groups) {}
  Dev<OptimTensor> tensors;
  Dev<OptimChunk> chunks, muon_chunks;
  Dev<int64_t> muon;
  Dev<OptimGroup> groups;
};

graph::CudaBackendContext& cuda_ctx() { return graph::CudaBackendContext::of(graph::cuda_backend().get()); }

}  // namespace

TEST(OptimizerKernelDescriptors, EveryKernelIsRegistered) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->spec().file == "vision/train/optim.cuh") ids.insert(k->id());
  EXPECT_EQ(ids, (std::set<std::string>{"grad_sumsq_partial__f32", "grad_sumsq_finalize__f32", "sgd_step__f32",
                                        "adamw_step__f32", "muon_prepare__f32", "muon_normalize__bf16",
                                        "ema_update__f32"}));
  const auto& k = cuda::kernel_instance<train::SgdStep>();
  EXPECT_EQ(k.name_expression(), "vision::train::sgd_step<float>");
  EXPECT_NE(k.source().find("struct OptimTensor"), std::string::npos);  // the layout header is inlined
  const auto& ns = cuda::kernel_instance<train::NsGemm>();
  EXPECT_EQ(ns.id(), "ns_gemm__bf16");
  EXPECT_EQ(ns.name_expression(), "vision::train::ns_gemm<__nv_bfloat16>");
  EXPECT_NE(ns.source().find("mma.sync.aligned.m16n8k16.row.col.f32.bf16"), std::string::npos);
  EXPECT_NE(ns.source().find("struct NsTile"), std::string::npos);
}

// Each kernel against its CPU twin, on tables with multi-chunk tensors, three groups and two Muon tensors (one
// transposed). Out-of-place outputs (partials, sum, the Newton–Schulz input) are poisoned first; in-place updates
// start from the same random state on both sides. Every comparison is bit for bit.
TEST(OptimizerKernels, EachKernelMatchesItsCpuTwinBitForBit) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Tables t = make_tables();
  const DevTables dev(t);
  const auto n = static_cast<size_t>(t.numel);
  const auto grads = random_values(n), params = random_values(n), mom = random_values(n, -0.1f, 0.1f),
             sq = random_values(n, 0.0f, 0.01f);
  const float coef = 0.75f;
  const Dev<float> d_grads(grads);

  // Gradient sum of squares.
  {
    Dev<float> partials(std::vector<float>(t.chunks.size()));
    Dev<OptimStatus> status(std::vector<OptimStatus>(1));
    partials.buf.poison();
    status.buf.poison();
    train::launch_grad_sumsq(nullptr, d_grads.get(), dev.tensors.get(), dev.chunks.get(), static_cast<int64_t>(t.chunks.size()),
                             partials.get(), status.get(), 10.0f);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> ref(t.chunks.size());
    train::grad_sumsq_partials_cpu(grads.data(), t.tensors, t.chunks, ref.data());
    EXPECT_EQ(partials.download(), ref);
    const OptimStatus got = status.download()[0];
    const OptimStatus want = train::optim_math::decide_step(train::grad_sumsq_cpu(grads.data(), t.tensors, t.chunks),
                                                            10.0f);
    EXPECT_EQ(got.sumsq, want.sumsq);
    EXPECT_EQ(got.norm, want.norm);
    EXPECT_EQ(got.coef, want.coef);
    EXPECT_EQ(got.applied, 1);
    EXPECT_LT(got.coef, 1.0f);  // the random gradient's norm is above 10: clipped
  }
  // SGD with the Muon update of the two Muon tensors (and without: ns_out null, no Muon tensors).
  const auto ns_out = random_bf16(static_cast<size_t>(t.ns));
  {
    Dev<float> p(params), b(mom);
    const Dev<uint16_t> ns(ns_out);
    train::launch_sgd_step(nullptr, p.get(), d_grads.get(), b.get(), ns.get(), dev.tensors.get(), dev.chunks.get(),
                           static_cast<int64_t>(t.chunks.size()), dev.groups.get(), coef);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    auto rp = params, rb = mom;
    train::sgd_step_cpu(rp.data(), grads.data(), rb.data(), ns_out.data(), t.tensors, t.chunks, t.groups, coef);
    EXPECT_EQ(p.download(), rp);
    EXPECT_EQ(b.download(), rb);
    EXPECT_NE(rp, params);
  }
  {
    std::vector<OptimTensor> plain = t.tensors;
    for (auto& r : plain) r.ns_offset = -1;
    const Dev<OptimTensor> plain_d(plain);
    Dev<float> p(params), b(mom);
    train::launch_sgd_step(nullptr, p.get(), d_grads.get(), b.get(), nullptr, plain_d.get(), dev.chunks.get(),
                           static_cast<int64_t>(t.chunks.size()), dev.groups.get(), 1.0f);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    auto rp = params, rb = mom;
    train::sgd_step_cpu(rp.data(), grads.data(), rb.data(), nullptr, plain, t.chunks, t.groups, 1.0f);
    EXPECT_EQ(p.download(), rp);
    EXPECT_EQ(b.download(), rb);
  }
  // AdamW.
  {
    Dev<float> p(params), m1(mom), m2(sq);
    train::launch_adamw_step(nullptr, p.get(), d_grads.get(), m1.get(), m2.get(), dev.tensors.get(), dev.chunks.get(),
                             static_cast<int64_t>(t.chunks.size()), dev.groups.get(), coef);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    auto rp = params, r1 = mom, r2 = sq;
    train::adamw_step_cpu(rp.data(), grads.data(), r1.data(), r2.data(), t.tensors, t.chunks, t.groups, coef);
    EXPECT_EQ(p.download(), rp);
    EXPECT_EQ(m1.download(), r1);
    EXPECT_EQ(m2.download(), r2);
  }
  // Muon prepare (the workspace poisoned: every element must be written) and normalisation.
  {
    Dev<float> b(mom);
    Dev<uint16_t> ns(std::vector<uint16_t>(static_cast<size_t>(t.ns)));
    ns.buf.poison();
    train::launch_muon_prepare(nullptr, d_grads.get(), b.get(), ns.get(), dev.tensors.get(), dev.muon_chunks.get(),
                               static_cast<int64_t>(t.muon_chunks.size()), dev.groups.get(), coef);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    auto rb = mom;
    std::vector<uint16_t> rns(static_cast<size_t>(t.ns), 0xffff);
    train::muon_prepare_cpu(grads.data(), rb.data(), rns.data(), t.tensors, t.muon_chunks, t.groups, coef);
    EXPECT_EQ(b.download(), rb);
    EXPECT_EQ(ns.download(), rns);
    train::launch_muon_normalize(nullptr, ns.get(), dev.tensors.get(), dev.muon.get(), static_cast<int64_t>(t.muon.size()));
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    train::muon_normalize_cpu(rns.data(), t.tensors, t.muon);
    EXPECT_EQ(ns.download(), rns);
  }
  // EMA over two regions.
  {
    std::vector<EmaChunk> ec;
    for (int64_t s = 0; s < 9000; s += train::kOptimChunk) ec.push_back({0, 100 + s, s, std::min<int64_t>(train::kOptimChunk, 9000 - s)});
    ec.push_back({1, 3, 9000, 50});
    const Dev<EmaChunk> dec(ec);
    const auto bufs = random_values(64);
    const Dev<float> d_bufs(bufs);
    const auto ema0 = random_values(9050);
    Dev<float> ema(ema0);
    const Dev<float> decay(std::vector<float>{0.37f, 0.63f});
    train::launch_ema_update(nullptr, ema.get(), d_grads.get(), d_bufs.get(), dec.get(), static_cast<int64_t>(ec.size()),
                             decay.get());
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    auto ref = ema0;
    train::ema_update_cpu(ref.data(), grads.data(), bufs.data(), ec, 0.37f, 0.63f);
    EXPECT_EQ(ema.download(), ref);
  }
}

// The updates driven by a step's decision on the device (Optimizer::queue_step): with an applied decision they equal
// the CPU twin at the decision's factor, bit for bit; with a skipped one (a NaN gradient, decided by the same kernel)
// every update kernel and the EMA leave their buffers as they were.
TEST(OptimizerKernels, UpdatesFollowTheDecisionOnTheDevice) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Tables t = make_tables();
  const DevTables dev(t);
  const auto n = static_cast<size_t>(t.numel);
  const auto params = random_values(n), mom = random_values(n, -0.1f, 0.1f), sq = random_values(n, 0.0f, 0.01f);
  const auto n_chunks = static_cast<int64_t>(t.chunks.size());
  std::vector<OptimTensor> plain = t.tensors;  // SGD without the Muon update: no tensor reads the (null) workspace
  for (auto& r : plain) r.ns_offset = -1;
  const Dev<OptimTensor> plain_d(plain);
  for (const bool finite : {true, false}) {
    SCOPED_TRACE(finite ? "finite gradient" : "a NaN in the gradient");
    auto grads = random_values(n);
    if (!finite) grads[n / 2] = std::numeric_limits<float>::quiet_NaN();
    const Dev<float> d_grads(grads);
    Dev<float> partials(std::vector<float>(t.chunks.size()));
    Dev<OptimStatus> status(std::vector<OptimStatus>(1));
    status.buf.poison();
    train::launch_grad_sumsq(nullptr, d_grads.get(), dev.tensors.get(), dev.chunks.get(), n_chunks, partials.get(),
                             status.get(), 10.0f);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    const OptimStatus s = status.download()[0];
    ASSERT_EQ(s.applied, finite ? 1 : 0);
    const float coef = s.coef;  // the factor the CPU twin is given for an applied step
    {
      Dev<float> p(params), b(mom);
      train::launch_sgd_step(nullptr, p.get(), d_grads.get(), b.get(), nullptr, plain_d.get(), dev.chunks.get(), n_chunks,
                             dev.groups.get(), 123.0f, status.get());  // the decision's factor, not 123
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      auto rp = params, rb = mom;
      if (finite) train::sgd_step_cpu(rp.data(), grads.data(), rb.data(), nullptr, plain, t.chunks, t.groups, coef);
      EXPECT_EQ(p.download(), rp);
      EXPECT_EQ(b.download(), rb);
    }
    {
      Dev<float> p(params), m1(mom), m2(sq);
      train::launch_adamw_step(nullptr, p.get(), d_grads.get(), m1.get(), m2.get(), dev.tensors.get(), dev.chunks.get(),
                               n_chunks, dev.groups.get(), 123.0f, status.get());
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      auto rp = params, r1 = mom, r2 = sq;
      if (finite) train::adamw_step_cpu(rp.data(), grads.data(), r1.data(), r2.data(), t.tensors, t.chunks, t.groups, coef);
      EXPECT_EQ(p.download(), rp);
      EXPECT_EQ(m1.download(), r1);
      EXPECT_EQ(m2.download(), r2);
    }
    {
      Dev<float> b(mom);
      const auto ns0 = random_bf16(static_cast<size_t>(t.ns));
      Dev<uint16_t> ns(ns0);
      train::launch_muon_prepare(nullptr, d_grads.get(), b.get(), ns.get(), dev.tensors.get(), dev.muon_chunks.get(),
                                 static_cast<int64_t>(t.muon_chunks.size()), dev.groups.get(), 123.0f, status.get());
      train::launch_muon_normalize(nullptr, ns.get(), dev.tensors.get(), dev.muon.get(), static_cast<int64_t>(t.muon.size()),
                                   status.get());
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      auto rb = mom;
      auto rns = ns0;
      if (finite) {
        train::muon_prepare_cpu(grads.data(), rb.data(), rns.data(), t.tensors, t.muon_chunks, t.groups, coef);
        train::muon_normalize_cpu(rns.data(), t.tensors, t.muon);
      }
      EXPECT_EQ(b.download(), rb);
      EXPECT_EQ(ns.download(), rns);
    }
    {
      std::vector<EmaChunk> ec;
      for (int64_t off = 0; off < 9000; off += train::kOptimChunk)
        ec.push_back({0, off, off, std::min<int64_t>(train::kOptimChunk, 9000 - off)});
      const Dev<EmaChunk> dec(ec);
      const auto ema0 = random_values(9000);
      Dev<float> ema(ema0);
      const Dev<float> d_params(params);
      const Dev<float> decay(std::vector<float>{0.37f, 0.63f});
      train::launch_ema_update(nullptr, ema.get(), d_params.get(), nullptr, dec.get(), static_cast<int64_t>(ec.size()),
                               decay.get(), status.get());
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      auto ref = ema0;
      if (finite) train::ema_update_cpu(ref.data(), params.data(), nullptr, ec, 0.37f, 0.63f);
      EXPECT_EQ(ema.download(), ref);
    }
  }
}

// One Newton–Schulz result (5 iterations) against the CPU twin's from the same input, matrix by matrix, within the
// bounds argued below: count m × n matrices of gpu, cpu and x (the normalised input), each from element `offset`.
void expect_newton_schulz_near_twin(const std::vector<uint16_t>& gpu, const std::vector<uint16_t>& cpu,
                                    const std::vector<uint16_t>& x, int64_t offset, int64_t count, int64_t m,
                                    int64_t n) {
  const int64_t mn = m * n;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<double> g(static_cast<size_t>(mn)), r(g.size()), in(g.size());
    for (int64_t i = 0; i < mn; ++i) {
      const auto at = static_cast<size_t>(offset + b * mn + i);
      g[static_cast<size_t>(i)] = train::from_bf16(gpu[at]);
      r[static_cast<size_t>(i)] = train::from_bf16(cpu[at]);
      in[static_cast<size_t>(i)] = train::from_bf16(x[at]);
    }
    const auto exact = newton_schulz_f64(in, m, n, 5);
    const double effect = rel_error(r, exact), diff = rel_error(g, r);
    EXPECT_GT(effect, 1e-3) << m << "×" << n;
    EXPECT_LE(diff, 0.75 * effect) << m << "×" << n << " matrix " << b;
    EXPECT_LE(max_abs_error(g, r), 16 * 0x1p-8 * max_abs(r)) << m << "×" << n << " matrix " << b;
  }
}

// The batched Newton–Schulz (cuBLAS bf16 GEMMs, f32 accumulation on tensor cores) against the CPU twin (f32
// accumulation, k ascending) from the same normalised bf16 input. Products of bf16 values are exact in f32 and their
// sums nearly so, so the two agree exactly on most elements (the twin equals PyTorch's f32 CPU matmul bit for bit up
// to 256 × 2304); but where a sum rounds differently, a bf16 rounding can fall the other way, and the iteration spreads
// such a difference as bf16-ulp noise. Its size is that of two bf16 realisations of one computation from inputs one
// f32 rounding apart: measured at 0.30 (64 × 576) to 0.38 (256 × 2304) of the bf16 effect itself (‖bf16 − exact‖, the
// float64 iteration without rounding), with single elements up to 4 (64 × 576) and 10 (256 × 2304) bf16 steps of
// max|X| apart. Bounds: ≤ 0.75 of the bf16 effect (an iteration missing its roundings lands near the exact one, ratio
// ≈ 1; a wrong product or transpose, ≫ 1) and no element more than 16·2^-8·max|X| off. Scratch and output buffers are
// poisoned first.
TEST(NewtonSchulzGpu, BatchedBf16MatchesTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto& ctx = cuda_ctx();
  struct Case {
    int64_t batch, m, n;
  };
  for (const Case c : {Case{3, 4, 6}, Case{2, 16, 48}, Case{2, 64, 64}, Case{2, 64, 576}, Case{1, 128, 1152}}) {
    const int64_t mn = c.m * c.n, total = c.batch * mn;
    std::vector<uint16_t> x = random_bf16(static_cast<size_t>(total));
    std::vector<OptimTensor> tab;
    std::vector<int64_t> list;
    for (int64_t b = 0; b < c.batch; ++b) {
      tab.push_back({0, mn, 0, b * mn, c.m, c.n, 0, 1.0f, 0.0f});
      list.push_back(b);
    }
    train::muon_normalize_cpu(x.data(), tab, list);
    Dev<uint16_t> dx(x), dy(std::vector<uint16_t>(static_cast<size_t>(total))),
        da(std::vector<uint16_t>(static_cast<size_t>(c.batch * c.m * c.m))),
        db(std::vector<uint16_t>(static_cast<size_t>(c.batch * c.m * c.m)));
    dy.buf.poison();
    da.buf.poison();
    db.buf.poison();
    uint16_t* out = train::newton_schulz_cuda(ctx.cublas(), ctx.stream(), dx.get(), dy.get(), da.get(), db.get(),
                                              c.batch, c.m, c.n, 5);
    ctx.synchronize();
    EXPECT_EQ(out, dy.get()) << "after 5 (odd) iterations the result is in the second buffer";
    const auto gpu = dy.download();
    auto cpu = x;
    train::newton_schulz_cpu(cpu.data(), c.batch, c.m, c.n, 5);
    expect_newton_schulz_near_twin(gpu, cpu, x, 0, c.batch, c.m, c.n);
  }
}

// cuBLAS writes every element of the GEMMs' outputs: the iteration with fresh scratch and output buffers (never written
// by anyone) gives exactly the result of the one above with poisoned ones. Under compute-sanitizer's initcheck, which
// does not see the stores of cuBLAS's Hopper kernels, this is the reproduction of its reports (the copy of A into B
// reads a GEMM's output) when VISION_SANITIZER_MARKS=0, and reports nothing with the engine's marks (cuda/sanitizer.h).
TEST(NewtonSchulzGpu, FreshScratchGivesThePoisonedScratchResult) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto& ctx = cuda_ctx();
  const int64_t batch = 2, m = 64, n = 576, total = batch * m * n, square = batch * m * m;
  std::vector<uint16_t> x = random_bf16(static_cast<size_t>(total));
  std::vector<OptimTensor> tab;
  std::vector<int64_t> list;
  for (int64_t b = 0; b < batch; ++b) {
    tab.push_back({0, m * n, 0, b * m * n, m, n, 0, 1.0f, 0.0f});
    list.push_back(b);
  }
  train::muon_normalize_cpu(x.data(), tab, list);
  std::vector<uint16_t> results[2];
  for (int poisoned = 0; poisoned < 2; ++poisoned) {
    Dev<uint16_t> dx(x);
    DeviceBuffer dy(size_t(total) * 2), da(size_t(square) * 2), db(size_t(square) * 2);
    if (poisoned)
      for (DeviceBuffer* b : {&dy, &da, &db}) b->poison();
    uint16_t* out = train::newton_schulz_cuda(ctx.cublas(), ctx.stream(), dx.get(), static_cast<uint16_t*>(dy.get()),
                                              static_cast<uint16_t*>(da.get()), static_cast<uint16_t*>(db.get()),
                                              batch, m, n, 5);
    ctx.synchronize();
    ASSERT_EQ(out, dy.get());
    results[poisoned] = values_of<uint16_t>(dy.download(size_t(total) * 2));
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(std::count(results[1].begin(), results[1].end(), uint16_t{0xffff}), 0) << "poison left in the output";
}

// The grouped Newton–Schulz (all shapes in one cublasGemmGroupedBatchedEx call per product) against the CPU twin,
// shape by shape, within BatchedBf16MatchesTheCpuTwin's bounds: the shapes of that test together, in one run.
// The kernel path's tables, built on the host (no GPU needed): every matrix of every shape in order, its X at its
// offset and its scratch padded to 8 elements; per matrix the m × m tiles (products 0, 1), then all the m × n tiles
// (product 2), each tile once.
TEST(NewtonSchulzTiles, EveryMatrixIsTiledOncePerProduct) {
  std::vector<std::vector<uint8_t>> uploads;
  auto upload = [&](const void* host, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(host);
    uploads.emplace_back(p, p + bytes);
    return std::shared_ptr<void>(std::malloc(std::max<size_t>(bytes, 1)), std::free);
  };
  std::vector<train::GroupedNewtonSchulz::Shape> shapes;
  int64_t total = 0;
  for (const auto& [count, m, n] : std::vector<std::array<int64_t, 3>>{{3, 3, 5}, {1, 70, 130}, {2, 64, 128}}) {
    shapes.push_back({m, n, count, total});
    total += count * m * n;
  }
  std::vector<uint16_t> x(static_cast<size_t>(total)), y(x.size()),
      a(static_cast<size_t>(train::GroupedNewtonSchulz::square_elements(shapes))), b(a.size());
  train::GroupedNewtonSchulz ns(shapes, x.data(), y.data(), a.data(), b.data(), upload, train::NsPath::kernel);
  EXPECT_EQ(ns.path(), train::NsPath::kernel);
  EXPECT_TRUE(ns.stragglers().empty());
  ASSERT_EQ(uploads.size(), 2u);
  const auto matrices = values_of<train::NsMatrix>(uploads[0]);
  const auto tiles = values_of<train::NsTile>(uploads[1]);
  ASSERT_EQ(matrices.size(), 6u);
  // Square tiles: 3 × 1 + 2 × 2 + 2 × 1 = 9; rectangular: 3 × 1 + 2 × 3 + 2 × 2 = 13.
  EXPECT_EQ(ns.tiles(), 22);
  ASSERT_EQ(tiles.size(), 22u);
  int64_t xo = 0, ao = 0;
  size_t i = 0;
  for (const auto& s : shapes)
    for (int64_t j = 0; j < s.count; ++j, ++i, xo += s.m * s.n, ao += train::GroupedNewtonSchulz::square_stride(s.m)) {
      EXPECT_EQ(matrices[i].x_offset, xo);
      EXPECT_EQ(matrices[i].a_offset, ao);
      EXPECT_EQ(ao % 8, 0);
      EXPECT_EQ(matrices[i].m, s.m);
      EXPECT_EQ(matrices[i].n, s.n);
    }
  std::map<int32_t, std::pair<int64_t, int64_t>> covered;  // matrix → elements covered by square, rectangular tiles
  std::set<std::array<int32_t, 4>> distinct;               // (product kind, matrix, row, col): each tile once
  for (size_t k = 0; k < tiles.size(); ++k) {
    const train::NsTile& t = tiles[k];
    distinct.insert({k < 9 ? 0 : 1, t.matrix, t.row, t.col});
    ASSERT_GE(t.matrix, 0);
    ASSERT_LT(t.matrix, 6);
    const train::NsMatrix& mat = matrices[static_cast<size_t>(t.matrix)];
    const int64_t cols = k < 9 ? mat.m : mat.n;
    EXPECT_EQ(t.row % train::kNsTileM, 0);
    EXPECT_EQ(t.col % train::kNsTileN, 0);
    EXPECT_LT(t.row, mat.m);
    EXPECT_LT(t.col, cols);
    const int64_t area = std::min<int64_t>(train::kNsTileM, mat.m - t.row) * std::min<int64_t>(train::kNsTileN, cols - t.col);
    (k < 9 ? covered[t.matrix].first : covered[t.matrix].second) += area;
  }
  EXPECT_EQ(distinct.size(), tiles.size()) << "a tile is listed twice";
  for (int32_t k = 0; k < 6; ++k) {
    const train::NsMatrix& mat = matrices[static_cast<size_t>(k)];
    EXPECT_EQ(covered[k].first, int64_t{mat.m} * mat.m) << "matrix " << k;
    EXPECT_EQ(covered[k].second, int64_t{mat.m} * mat.n) << "matrix " << k;
  }
}

// VISION_NS_GROUPED picks the path: unset or 1 cuBLAS's grouped GEMM, "kernel" the engine's, 0 shape by shape; anything
// else is an error naming the variable.
TEST(NewtonSchulzTiles, PathFromTheEnvironment) {
  {
    const ScopedEnv e(train::kNewtonSchulzGroupedEnv, std::nullopt);
    EXPECT_EQ(train::newton_schulz_path_from_env(), train::NsPath::kernel);
  }
  for (const auto& [value, path] : std::vector<std::pair<std::string, train::NsPath>>{
           {"1", train::NsPath::cublas}, {"cublas", train::NsPath::cublas}, {"kernel", train::NsPath::kernel},
           {"0", train::NsPath::per_shape}}) {
    const ScopedEnv e(train::kNewtonSchulzGroupedEnv, value);
    EXPECT_EQ(train::newton_schulz_path_from_env(), path) << value;
  }
  const ScopedEnv e(train::kNewtonSchulzGroupedEnv, std::string("fast"));
  try {
    train::newton_schulz_path_from_env();
    ADD_FAILURE() << "no error";
  } catch (const std::exception& ex) {
    EXPECT_NE(std::string(ex.what()).find("VISION_NS_GROUPED=fast"), std::string::npos) << ex.what();
  }
}

// Both grouped paths, each on two lists: shapes whose matrices all start 16-byte aligned, and a mix with odd sizes that
// leave matrices misaligned and an odd leading dimension. The cublas path runs the misaligned ones shape by shape after
// its grouped GEMMs (cuBLAS failed with a misaligned address when they were grouped); the engine's own kernel takes
// every matrix, in 3 launches an iteration (counted in a captured graph), and repeats its bits. A test per path, so that
// the kernel's runs no cuBLAS kernel (racecheck reports cuBLAS's Hopper GEMMs, whose barriers it does not follow).
static void grouped_newton_schulz_matches_the_cpu_twin(train::NsPath path) {
  auto& ctx = cuda_ctx();
  using Sizes = std::vector<std::array<int64_t, 3>>;  // count, m, n
  for (const auto& [sizes, stragglers] : std::vector<std::pair<Sizes, size_t>>{
           {{{3, 4, 6}, {2, 16, 48}, {2, 64, 64}, {2, 64, 576}, {1, 128, 1152}, {1, 256, 2304}}, 0},
           {{{2, 8, 16}, {3, 3, 5}, {1, 5, 11}, {1, 3, 4}, {2, 64, 64}, {1, 7, 9}, {1, 70, 130}}, 4}}) {
    const bool kernel = path == train::NsPath::kernel;
    SCOPED_TRACE(testing::Message() << (kernel ? "kernel" : "cublas") << ", " << sizes.size() << " shapes");
    std::vector<train::GroupedNewtonSchulz::Shape> shapes;
    int64_t total = 0;
    for (const auto& [count, m, n] : sizes) {
      shapes.push_back({m, n, count, total});
      total += count * m * n;
    }
    ASSERT_EQ(train::GroupedNewtonSchulz::elements(shapes), total);
    std::vector<uint16_t> x = random_bf16(static_cast<size_t>(total));
    std::vector<OptimTensor> tab;
    std::vector<int64_t> list;
    for (const auto& s : shapes)
      for (int64_t b = 0; b < s.count; ++b) {
        tab.push_back({0, s.m * s.n, 0, s.offset + b * s.m * s.n, s.m, s.n, 0, 1.0f, 0.0f});
        list.push_back(static_cast<int64_t>(list.size()));
      }
    train::muon_normalize_cpu(x.data(), tab, list);
    const auto square = static_cast<size_t>(train::GroupedNewtonSchulz::square_elements(shapes));
    Dev<uint16_t> dx(x), dy(std::vector<uint16_t>(static_cast<size_t>(total))), da{std::vector<uint16_t>(square)},
        db{std::vector<uint16_t>(square)};
    dy.buf.poison();
    da.buf.poison();
    db.buf.poison();
    auto upload = [](const void* host, size_t bytes) {
      auto mem = cuda::device_alloc(bytes);
      VISION_CUDA_CHECK(cudaMemcpy(mem.get(), host, bytes, cudaMemcpyHostToDevice));
      return mem;
    };
    train::GroupedNewtonSchulz ns(shapes, dx.get(), dy.get(), da.get(), db.get(), upload, path);
    EXPECT_EQ(ns.stragglers().size(), kernel ? 0 : stragglers);
    uint16_t* out = ns.run(ctx.cublas(), ctx.stream(), 5);
    ctx.synchronize();
    EXPECT_EQ(ns.path(), path) << "cuBLAS ran no grouped bf16 GEMM: the iteration went shape by shape";
    EXPECT_EQ(out, dy.get()) << "after 5 (odd) iterations the result is in the second buffer";
    const auto gpu = dy.download();
    auto cpu = x;
    for (const auto& s : shapes) {
      train::newton_schulz_cpu(cpu.data() + s.offset, s.count, s.m, s.n, 5);
      expect_newton_schulz_near_twin(gpu, cpu, x, s.offset, s.count, s.m, s.n);
    }
    if (kernel) {  // 5 steps from the same input again, captured: 15 launches, the same bits
      dx.buf.upload(bytes_of(x));
      dy.buf.poison();
      const auto captured = cuda::CapturedGraph::capture(ctx.stream(), [&] { ns.run(ctx.cublas(), ctx.stream(), 5); });
      captured->replay(ctx.stream());
      ctx.synchronize();
      EXPECT_EQ(captured->launches(), 15u);
      EXPECT_TRUE(dy.download() == gpu) << "the replayed iteration differs from the eager one";
    }
    // An even number of steps ends in the first buffer.
    EXPECT_EQ(ns.run(ctx.cublas(), ctx.stream(), 2), dx.get());
    ctx.synchronize();
  }
}

TEST(NewtonSchulzGpu, GroupedShapesMatchTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  grouped_newton_schulz_matches_the_cpu_twin(train::NsPath::cublas);
}

TEST(NewtonSchulzGpu, GroupedKernelMatchesTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  grouped_newton_schulz_matches_the_cpu_twin(train::NsPath::kernel);
}

// Whole optimizers on the CUDA backend against the CPU backend over the fixture's 4 steps (groups, per-step lr and
// momentum). SGD and AdamW: every parameter and state element bit for bit, with clipping active too. MuSGD: the
// non-Muon tensors and the Muon momentum bit for bit; the Muon tensors within the Newton–Schulz argument above, taken
// over the trajectory against the fixture's exact (unrounded) one.
TEST(OptimizerGpu, MatchesTheCpuOptimizer) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (std::string kind : {"sgd", "adamw", "musgd"})
    for (double clip : {0.0, 1.0}) {
      auto cpu = fixture_model(graph::cpu_backend()), gpu = fixture_model(graph::cuda_backend());
      auto o = fixture_options(kind);
      o.max_grad_norm = clip;
      auto oc = cpu->optimizer(o), og = gpu->optimizer(o);
      double num = 0, effect = 0;
      for (int s = 0; s < fixture_steps(); ++s) {
        set_fixture_hyper(*oc, kind, s);
        set_fixture_hyper(*og, kind, s);
        set_fixture_grads(*cpu, s);
        set_fixture_grads(*gpu, s);
        const auto rc = oc->step(), rg = og->step();
        ASSERT_TRUE(rg.applied);
        EXPECT_EQ(rg.grad_norm, rc.grad_norm) << kind << " step " << s;
        EXPECT_EQ(rg.clip_coef, rc.clip_coef) << kind << " step " << s;
        if (clip > 0 && s == 0) EXPECT_LT(rc.clip_coef, 1.0f);
        for (const auto& [key, shape] : fixture_shapes()) {
          const auto pc = cpu->get(cpu->params, key), pg = gpu->get(gpu->params, key);
          if (kind != "musgd" || shape.rank() < 2) {
            EXPECT_EQ(pg, pc) << kind << " " << key << " step " << s;
          } else if (clip == 0) {
            const auto exact = fx("musgd_exact." + std::to_string(s) + "." + key).to_vector();
            for (size_t i = 0; i < pc.size(); ++i) {
              num += (double(pg[i]) - pc[i]) * (double(pg[i]) - pc[i]);
              effect += (double(pc[i]) - exact[i]) * (double(pc[i]) - exact[i]);
            }
          }
        }
      }
      if (kind == "musgd" && clip == 0) EXPECT_LE(std::sqrt(num), 0.75 * std::sqrt(effect));
      const auto sc = oc->state_dict(), sg = og->state_dict();
      ASSERT_EQ(sc.size(), sg.size());
      for (size_t i = 1; i < sc.size(); ++i) {
        const bool exact = kind != "musgd" || sc[i].first.ends_with("muon_momentum_buffer") ||
                           sc[i].second.shape().rank() < 2;
        if (exact) EXPECT_EQ(sg[i].second.to_vector(), sc[i].second.to_vector()) << sc[i].first;
        else EXPECT_LT(max_abs_error(sg[i].second.to_vector(), sc[i].second.to_vector()), 1e-3) << sc[i].first;
      }
    }
}

TEST(OptimizerGpu, SkipsNonFiniteSteps) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto m = fixture_model(graph::cuda_backend());
    auto opt = m->optimizer(fixture_options(kind));
    const auto before = m->all(m->params);
    std::vector<float> g = random_values(static_cast<size_t>(m->numel));
    g[m->numel - 1] = std::numeric_limits<float>::quiet_NaN();
    m->set_all(m->grads, g);
    EXPECT_FALSE(opt->step().applied);
    EXPECT_EQ(opt->skipped_steps(), 1);
    EXPECT_EQ(m->all(m->params), before);
    g[m->numel - 1] = 0.5f;
    m->set_all(m->grads, g);
    EXPECT_TRUE(opt->step().applied);
    EXPECT_NE(m->all(m->params), before);
  }
}

// YOLO26n's training state (366 tensors, 126 Muon matrices in 40 shapes up to 256 × 2304, the class branch ×3) on
// the given backends, every store from the same random parameters and gradients, and MuSGD's options over it.
struct Yolo26nStates {
  graph::Graph g;
  std::vector<std::unique_ptr<graph::StateStore>> stores;
  std::vector<float> p0;
  train::OptimizerOptions musgd;
};

std::unique_ptr<Yolo26nStates> yolo26n_states(const std::vector<std::shared_ptr<graph::BackendContext>>& backends) {
  auto y = std::make_unique<Yolo26nStates>();
  const Shape in{1, 3, 32, 32};
  models::yolo::record_yolo26_training(y->g.input("images", in), {.scale = models::yolo::Scale::n, .nc = 80});
  for (const auto& b : backends) y->stores.push_back(std::make_unique<graph::StateStore>(y->g, b, std::vector{in}));
  y->p0 = random_values(static_cast<size_t>(y->stores[0]->parameter_count()));
  const auto grads = random_values(y->p0.size(), -1e-3f, 1e-3f);
  for (auto& st : y->stores) {
    st->backend().copy_to_device(st->flat_params().raw(), y->p0.data(), y->p0.size() * 4);
    st->backend().copy_to_device(st->flat_grads().raw(), grads.data(), grads.size() * 4);
  }
  y->musgd.kind = train::OptimizerKind::musgd;
  y->musgd.lr = 0.01;
  y->musgd.momentum = 0.9;
  y->musgd.rules = models::yolo::yolo26_group_rules();
  return y;
}

// One MuSGD step over YOLO26n's state on both backends from the same state and gradients: non-Muon tensors bit for
// bit; the Muon tensors' updates within 5% of their size (the bf16 Newton–Schulz noise of the large matrices is ≈ 1%;
// a wrong batch or transpose gives O(1)).
TEST(OptimizerGpu, Yolo26nMuSGDStepMatchesTheCpu) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const auto y = yolo26n_states({graph::cpu_backend(), graph::cuda_backend()});
  graph::StateStore &sc = *y->stores[0], &sg = *y->stores[1];
  const std::vector<float>& p0 = y->p0;
  train::Optimizer oc(sc, y->musgd), og(sg, y->musgd);
  ASSERT_TRUE(oc.step().applied);
  ASSERT_TRUE(og.step().applied);
  const auto& a = oc.assignment();
  for (size_t i = 0; i < a.params.size(); ++i) {
    const auto& p = a.params[i];
    const auto c = sc.tensor(p.key).to_vector();
    const auto d = sg.backend().download(sg.tensor(p.key)).to_vector();
    if (p.shape.rank() < 2) {
      EXPECT_EQ(d, c) << p.key;
      continue;
    }
    std::vector<double> uc(c.size()), ug(c.size());
    for (size_t k = 0; k < c.size(); ++k) {
      const double before = p0[static_cast<size_t>(p.offset) + k];
      uc[k] = c[k] - before;
      ug[k] = d[k] - before;
    }
    EXPECT_LT(rel_error(ug, uc), 0.05) << p.key;
  }
}

// #27: MuSGD's step over YOLO26n (126 Muon matrices in 40 shapes) captured into one CUDA graph — the decision, the
// group settings' copy from the engine's pinned buffer, the Muon preparation, Newton–Schulz (5 iterations in the
// engine's own grouped GEMM: 15 launches) and the update — replays in at most 100 operations (per-shape Newton–Schulz
// made about 1,000), and the replayed step equals an eager one bit for bit.
// Its first GPU run (H100, 2026-12-07, cuBLAS's grouped GEMM) captured 616 operations: cublasGemmGroupedBatchedEx runs
// a kernel per shape (5 × 3 × 40 = 600, + 6 + 10 copies), and the replayed parameters differed from the eager step's
// — likely cuBLAS staging each call's per-group arguments in one host buffer that a replay reads as the last call left
// it. The kernel path has neither (its tables are uploaded once). Its second run (kernel path) failed only because the
// step's staging (now Optimizer::stage_step, a host write that waits for the last copy) was inside the capture: the
// settings are staged first, and launch_step is what a graph captures.
TEST(OptimizerGpu, Yolo26nMuSGDStepIsOneGraphOfAtMost100Launches) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const ScopedEnv path(train::kNewtonSchulzGroupedEnv, std::string("kernel"));
  const auto y = yolo26n_states({graph::cuda_backend(), graph::cuda_backend()});
  graph::StateStore &eager = *y->stores[0], &replayed = *y->stores[1];
  train::Optimizer oe(eager, y->musgd), orp(replayed, y->musgd);
  ASSERT_TRUE(oe.step().applied);
  ASSERT_TRUE(orp.step().applied);  // the first step eagerly: cuBLAS's first calls, the tables uploaded
  oe.set_group_lr(0, 0.02);
  orp.set_group_lr(0, 0.02);
  ASSERT_TRUE(oe.step().applied);
  cudaStream_t stream = graph::stream_of(&replayed.backend());
  orp.stage_step();
  const auto captured = cuda::CapturedGraph::capture(stream, [&] { orp.launch_step(); });
  captured->replay(stream);
  ASSERT_TRUE(orp.finish_step().applied);
  const size_t launches = captured->launches();
  EXPECT_LE(launches, 100u);
  EXPECT_GE(launches, 5u * 3u) << "Newton–Schulz alone makes 3 launches an iteration";
  std::printf("MuSGD step over YOLO26n: %zu operations in the captured graph\n", launches);
  EXPECT_EQ(replayed.backend().download(replayed.flat_params()).to_vector(),
            eager.backend().download(eager.flat_params()).to_vector());
}

// The EMA of a model on the GPU against the CPU's: three updates of a changing model, bit for bit.
TEST(EmaGpu, MatchesTheCpuTwinBitForBit) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto x = g->input("x", Shape{1, 3, 8, 8});
  {
    auto model = g->scope("model");
    auto s = g->scope("0");
    auto y = ops::batchnorm2d(ops::conv2d(x, {.in_channels = 3, .out_channels = 2000, .kernel = 3}));
    g->mark_output(y);
  }
  graph::StateStore sc(*g, graph::cpu_backend(), {Shape{1, 3, 8, 8}}), sg(*g, graph::cuda_backend(), {Shape{1, 3, 8, 8}});
  auto randomise = [&] {
    for (const auto& e : sc.entries()) {
      if (!core::is_floating(e.dtype)) continue;
      const Tensor t = random_tensor(e.shape);
      sc.set_from_host(e.key, t);
      sg.set_from_host(e.key, t);
    }
  };
  randomise();
  train::ModelEma ec(sc), eg(sg);
  for (int n = 0; n < 3; ++n) {
    randomise();
    ec.update(sc);
    eg.update(sg);
  }
  for (const auto& key : ec.keys())
    EXPECT_EQ(sg.backend().download(eg.tensor(key)).to_vector(), ec.tensor(key).to_vector()) << key;
}
