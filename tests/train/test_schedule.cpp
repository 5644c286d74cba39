// The learning-rate schedule at hand-picked points: lf(e) linear and cosine, the warmup length, accumulate (with
// Python's half-to-even rounding), per-group lr and momentum during and after warmup, weight-decay scaling, and the
// schedule applied to an Optimizer's groups.
#include <gtest/gtest.h>

#include <cmath>

#include "train/optim_test_util.h"
#include "vision/train/schedule.h"

using namespace vision;
using namespace vision::train;

TEST(Schedule, RoundingAndInterpolation) {
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(-2.5), -2.0);
  EXPECT_EQ(round_half_even(2.4999), 2.0);
  EXPECT_EQ(round_half_even(2.5001), 3.0);
  EXPECT_EQ(interp(-1, 0, 10, 3, 5), 3.0);  // clamped below
  EXPECT_EQ(interp(11, 0, 10, 3, 5), 5.0);  // and above
  EXPECT_DOUBLE_EQ(interp(2.5, 0, 10, 3, 5), 3.5);
  EXPECT_EQ(interp(10, 0, 10, 0.1, 0.007), 0.007);  // exactly the end value at the end
}

TEST(Schedule, LrFactorLinearAndCosine) {
  EXPECT_DOUBLE_EQ(linear_lf(0, 100, 0.01), 1.0);
  EXPECT_DOUBLE_EQ(linear_lf(50, 100, 0.01), 0.505);  // 0.5·0.99 + 0.01
  EXPECT_DOUBLE_EQ(linear_lf(99, 100, 0.01), 0.0199);
  EXPECT_DOUBLE_EQ(linear_lf(100, 100, 0.01), 0.01);
  EXPECT_DOUBLE_EQ(linear_lf(150, 100, 0.01), 0.01);  // max(…, 0)
  EXPECT_DOUBLE_EQ(cosine_lf(0, 100, 0.01), 1.0);
  EXPECT_NEAR(cosine_lf(50, 100, 0.01), 0.505, 1e-15);
  EXPECT_NEAR(cosine_lf(25, 100, 0.01), 1 - (1 - std::sqrt(0.5)) / 2 * 0.99, 1e-15);  // 0.855017856…
  EXPECT_NEAR(cosine_lf(100, 100, 0.01), 0.01, 1e-15);
}

TEST(Schedule, WarmupLengthAccumulateAndWeightDecay) {
  EXPECT_EQ(warmup_iterations(3, 500), 1500);
  EXPECT_EQ(warmup_iterations(3, 10), 100);   // at least 100
  EXPECT_EQ(warmup_iterations(2.5, 41), 102);  // round(102.5) = 102 (half to even)
  EXPECT_EQ(warmup_iterations(3.5, 41), 144);  // round(143.5) = 144
  EXPECT_EQ(warmup_iterations(0, 500), -1);    // no warmup
  EXPECT_EQ(accumulate_steps(64, 16), 4);
  EXPECT_EQ(accumulate_steps(64, 24), 3);   // round(2.67)
  EXPECT_EQ(accumulate_steps(64, 40), 2);   // round(1.6)
  EXPECT_EQ(accumulate_steps(64, 128), 1);  // round(0.5) = 0, at least 1
  EXPECT_EQ(accumulate_steps(64, 256), 1);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(5e-4, 16, 4, 64), 5e-4);
  EXPECT_DOUBLE_EQ(scaled_weight_decay(5e-4, 24, 3, 64), 5.625e-4);  // 5e-4 · 72/64
  EXPECT_DOUBLE_EQ(scaled_weight_decay(5e-4, 128, 1, 64), 1e-3);
}

// Defaults (epochs 100, lr0 0.01, lrf 0.01, momentum 0.937, warmup 3 epochs, warmup momentum 0.8, warmup bias lr 0.1,
// nbs 64, batch 16) at 500 batches per epoch: nw = 1500.
TEST(Schedule, GroupValuesDuringAndAfterWarmup) {
  ScheduleOptions o;
  o.batches_per_epoch = 500;
  const Schedule s(o);
  EXPECT_EQ(s.warmup_iterations(), 1500);
  // ni = 0: bias groups at warmup_bias_lr, the others at 0; momentum at warmup_momentum; accumulate 1.
  auto v = s.group_values(0, 0, true, 1.0, true);
  EXPECT_DOUBLE_EQ(v.lr, 0.1);
  EXPECT_DOUBLE_EQ(*v.momentum, 0.8);
  EXPECT_DOUBLE_EQ(s.group_values(0, 0, false, 1.0, true).lr, 0.0);
  EXPECT_EQ(s.accumulate(0), 1);
  // ni = 750 (epoch 1, lf(1) = 0.99·0.99 + 0.01 = 0.9901; target 0.009901): halfway.
  v = s.group_values(1, 750, false, 1.0, true);
  EXPECT_NEAR(v.lr, 0.0049505, 1e-15);
  EXPECT_NEAR(*v.momentum, 0.8685, 1e-15);  // 0.8 + 0.5·0.137
  EXPECT_NEAR(s.group_values(1, 750, true, 1.0, true).lr, 0.1 + 0.5 * (0.009901 - 0.1), 1e-15);
  EXPECT_NEAR(s.group_values(1, 750, false, 3.0, true).lr, 0.5 * 0.029703, 1e-15);  // lr × 3 group
  EXPECT_FALSE(s.group_values(1, 750, false, 1.0, false).momentum.has_value());      // AdamW's β1: not warmed
  // accumulate = round(interp(ni, [0, 1500], [1, 4])): 750 → round(2.5) = 2, 749 → 2, 1250 → round(3.5) = 4,
  // 375 → round(1.75) = 2, 250 → round(1.5) = 2, 100 → round(1.2) = 1; after warmup 4.
  EXPECT_EQ(s.accumulate(750), 2);
  EXPECT_EQ(s.accumulate(749), 2);
  EXPECT_EQ(s.accumulate(1250), 4);
  EXPECT_EQ(s.accumulate(375), 2);
  EXPECT_EQ(s.accumulate(250), 2);
  EXPECT_EQ(s.accumulate(100), 1);
  EXPECT_EQ(s.accumulate(1500), 4);
  EXPECT_EQ(s.accumulate(100000), 4);
  // ni = nw (epoch 3): the end values exactly; after it lr0·lf(e) and momentum.
  v = s.group_values(3, 1500, true, 1.0, true);
  EXPECT_DOUBLE_EQ(v.lr, 0.01 * (0.97 * 0.99 + 0.01));
  EXPECT_DOUBLE_EQ(*v.momentum, 0.937);
  v = s.group_values(50, 25000, true, 1.0, true);
  EXPECT_DOUBLE_EQ(v.lr, 0.01 * 0.505);
  EXPECT_DOUBLE_EQ(*v.momentum, 0.937);
  // Cosine.
  o.cos_lr = true;
  EXPECT_NEAR(Schedule(o).group_values(25, 12500, false, 1.0, true).lr, 0.01 * (1 - (1 - std::sqrt(0.5)) / 2 * 0.99),
              1e-16);
  // No warmup: the epoch's values from the first iteration.
  o.cos_lr = false;
  o.warmup_epochs = 0;
  const Schedule nowarm(o);
  EXPECT_DOUBLE_EQ(nowarm.group_values(0, 0, true, 1.0, true).lr, 0.01);
  EXPECT_DOUBLE_EQ(*nowarm.group_values(0, 0, true, 1.0, true).momentum, 0.937);
  EXPECT_EQ(nowarm.accumulate(0), 4);
}

// apply(): each group of an optimizer gets its values (bias groups start at warmup_bias_lr, boosted groups scale the
// target), and AdamW's β1 is left alone.
TEST(Schedule, AppliesToAnOptimizersGroups) {
  using namespace vision::test::optim;
  ScheduleOptions o;
  o.batches_per_epoch = 500;
  const Schedule s(o);
  auto m = fixture_model(graph::cpu_backend());
  auto mu = m->optimizer(fixture_options("musgd"));  // bn, bias, bias.x3, muon, muon.x3
  s.apply(*mu, 1, 750);
  for (size_t i = 0; i < mu->groups().size(); ++i) {
    const auto& g = mu->groups()[i];
    const double target = 0.009901 * g.lr_scale;
    const double start = g.kind == GroupKind::bias ? 0.1 : 0.0;
    EXPECT_NEAR(mu->group_settings(i).lr, start + 0.5 * (target - start), 1e-15) << g.name();
    EXPECT_NEAR(mu->group_settings(i).momentum, 0.8685, 1e-15) << g.name();
  }
  auto ad = m->optimizer(fixture_options("adamw"));
  ad->set_group_momentum(0, 0.9);
  s.apply(*ad, 1, 750);
  EXPECT_DOUBLE_EQ(ad->group_settings(0).momentum, 0.9);
  EXPECT_NEAR(ad->group_settings(0).lr, 0.0049505, 1e-15);
}
