// Yolo26Trainer's training trajectory on the CPU backend against the independent PyTorch reference trainer
// (yolo26_train_fixture.h): YOLO26n on two fixed batches of 2 images of 128×128, 20 SGD steps (warmup ramps, nbs 3)
// and 5 AdamW (2 batches accumulated) and MuSGD steps, the loss at every iteration within 2× the reference's own
// float32 divergence from float64 over the same steps, never worse than 1e-3 relative.
#include <gtest/gtest.h>

#include "models/yolo/yolo26_train_fixture.h"

using namespace vision;
using namespace vision::test::yolo26_train;

namespace {

TEST(Yolo26TrainTrajectory, SgdFollowsTheReference) {
  expect_follows_reference(run_trainer(graph::cpu_backend(), "sgd"), "sgd");
}

TEST(Yolo26TrainTrajectory, AdamWFollowsTheReference) {
  expect_follows_reference(run_trainer(graph::cpu_backend(), "adamw"), "adamw");
}

TEST(Yolo26TrainTrajectory, MuSgdFollowsTheReference) {
  expect_follows_reference(run_trainer(graph::cpu_backend(), "musgd"), "musgd");
}

}  // namespace
