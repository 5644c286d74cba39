// cuDNN convolutions (forward, backward-data, backward-filter) in NCHW and NHWC, f32 (no TF32), f16 and bf16
// (f32 accumulation), against float64 references computed from the same rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "error_bounds.h"
#include "test_util.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/ops/cuda/cudnn_conv.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_cudnn_conv_cpp {

using namespace vision;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;

namespace {

// A device tensor of dtype in layout from NCHW-ordered f32 values.
Tensor to_device(graph::BackendContext& b, const std::vector<float>& v, const Shape& s, DType t, Layout l) {
  Tensor h = core::to_layout(Tensor::from_vector(s, v), l);
  Tensor c = Tensor::zeros(s, t, l);
  const float* src = h.data<float>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (t == DType::f32) c.data<float>()[i] = src[i];
    else c.data<uint16_t>()[i] = t == DType::f16 ? core::float_to_half(src[i]) : core::float_to_bf16(src[i]);
  }
  return b.upload(c);
}

// Device tensor → NCHW-ordered f32 values.
std::vector<float> to_host(graph::BackendContext& b, const Tensor& d) {
  const Tensor h = b.download(d);
  const std::vector<float> v = h.to_vector();  // memory order, converted to f32
  Tensor f = Tensor::zeros(h.shape(), DType::f32, h.layout());
  std::memcpy(f.raw(), v.data(), v.size() * sizeof(float));
  return core::to_layout(f, Layout::nchw).to_vector();
}

// Direct float64 convolution and its two gradients for dy, with the roundings a convolution in `dtype` may make on the
// way to each element (error_bounds.h). The reference sees the rounded inputs, so a direct or GEMM algorithm that
// multiplies them exactly and accumulates in f32 only rounds its output. cuDNN picks its algorithm itself, and some
// hold a transformed or re-laid-out operand in the dtype: we allow, beyond the output's rounding, one rounding of
// each operand of each product (relative u each, as if every input were rounded once more) — two terms |a·b| per
// product. With ρ ≈ 1 for random data that bounds the relative norm by about 2ū (error_bounds.h), against the ~u/2
// of the output rounding alone.
struct Reference {
  std::vector<double> y, dx, dw;
  test::RoundingTerms y_terms, dx_terms, dw_terms;
};

Reference reference(const ops::Conv2dAttrs& a, const Shape& xs, const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& dy, DType dtype) {
  const Shape ys = a.output_shape(xs);
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ys[1], Ho = ys[2], Wo = ys[3];
  const int64_t cpg = C / a.groups, kpg = K / a.groups, R = a.kernel, p = a.pad();
  Reference r;
  r.y.assign(static_cast<size_t>(ys.numel()), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.y_terms = test::RoundingTerms(r.y.size(), dtype);
  r.dx_terms = test::RoundingTerms(r.dx.size(), dtype);
  r.dw_terms = test::RoundingTerms(r.dw.size(), dtype);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * K + k) * Ho + oh) * Wo + ow);
          double acc = 0;
          for (int64_t c = 0; c < cpg; ++c)
            for (int64_t i = 0; i < R; ++i)
              for (int64_t j = 0; j < R; ++j) {
                const int64_t ih = oh * a.stride - p + i * a.dilation, iw = ow * a.stride - p + j * a.dilation;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t ci = (k / kpg) * cpg + c;
                const size_t xi = static_cast<size_t>(((n * C + ci) * H + ih) * W + iw);
                const size_t wi = static_cast<size_t>(((k * cpg + c) * R + i) * R + j);
                acc += double(x[xi]) * w[wi];
                r.dx[xi] += double(dy[yi]) * w[wi];
                r.dw[wi] += double(dy[yi]) * x[xi];
                r.y_terms.add(yi, x[xi], w[wi]);
                r.y_terms.add(yi, w[wi], x[xi]);
                r.dx_terms.add(xi, dy[yi], w[wi]);
                r.dx_terms.add(xi, w[wi], dy[yi]);
                r.dw_terms.add(wi, dy[yi], x[xi]);
                r.dw_terms.add(wi, x[xi], dy[yi]);
              }
          r.y[yi] = acc;
        }
  // Each output is rounded once more.
  for (size_t i = 0; i < r.y.size(); ++i) r.y_terms.add(i, r.y[i]);
  for (size_t i = 0; i < r.dx.size(); ++i) r.dx_terms.add(i, r.dx[i]);
  for (size_t i = 0; i < r.dw.size(); ++i) r.dw_terms.add(i, r.dw[i]);
  return r;
}

struct Case {
  DType dtype;
  Layout layout;
};

class CudnnConvTest : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(CudnnConvTest, ForwardBackwardDataBackwardFilter) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const auto [dtype, layout] = GetParam();
  // Bounds derived from the dtype's unit roundoff and each reduction's length (error_bounds.h, reference() above),
  // element by element and as a norm; f32 (IEEE, no TF32) also keeps the 1e-5 relative norm it has always met.
  auto backend = graph::cuda_backend();
  auto& cb = graph::CudaBackendContext::of(backend.get());
  for (auto [cin, cout, k, stride, groups] : std::vector<std::array<int64_t, 5>>{
           {8, 16, 3, 1, 1}, {16, 16, 3, 2, 1}, {16, 16, 3, 1, 16}, {32, 8, 1, 1, 1}, {8, 8, 3, 1, 2}}) {
    ops::Conv2dAttrs a;
    a.in_channels = cin;
    a.out_channels = cout;
    a.kernel = k;
    a.stride = stride;
    a.groups = groups;
    const Shape xs{2, cin, 12, 10};
    const Shape ws = a.weight_shape();
    ops::cuda_impl::CudnnConv conv(cb.cudnn(), a, xs, dtype, layout);
    const Shape ys = conv.output_shape();
    const auto x = test::rounded(test::random_values(static_cast<size_t>(xs.numel())), dtype);
    const auto w = test::rounded(test::random_values(static_cast<size_t>(ws.numel())), dtype);
    const auto dy = test::rounded(test::random_values(static_cast<size_t>(ys.numel())), dtype);
    const Reference ref = reference(a, xs, x, w, dy, dtype);

    Tensor dx_dev = to_device(*backend, std::vector<float>(x.size(), test::kPoison), xs, dtype, layout);
    Tensor dw_dev = to_device(*backend, std::vector<float>(w.size(), test::kPoison), ws, dtype, layout);
    Tensor y_dev = to_device(*backend, std::vector<float>(dy.size(), test::kPoison), ys, dtype, layout);
    const Tensor x_dev = to_device(*backend, x, xs, dtype, layout);
    const Tensor w_dev = to_device(*backend, w, ws, dtype, layout);
    const Tensor dy_dev = to_device(*backend, dy, ys, dtype, layout);
    auto ws_mem = backend->allocate(std::max<size_t>(conv.workspace_bytes(), 1));
    conv.forward(x_dev.raw(), w_dev.raw(), y_dev.raw(), ws_mem.get());
    conv.backward_data(w_dev.raw(), dy_dev.raw(), dx_dev.raw(), ws_mem.get());
    conv.backward_filter(x_dev.raw(), dy_dev.raw(), dw_dev.raw(), ws_mem.get());
    const std::string what = fmt::format("{} {} conv {}→{} k{} s{} g{}", core::dtype_name(dtype),
                                         core::layout_name(layout), cin, cout, k, stride, groups);
    // The reduction lengths: C/g·k² (forward), at most K/g·k² (backward-data), N·Ho·Wo (backward-filter).
    const int64_t k_fwd = cin / groups * k * k, k_data = cout / groups * k * k, k_filter = ys[0] * ys[2] * ys[3];
    const auto y = to_host(*backend, y_dev), dx = to_host(*backend, dx_dev), dw = to_host(*backend, dw_dev);
    EXPECT_TRUE(test::within_rounding(y, ref.y, ref.y_terms, dtype, k_fwd)) << what << " forward";
    EXPECT_TRUE(test::within_rounding(dx, ref.dx, ref.dx_terms, dtype, k_data)) << what << " backward-data";
    EXPECT_TRUE(test::within_rounding(dw, ref.dw, ref.dw_terms, dtype, k_filter)) << what << " backward-filter";
    if (dtype == DType::f32) {
      EXPECT_LT(test::rel_error(y, ref.y), 1e-5) << what << " forward";
      EXPECT_LT(test::rel_error(dx, ref.dx), 1e-5) << what << " backward-data";
      EXPECT_LT(test::rel_error(dw, ref.dw), 1e-5) << what << " backward-filter";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayoutsAndTypes, CudnnConvTest,
                         ::testing::Values(Case{DType::f32, Layout::nchw}, Case{DType::f32, Layout::nhwc},
                                           Case{DType::f16, Layout::nchw}, Case{DType::f16, Layout::nhwc},
                                           Case{DType::bf16, Layout::nchw}, Case{DType::bf16, Layout::nhwc}),
                         [](const auto& info) {
                           return std::string(core::dtype_name(info.param.dtype)) + "_" +
                                  std::string(core::layout_name(info.param.layout));
                         });

// With deterministic algorithms, repeated backward passes are bit-for-bit identical (the batch is large enough for
// cuDNN's fastest backward-filter algorithms to be the non-deterministic, atomics-based ones), and still correct.
TEST(CudnnConvDeterministic, RepeatedRunsAreBitIdentical) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto backend = graph::cuda_backend();
  auto& cb = graph::CudaBackendContext::of(backend.get());
  for (const auto [dtype, layout] : {Case{DType::f32, Layout::nchw}, Case{DType::bf16, Layout::nhwc}}) {
    ops::Conv2dAttrs a;
    a.in_channels = 32;
    a.out_channels = 32;
    a.kernel = 3;
    const Shape xs{8, 32, 20, 20};
    const Shape ws = a.weight_shape();
    ops::cuda_impl::CudnnConv conv(cb.cudnn(), a, xs, dtype, layout, /*deterministic=*/true);
    EXPECT_TRUE(conv.deterministic());
    const Shape ys = conv.output_shape();
    const auto x = test::rounded(test::random_values(static_cast<size_t>(xs.numel())), dtype);
    const auto w = test::rounded(test::random_values(static_cast<size_t>(ws.numel())), dtype);
    const auto dy = test::rounded(test::random_values(static_cast<size_t>(ys.numel())), dtype);
    const Reference ref = reference(a, xs, x, w, dy, dtype);
    const Tensor x_dev = to_device(*backend, x, xs, dtype, layout);
    const Tensor w_dev = to_device(*backend, w, ws, dtype, layout);
    const Tensor dy_dev = to_device(*backend, dy, ys, dtype, layout);
    auto ws_mem = backend->allocate(std::max<size_t>(conv.workspace_bytes(), 1));
    std::vector<Tensor> results;  // y, dx, dw of two runs
    for (int run = 0; run < 2; ++run) {
      Tensor y = to_device(*backend, std::vector<float>(dy.size(), test::kPoison), ys, dtype, layout);
      Tensor dx = to_device(*backend, std::vector<float>(x.size(), test::kPoison), xs, dtype, layout);
      Tensor dw = to_device(*backend, std::vector<float>(w.size(), test::kPoison), ws, dtype, layout);
      conv.forward(x_dev.raw(), w_dev.raw(), y.raw(), ws_mem.get());
      conv.backward_data(w_dev.raw(), dy_dev.raw(), dx.raw(), ws_mem.get());
      conv.backward_filter(x_dev.raw(), dy_dev.raw(), dw.raw(), ws_mem.get());
      results.insert(results.end(), {y, dx, dw});
    }
    const std::string what = fmt::format("{} {}", core::dtype_name(dtype), core::layout_name(layout));
    // The deterministic algorithms are held to the same derived bounds as the fastest ones.
    const int64_t k_fwd = 32 * 9, k_data = 32 * 9, k_filter = ys[0] * ys[2] * ys[3];
    EXPECT_TRUE(test::within_rounding(to_host(*backend, results[0]), ref.y, ref.y_terms, dtype, k_fwd)) << what;
    EXPECT_TRUE(test::within_rounding(to_host(*backend, results[1]), ref.dx, ref.dx_terms, dtype, k_data)) << what;
    EXPECT_TRUE(test::within_rounding(to_host(*backend, results[2]), ref.dw, ref.dw_terms, dtype, k_filter)) << what;
    const char* names[] = {"forward", "backward-data", "backward-filter"};
    for (int i = 0; i < 3; ++i) {
      const Tensor first = backend->download(results[i]), second = backend->download(results[i + 3]);
      EXPECT_EQ(std::memcmp(first.raw(), second.raw(), first.nbytes()), 0) << what << " " << names[i] << " differs";
    }
  }
}

// A forward-only convolution (an inference plan's: no backward algorithms chosen) computes the same forward, within
// the same bounds as the full one, in deterministic mode the same bytes; asking it for a backward is an error.
TEST(CudnnConvForwardOnly, SameForwardAndNoBackward) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto backend = graph::cuda_backend();
  auto& cb = graph::CudaBackendContext::of(backend.get());
  for (const auto [dtype, layout] : {Case{DType::f32, Layout::nchw}, Case{DType::f16, Layout::nhwc}}) {
    ops::Conv2dAttrs a;
    a.in_channels = 16;
    a.out_channels = 24;
    a.kernel = 3;
    const Shape xs{4, 16, 18, 18};
    const Shape ws = a.weight_shape();
    ops::cuda_impl::CudnnConv full(cb.cudnn(), a, xs, dtype, layout, /*deterministic=*/true);
    ops::cuda_impl::CudnnConv fwd(cb.cudnn(), a, xs, dtype, layout, /*deterministic=*/true, size_t(256) << 20,
                                  /*tf32=*/false, /*forward_only=*/true);
    const Shape ys = fwd.output_shape();
    const auto x = test::rounded(test::random_values(static_cast<size_t>(xs.numel())), dtype);
    const auto w = test::rounded(test::random_values(static_cast<size_t>(ws.numel())), dtype);
    const auto dy = test::rounded(test::random_values(static_cast<size_t>(ys.numel())), dtype);
    const Reference ref = reference(a, xs, x, w, dy, dtype);
    const Tensor x_dev = to_device(*backend, x, xs, dtype, layout);
    const Tensor w_dev = to_device(*backend, w, ws, dtype, layout);
    auto ws_mem = backend->allocate(std::max<size_t>({full.workspace_bytes(), fwd.workspace_bytes(), 1}));
    Tensor y_full = to_device(*backend, std::vector<float>(dy.size(), test::kPoison), ys, dtype, layout);
    Tensor y_fwd = to_device(*backend, std::vector<float>(dy.size(), test::kPoison), ys, dtype, layout);
    full.forward(x_dev.raw(), w_dev.raw(), y_full.raw(), ws_mem.get());
    fwd.forward(x_dev.raw(), w_dev.raw(), y_fwd.raw(), ws_mem.get());
    const std::string what = fmt::format("{} {}", core::dtype_name(dtype), core::layout_name(layout));
    EXPECT_TRUE(test::within_rounding(to_host(*backend, y_fwd), ref.y, ref.y_terms, dtype, 16 * 9)) << what;
    const Tensor a_host = backend->download(y_full), b_host = backend->download(y_fwd);
    EXPECT_EQ(std::memcmp(a_host.raw(), b_host.raw(), a_host.nbytes()), 0) << what << ": the same algorithm";
    Tensor dx = to_device(*backend, std::vector<float>(x.size(), 0.0f), xs, dtype, layout);
    EXPECT_NE(test::error_of([&] { fwd.backward_data(w_dev.raw(), y_fwd.raw(), dx.raw(), ws_mem.get()); })
                  .find("forward passes only"),
              std::string::npos);
  }
}

// A geometry's algorithms are kept on disk (the kernel cache's folder): a later process — here, this one after
// forgetting its choices — reads them instead of asking cuDNN, and gets the same algorithms; an entry that is
// damaged on disk is chosen again (and written again).
TEST(CudnnConvAlgorithmCache, ALaterProcessReadsTheChoiceFromTheDisk) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto backend = graph::cuda_backend();
  auto& cb = graph::CudaBackendContext::of(backend.get());
  test::TempDir dir;
  const char* old_dir = std::getenv("VISION_CACHE_DIR");
  const std::string restore = old_dir ? old_dir : "";
  ::setenv("VISION_CACHE_DIR", dir.path().c_str(), 1);
  ops::Conv2dAttrs a;  // a geometry no other test uses
  a.in_channels = 7;
  a.out_channels = 13;
  a.kernel = 3;
  const Shape xs{3, 7, 37, 29};
  auto choose = [&](bool forward_only) {
    ops::cuda_impl::CudnnConv conv(cb.cudnn(), a, xs, DType::f16, Layout::nhwc, false, size_t(256) << 20, false,
                                   forward_only);
    std::vector<std::string> lines;
    for (const std::string& l : ops::cuda_impl::chosen_algorithms())
      if (l.find("[3, 7, 37, 29]") != std::string::npos) lines.push_back(l);
    return lines;
  };
  auto entries = [&] {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      if (e.path().extension() == ".kernel") out.push_back(e.path());
    return out;
  };
  for (const bool forward_only : {false, true}) {
    SCOPED_TRACE(forward_only ? "forward only" : "all three directions");
    for (const auto& e : entries()) std::filesystem::remove(e);
    ops::cuda_impl::forget_algorithm_choices();
    const auto before = ops::cuda_impl::algorithm_choice_time();
    const std::vector<std::string> chosen = choose(forward_only);
    ASSERT_FALSE(chosen.empty()) << "the geometry is listed among the chosen algorithms";
    EXPECT_EQ(ops::cuda_impl::algorithm_choice_time().from_disk, before.from_disk) << "chosen by cuDNN, not read";
    ASSERT_EQ(entries().size(), 1u) << "the choice is on disk";

    ops::cuda_impl::forget_algorithm_choices();
    EXPECT_EQ(choose(forward_only), chosen) << "read back: the same algorithms";
    EXPECT_EQ(ops::cuda_impl::algorithm_choice_time().from_disk, before.from_disk + 1) << "read from the disk";

    // Damaged on disk (cut short): chosen again, the same, and stored whole again.
    const std::filesystem::path entry = entries().at(0);
    std::filesystem::resize_file(entry, std::filesystem::file_size(entry) / 2);
    ops::cuda_impl::forget_algorithm_choices();
    EXPECT_EQ(choose(forward_only), chosen);
    EXPECT_EQ(ops::cuda_impl::algorithm_choice_time().from_disk, before.from_disk + 1) << "not read from a damaged entry";
    ops::cuda_impl::forget_algorithm_choices();
    EXPECT_EQ(choose(forward_only), chosen);
    EXPECT_EQ(ops::cuda_impl::algorithm_choice_time().from_disk, before.from_disk + 2) << "stored again, read again";
  }
  if (old_dir)
    ::setenv("VISION_CACHE_DIR", restore.c_str(), 1);
  else
    ::unsetenv("VISION_CACHE_DIR");
}

// cuDNN writes every element of each output it is given: the three directions run into fresh device memory (never
// written by anyone) give exactly the bytes of a run into poisoned memory, and no poison is left there. This is also
// the reproduction for compute-sanitizer's initcheck, which does not see the stores of cuDNN's Hopper kernels: with
// VISION_SANITIZER_MARKS=0 it reports the reads of the fresh buffers below as uninitialised; with the engine's marks
// (cuda/sanitizer.h) it reports nothing (tools/compute-sanitizer.sh, docs/reliability.md).
TEST(CudnnConvOutputs, EveryElementIsWrittenIntoFreshMemory) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto backend = graph::cuda_backend();
  auto& cb = graph::CudaBackendContext::of(backend.get());
  for (const auto [dtype, layout] :
       {Case{DType::f16, Layout::nhwc}, Case{DType::bf16, Layout::nhwc}, Case{DType::f32, Layout::nchw}}) {
    ops::Conv2dAttrs a;
    a.in_channels = 32;
    a.out_channels = 64;
    a.kernel = 3;
    const Shape xs{2, 32, 20, 20};
    const Shape ws = a.weight_shape();
    // Deterministic algorithms: two runs give the same bits (the fastest f32 backward-data accumulates with atomics).
    ops::cuda_impl::CudnnConv conv(cb.cudnn(), a, xs, dtype, layout, /*deterministic=*/true);
    const Shape ys = conv.output_shape();
    const Tensor x = to_device(*backend, test::rounded(test::random_values(size_t(xs.numel())), dtype), xs, dtype, layout);
    const Tensor w = to_device(*backend, test::rounded(test::random_values(size_t(ws.numel())), dtype), ws, dtype, layout);
    const Tensor dy = to_device(*backend, test::rounded(test::random_values(size_t(ys.numel())), dtype), ys, dtype, layout);
    auto workspace = backend->allocate(std::max<size_t>(conv.workspace_bytes(), 1));
    const size_t elem = core::dtype_size(dtype);
    const size_t bytes[3] = {size_t(ys.numel()) * elem, size_t(xs.numel()) * elem, size_t(ws.numel()) * elem};
    std::vector<std::vector<uint8_t>> results[2];  // [fresh, poisoned][y, dx, dw]
    for (int poisoned = 0; poisoned < 2; ++poisoned) {
      std::shared_ptr<void> out[3];
      for (int i = 0; i < 3; ++i) {
        out[i] = backend->allocate(bytes[i]);
        if (poisoned) VISION_CUDA_CHECK(cudaMemset(out[i].get(), 0xff, bytes[i]));
      }
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      conv.forward(x.raw(), w.raw(), out[0].get(), workspace.get());
      conv.backward_data(w.raw(), dy.raw(), out[1].get(), workspace.get());
      conv.backward_filter(x.raw(), dy.raw(), out[2].get(), workspace.get());
      VISION_CUDA_CHECK(cudaDeviceSynchronize());
      for (int i = 0; i < 3; ++i) {
        std::vector<uint8_t> host(bytes[i]);
        VISION_CUDA_CHECK(cudaMemcpy(host.data(), out[i].get(), bytes[i], cudaMemcpyDeviceToHost));
        results[poisoned].push_back(std::move(host));
      }
    }
    const char* names[] = {"forward", "backward-data", "backward-filter"};
    for (int i = 0; i < 3; ++i) {
      const std::string what = fmt::format("{} {} {}", core::dtype_name(dtype), core::layout_name(layout), names[i]);
      EXPECT_EQ(results[0][i], results[1][i]) << what << ": fresh and poisoned outputs differ";
      // No element still holds the poison (all bits set: NaN in every float type).
      size_t left = 0;
      for (size_t e = 0; e < bytes[i]; e += elem)
        left += std::all_of(results[1][i].begin() + e, results[1][i].begin() + e + elem,
                            [](uint8_t b) { return b == 0xff; });
      EXPECT_EQ(left, 0u) << what << ": elements cuDNN did not write";
    }
  }
}

}  // namespace test_cudnn_conv_cpp
