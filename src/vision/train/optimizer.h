// Optimizer — SGD (Nesterov), AdamW and MuSGD over a model's flat f32 parameter and gradient buffers, with parameter
// groups (param_groups.h), global gradient-norm clipping, a non-finite-gradient skip and its state as named tensors.
//
// One step: the gradient's global L2 norm over every non-frozen element (a fixed-order f32 reduction: two launches on
// CUDA, no atomics; the CPU twin reproduces it bit for bit); when the norm is not finite (a NaN or Inf gradient, or
// an overflow) the step is skipped and counted and nothing changes; else the gradients are scaled on the fly by
// coef = min(1, max_grad_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_) and the update runs. The decision
// (OptimStatus: norm, finite, coef) is made where the step runs — on the device for CUDA — and the update kernels
// follow it, so a step can be queued without waiting (queue_step) and read back later (finish_step):
//   SGD, AdamW: one fused launch over the whole flat buffer (one CUDA block per chunk of one tensor; the block finds
//     its tensor's group in a small table, so every group has its own lr, momentum and weight decay);
//   MuSGD: one launch for the Muon momentum and the bf16 Newton–Schulz input of every Muon tensor, one for the
//     Frobenius normalisation of every matrix, the Newton–Schulz iterations as cuBLAS strided-batched bf16 GEMMs
//     (f32 accumulation), one batch per matrix shape, then one fused launch over the whole flat buffer (the Muon
//     update, then SGD). Other MuSGD groups take plain Nesterov SGD.
// Formulas (YOLO26.md "Optimizers", optim_kernels.h): SGD as PyTorch's (g' = g + wd·p; buf = m·buf + g';
// p −= lr·(g' + m·buf)); AdamW as PyTorch's (p *= 1 − lr·wd; bias-corrected moments; eps 1e-8); MuSGD for a Muon
// tensor: buf₁ ← buf₁ + (1 − β)(g − buf₁), u = (1 − β)·g + β·buf₁, X = NS₅(u viewed (shape[0], rest), in bf16),
// p −= lr·0.2·sqrt(max(1, shape[-2]/shape[-1]))·X, then the SGD step with its own buffer at lr·1.0.
// CPU backend: the CPU twins (optim_kernels.h); CUDA backend: optim.cuh + cuBLAS.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/state.h"
#include "vision/train/optim_layout.cuh"
#include "vision/train/param_groups.h"

namespace vision::train {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.01;             // lr0: group g starts at lr · g.lr_scale
  double momentum = 0.937;      // SGD / MuSGD momentum; AdamW β1
  double beta2 = 0.999;         // AdamW
  double eps = 1e-8;            // AdamW
  double weight_decay = 5e-4;   // for groups with decay, as given (scaled_weight_decay() gives the trainer's value)
  double max_grad_norm = 10.0;  // global gradient-norm clipping; ≤ 0 turns clipping off
  int ns_steps = 5;             // MuSGD's Newton–Schulz iterations
  GroupRules rules;             // lr boost patterns (MuSGD) and frozen prefixes
};

// What a step did.
struct StepResult {
  bool applied = false;   // false: a gradient was not finite, nothing changed
  float grad_norm = 0;    // ‖g‖₂ over the non-frozen elements before clipping (f32; +inf or NaN when skipped)
  float clip_coef = 1;    // the factor the gradients were scaled by
};

// A group's hyperparameters for the next step (the schedule sets lr and momentum every iteration).
struct GroupSettings {
  double lr = 0;
  double momentum = 0;      // SGD / MuSGD momentum; AdamW β1
  double weight_decay = 0;  // 0 for groups without decay
};

// `auto`: iterations = ceil(n_train / max(batch, nbs)) · epochs; above 10,000 MuSGD (lr 0.01, momentum 0.9), else
// AdamW (lr = round(0.002 · 5 / (4 + nc), 6), β1 0.9). Both force warmup_bias_lr to 0.
struct OptimizerChoice {
  OptimizerKind kind = OptimizerKind::musgd;
  double lr = 0.01;
  double momentum = 0.9;  // β1 for AdamW
  double warmup_bias_lr = 0.0;
  int64_t iterations = 0;
};
OptimizerChoice choose_auto_optimizer(int64_t n_train, int64_t batch, int64_t nbs, int64_t epochs, int64_t nc);

class Optimizer {
 public:
  // Over a StateStore's flat buffers; each applied step calls state.mark_updated(). The store must outlive this.
  Optimizer(graph::StateStore& state, OptimizerOptions options);
  // Over any flat f32 parameter and gradient buffers (numel = the parameters of entries, on backend's device), the
  // parameters laid out as entries say (StateEntry::offset in bytes; buffers among entries only name BatchNorm layers).
  Optimizer(const std::vector<graph::StateEntry>& entries, core::Tensor flat_params, core::Tensor flat_grads,
            std::shared_ptr<graph::BackendContext> backend, OptimizerOptions options);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const OptimizerOptions& options() const;
  OptimizerKind kind() const { return options().kind; }
  const GroupAssignment& assignment() const;
  const std::vector<ParamGroup>& groups() const { return assignment().groups; }

  // Current settings of group i (initially lr · lr_scale, momentum, and weight_decay where the group decays).
  const GroupSettings& group_settings(size_t i) const;
  void set_group_lr(size_t i, double lr);
  void set_group_momentum(size_t i, double momentum);
  void set_group_weight_decay(size_t i, double weight_decay);

  // Clip, check, update (see above). Waits for the backend once (the decision is read back): queue_step() then
  // finish_step().
  StepResult step();
  // The step queued without waiting: the norm, the non-finite check and the clipping factor are decided where the step
  // runs (on the device for CUDA), and the updates follow that decision. finish_step() reads it back (waiting for the
  // backend) and brings the step counts up to date; it must come before the next queue_step(). The state store is
  // marked updated by finish_step.
  void queue_step();
  StepResult finish_step();
  // queue_step() in its two parts, for a step captured into a CUDA graph: stage_step() is the host's part (the step's
  // group settings — lr, momentum, AdamW's t — written where the launched work reads them), launch_step() queues the
  // work (decision, clipping, Muon, update). A graph that captured launch_step() is replayed after each later
  // stage_step() in its place, taking the settings staged last; finish_step() follows as for queue_step(). Capture only
  // where capturable() says so.
  void stage_step();
  void launch_step();
  bool capturable() const;
  // Forgets a staged step that will not be finished (the training step failed before or while running it): the next
  // stage_step() or queue_step() is allowed. The parameters are as far as the failed work got.
  void cancel_step();
  // Where the last queued step's decision lives (device memory on CUDA): ModelEma::queue_update follows it.
  const OptimStatus* step_status() const;
  // Zeroes the whole flat gradient buffer.
  void zero_grad();
  int64_t steps() const;          // applied steps (AdamW's t)
  int64_t skipped_steps() const;  // steps skipped for a non-finite gradient

  // The optimizer's state, named for a checkpoint: "optimizer.step" (i64 scalar: applied steps) and per non-frozen
  // parameter KEY: SGD "optimizer.KEY.momentum_buffer"; AdamW "optimizer.KEY.exp_avg" and ".exp_avg_sq"; MuSGD
  // ".momentum_buffer" and, for Muon tensors, ".muon_momentum_buffer" (f32, the parameter's shape).
  std::vector<std::string> state_names() const;
  // A device view (f32, the backend's device) of a named state tensor; "optimizer.step" is a host i64 scalar.
  core::Tensor state_tensor(const std::string& name) const;
  // Host copies of every state tensor, in state_names() order.
  std::vector<std::pair<std::string, core::Tensor>> state_dict() const;
  // Restores every state tensor (all of state_names(), f32 of the right shape, "optimizer.step" i64 or i32 or f32);
  // strict: a missing or mis-shaped one is an error naming it; tensors not starting with "optimizer." are ignored,
  // others unknown are an error.
  void load_state_dict(const std::vector<std::pair<std::string, core::Tensor>>& tensors);
  void load_state_dict(const core::SafetensorsFile& file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::train
