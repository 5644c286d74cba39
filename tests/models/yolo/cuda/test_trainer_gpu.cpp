// Yolo26Trainer on CUDA: f32 steps (deterministic, no TF32) follow the CPU twin's losses closely; bf16 and f16 (loss
// scaling) training lowers the loss of a fixed batch; resume in f32 with deterministic plans repeats the
// uninterrupted run within 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "models/yolo/trainer_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/graph/backend.h"

namespace vision::test {
namespace {

using namespace trainer_util;

std::shared_ptr<graph::BackendContext> cuda_backend() {
  return graph::make_backend(graph::parse_device_choice("cuda"));
}

// The weights with every f32 value moved by about one unit in the last place (a relative N(0, 2^-23) change): a run
// from them measures how far rounding alone carries the trajectory apart (an anchor that changes its assignment makes
// the loss jump), which bounds what any correct f32 implementation can promise.
core::SafetensorsFile perturbed(core::SafetensorsFile w) {
  std::mt19937_64 g(99);
  std::normal_distribution<double> n(0.0, std::ldexp(1.0, -23));
  for (auto& [name, t] : w.tensors) {
    if (t.dtype() != core::DType::f32) continue;
    t = t.clone();  // tensors share their memory when copied
    float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(v[i] * (1.0 + n(g)));
  }
  return w;
}

TEST(Yolo26TrainerGpu, F32FollowsTheCpu) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const yolo::ModelInfo info = tiny_info();
  const auto init = yolo::initial_weights(info);
  yolo::TrainerOptions o = tiny_options();
  o.deterministic = true;
  const std::vector<Batch> batches = {make_batch(2, 3), make_batch(2, 4), make_batch(2, 5)};
  yolo::Yolo26Trainer cpu(graph::cpu_backend(), info, init, o);
  yolo::Yolo26Trainer cpu_rounded(graph::cpu_backend(), info, perturbed(init), o);
  yolo::Yolo26Trainer gpu(cuda_backend(), info, init, o);
  const std::vector<float> a = run(cpu, 6, batches), r = run(cpu_rounded, 6, batches), b = run(gpu, 6, batches);
  // Per iteration: within 2× the CPU's own divergence under one-ulp changes of the weights (never below 1e-4
  // relative: the first iterations' rounding alone), and never worse than 2% of the loss.
  double allowed = 1e-4;
  for (size_t i = 0; i < a.size(); ++i) {
    const double own = std::abs(r[i] - a[i]) / std::abs(a[i]), ours = std::abs(b[i] - a[i]) / std::abs(a[i]);
    allowed = std::max(allowed, 2 * own);  // a divergence once reached does not shrink back by itself
    std::printf("  iteration %zu: cpu %.6f cuda %.6f (rel %.2e), cpu from rounded weights %.6f (rel %.2e), bound %.2e\n",
                i, a[i], b[i], ours, r[i], own, allowed);
    EXPECT_LE(ours, std::min(allowed, 0.02)) << "iteration " << i;
  }
  EXPECT_LE(std::abs(b[0] - a[0]), 1e-5 * std::abs(a[0])) << "the first forward, before any step";
  EXPECT_NE(a.front(), a.back());  // the model changed
}

TEST(Yolo26TrainerGpu, MixedPrecisionLowersTheLoss) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const yolo::ModelInfo info = tiny_info();
  for (const core::DType dtype : {core::DType::bf16, core::DType::f16}) {
    yolo::TrainerOptions o = tiny_options();
    o.nbs = 2;
    o.optimizer = "AdamW";
    o.lr0 = 0.002;
    o.dtype = dtype;
    o.layout = core::Layout::nhwc;
    yolo::Yolo26Trainer t(cuda_backend(), info, yolo::initial_weights(info), o);
    const Batch b = make_batch(2, 1);
    std::vector<float> losses;
    // Eight applied steps: f16's dynamic loss scale starts at 2^16 (as PyTorch's GradScaler) and halves on each
    // overflow, skipping that step, until the gradients fit.
    int64_t applied = 0;
    for (int i = 0; i < 24 && applied < 8; ++i) {
      const yolo::IterationResult r = t.train_batch(b.images, b.targets, b.count);
      ASSERT_TRUE(std::isfinite(r.loss)) << core::dtype_name(dtype);
      ASSERT_TRUE(r.stepped);
      applied += r.step.applied;
      losses.push_back(r.loss);
    }
    std::printf("  %s: first %.4f last %.4f after %zu iterations, loss scale %g\n", core::dtype_name(dtype).data(),
                losses.front(), losses.back(), losses.size(), t.loss_scale());
    EXPECT_EQ(applied, 8) << core::dtype_name(dtype);
    EXPECT_LT(losses.back(), 0.8f * losses.front()) << core::dtype_name(dtype);
    if (dtype == core::DType::bf16) EXPECT_EQ(losses.size(), 8u) << "bf16 skipped a step";
    if (dtype == core::DType::f16) EXPECT_GT(t.loss_scale(), 1.0f);
  }
}

TEST(Yolo26TrainerGpu, DeterministicResumeRepeatsTheRun) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const yolo::ModelInfo info = tiny_info();
  const auto init = yolo::initial_weights(info);
  yolo::TrainerOptions o = tiny_options();
  o.deterministic = true;
  const std::vector<Batch> batches = {make_batch(2, 3), make_batch(2, 4), make_batch(2, 5)};
  TempDir dir;
  yolo::Yolo26Trainer whole(cuda_backend(), info, init, o);
  const std::vector<float> expected = run(whole, 8, batches);
  yolo::Yolo26Trainer first(cuda_backend(), info, init, o);
  std::vector<float> losses = run(first, 5, batches);
  first.save_checkpoint(dir.path() / "last.safetensors", {}, 0);
  yolo::Yolo26Trainer second(cuda_backend(), info, init, o);
  second.resume(train::read_checkpoint(dir.path() / "last.safetensors"));
  const std::vector<float> rest = run(second, 3, batches);
  losses.insert(losses.end(), rest.begin(), rest.end());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(losses[i], expected[i], 1e-5 * std::abs(expected[i])) << "iteration " << i;
}

}  // namespace
}  // namespace vision::test
