// Data-parallel training's device path on one GPU (issue #30): a world of one rank through NCCL — its all-reduce and
// broadcasts really called — gives bit for bit the numbers of a run without a communicator (deterministic plans, f32
// and bf16), and VISION_DIST_BACKEND=mpi (through host memory) does too. The NCCL path reduces in buckets started beside
// the backward (on a stream of their own, captured with the step from the second batch on), and with --sync-bn in bf16
// (our BatchNorm kernels either way, their gathers over one rank) it still gives the same bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "models/yolo/trainer_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/dist/communicator.h"
#include "vision/graph/backend.h"

namespace vision::test {
namespace {

using namespace trainer_util;

std::vector<float> train_params(const std::shared_ptr<dist::Communicator>& comm, core::DType dtype,
                                std::string* reduction, bool sync_bn = false, size_t* buckets = nullptr) {
  const yolo::ModelInfo info = tiny_info();
  yolo::TrainerOptions o = tiny_options();
  o.deterministic = true;
  o.dtype = dtype;
  o.nbs = o.batch;  // a step per batch
  o.comm = comm;
  o.sync_bn = sync_bn;
  yolo::Yolo26Trainer t(graph::make_backend(graph::DeviceChoice::cuda), info, yolo::initial_weights(info), o);
  for (int i = 0; i < 3; ++i) {
    const Batch b = make_batch(2, 40 + static_cast<uint64_t>(i));
    const yolo::IterationResult r = t.train_batch(b.images, b.targets, b.count);
    EXPECT_TRUE(r.stepped && r.step.applied);
  }
  if (reduction) *reduction = t.reduction();
  if (buckets) *buckets = t.gradient_buckets();
  std::vector<float> out = t.executor().state().flat_params().defined()
                               ? t.backend().download(t.executor().state().flat_params()).to_vector()
                               : std::vector<float>{};
  return out;
}

TEST(NcclGpu, WorldOfOneMatchesARunWithoutNccl) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const ScopedEnv buckets(yolo::kNcclBucketsEnv, std::nullopt);  // the default: the buckets on NCCL's own stream
  for (const core::DType dtype : {core::DType::f32, core::DType::bf16}) {
    const std::vector<float> plain = train_params(nullptr, dtype, nullptr);
    std::string reduction;
    size_t buckets = 0;
    const std::vector<float> nccl = train_params(dist::make_single(), dtype, &reduction, false, &buckets);
    EXPECT_EQ(reduction, "nccl");
    EXPECT_GE(buckets, 2u) << "the tiny model's 2.5 M gradients in buckets of 1 M";
    ASSERT_EQ(plain.size(), nccl.size());
    EXPECT_TRUE(plain == nccl) << core::dtype_name(dtype) << ": NCCL in a world of one changed the parameters";
    ::setenv("VISION_DIST_BACKEND", "mpi", 1);
    const std::vector<float> host = train_params(dist::make_single(), dtype, &reduction);
    ::unsetenv("VISION_DIST_BACKEND");
    EXPECT_EQ(reduction, "single");
    EXPECT_TRUE(plain == host) << core::dtype_name(dtype) << ": the host path changed the parameters";
    if (dtype == core::DType::bf16)
      EXPECT_TRUE(plain == train_params(dist::make_single(), dtype, nullptr, true))
          << "--sync-bn in a world of one changed the parameters";
  }
}

}  // namespace
}  // namespace vision::test
