// The foundation's small network on CUDA eager, on CUDA-graph replay and on the CPU: all must agree.
#include <gtest/gtest.h>

#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/models/demo/small_net.h"

using namespace vision;
using namespace vision::graph;
using models::demo::SmallNetConfig;

namespace {

// Gives the CUDA executor the CPU executor's parameters and buffers.
void copy_state(Executor& from, Executor& to, const std::vector<Shape>& shapes) {
  auto& dst = to.state(shapes);
  for (auto& [key, t] : from.state().to_host()) dst.set_from_host(key, t);
}

std::vector<float> host(Executor& ex, const Tensor& t) { return ex.backend().download(t).to_vector(); }

}  // namespace

TEST(SmallNetCuda, InferenceEagerGraphReplayAndCpuAgree) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const SmallNetConfig cfg{.in_channels = 3, .width = 8};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor gpu(models::demo::small_net(cfg), cuda_backend());
  auto x1 = test::random_tensor(Shape{2, 3, 32, 24});
  auto x2 = test::random_tensor(Shape{2, 3, 32, 24});
  const auto ref1 = cpu.forward({x1})[0].to_vector();
  const auto ref2 = cpu.forward({x2})[0].to_vector();
  copy_state(cpu, gpu, {x1.shape()});

  const auto eager = host(gpu, gpu.forward({x1})[0]);  // first run: eager
  Plan& plan = gpu.plan(Mode::inference, {x1.shape()});
  EXPECT_FALSE(plan.graph_replayed());
  const auto replay1 = host(gpu, gpu.forward({x1})[0]);  // second: captured, then replayed
  EXPECT_TRUE(plan.graph_replayed());
  const auto replay2 = host(gpu, gpu.forward({x2})[0]);  // replay on new input data
  EXPECT_LT(test::rel_error(eager, ref1), 1e-5);
  EXPECT_LT(test::rel_error(replay1, ref1), 1e-5);
  EXPECT_LT(test::rel_error(replay2, ref2), 1e-5);
  EXPECT_EQ(replay1, eager);  // the same kernels on the same data
}

TEST(SmallNetCuda, TrainingStepMatchesCpu) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const SmallNetConfig cfg{.in_channels = 3, .width = 8, .loss = SmallNetConfig::Loss::projection};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor gpu(models::demo::small_net(cfg), cuda_backend());
  auto x = test::random_tensor(Shape{2, 3, 16, 16});
  auto r = test::random_tensor(Shape{2, 8, 16, 16});
  cpu.state({x.shape(), r.shape()});
  copy_state(cpu, gpu, {x.shape(), r.shape()});

  const float loss_cpu = cpu.forward_train({x, r})[0].to_vector()[0];
  cpu.backward();
  const float loss_gpu = host(gpu, gpu.forward_train({x, r})[0])[0];
  gpu.backward();
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * std::abs(loss_cpu) + 1e-7);
  EXPECT_LT(test::rel_error(host(gpu, gpu.state().flat_grads()), cpu.state().flat_grads().to_vector()), 5e-5);
  // BatchNorm's running statistics were updated the same way.
  for (const char* key : {"net.0.bn.running_mean", "net.0.bn.running_var", "net.2.bn.running_var"})
    EXPECT_LT(test::rel_error(host(gpu, gpu.state().tensor(key)), cpu.state().tensor(key).to_vector()), 1e-5) << key;
  EXPECT_EQ(gpu.backend().download(gpu.state().tensor("net.0.bn.num_batches_tracked")).data<int64_t>()[0], 1);
}

TEST(SmallNetCuda, AskingForCudaWithoutAGpuIsAClearError) {
  if (cuda::gpu_available()) GTEST_SKIP() << "a GPU is present";
  try {
    make_backend(DeviceChoice::cuda);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_backend(DeviceChoice::automatic)->backend(), Backend::cpu);
}
