// The foundation's small network on CUDA eager, on CUDA-graph replay and on the CPU: all must agree, with random
// BatchNorm statistics (the fold kernel and cuDNN's BatchNorm see real values), and against float64.
#include <gtest/gtest.h>

#include "error_bounds.h"
#include "models/small_net_reference.h"
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

// f32 on both sides (cuDNN without TF32): the relative norm every f32 comparison of the suite uses.
constexpr double kF32Bound = 1e-5;

// The GPU output against the float64 network: as a norm, and element by element within its f32 error bound.
void expect_matches_float64(const std::vector<float>& out, const test::SmallNetReference& ref, const char* what) {
  EXPECT_LT(test::rel_error(out, ref.y), kF32Bound) << what;
  EXPECT_TRUE(test::within_bounds(out, ref.y, ref.bound)) << what;
}

}  // namespace

TEST(SmallNetCuda, InferenceEagerGraphReplayAndCpuAgree) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const SmallNetConfig cfg{.in_channels = 3, .width = 8};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor gpu(models::demo::small_net(cfg), cuda_backend());
  auto x1 = test::random_tensor(Shape{2, 3, 32, 24});
  auto x2 = test::random_tensor(Shape{2, 3, 32, 24});
  test::randomize_batchnorm_state(cpu.state({x1.shape()}));
  const auto ref1 = cpu.forward({x1})[0].to_vector();
  const auto ref2 = cpu.forward({x2})[0].to_vector();
  copy_state(cpu, gpu, {x1.shape()});
  const test::SmallNetReference f64_1 = test::small_net_reference(cpu.state(), x1);
  const test::SmallNetReference f64_2 = test::small_net_reference(cpu.state(), x2);

  const auto eager = test::to_host(gpu, gpu.forward({x1})[0]);  // first run: eager
  Plan& plan = gpu.plan(Mode::inference, {x1.shape()});
  EXPECT_FALSE(plan.graph_replayed());
  const auto replay1 = test::to_host(gpu, gpu.forward({x1})[0]);  // second: captured, then replayed
  EXPECT_TRUE(plan.graph_replayed());
  const auto replay2 = test::to_host(gpu, gpu.forward({x2})[0]);  // replay on new input data
  EXPECT_LT(test::rel_error(eager, ref1), kF32Bound);
  EXPECT_LT(test::rel_error(replay1, ref1), kF32Bound);
  EXPECT_LT(test::rel_error(replay2, ref2), kF32Bound);
  expect_matches_float64(eager, f64_1, "eager");
  expect_matches_float64(replay2, f64_2, "replay on new inputs");
  EXPECT_EQ(replay1, eager);  // the same kernels on the same data
}

// With graph replay turned off every run is eager: the same kernels as the replayed graph, so the same bits, run
// after run, on changing inputs.
TEST(SmallNetCuda, InferenceWithoutGraphReplayEqualsReplay) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const SmallNetConfig cfg{.in_channels = 3, .width = 8};
  const Shape shape{2, 3, 32, 24};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor replayed(models::demo::small_net(cfg), cuda_backend());
  Executor eager(models::demo::small_net(cfg), cuda_backend());
  test::randomize_batchnorm_state(cpu.state({shape}));
  copy_state(cpu, replayed, {shape});
  copy_state(cpu, eager, {shape});
  Plan& replay_plan = replayed.plan(Mode::inference, {shape});
  Plan& eager_plan = eager.plan(Mode::inference, {shape});
  eager_plan.set_graph_replay(false);
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE(testing::Message() << "run " << run);
    const Tensor x = test::random_tensor(shape);
    const auto with_replay = test::to_host(replayed, replayed.forward({x})[0]);
    const auto without = test::to_host(eager, eager.forward({x})[0]);
    EXPECT_EQ(replay_plan.graph_replayed(), run >= 1);  // captured on the second run
    EXPECT_FALSE(eager_plan.graph_replayed());
    EXPECT_EQ(without, with_replay);  // bit for bit
    expect_matches_float64(without, test::small_net_reference(cpu.state(), x), "without replay");
  }
}

TEST(SmallNetCuda, TrainingStepMatchesCpu) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const SmallNetConfig cfg{.in_channels = 3, .width = 8, .loss = SmallNetConfig::Loss::projection};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor gpu(models::demo::small_net(cfg), cuda_backend());
  auto x = test::random_tensor(Shape{2, 3, 16, 16});
  auto r = test::random_tensor(Shape{2, 8, 16, 16});
  // Random γ, β and running statistics: the running-statistics update starts from real values.
  test::randomize_batchnorm_state(cpu.state({x.shape(), r.shape()}));
  copy_state(cpu, gpu, {x.shape(), r.shape()});

  const float loss_cpu = cpu.forward_train({x, r})[0].to_vector()[0];
  cpu.backward();
  const float loss_gpu = test::to_host(gpu, gpu.forward_train({x, r})[0])[0];
  gpu.backward();
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * std::abs(loss_cpu) + 1e-7);
  EXPECT_LT(test::rel_error(test::to_host(gpu, gpu.state().flat_grads()), cpu.state().flat_grads().to_vector()), 5e-5);
  // BatchNorm's running statistics were updated the same way.
  for (const char* key : {"net.0.bn.running_mean", "net.0.bn.running_var", "net.2.bn.running_mean",
                          "net.2.bn.running_var"})
    EXPECT_LT(test::rel_error(test::to_host(gpu, gpu.state().tensor(key)), cpu.state().tensor(key).to_vector()), 1e-5)
        << key;
  EXPECT_EQ(gpu.backend().download(gpu.state().tensor("net.0.bn.num_batches_tracked")).data<int64_t>()[0], 1);
}

// Runs in a child process that sees no GPU (CUDA_VISIBLE_DEVICES empty), on a GPU host too.
TEST(SmallNetCuda, AskingForCudaWithoutAGpuIsAClearError) {
  VISION_RUN_WITHOUT_GPU();
  ASSERT_FALSE(cuda::gpu_available()) << "CUDA_VISIBLE_DEVICES is empty, yet a GPU is usable";
  try {
    make_backend(DeviceChoice::cuda);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_backend(DeviceChoice::automatic)->backend(), Backend::cpu);
}
