// Yolo26Trainer on the CPU: a few steps lower the loss of a fixed batch; a run interrupted by a checkpoint (between
// optimizer steps too, with gradients accumulated) and resumed gives the uninterrupted run's losses bit for bit; the
// ProgLoss weights; bad inputs and mismatched checkpoints are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"
#include "models/yolo/trainer_test_util.h"
#include "vision/models/yolo/trainer.h"

namespace vision::test {
namespace {

using namespace trainer_util;

TEST(Yolo26Trainer, ProgLossWeights) {
  EXPECT_FLOAT_EQ(yolo::progloss_weights(0, 100)[0], 0.8f);
  EXPECT_FLOAT_EQ(yolo::progloss_weights(0, 100)[1], 0.2f);
  EXPECT_NEAR(yolo::progloss_weights(33, 100)[0], (1 - 33.0 / 99) * 0.7 + 0.1, 1e-7);
  EXPECT_FLOAT_EQ(yolo::progloss_weights(99, 100)[0], 0.1f);
  EXPECT_NEAR(yolo::progloss_weights(99, 100)[1], 0.9f, 1e-7);
  EXPECT_FLOAT_EQ(yolo::progloss_weights(150, 100)[0], 0.1f);
  EXPECT_FLOAT_EQ(yolo::progloss_weights(1, 1)[0], 0.1f);  // one epoch: max(E − 1, 1)
}

TEST(Yolo26Trainer, StepsLowerTheLossOfAFixedBatch) {
  const yolo::ModelInfo info = tiny_info();
  yolo::TrainerOptions o = tiny_options();
  o.nbs = 2;  // a step per batch
  o.optimizer = "AdamW";
  o.lr0 = 0.002;
  yolo::Yolo26Trainer trainer(graph::cpu_backend(), info, yolo::initial_weights(info), o);
  const Batch b = make_batch(2, 1);
  std::vector<float> losses;
  for (int i = 0; i < 8; ++i) {
    const yolo::IterationResult r = trainer.train_batch(b.images, b.targets, b.count);
    ASSERT_TRUE(r.stepped);
    ASSERT_TRUE(r.step.applied);
    ASSERT_TRUE(std::isfinite(r.loss));
    EXPECT_GT(r.step.grad_norm, 0.0f);
    losses.push_back(r.loss);
  }
  std::printf("  losses: first %.4f last %.4f\n", losses.front(), losses.back());
  EXPECT_LT(losses.back(), 0.8f * losses.front());
  EXPECT_EQ(trainer.optimizer().steps(), 8);
  ASSERT_NE(trainer.ema(), nullptr);
  EXPECT_EQ(trainer.ema()->updates(), 8);
  // The EMA differs from the live model (it lags), and the weights file holds it.
  const auto live = trainer.weights(false), ema = trainer.weights(true);
  ASSERT_EQ(live.tensors.size(), ema.tensors.size());
  bool differs = false;
  for (size_t i = 0; i < live.tensors.size(); ++i)
    if (live.tensors[i].second.dtype() == core::DType::f32)
      differs = differs || live.tensors[i].second.to_vector() != ema.tensors[i].second.to_vector();
  EXPECT_TRUE(differs);
}

// Gradients accumulate over nbs / batch batches: a step every second batch.
TEST(Yolo26Trainer, AccumulatesToNominalBatch) {
  const yolo::ModelInfo info = tiny_info();
  yolo::Yolo26Trainer trainer(graph::cpu_backend(), info, yolo::initial_weights(info), tiny_options());
  const Batch b = make_batch(2, 2);
  std::vector<bool> stepped;
  for (int i = 0; i < 4; ++i) stepped.push_back(trainer.train_batch(b.images, b.targets, b.count).stepped);
  EXPECT_EQ(stepped, (std::vector<bool>{false, true, false, true}));  // ni − last ≥ 2, last starts at −1
  EXPECT_EQ(trainer.optimizer().steps(), 2);
}

TEST(Yolo26Trainer, ResumeRepeatsTheUninterruptedRun) {
  const yolo::ModelInfo info = tiny_info();
  const std::vector<Batch> batches = {make_batch(2, 3), make_batch(2, 4), make_batch(2, 5)};
  const auto init = yolo::initial_weights(info);
  TempDir dir;
  for (const int stop : {4, 5}) {  // after a step; between steps (a gradient accumulated)
    yolo::Yolo26Trainer whole(graph::cpu_backend(), info, init, tiny_options());
    const std::vector<float> expected = run(whole, 8, batches);

    yolo::Yolo26Trainer first(graph::cpu_backend(), info, init, tiny_options());
    std::vector<float> losses = run(first, stop, batches);
    const auto path = dir.path() / ("last" + std::to_string(stop) + ".safetensors");
    first.save_checkpoint(path, {{"epochs", 3}}, 0.25);

    yolo::Yolo26Trainer second(graph::cpu_backend(), info, init, tiny_options());
    const train::TrainingState s = second.resume(train::read_checkpoint(path));
    EXPECT_EQ(s.best_fitness, 0.25);
    EXPECT_EQ(s.args.at("epochs"), 3);
    EXPECT_EQ(second.iteration(), stop);
    EXPECT_EQ(second.epoch(), stop / 3);
    const std::vector<float> rest = run(second, 8 - stop, batches);
    losses.insert(losses.end(), rest.begin(), rest.end());
    ASSERT_EQ(losses.size(), expected.size());
    for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], expected[i]) << "iteration " << i << ", stop " << stop;
    EXPECT_EQ(second.optimizer().steps(), whole.optimizer().steps());
    // The two runs end with the same EMA and live weights.
    const auto a = whole.weights(true), b2 = second.weights(true);
    for (size_t i = 0; i < a.tensors.size(); ++i)
      if (a.tensors[i].second.dtype() == core::DType::f32)
        ASSERT_EQ(a.tensors[i].second.to_vector(), b2.tensors[i].second.to_vector()) << a.tensors[i].first;
  }
}

// The loader's u8 batches [B, S, S, 3] train exactly as their f32 normalisation does (the CPU converts on the host
// with write_normalized's arithmetic); an NHWC f32 batch too (converted to the plan's NCHW).
TEST(Yolo26Trainer, U8ImagesTrainAsTheirF32Normalisation) {
  const yolo::ModelInfo info = tiny_info();
  const auto init = yolo::initial_weights(info);
  Tensor normalized;
  const Batch u8 = make_u8_batch(2, 7, normalized);
  Batch f32 = u8;
  f32.images = normalized;
  Batch nhwc = u8;
  nhwc.images = data::normalize_u8_batch(u8.images, core::Layout::nhwc);
  yolo::Yolo26Trainer a(graph::cpu_backend(), info, init, tiny_options()), b(graph::cpu_backend(), info, init, tiny_options()),
      c(graph::cpu_backend(), info, init, tiny_options());
  const std::vector<float> la = run(a, 3, {f32}), lb = run(b, 3, {u8}), lc = run(c, 3, {nhwc});
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, lc);
  EXPECT_NE(la.front(), la.back());
  Batch bad = u8;
  bad.images = Tensor::zeros(Shape{2, kSize, kSize, 4}, core::DType::u8);
  EXPECT_NE(error_of([&] { a.train_batch(bad.images, bad.targets, bad.count); }).find("host u8 [B, H, W, 3]"),
            std::string::npos);
}

TEST(Yolo26Trainer, ClearErrors) {
  const yolo::ModelInfo info = tiny_info();
  const auto init = yolo::initial_weights(info);
  yolo::TrainerOptions o = tiny_options();
  o.imgsz = 100;
  EXPECT_NE(error_of([&] { yolo::Yolo26Trainer(graph::cpu_backend(), info, init, o); }).find("100"), std::string::npos);
  o = tiny_options();
  o.dtype = core::DType::bf16;
  EXPECT_NE(error_of([&] { yolo::Yolo26Trainer(graph::cpu_backend(), info, init, o); }).find("--device cuda"),
            std::string::npos);
  o = tiny_options();
  o.optimizer = "Adam";
  EXPECT_NE(error_of([&] { yolo::Yolo26Trainer(graph::cpu_backend(), info, init, o); }).find("Adam"),
            std::string::npos);

  yolo::Yolo26Trainer t(graph::cpu_backend(), info, init, tiny_options());
  Batch b = make_batch(2, 6);
  b.count.data<int32_t>()[1] = 9;  // more boxes than rows
  EXPECT_NE(error_of([&] { t.train_batch(b.images, b.targets, b.count); }).find("count[1] = 9"), std::string::npos);

  // A checkpoint of another nc.
  TempDir dir;
  const yolo::ModelInfo other = tiny_info(5);
  yolo::Yolo26Trainer t5(graph::cpu_backend(), other, yolo::initial_weights(other), tiny_options());
  t5.save_checkpoint(dir.path() / "nc5.safetensors", {}, 0);
  const std::string e = error_of([&] { t.resume(train::read_checkpoint(dir.path() / "nc5.safetensors")); });
  EXPECT_NE(e.find("5 classes"), std::string::npos) << e;
  EXPECT_NE(e.find("nc5.safetensors"), std::string::npos) << e;
}

}  // namespace
}  // namespace vision::test
