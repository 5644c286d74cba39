// The HSV jitter kernel (hsv.cuh) against apply_hsv on the CPU: the same bytes for noise images (every hue, saturation
// and value met) and photographs' extremes (greys, saturated primaries), gains drawn as the loader draws them and
// extreme ones, in place on a batch of images whose records differ, an image whose record says "unchanged" left
// byte for byte. The descriptor needs no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/data/augment.h"
#include "vision/data/hsv_cuda.h"

using namespace vision;
using namespace vision::test;

namespace {

TEST(HsvKernel, DescriptorId) {
  EXPECT_EQ(cuda::kernel_instance<data::HsvJitterKernel>().id(), "hsv_jitter__u8");
  EXPECT_NE(cuda::kernel_instance<data::HsvJitterKernel>().source().find("hsv_jitter"), std::string::npos);
}

TEST(HsvGpu, EqualsApplyHsvOnTheCpu) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  constexpr int64_t w = 203, h = 157, pixels = w * h;  // odd sizes: the blocks' stretches end mid-image
  std::mt19937_64& rng = test::rng();
  std::uniform_real_distribution<double> unit(-1, 1);
  std::vector<data::HsvGains> gains = {
      {1, 1, 1},                   // unchanged: the record's flag is 0
      {1.015, 1.7, 1.4},           // the options' extremes
      {0.985, 0.3, 0.6},
      {1, 1, 1.0000001},           // barely changed: the round trip through HSV still applies
      {1.9, 3.0, 2.5},             // far outside the defaults: hue wraps, saturation and value clamp
  };
  for (int i = 0; i < 11; ++i) gains.push_back({1 + 0.015 * unit(rng), 1 + 0.7 * unit(rng), 1 + 0.4 * unit(rng)});
  const int64_t count = static_cast<int64_t>(gains.size());
  std::vector<data::Image> images;
  for (int64_t i = 0; i < count; ++i) {
    data::Image im(w, h, 3);
    for (auto& p : im.pixels) p = static_cast<uint8_t>(rng() & 0xff);
    // A band of greys and of saturated primaries and secondaries in every image.
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t g = static_cast<uint8_t>(x % 256);
      std::memset(im.at(x, 0), g, 3);
      uint8_t* p = im.at(x, 1);
      p[0] = (x & 1) ? 255 : 0, p[1] = (x & 2) ? 255 : 0, p[2] = (x & 4) ? 255 : 0;
    }
    images.push_back(std::move(im));
  }
  std::vector<uint8_t> host(static_cast<size_t>(count * pixels * 3)), records(count * data::kHsvRecordBytes);
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(host.data() + i * pixels * 3, images[static_cast<size_t>(i)].pixels.data(), pixels * 3);
    data::hsv_record(gains[static_cast<size_t>(i)], records.data() + i * data::kHsvRecordBytes);
  }
  EXPECT_EQ(records[data::kHsvRecordApplies], 0);  // gains of exactly 1
  DeviceBuffer d_images(host.size()), d_records(records.size());
  d_images.upload(host);
  d_records.upload(records);
  data::launch_hsv_jitter(nullptr, static_cast<uint8_t*>(d_images.get()), pixels, count,
                          static_cast<const uint8_t*>(d_records.get()));
  VISION_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d_images.download(host.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    SCOPED_TRACE(testing::Message() << "image " << i);
    data::Image want = images[static_cast<size_t>(i)];
    const data::HsvGains& g = gains[static_cast<size_t>(i)];
    data::apply_hsv(want, g[0], g[1], g[2]);
    size_t mismatches = 0, changed = 0;
    for (int64_t k = 0; k < pixels * 3; ++k) {
      mismatches += got[static_cast<size_t>(i * pixels * 3 + k)] != want.pixels[static_cast<size_t>(k)];
      changed += want.pixels[static_cast<size_t>(k)] != images[static_cast<size_t>(i)].pixels[static_cast<size_t>(k)];
    }
    EXPECT_EQ(mismatches, 0u) << "of " << pixels * 3;
    if (i == 0) EXPECT_EQ(changed, 0u);
    else EXPECT_GT(changed, 0u);
  }
  EXPECT_THROW(data::launch_hsv_jitter(nullptr, static_cast<uint8_t*>(d_images.get()), 0, count,
                                       static_cast<const uint8_t*>(d_records.get())),
               Error);
}

}  // namespace
