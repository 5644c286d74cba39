// The letterbox kernel (letterbox.cuh) against the CPU letterbox + write_normalized: the same values exactly in f32
// (NCHW and NHWC) and their rounding in f16 and bf16, for downscaled, upscaled, same-size and padded images, written
// into one item of a poisoned batch (the other item untouched). The descriptor needs no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/cuda/memory.h"
#include "vision/data/letterbox.h"
#include "vision/data/letterbox_cuda.h"
#include "vision/data/image_tensor.h"
#include "vision/data/yuv.h"

using namespace vision;
using namespace vision::test;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;

namespace {

data::Image letterbox_test_image(int64_t w, int64_t h, uint32_t seed) {
  data::Image im(w, h, 3);
  std::mt19937 rng(seed);
  for (auto& p : im.pixels) p = static_cast<uint8_t>(rng() & 0xff);
  return im;
}

TEST(LetterboxKernel, DescriptorIds) {
  EXPECT_EQ(cuda::kernel_instance<data::LetterboxNormalize>(DType::f16).id(), "letterbox_normalize__f16");
  EXPECT_EQ(cuda::kernel_instance<data::LetterboxNormalize>(DType::f32).id(), "letterbox_normalize__f32");
  EXPECT_THROW(data::LetterboxNormalize(DType::i32), Error);
}

struct Size {
  int64_t w, h, target_w, target_h, stride;
};

TEST(LetterboxGpu, EqualsTheCpuLetterboxInEveryFormat) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Size sizes[] = {
      {640, 480, 320, 320, 0},   // downscaled, padded above and below
      {97, 203, 320, 320, 32},   // upscaled, odd sizes, minimal stride padding
      {320, 192, 320, 320, 32},  // the same size: copied
      {1000, 37, 256, 128, 0},   // a very wide one
  };
  uint32_t seed = 1;
  for (const Size& s : sizes) {
    const data::Image image = letterbox_test_image(s.w, s.h, seed++);
    const data::LetterboxTransform t = data::letterbox_transform(s.h, s.w, s.target_h, s.target_w, true, s.stride);
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      Tensor expected = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, DType::f32, layout);
      data::write_normalized(data::letterbox(image, t), expected, 0);
      const std::vector<float> want = expected.to_vector();  // logical NCHW order
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        SCOPED_TRACE(testing::Message() << s.w << "x" << s.h << " → " << t.input_w << "x" << t.input_h << " "
                                        << core::dtype_name(dtype) << " " << core::layout_name(layout));
        const size_t item = static_cast<size_t>(3 * t.input_h * t.input_w) * core::dtype_size(dtype);
        DeviceBuffer src(image.pixels.size()), dst(2 * item);
        src.upload(image.pixels);
        dst.poison();
        const Tensor batch =
            Tensor::view(dst.get(), Shape{2, 3, t.input_h, t.input_w}, dtype, core::Device::cuda, layout);
        data::launch_letterbox_normalize(nullptr, static_cast<const uint8_t*>(src.get()), t, batch, 1);
        VISION_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint8_t> untouched = dst.download(item, 0);
        EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0xff; }))
            << "item 0 was written";
        const std::vector<uint8_t> got_bytes = dst.download(item, item);
        Tensor got = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, dtype, layout);
        std::memcpy(got.raw(), got_bytes.data(), item);
        Tensor want_rounded = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, dtype, layout);
        graph::cpu_backend()->convert(want_rounded, expected);
        const std::vector<float> g = got.to_vector(), w = want_rounded.to_vector();
        size_t mismatches = 0;
        for (size_t i = 0; i < g.size(); ++i) mismatches += g[i] != w[i];
        EXPECT_EQ(mismatches, 0u) << "of " << g.size();
        if (dtype == DType::f32) EXPECT_EQ(g, want);
      }
    }
  }
}

// A random 4:2:0 frame with padded rows: I420 (three planes) or NV12 (interleaved chroma), in one host buffer.
struct YuvTestFrame {
  std::vector<uint8_t> bytes;
  int64_t y_pitch = 0, uv_pitch = 0, u_offset = 0, v_offset = 0;
};

YuvTestFrame yuv_test_frame(int64_t w, int64_t h, bool nv12, uint32_t seed) {
  YuvTestFrame f;
  const int64_t cw = (w + 1) / 2, ch = (h + 1) / 2;
  f.y_pitch = w + 7;
  f.uv_pitch = (nv12 ? 2 * cw : cw) + 5;
  f.u_offset = f.y_pitch * h;
  f.v_offset = nv12 ? f.u_offset + 1 : f.u_offset + f.uv_pitch * ch;
  f.bytes.resize(static_cast<size_t>(f.u_offset + (nv12 ? 1 : 2) * f.uv_pitch * ch + 1));
  std::mt19937 rng(seed);
  for (auto& b : f.bytes) b = static_cast<uint8_t>(rng() & 0xff);
  return f;
}

data::Yuv420View yuv_test_view(const uint8_t* base, const YuvTestFrame& f, int64_t w, int64_t h, bool nv12) {
  data::Yuv420View v;
  v.y = base, v.u = base + f.u_offset, v.v = base + f.v_offset;
  v.width = w, v.height = h, v.y_pitch = f.y_pitch, v.uv_pitch = f.uv_pitch, v.uv_step = nv12 ? 2 : 1;
  return v;
}

TEST(LetterboxKernel, YuvDescriptorIds) {
  EXPECT_EQ(cuda::kernel_instance<data::LetterboxYuvNormalize>(DType::bf16).id(), "letterbox_yuv_normalize__bf16");
  EXPECT_THROW(data::LetterboxYuvNormalize(DType::u8), Error);
}

// The fused YUV kernel against its CPU twin, letterbox(yuv420_to_rgb(frame)) + write_normalized: equal in f32 and
// after rounding in f16/bf16, for I420 and NV12 with padded rows, both matrices and ranges, odd sizes.
TEST(LetterboxGpu, YuvFramesEqualTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Size sizes[] = {{1920, 1080, 640, 640, 32}, {97, 203, 320, 320, 32}, {320, 192, 320, 320, 32},
                        {1001, 37, 256, 128, 0}};
  uint32_t seed = 11;
  for (const Size& s : sizes) {
    for (bool nv12 : {false, true}) {
      const YuvTestFrame frame = yuv_test_frame(s.w, s.h, nv12, seed++);
      DeviceBuffer src(frame.bytes.size());
      src.upload(frame.bytes);
      const data::LetterboxTransform t = data::letterbox_transform(s.h, s.w, s.target_h, s.target_w, true, s.stride);
      for (const auto& [matrix, full] : {std::pair{data::YuvMatrix::bt601, false}, {data::YuvMatrix::bt709, true}}) {
        data::Yuv420View host = yuv_test_view(frame.bytes.data(), frame, s.w, s.h, nv12);
        host.matrix = matrix, host.full_range = full;
        data::Yuv420View device = yuv_test_view(static_cast<const uint8_t*>(src.get()), frame, s.w, s.h, nv12);
        device.matrix = matrix, device.full_range = full, device.device = true;
        const Layout layout = nv12 ? Layout::nhwc : Layout::nchw;
        Tensor expected = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, DType::f32, layout);
        data::write_normalized(data::letterbox(data::yuv420_to_rgb(host), t), expected, 0);
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
          SCOPED_TRACE(testing::Message() << s.w << "x" << s.h << (nv12 ? " nv12 " : " i420 ")
                                          << (matrix == data::YuvMatrix::bt709 ? "bt709" : "bt601")
                                          << (full ? " full " : " limited ") << core::dtype_name(dtype));
          const size_t item = static_cast<size_t>(3 * t.input_h * t.input_w) * core::dtype_size(dtype);
          DeviceBuffer dst(2 * item);
          dst.poison();
          const Tensor batch =
              Tensor::view(dst.get(), Shape{2, 3, t.input_h, t.input_w}, dtype, core::Device::cuda, layout);
          data::launch_letterbox_yuv_normalize(nullptr, device, t, batch, 1);
          VISION_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<uint8_t> untouched = dst.download(item, 0);
          EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0xff; }));
          const std::vector<uint8_t> got_bytes = dst.download(item, item);
          Tensor got = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, dtype, layout);
          std::memcpy(got.raw(), got_bytes.data(), item);
          Tensor want = Tensor::zeros(Shape{1, 3, t.input_h, t.input_w}, dtype, layout);
          graph::cpu_backend()->convert(want, expected);
          const std::vector<float> g = got.to_vector(), w = want.to_vector();
          size_t mismatches = 0;
          for (size_t i = 0; i < g.size(); ++i) mismatches += g[i] != w[i];
          EXPECT_EQ(mismatches, 0u) << "of " << g.size();
        }
      }
      // The twin reads device planes too (copied to the host first): the same RGB.
      data::Yuv420View device = yuv_test_view(static_cast<const uint8_t*>(src.get()), frame, s.w, s.h, nv12);
      device.device = true;
      EXPECT_EQ(data::yuv420_to_rgb(device), data::yuv420_to_rgb(yuv_test_view(frame.bytes.data(), frame, s.w, s.h,
                                                                                nv12)));
    }
  }
}

}  // namespace
