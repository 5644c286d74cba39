// Learning-rate schedule — the per-epoch factor lf(e) (linear or cosine), the warmup of every group's lr and momentum
// over the first iterations (np.interp semantics), gradient accumulation and the weight-decay scaling of ultralytics'
// trainer (YOLO26.md "Training"): pure functions, and a small class that applies them to an Optimizer.
//
//   linear lf(e) = max(1 − e/E, 0)·(1 − lrf) + lrf;  cosine lf(e) = max((1 − cos(π·e/E))/2, 0)·(lrf − 1) + 1
//   nw = max(round(warmup_epochs · batches_per_epoch), 100) (no warmup when warmup_epochs ≤ 0)
//   for ni ≤ nw: accumulate = max(1, round(interp(ni, [0, nw], [1, nbs/batch])));
//                lr_g = interp(ni, [0, nw], [start_g, lr0·scale_g·lf(e)]), start_g = warmup_bias_lr for bias groups,
//                0 for the others; momentum_g = interp(ni, [0, nw], [warmup_momentum, momentum]) (not AdamW's β1)
//   after:       lr_g = lr0·scale_g·lf(e), momentum_g = momentum, accumulate = max(round(nbs/batch), 1)
//   weight decay used = weight_decay · batch · accumulate / nbs
// Rounding is Python's round (half to even), as the trainer uses it.
#pragma once

#include <cstdint>
#include <optional>

#include "vision/train/optimizer.h"

namespace vision::train {

// Round half to even (Python's round(x), NumPy's round).
double round_half_even(double x);
// np.interp(x, [x0, x1], [y0, y1]) with x0 < x1: y0 below x0, y1 above x1, linear between.
double interp(double x, double x0, double x1, double y0, double y1);
double linear_lf(double epoch, double epochs, double lrf);
double cosine_lf(double epoch, double epochs, double lrf);
// max(round(warmup_epochs · batches_per_epoch), 100), or −1 (no warmup) when warmup_epochs ≤ 0.
int64_t warmup_iterations(double warmup_epochs, int64_t batches_per_epoch);
// max(round(nbs / batch), 1).
int64_t accumulate_steps(int64_t nbs, int64_t batch);
// weight_decay · batch · accumulate / nbs.
double scaled_weight_decay(double weight_decay, int64_t batch, int64_t accumulate, int64_t nbs);

struct ScheduleOptions {
  int64_t epochs = 100;
  double lr0 = 0.01;
  double lrf = 0.01;
  bool cos_lr = false;
  double momentum = 0.937;
  double warmup_epochs = 3.0;
  double warmup_momentum = 0.8;
  double warmup_bias_lr = 0.1;
  int64_t nbs = 64;
  int64_t batch = 16;
  int64_t batches_per_epoch = 1;
};

class Schedule {
 public:
  explicit Schedule(ScheduleOptions options);
  const ScheduleOptions& options() const { return o_; }

  int64_t warmup_iterations() const { return nw_; }
  double lf(double epoch) const;
  // Optimizer steps every accumulate(ni) iterations at global iteration ni.
  int64_t accumulate(int64_t ni) const;

  struct Values {
    double lr = 0;
    std::optional<double> momentum;  // set for groups that have a momentum to warm (not AdamW)
  };
  // A group's lr and momentum at epoch `epoch`, global iteration ni (= epoch · batches_per_epoch + i).
  Values group_values(int64_t epoch, int64_t ni, bool bias_group, double lr_scale, bool warm_momentum) const;
  // Sets every group of opt from group_values (bias groups: GroupKind::bias; momentum warmed unless AdamW).
  void apply(Optimizer& opt, int64_t epoch, int64_t ni) const;

 private:
  ScheduleOptions o_;
  int64_t nw_;
};

}  // namespace vision::train
