#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "test_util.h"
#include "vision/graph/backend.h"

namespace vision::test {
namespace {

using core::Shape;
using core::Tensor;

TEST(CpuBackend, AllocatesAlignedMemoryAndCopies) {
  auto be = graph::cpu_backend();
  EXPECT_EQ(be->backend(), graph::Backend::cpu);
  EXPECT_EQ(be->device(), core::Device::cpu);
  for (size_t bytes : {size_t(0), size_t(1), size_t(100), size_t(1) << 20}) {
    auto mem = be->allocate(bytes);
    ASSERT_NE(mem, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mem.get()) % 64, 0u);
  }
  const auto src = random_values(1000);
  auto a = be->allocate(4000), b = be->allocate(4000);
  be->copy_to_device(a.get(), src.data(), 4000);
  be->copy_on_device(b.get(), a.get(), 4000);
  std::vector<float> back(1000);
  be->copy_to_host(back.data(), b.get(), 4000);
  EXPECT_EQ(back, src);
  be->fill_zero(b.get(), 4000);
  be->copy_to_host(back.data(), b.get(), 4000);
  EXPECT_EQ(back, std::vector<float>(1000, 0.0f));
  be->synchronize();
}

TEST(CpuBackend, AddIntoAndUploadDownload) {
  auto be = graph::cpu_backend();
  const Tensor x = random_tensor({3, 5000}), y = random_tensor({3, 5000});
  Tensor dev = be->upload(x);
  EXPECT_EQ(dev.shape(), x.shape());
  EXPECT_NE(dev.raw(), x.raw());
  be->add_into(dev, y);
  const Tensor back = be->download(dev);
  const auto xv = x.to_vector(), yv = y.to_vector(), bv = back.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(bv[i], xv[i] + yv[i]);
  EXPECT_THROW(be->add_into(dev, random_tensor({3, 4999})), Error);
  EXPECT_THROW(be->add_into(Tensor::zeros({4}, core::DType::i32), Tensor::zeros({4}, core::DType::i32)), Error);
}

}  // namespace
}  // namespace vision::test
