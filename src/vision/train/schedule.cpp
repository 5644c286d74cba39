#include "vision/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "vision/core/error.h"

namespace vision::train {

double round_half_even(double x) {
  const double r = std::round(x);  // half away from zero
  if (std::abs(x - std::trunc(x)) == 0.5) return 2.0 * std::round(x / 2.0);
  return r;
}

double interp(double x, double x0, double x1, double y0, double y1) {
  VISION_CHECK(x0 < x1, "interp: the sample points {} and {} must increase", x0, x1);
  if (x <= x0) return y0;
  if (x >= x1) return y1;
  const double slope = (y1 - y0) / (x1 - x0);  // NumPy's order of operations
  return slope * (x - x0) + y0;
}

double linear_lf(double epoch, double epochs, double lrf) {
  return std::max(1.0 - epoch / epochs, 0.0) * (1.0 - lrf) + lrf;
}

double cosine_lf(double epoch, double epochs, double lrf) {
  return std::max((1.0 - std::cos(epoch * std::numbers::pi / epochs)) / 2.0, 0.0) * (lrf - 1.0) + 1.0;
}

int64_t warmup_iterations(double warmup_epochs, int64_t batches_per_epoch) {
  if (warmup_epochs <= 0) return -1;
  return std::max<int64_t>(
      static_cast<int64_t>(round_half_even(warmup_epochs * static_cast<double>(batches_per_epoch))), 100);
}

int64_t accumulate_steps(int64_t nbs, int64_t batch) {
  VISION_CHECK(nbs > 0 && batch > 0, "accumulate: nbs {} and batch {} must be positive", nbs, batch);
  return std::max<int64_t>(
      static_cast<int64_t>(round_half_even(static_cast<double>(nbs) / static_cast<double>(batch))), 1);
}

double scaled_weight_decay(double weight_decay, int64_t batch, int64_t accumulate, int64_t nbs) {
  return weight_decay * static_cast<double>(batch) * static_cast<double>(accumulate) / static_cast<double>(nbs);
}

Schedule::Schedule(ScheduleOptions options) : o_(options) {
  VISION_CHECK(o_.epochs > 0 && o_.batch > 0 && o_.nbs > 0 && o_.batches_per_epoch > 0 && o_.lr0 >= 0,
               "schedule: epochs {}, batch {}, nbs {}, batches per epoch {} must be positive and lr0 {} ≥ 0",
               o_.epochs, o_.batch, o_.nbs, o_.batches_per_epoch, o_.lr0);
  nw_ = train::warmup_iterations(o_.warmup_epochs, o_.batches_per_epoch);
}

double Schedule::lf(double epoch) const {
  const double e = static_cast<double>(o_.epochs);
  return o_.cos_lr ? cosine_lf(epoch, e, o_.lrf) : linear_lf(epoch, e, o_.lrf);
}

int64_t Schedule::accumulate(int64_t ni) const {
  if (nw_ < 0 || ni > nw_) return accumulate_steps(o_.nbs, o_.batch);
  const double target = static_cast<double>(o_.nbs) / static_cast<double>(o_.batch);
  return std::max<int64_t>(1, static_cast<int64_t>(round_half_even(
                                  interp(static_cast<double>(ni), 0.0, static_cast<double>(nw_), 1.0, target))));
}

Schedule::Values Schedule::group_values(int64_t epoch, int64_t ni, bool bias_group, double lr_scale,
                                        bool warm_momentum) const {
  Values v;
  const double target = o_.lr0 * lr_scale * lf(static_cast<double>(epoch));
  if (nw_ >= 0 && ni <= nw_) {
    const double x = static_cast<double>(ni), x1 = static_cast<double>(nw_);
    v.lr = interp(x, 0.0, x1, bias_group ? o_.warmup_bias_lr : 0.0, target);
    if (warm_momentum) v.momentum = interp(x, 0.0, x1, o_.warmup_momentum, o_.momentum);
  } else {
    v.lr = target;
    if (warm_momentum) v.momentum = o_.momentum;
  }
  return v;
}

void Schedule::apply(Optimizer& opt, int64_t epoch, int64_t ni) const {
  const bool warm_momentum = opt.kind() != OptimizerKind::adamw;
  for (size_t i = 0; i < opt.groups().size(); ++i) {
    const ParamGroup& g = opt.groups()[i];
    const Values v = group_values(epoch, ni, g.kind == GroupKind::bias, g.lr_scale, warm_momentum);
    opt.set_group_lr(i, v.lr);
    if (v.momentum) opt.set_group_momentum(i, *v.momentum);
  }
}

}  // namespace vision::train
