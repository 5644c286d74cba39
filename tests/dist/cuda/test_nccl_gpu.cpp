// Data-parallel training's device path on one GPU (issue #30): a world of one rank through NCCL — its all-reduce and
// broadcasts really called — gives bit for bit the numbers of a run without a communicator (deterministic plans, f32
// and bf16), and VISION_DIST_BACKEND=mpi (through host memory) does too.
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
                                std::string* reduction) {
  const yolo::ModelInfo info = tiny_info();
  yolo::TrainerOptions o = tiny_options();
  o.deterministic = true;
  o.dtype = dtype;
  o.nbs = o.batch;  // a step per batch
  o.comm = comm;
  yolo::Yolo26Trainer t(graph::make_backend(graph::DeviceChoice::cuda), info, yolo::initial_weights(info), o);
  for (int i = 0; i < 3; ++i) {
    const Batch b = make_batch(2, 40 + static_cast<uint64_t>(i));
    const yolo::IterationResult r = t.train_batch(b.images, b.targets, b.count);
    EXPECT_TRUE(r.stepped && r.step.applied);
  }
  if (reduction) *reduction = t.reduction();
  std::vector<float> out = t.executor().state().flat_params().defined()
                               ? t.backend().download(t.executor().state().flat_params()).to_vector()
                               : std::vector<float>{};
  return out;
}

TEST(NcclGpu, WorldOfOneMatchesARunWithoutNccl) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (const core::DType dtype : {core::DType::f32, core::DType::bf16}) {
    const std::vector<float> plain = train_params(nullptr, dtype, nullptr);
    std::string reduction;
    const std::vector<float> nccl = train_params(dist::make_single(), dtype, &reduction);
    EXPECT_EQ(reduction, "nccl");
    ASSERT_EQ(plain.size(), nccl.size());
    EXPECT_TRUE(plain == nccl) << core::dtype_name(dtype) << ": NCCL in a world of one changed the parameters";
    ::setenv("VISION_DIST_BACKEND", "mpi", 1);
    const std::vector<float> host = train_params(dist::make_single(), dtype, &reduction);
    ::unsetenv("VISION_DIST_BACKEND");
    EXPECT_EQ(reduction, "single");
    EXPECT_TRUE(plain == host) << core::dtype_name(dtype) << ": the host path changed the parameters";
  }
}

}  // namespace
}  // namespace vision::test
