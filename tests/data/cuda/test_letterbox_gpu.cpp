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

}  // namespace
