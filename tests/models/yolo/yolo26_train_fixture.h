// The YOLO26n training-trajectory fixture of tools/reference/make_yolo26_train_fixture.py (yolo26n_train.safetensors:
// the reference trainer's losses over 20 SGD steps and 5 AdamW and MuSGD steps on two fixed batches of 2 images of
// 128×128, in float64 and in 16 float32 variants) and the comparison of Yolo26Trainer against it: run with the
// fixture's options from the same weights (yolo26n_random.safetensors) on the same batches, its loss at every iteration
// lies within 2× the reference's own float32 divergence from float64 over the same steps (the largest of its float32
// runs so far, or a floor of f32 rounding), never worse than 1e-3 relative; so does the gradient norm at every step;
// every group's lr, momentum and weight decay equal the reference's at every iteration; it steps at the same
// iterations; after the SGD run every BatchNorm running statistic matches; and the training moved the loss far beyond
// the bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/yolo/yolo26_fixture.h"
#include "test_util.h"
#include "vision/models/yolo/trainer.h"

namespace vision::test::yolo26_train {

namespace yolo = models::yolo;

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(yolo26_fixture::fixture_path("yolo26n_train.safetensors"));
  return f;
}
inline std::vector<float> values(const std::string& name) { return fixture().at(name).to_vector(); }

struct Batch {
  core::Tensor images, targets, count;
};

inline size_t batch_count() {
  size_t n = 0;
  while (fixture().find("images." + std::to_string(n))) ++n;
  return n;
}

// The fixture's batches: images u8 / 255 in f32, targets, count.
inline std::vector<Batch> batches() {
  std::vector<Batch> out;
  for (size_t j = 0; j < batch_count(); ++j) {
    const std::string s = std::to_string(j);
    const core::Tensor& u8 = fixture().at("images." + s);
    std::vector<float> v(static_cast<size_t>(u8.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(u8.data<uint8_t>()[i]) / 255.0f;
    out.push_back({core::Tensor::from_vector(u8.shape(), v), fixture().at("targets." + s), fixture().at("count." + s)});
  }
  return out;
}

inline nlohmann::json run_options(const std::string& run) {
  return nlohmann::json::parse(fixture().metadata.at("options." + run));
}

// The run's TrainerOptions, as the fixture's metadata gives them.
inline yolo::TrainerOptions trainer_options(const std::string& run) {
  const nlohmann::json j = run_options(run);
  yolo::TrainerOptions o;
  o.epochs = j.at("epochs");
  o.batch = j.at("batch");
  o.batches_per_epoch = j.at("batches_per_epoch");
  o.imgsz = j.at("imgsz");
  o.optimizer = j.at("optimizer");
  o.lr0 = j.at("lr0");
  o.lrf = j.at("lrf");
  o.momentum = j.at("momentum");
  o.weight_decay = j.at("weight_decay");
  o.warmup_epochs = j.at("warmup_epochs");
  o.warmup_momentum = j.at("warmup_momentum");
  o.warmup_bias_lr = j.at("warmup_bias_lr");
  o.cos_lr = j.at("cos_lr");
  o.nbs = j.at("nbs");
  o.max_grad_norm = j.at("max_grad_norm");
  return o;
}

// What our trainer did, per iteration.
struct Trajectory {
  std::vector<float> loss, grad_norm;  // grad_norm NaN where it did not step
  std::vector<std::vector<train::GroupSettings>> groups;
  std::vector<std::string> group_names;
  std::vector<std::pair<std::string, std::vector<float>>> bn;  // BatchNorm running statistics after the run
  double seconds = 0;
};

// Yolo26Trainer with the run's options on `backend`, the fixture's iterations; an epoch ends every batches_per_epoch
// iterations (the batches cycle).
inline Trajectory run_trainer(std::shared_ptr<graph::BackendContext> backend, const std::string& run,
                              bool deterministic = false) {
  yolo::TrainerOptions o = trainer_options(run);
  o.deterministic = deterministic;
  const int iterations = run_options(run).at("iterations");
  const yolo::ModelInfo info = yolo::default_model_info(yolo26_fixture::kSpec);
  yolo::Yolo26Trainer trainer(std::move(backend), info, yolo26_fixture::weights(), o);
  const std::vector<Batch> data = batches();
  Trajectory t;
  for (const train::ParamGroup& g : trainer.optimizer().groups()) t.group_names.push_back(g.name());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    const Batch& b = data[static_cast<size_t>(trainer.iteration()) % data.size()];
    const yolo::IterationResult r = trainer.train_batch(b.images, b.targets, b.count);
    t.loss.push_back(r.loss);
    t.grad_norm.push_back(r.stepped && r.step.applied ? r.step.grad_norm : NAN);
    std::vector<train::GroupSettings> settings;
    for (size_t g = 0; g < trainer.optimizer().groups().size(); ++g)
      settings.push_back(trainer.optimizer().group_settings(g));
    t.groups.push_back(settings);
    if (trainer.iteration() % o.batches_per_epoch == 0) trainer.end_epoch();
  }
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const core::SafetensorsFile w = trainer.weights(/*use_ema=*/false);
  for (const auto& [key, tensor] : w.tensors)
    if (key.ends_with("running_mean") || key.ends_with("running_var")) t.bn.emplace_back(key, tensor.to_vector());
  return t;
}

constexpr double kRounding = 0x1p-24;  // the f32 rounding of the stored float64 results, relative
constexpr double kCap = 1e-3;          // never worse than this, relative
// The f32 rounding floor of the loss and the gradient norm, each one long reduction over the batch (the loss: sums of
// up to 80 × 2 × 336 BCE terms and the box terms; the norm: over 2.5 M gradients): 4e-6 relative, about 64 f32 ulps, as
// the one-step gradient test allows (yolo26_grads_fixture.h, kReductionFloor). The reference's own divergence on the
// first iterations is a single draw that its summation order can make far smaller.
constexpr double kFloor = 4e-6;

// The reference's float32 runs (make_yolo26_train_fixture.py VARIANTS, 16: NCHW or channels_last × the batch in order
// or reversed × the initial weights as given or perturbed by ±1 ulp): float32 implementations of the same arithmetic
// with their own rounding. Ours is one more.
inline size_t variant_count() {
  const std::string& names = fixture().metadata.at("variants");
  return static_cast<size_t>(std::count(names.begin(), names.end(), ',')) + 1;
}

// The reference's own float32 divergence of a per-iteration value at iteration i, from err [N, V] (each float32 run's
// |f32 − f64| / |f64|): the largest over its runs and over the iterations ≤ i. The divergence of a trajectory is a
// random walk of rounding errors, amplified as it goes: at one step, one run's value is a single draw that can pass near
// zero, and ours is another draw; the envelope over runs and steps is its scale.
inline double peer_divergence(const std::vector<float>& err, size_t i) {
  const size_t v = variant_count();
  double d = 0;
  for (size_t j = 0; j <= i; ++j)
    for (size_t k = 0; k < v; ++k)
      if (!std::isnan(err[j * v + k])) d = std::max(d, double(err[j * v + k]));  // NaN: no step (the gradient norm)
  return d;
}

inline double bound_of(double peer) { return std::min(std::max(2 * peer, kFloor) + kRounding, kCap); }

// The trajectory against the fixture's run; prints a table of the errors and their bounds.
inline void expect_follows_reference(const Trajectory& t, const std::string& run) {
  const std::vector<float> ref_loss = values(run + ".loss"), loss_err = values(run + ".loss_err");
  const std::vector<float> ref_norm = values(run + ".grad_norm"), norm_err = values(run + ".grad_norm_err");
  const std::vector<float> ref_lr = values(run + ".lr"), ref_momentum = values(run + ".momentum");
  const std::vector<float> ref_decay = values(run + ".weight_decay");
  const size_t n = ref_loss.size();
  ASSERT_EQ(t.loss.size(), n);
  const size_t variants = variant_count();
  ASSERT_EQ(loss_err.size(), variants * n);
  ASSERT_EQ(norm_err.size(), variants * n);

  // The parameter groups and their hyperparameters (float64 in the reference, double in ours; stored as f32).
  std::vector<std::string> ref_groups;
  std::stringstream names(fixture().metadata.at("groups." + run));
  for (std::string s; std::getline(names, s, ',');) ref_groups.push_back(s);
  ASSERT_EQ(t.group_names, ref_groups) << run << ": other parameter groups";
  const size_t groups = ref_groups.size();
  ASSERT_EQ(ref_lr.size(), n * groups);
  auto near = [](double ours, float ref) { return std::abs(ours - ref) <= 2 * kRounding * std::abs(ref) + 1e-30; };
  for (size_t i = 0; i < n; ++i)
    for (size_t g = 0; g < groups; ++g) {
      const train::GroupSettings& s = t.groups[i][g];
      EXPECT_PRED2(near, s.lr, ref_lr[i * groups + g]) << run << " iteration " << i << " group " << ref_groups[g];
      EXPECT_PRED2(near, s.momentum, ref_momentum[i * groups + g])  // AdamW: β1, not warmed
          << run << " iteration " << i << " group " << ref_groups[g];
      EXPECT_PRED2(near, s.weight_decay, ref_decay[g]) << run << " group " << ref_groups[g];
    }

  std::printf("%s: %zu iterations against the float64 reference (bounds: 2× its %zu float32 runs' divergence, the "
              "largest so far; floor %.0e, cap %.0e)\n", run.c_str(), n, variants, kFloor, kCap);
  std::printf("   it  loss (ref)        rel err   bound     peers now | grad norm (ref)  rel err   bound\n");
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double ref = ref_loss[i];
    const double rel = std::abs(t.loss[i] - ref) / std::abs(ref);
    const double bound = bound_of(peer_divergence(loss_err, i));
    EXPECT_TRUE(std::isfinite(t.loss[i]) && rel <= bound)
        << run << " iteration " << i << ": loss " << t.loss[i] << ", reference " << ref << ", rel error " << rel
        << " > " << bound;
    worst = std::max(worst, rel / bound);
    double now = 0;
    for (size_t k = 0; k < variants; ++k) now = std::max(now, double(loss_err[i * variants + k]));
    std::printf("  %3zu  %-16.9g  %.2e  %.2e  %.2e  |", i, ref, rel, bound, now);
    const bool ref_stepped = !std::isnan(ref_norm[i]);
    EXPECT_EQ(!std::isnan(t.grad_norm[i]), ref_stepped) << run << " iteration " << i << ": steps differently";
    if (ref_stepped && !std::isnan(t.grad_norm[i])) {
      const double nrel = std::abs(t.grad_norm[i] - ref_norm[i]) / ref_norm[i];
      const double nbound = bound_of(peer_divergence(norm_err, i));
      EXPECT_LE(nrel, nbound) << run << " iteration " << i << ": gradient norm " << t.grad_norm[i]
                              << ", reference " << ref_norm[i];
      worst = std::max(worst, nrel / nbound);
      std::printf(" %-15.9g  %.2e  %.2e\n", ref_norm[i], nrel, nbound);
    } else {
      std::printf(" (no step)\n");
    }
  }
  std::printf("  worst: %.0f%% of its bound; %.2f s for the %zu iterations\n", 100 * worst, t.seconds, n);
  // The training moved the loss far beyond the bounds: at the last iteration the reference's loss differs from what the
  // untrained model gives on that batch with the same ProgLoss weights by at least 50× the bound there (so a trainer
  // that did not update, or updated much less, fails).
  const size_t last = n - 1;
  const int64_t bpe = run_options(run).at("batches_per_epoch"), epochs = run_options(run).at("epochs");
  const std::vector<float> heads = values("initial.head_losses." + std::to_string(last % batch_count()));
  const std::array<float, 2> w = yolo::progloss_weights(static_cast<int64_t>(last) / bpe, epochs);
  const double untrained = double(w[0]) * heads[0] + double(w[1]) * heads[1];
  const double moved = std::abs(ref_loss[last] - untrained) / std::abs(ref_loss[last]);
  const double last_bound = bound_of(peer_divergence(loss_err, last));
  std::printf("  the training moved the last loss by %.2e relative (untrained %.9g), %.0f× its bound\n", moved,
              untrained, moved / last_bound);
  EXPECT_GT(moved, 50 * last_bound) << run << ": the reference's training barely moves the loss";

  if (run == "sgd") {  // the BatchNorm running statistics after the run
    int compared = 0;
    double worst_bn = 0;
    std::string worst_key;
    for (const auto& [key, ours] : t.bn) {
      const std::string name = run + ".bn." + key;
      ASSERT_NE(fixture().find(name), nullptr) << name;
      const std::vector<float> err = values("err." + name), ref = values(name);  // err [V, 2]: rel, max |·|
      ASSERT_EQ(err.size(), 2 * variants) << name;
      double peer_rel = 0, peer_max = 0;
      for (size_t k = 0; k < variants; ++k)
        peer_rel = std::max(peer_rel, double(err[2 * k])), peer_max = std::max(peer_max, double(err[2 * k + 1]));
      // 2× the reference's own float32 divergence (the largest of its runs), in relative norm and in max |·| (plus the
      // relative bound on the tensor's scale: one wrong element cannot hide in the norm).
      const double rel = rel_error(ours, to_double(ref)), bound = 2 * peer_rel + kRounding;
      const double max_err = max_abs_error(ours, to_double(ref)), max_bound = 2 * peer_max + bound * max_abs(ref);
      EXPECT_LE(rel, bound) << name;
      EXPECT_LE(max_err, max_bound) << name;
      ++compared;
      if (rel / bound > worst_bn) worst_bn = rel / bound, worst_key = key;
    }
    EXPECT_GT(compared, 100);
    std::printf("  BatchNorm running statistics after the run: %d tensors, worst %s at %.0f%% of its bound\n",
                compared, worst_key.c_str(), 100 * worst_bn);
  }
}

}  // namespace vision::test::yolo26_train
