#include "vision/graph/loss_scaler.h"

#include <algorithm>

namespace vision::graph {

LossScaler::LossScaler() : LossScaler(Options{}) {}

LossScaler::LossScaler(Options options) : o_(options), scale_(options.initial_scale) {
  VISION_CHECK(o_.initial_scale > 0 && o_.growth_factor >= 1 && o_.backoff_factor > 0 && o_.backoff_factor < 1 &&
                   o_.growth_interval > 0 && o_.min_scale > 0 && o_.max_scale >= o_.min_scale,
               "loss scaler: invalid options (scale {}, growth {}, backoff {}, interval {})", o_.initial_scale,
               o_.growth_factor, o_.backoff_factor, o_.growth_interval);
}

bool LossScaler::unscale(StateStore& state) {
  const bool finite = state.backend().scale_and_check_finite(state.flat_grads(), 1.0f / scale_);
  if (!finite) {
    scale_ = std::max(o_.min_scale, scale_ * o_.backoff_factor);
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= o_.growth_interval) {
    scale_ = std::min(o_.max_scale, scale_ * o_.growth_factor);
    clean_ = 0;
  }
  return true;
}

}  // namespace vision::graph
