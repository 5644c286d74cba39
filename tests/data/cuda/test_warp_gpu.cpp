// The augmentation's warp on the GPU (warp.cuh, data/warp_cuda.h) against its CPU twin warp_plan_cpu: the same bytes
// for plans that plan_sample makes — mosaics and letterboxes, flips, rotation, shear, a perspective, zoom-outs far
// past the canvas — on noise images, with the output poisoned first. The descriptor needs no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/data/augment.h"
#include "vision/data/warp_cuda.h"

using namespace vision;
using namespace vision::test;

namespace {

TEST(AugmentWarpKernel, DescriptorId) {
  const auto& k = cuda::kernel_instance<data::AugmentWarpKernel>();
  EXPECT_EQ(k.id(), "augment_warp__u8");
  EXPECT_NE(k.source().find("warp_plan_pixel"), std::string::npos);  // the shared math is inlined
}

TEST(AugmentWarpGpu, EqualsTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  constexpr int64_t imgsz = 160;
  std::mt19937_64& rng = test::rng();
  // Sources of several shapes (long side imgsz, as the training load makes them, and one larger: resized on the host).
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{160, 120}, {90, 160}, {160, 160}, {133, 160}, {200, 170}};
  std::vector<std::shared_ptr<const data::Image>> images;
  for (const auto& [w, h] : sizes) {
    data::Image im(w, h, 3);
    for (auto& p : im.pixels) p = static_cast<uint8_t>(rng() & 0xff);
    images.push_back(std::make_shared<const data::Image>(std::move(im)));
  }
  const data::SourceLoader load = [&](size_t i) {
    return data::SourceImage{images[i], {{0, 10, 10, 60, 50}}, true};
  };
  std::vector<data::AugmentOptions> options(3);
  options[1].degrees = 15, options[1].shear = 4, options[1].flipud = 0.5;
  options[2].perspective = 0.0007, options[2].scale = 0.9;
  std::vector<data::SamplePlan> plans;
  for (size_t k = 0; k < options.size(); ++k)
    for (uint64_t seed = 0; seed < 8; ++seed)
      for (const bool mosaic : {true, false}) {
        data::Random r(data::derive_seed(11, seed, k));
        data::SamplePlan p;
        data::plan_sample(seed % images.size(), images.size(), load, imgsz, options[k], mosaic, r, p);
        plans.push_back(std::move(p));
      }
  const auto count = static_cast<int64_t>(plans.size());
  // Every source (and the host-letterboxed ones the plans made) copied to the device once.
  std::vector<std::unique_ptr<DeviceBuffer>> sources;
  std::vector<data::WarpPlan> host_plans, device_plans;
  for (const data::SamplePlan& p : plans) {
    data::WarpPlan d = p.warp;
    for (int t = 0; t < d.tiles; ++t) {
      const data::Image& im = *p.sources[static_cast<size_t>(t)];
      sources.push_back(std::make_unique<DeviceBuffer>(im.pixels.size()));
      sources.back()->upload(im.pixels);
      d.source[t] = reinterpret_cast<uint64_t>(sources.back()->get());
    }
    device_plans.push_back(d);
    host_plans.push_back(data::host_warp_plan(p));
  }
  DeviceBuffer d_plans(device_plans.size() * sizeof(data::WarpPlan)), d_out(static_cast<size_t>(count * imgsz * imgsz * 3));
  std::vector<uint8_t> plan_bytes(d_plans.bytes());
  std::memcpy(plan_bytes.data(), device_plans.data(), plan_bytes.size());
  d_plans.upload(plan_bytes);
  d_out.poison();
  data::launch_augment_warp(nullptr, static_cast<uint8_t*>(d_out.get()), imgsz, count,
                            static_cast<const data::WarpPlan*>(d_plans.get()));
  VISION_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d_out.download(d_out.bytes());
  std::vector<uint8_t> want(static_cast<size_t>(imgsz * imgsz * 3));
  int64_t mosaics = 0, mirrored = 0, perspective = 0;
  for (int64_t i = 0; i < count; ++i) {
    SCOPED_TRACE(testing::Message() << "plan " << i);
    const data::WarpPlan& p = host_plans[static_cast<size_t>(i)];
    mosaics += p.tiles == 4, mirrored += p.mirror_x || p.mirror_y, perspective += !p.affine;
    std::fill(want.begin(), want.end(), uint8_t{7});
    data::warp_plan_cpu(p, want.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data() + i * imgsz * imgsz * 3, want.size()));
  }
  EXPECT_GT(mosaics, 8);
  EXPECT_GT(mirrored, 8);
  EXPECT_GT(perspective, 4);
  EXPECT_THROW(data::launch_augment_warp(nullptr, static_cast<uint8_t*>(d_out.get()), 0, count,
                                         static_cast<const data::WarpPlan*>(d_plans.get())),
               Error);
}

}  // namespace
