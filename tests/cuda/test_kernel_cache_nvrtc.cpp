// A real kernel compiled through the kernel disk cache (NVRTC): built once, then loaded; another arch is another key.
#include <gtest/gtest.h>

#include "test_util.h"
#include "vision/cuda/kernel_cache.h"
#include "vision/ops/kernels/elementwise_cuda.h"

using namespace vision;
using namespace vision::cuda;
using vision::test::TempDir;

TEST(KernelCacheNvrtc, RealKernelIsCompiledOnceThenLoaded) {
  TempDir dir;
  const ops::kernels::AddForward add(core::DType::f16);
  CacheOutcome first{}, second{}, other_arch{};
  const CompiledKernel a = add.compile("sm_90a", dir.path(), &first);
  const CompiledKernel b = add.compile("sm_90a", dir.path(), &second);
  add.compile("sm_80", dir.path(), &other_arch);
  EXPECT_EQ(first, CacheOutcome::built);
  EXPECT_EQ(second, CacheOutcome::hit);
  EXPECT_EQ(other_arch, CacheOutcome::built);  // another arch is another key
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.lowered_name, b.lowered_name);
}
