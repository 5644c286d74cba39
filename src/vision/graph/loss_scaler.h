// LossScaler — dynamic loss scaling for f16 training: the loss gradient starts from a large scale S so that small
// gradients survive f16; the f32 gradients are divided by S before the optimizer step, which is skipped (and S
// shrunk) when any of them overflowed, and S grows again after a run of clean steps. bf16 needs none.
#pragma once

#include <cstdint>

#include "vision/graph/state.h"

namespace vision::graph {

class LossScaler {
 public:
  struct Options {
    float initial_scale = 65536.0f;
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;  // clean steps in a row before the scale grows
    float min_scale = 1.0f;
    float max_scale = 16777216.0f;  // 2^24
  };
  LossScaler();
  explicit LossScaler(Options options);

  // The seed of backward (Executor::backward(…, seed)).
  float scale() const { return scale_; }
  // After a backward seeded with scale(): divides the flat gradients by it in place and returns whether they are
  // all finite. When not, the caller skips the optimizer step; the scale is multiplied by backoff_factor. After
  // growth_interval finite steps in a row it is multiplied by growth_factor. Waits for the device.
  bool unscale(StateStore& state);
  int64_t skipped_steps() const { return skipped_; }

 private:
  Options o_;
  float scale_;
  int clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace vision::graph
