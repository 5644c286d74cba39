// ModelEma — the exponential moving average of a model's state (YOLO26.md "Training"): an f32 copy of every floating
// state tensor (trainable parameters and f32 buffers: BatchNorm running mean and variance; not num_batches_tracked),
// taken when it is made; at its n-th update d = decay·(1 − exp(−n/tau)) (0.9999, 2000) and v ← d·v + (1 − d)·x for
// every element: one fused launch on CUDA (ema_update in optim.cuh, one block per chunk), the CPU twin on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/state.h"
#include "vision/train/optim_layout.cuh"

namespace vision::train {

struct EmaOptions {
  double decay = 0.9999;
  double tau = 2000.0;
};

// decay · (1 − exp(−n / tau)).
double ema_decay(int64_t n, double decay = 0.9999, double tau = 2000.0);

class ModelEma {
 public:
  // Copies the model's floating state now (the EMA starts as the model), on the model's backend.
  explicit ModelEma(const graph::StateStore& model, EmaOptions options = {});
  ~ModelEma();
  ModelEma(const ModelEma&) = delete;
  ModelEma& operator=(const ModelEma&) = delete;

  // One update from the model's current state (the store it was made from, or one with the same entries).
  void update(const graph::StateStore& model);
  // The update queued behind an optimizer step (Optimizer::queue_step), following its decision where it runs
  // (step_status: Optimizer::step_status(); null: always): nothing changes when the step is skipped. finish_update
  // then counts it (applied: the step's StepResult::applied); it must come before the next queue_update.
  void queue_update(const graph::StateStore& model, const OptimStatus* step_status);
  void finish_update(bool applied);
  // queue_update in its two parts, for an update captured into a CUDA graph (as Optimizer::stage_step/launch_step):
  // stage_update() sets the decay of the next update where the launched work reads it (device memory on CUDA),
  // launch_update() queues the update. A graph that captured launch_update() is replayed after each later
  // stage_update() in its place.
  void stage_update();
  void launch_update(const graph::StateStore& model, const OptimStatus* step_status);
  // Forgets a staged update that will not be finished (as Optimizer::cancel_step).
  void cancel_update();
  int64_t updates() const;
  // The decay the next update uses.
  double next_decay() const;

  // The averaged tensors' keys (the model's floating state, in entry order), a device view of one, host copies.
  std::vector<std::string> keys() const;
  core::Tensor tensor(const std::string& key) const;
  std::vector<std::pair<std::string, core::Tensor>> to_host() const;
  // Writes the averaged values into a store with the same entries (validation, export); other state (integer
  // buffers) is left as it is.
  void copy_to(graph::StateStore& target) const;
  // Restores the average from host tensors by key (all of keys(), floating, the right shapes; other names ignored)
  // and the update count (a checkpoint's "updates").
  void load(const std::vector<std::pair<std::string, core::Tensor>>& tensors, int64_t updates);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::train
