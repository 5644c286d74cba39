// GPU launches of the element-wise, permute, upsample and max-pool kernels against float64 CPU references, in
// f32, f16 and bf16 (upsample and max-pool in NCHW and NHWC), on fresh random inputs with poisoned outputs. Skipped without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "cuda/cuda_test_util.h"
#include "error_bounds.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/ops/kernels/permute_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"
#include "vision/ops/kernels/maxpool_cuda.h"
#include "vision/ops/kernels/upsample_cuda.h"

using namespace vision;
using namespace vision::test;
using namespace vision::ops::kernels;
using core::DType;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class GpuKernels : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
    VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  DType dtype() const { return GetParam(); }
  size_t elem() const { return core::dtype_size(dtype()); }

  // Random values (rounded to the dtype) on the device, `pad` elements of offset in front.
  struct Input {
    std::vector<float> values;
    std::unique_ptr<DeviceBuffer> buffer;
    size_t offset = 0;
    const void* ptr() const { return buffer->at(offset); }
  };
  Input input(size_t n, float lo = -4.0f, float hi = 4.0f, size_t pad = 0) {
    Input in;
    in.values = rounded(random_values(n, lo, hi), dtype());
    in.buffer = std::make_unique<DeviceBuffer>((n + pad) * elem());
    in.offset = pad * elem();
    in.buffer->upload(encode(in.values, dtype()), in.offset);
    return in;
  }
  struct Output {
    size_t n;
    std::unique_ptr<DeviceBuffer> buffer;
    size_t offset = 0;
    void* ptr() const { return buffer->at(offset); }
  };
  Output output(size_t n, size_t pad = 0) {
    Output out{n, std::make_unique<DeviceBuffer>((n + pad) * elem()), pad * elem()};
    out.buffer->poison();
    return out;
  }
  std::vector<float> result(const Output& out) {
    VISION_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return decode(out.buffer->download(out.n * elem(), out.offset), dtype());
  }

  void expect_close(const std::vector<float>& out, const std::vector<double>& ref, const char* what) {
    EXPECT_LT(rel_error(out, ref), output_rounding_bound(dtype())) << what << " in " << core::dtype_name(dtype());
  }
  // Bit-exact results (data movement, max): compare as floats, NaN (poison) never equal.
  void expect_exact(const std::vector<float>& out, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(out.size(), ref.size()) << what;
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i)
      if (!(out[i] == ref[i]) && bad++ < 5)
        ADD_FAILURE() << what << "[" << i << "] = " << out[i] << ", expected " << ref[i];
    EXPECT_EQ(bad, 0u) << what << " in " << core::dtype_name(dtype());
  }

  cudaStream_t stream_ = nullptr;
};

// Sizes: one that ends in a partial vector (16-byte path + tail), and a misaligned view (element path).
struct Sizes {
  size_t n, pad;
};
const Sizes kSizes[] = {{100003, 0}, {4099, 1}};

}  // namespace

TEST_P(GpuKernels, SiluAndSigmoid) {
  for (const Sizes& l : kSizes) {
    const Input x = input(l.n, -8, 8, l.pad), dy = input(l.n, -1, 1, l.pad);
    std::vector<double> ref_silu(l.n), ref_silu_grad(l.n), ref_sig(l.n), ref_sig_grad(l.n);
    for (size_t i = 0; i < l.n; ++i) {
      const double v = x.values[i], s = sigmoid(v);
      ref_silu[i] = v * s;
      ref_silu_grad[i] = dy.values[i] * s * (1 + v * (1 - s));
      ref_sig[i] = s;
    }
    Output y = output(l.n, l.pad), dx = output(l.n, l.pad);
    launch_silu_forward(stream_, dtype(), x.ptr(), y.ptr(), l.n);
    expect_close(result(y), ref_silu, "silu forward");
    launch_silu_backward(stream_, dtype(), x.ptr(), dy.ptr(), dx.ptr(), l.n);
    expect_close(result(dx), ref_silu_grad, "silu backward");

    Output s = output(l.n, l.pad), ds = output(l.n, l.pad);
    launch_sigmoid_forward(stream_, dtype(), x.ptr(), s.ptr(), l.n);
    const std::vector<float> s_out = result(s);
    expect_close(s_out, ref_sig, "sigmoid forward");
    // The backward takes the forward's output, as stored in dtype.
    for (size_t i = 0; i < l.n; ++i) ref_sig_grad[i] = double(dy.values[i]) * s_out[i] * (1 - double(s_out[i]));
    launch_sigmoid_backward(stream_, dtype(), s.ptr(), dy.ptr(), ds.ptr(), l.n);
    expect_close(result(ds), ref_sig_grad, "sigmoid backward");
  }
}

TEST_P(GpuKernels, AddAndMul) {
  for (const Sizes& l : kSizes) {
    const Input a = input(l.n, -2, 2, l.pad), b = input(l.n, -2, 2, l.pad), dy = input(l.n, -1, 1, l.pad);
    std::vector<double> sum(l.n), prod(l.n), da(l.n), db(l.n), dcopy(l.n);
    for (size_t i = 0; i < l.n; ++i) {
      sum[i] = double(a.values[i]) + b.values[i];
      prod[i] = double(a.values[i]) * b.values[i];
      da[i] = double(dy.values[i]) * b.values[i];
      db[i] = double(dy.values[i]) * a.values[i];
      dcopy[i] = dy.values[i];
    }
    Output y = output(l.n, l.pad);
    launch_add_forward(stream_, dtype(), a.ptr(), b.ptr(), y.ptr(), l.n);
    expect_close(result(y), sum, "add forward");
    launch_mul_forward(stream_, dtype(), a.ptr(), b.ptr(), y.ptr(), l.n);
    expect_close(result(y), prod, "mul forward");

    Output ga = output(l.n, l.pad), gb = output(l.n, l.pad);
    launch_add_backward(stream_, dtype(), dy.ptr(), ga.ptr(), gb.ptr(), l.n);
    expect_exact(result(ga), dy.values, "add backward da");
    expect_exact(result(gb), dy.values, "add backward db");
    launch_mul_backward(stream_, dtype(), dy.ptr(), a.ptr(), b.ptr(), ga.ptr(), gb.ptr(), l.n);
    expect_close(result(ga), da, "mul backward da");
    expect_close(result(gb), db, "mul backward db");

    // A null gradient is skipped, the other still written.
    Output only = output(l.n, l.pad);
    launch_mul_backward(stream_, dtype(), dy.ptr(), a.ptr(), b.ptr(), nullptr, only.ptr(), l.n);
    expect_close(result(only), db, "mul backward db alone");
    Output only_add = output(l.n, l.pad);
    launch_add_backward(stream_, dtype(), dy.ptr(), only_add.ptr(), nullptr, l.n);
    expect_exact(result(only_add), dy.values, "add backward da alone");
  }
}

// Every dtype, two permutations of a rank-4 tensor and one of a rank-3 (padded to 4 inside), exact.
TEST_P(GpuKernels, Permute) {
  const std::vector<int64_t> dims{2, 3, 4, 5};
  const Input x = input(2 * 3 * 4 * 5);
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{0, 2, 3, 1}, std::vector<int64_t>{3, 1, 0, 2},
                                           std::vector<int64_t>{1, 0, 2}}) {
    const std::vector<int64_t> in = perm.size() == 4 ? dims : std::vector<int64_t>{6, 4, 5};
    std::vector<int64_t> out_dims, stride(in.size(), 1);
    for (size_t k = in.size() - 1; k-- > 0;) stride[k] = stride[k + 1] * in[k + 1];
    std::vector<int64_t> in_strides;
    for (int64_t p : perm) {
      out_dims.push_back(in[static_cast<size_t>(p)]);
      in_strides.push_back(stride[static_cast<size_t>(p)]);
    }
    Output y = output(120);
    launch_permute(stream_, dtype(), x.ptr(), y.ptr(), core::Shape(out_dims), in_strides);
    std::vector<float> ref(120);
    for (int64_t i = 0; i < 120; ++i) {
      int64_t rem = i, src = 0;
      for (size_t k = out_dims.size(); k-- > 0;) {
        src += (rem % out_dims[k]) * in_strides[k];
        rem /= out_dims[k];
      }
      ref[static_cast<size_t>(i)] = x.values[static_cast<size_t>(src)];
    }
    expect_exact(result(y), ref, "permute");
  }
  EXPECT_THROW(launch_permute(stream_, dtype(), x.ptr(), nullptr, core::Shape{1, 2, 3, 4, 5}, {120, 60, 20, 5, 1}), Error);
}

namespace {
// Index of element (n, c, h, w) of an (N, C, H, W) tensor in memory, in NCHW or NHWC.
int64_t at(core::Layout layout, int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H, int64_t W) {
  return layout == core::Layout::nchw ? ((n * C + c) * H + h) * W + w : ((n * H + h) * W + w) * C + c;
}
}  // namespace

// Both memory orders: the values are random in memory order, the reference reads them by logical index.
TEST_P(GpuKernels, UpsampleNearest2x) {
  const int64_t batch = 2, channels = 3, h = 13, w = 11, n = batch * channels * h * w;
  for (const core::Layout layout : {core::Layout::nchw, core::Layout::nhwc}) {
    SCOPED_TRACE(std::string(core::layout_name(layout)));
    const Input x = input(n), dy = input(4 * n);
    Output y = output(4 * n), dx = output(n);
    launch_upsample_nearest2x_forward(stream_, dtype(), layout, x.ptr(), y.ptr(), batch, channels, h, w);
    std::vector<float> ref(4 * n);
    std::vector<double> ref_dx(n, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < 2 * h; ++i)
          for (int64_t j = 0; j < 2 * w; ++j) {
            const int64_t o = at(layout, b, c, i, j, channels, 2 * h, 2 * w), src = at(layout, b, c, i / 2, j / 2, channels, h, w);
            ref[o] = x.values[src];
            ref_dx[src] += dy.values[o];
          }
    expect_exact(result(y), ref, "upsample forward");
    launch_upsample_nearest2x_backward(stream_, dtype(), layout, dy.ptr(), dx.ptr(), batch, channels, h, w);
    expect_close(result(dx), ref_dx, "upsample backward");
  }
}

TEST_P(GpuKernels, MaxPool2d) {
  // The listed windows and one compiled on first use (3/1/1), in both memory orders.
  for (const core::Layout layout : {core::Layout::nchw, core::Layout::nhwc})
    for (const MaxPool2dWindow win :
         {MaxPool2dWindow{5, 1, 2}, MaxPool2dWindow{2, 2, 0}, MaxPool2dWindow{3, 2, 1}, MaxPool2dWindow{3, 1, 1}}) {
      SCOPED_TRACE(std::string(core::layout_name(layout)) + " k=" + std::to_string(win.k) + " s=" +
                   std::to_string(win.s) + " p=" + std::to_string(win.p));
      const int64_t batch = 2, channels = 3, h = 17, w = 20;
      const int64_t ho = maxpool2d_output_size(h, win), wo = maxpool2d_output_size(w, win);
      const int64_t n_in = batch * channels * h * w, n_out = batch * channels * ho * wo;
      const Input x = input(n_in), dy = input(n_out);
      // CPU reference: first maximum in row-major window order, padding never wins.
      std::vector<float> ref_y(n_out);
      std::vector<int32_t> ref_arg(n_out);
      std::vector<double> ref_dx(n_in, 0.0);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t oh = 0; oh < ho; ++oh)
            for (int64_t ow = 0; ow < wo; ++ow) {
              float best = -INFINITY;
              int32_t arg = -1;
              for (int64_t ih = oh * win.s - win.p; ih < oh * win.s - win.p + win.k; ++ih)
                for (int64_t iw = ow * win.s - win.p; iw < ow * win.s - win.p + win.k; ++iw) {
                  if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                  const float v = x.values[at(layout, b, c, ih, iw, channels, h, w)];
                  if (arg < 0 || v > best) best = v, arg = static_cast<int32_t>(ih * w + iw);
                }
              const int64_t o = at(layout, b, c, oh, ow, channels, ho, wo);
              ref_y[o] = best;
              ref_arg[o] = arg;
              ref_dx[at(layout, b, c, arg / w, arg % w, channels, h, w)] += dy.values[o];
            }
      Output y = output(n_out), dx = output(n_in);
      DeviceBuffer arg(n_out * sizeof(int32_t));
      arg.poison();
      launch_maxpool2d_forward(stream_, dtype(), layout, win, x.ptr(), y.ptr(), static_cast<int32_t*>(arg.get()),
                               batch, channels, h, w);
      expect_exact(result(y), ref_y, "maxpool forward");
      const std::vector<uint8_t> arg_bytes = arg.download(arg.bytes());
      std::vector<int32_t> arg_out(ref_arg.size());
      std::memcpy(arg_out.data(), arg_bytes.data(), arg_bytes.size());
      EXPECT_EQ(arg_out, ref_arg) << "argmax";

      launch_maxpool2d_backward(stream_, dtype(), layout, win, dy.ptr(), static_cast<const int32_t*>(arg.get()),
                                dx.ptr(), batch, channels, h, w);
      expect_close(result(dx), ref_dx, "maxpool backward");
    }
}

// Launches recorded into a CUDA graph (as inference replays them) compute the same as direct launches.
TEST_P(GpuKernels, LaunchInsideStreamCapture) {
  const size_t n = 10000;
  const Input x = input(n);
  Output y = output(n);
  // Compile and load before capturing: loading a library is not a capturable operation.
  cuda::kernel_instance<SiluForward>(dtype()).prepare();

  cudaGraph_t graph = nullptr;
  VISION_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  launch_silu_forward(stream_, dtype(), x.ptr(), y.ptr(), n);
  VISION_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  VISION_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_TRUE(std::isnan(decode(y.buffer->download(elem()), dtype())[0])) << "capturing must not run the kernel";
  VISION_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = x.values[i] * sigmoid(x.values[i]);
  expect_close(result(y), ref, "silu forward replayed from a CUDA graph");
  VISION_CUDA_CHECK(cudaGraphExecDestroy(exec));
  VISION_CUDA_CHECK(cudaGraphDestroy(graph));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GpuKernels, testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(core::dtype_name(info.param));
                         });
