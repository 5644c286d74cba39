// Yolo26Trainer — trains a YOLO26 in C++ (issue #15): the training graph (record_yolo26_training + E2ELoss, BatchNorm
// in training mode), the optimizer with its parameter groups, the warmup / LR schedule, gradient accumulation to nbs,
// mixed precision, the EMA, the ProgLoss weights and checkpoints that resume exactly. Facts: shared/YOLO26.md
// (Training, Optimizers, Loss).
//
// One iteration (train_batch) does what ultralytics' trainer does for one batch:
//   ni = global batch index; the schedule sets every group's lr and momentum for (epoch, ni) and the number of batches
//   to accumulate; forward (both heads) + E2ELoss with the epoch's (o2m, o2o) weights; backward (gradients summed
//   over the accumulated batches; f16: seeded with the dynamic loss scale and unscaled); when ni − last_step ≥
//   accumulate: grad-norm clipping at 10, the optimizer step (skipped and counted when a gradient is not finite),
//   zeroed gradients and an EMA update.
// The generic parts (optimizer, schedule, EMA, checkpoint storage) are in vision/train/; this class wires them to the
// model. The caller owns the loop (epochs, data, validation, logging): apps/vision/cmd_train.cpp and
// examples/train_in_memory.cpp.
//
// Mixed precision: the plan's compute dtype — f32 (TF32 off), bf16 (the CUDA default: no loss scaling) or f16 with
// dynamic loss scaling; the master weights, the optimizer, the EMA and the loss stay f32.
//
// Resume: a checkpoint holds the live model, the EMA, the optimizer state, the counters (epoch, ni, last optimizer
// step, E2E weight updates), the loss scale and the run's arguments; the data order is a function of (seed, epoch)
// (data/loader.h), so a resumed run repeats the uninterrupted run's batches and steps.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/core/tensor.h"
#include "vision/dist/communicator.h"
#include "vision/dist/device_reducer.h"
#include "vision/graph/backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/trainer_dist.h"
#include "vision/models/yolo/trainer_input.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/train/checkpoint.h"
#include "vision/train/ema.h"
#include "vision/train/optimizer.h"
#include "vision/train/schedule.h"

namespace vision::models::yolo {

struct TrainerOptions {
  int64_t epochs = 100;
  int64_t batch = 16;
  int64_t batches_per_epoch = 1;  // of the training data (the schedule's warmup length depends on it)
  int64_t train_images = 0;       // of the training data (optimizer "auto" depends on it)
  int64_t imgsz = 640;
  std::string optimizer = "auto";  // auto, SGD, AdamW, MuSGD
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 5e-4;
  double warmup_epochs = 3.0, warmup_momentum = 0.8, warmup_bias_lr = 0.1;
  bool cos_lr = false;
  int64_t nbs = 64;
  double max_grad_norm = 10.0;
  int freeze = 0;  // the first N layers get no updates
  bool ema = true;
  core::DType dtype = core::DType::f32;  // the plan's compute dtype: f32, bf16 or f16 (dynamic loss scaling)
  core::Layout layout = core::Layout::nchw;
  bool deterministic = false;  // PlanOptions::deterministic: the same run gives the same numbers
  bool tf32 = false;           // PlanOptions::tf32: f32 convolutions may use TF32 tensor cores
  bool fuse = true;            // PlanOptions::fuse_training: BatchNorm → SiLU as one op
  bool profile = false;        // wait for the device after each phase and time it (IterationResult::timing)
  // Forward, loss and backward of a step as one captured CUDA graph, replayed from a plan's second step on
  // (graph::Plan::train_step; not with profile). false: eager launches.
  bool capture = true;
  // Data-parallel training (issue #30): this rank's communicator; nullptr or a world of one: a single process. With
  // several ranks, `batch` is the global batch (accumulation and weight decay follow it, as in ultralytics) and each
  // rank trains on its share. The trainer starts every rank from rank 0's parameters and buffers; at each optimizer
  // step it sums the ranks' gradients (ultralytics' DDP averages the gradients of the loss × world size: the same sum)
  // and copies rank 0's buffers (BatchNorm's running statistics, which DDP broadcasts from rank 0), so the optimizer,
  // the clipping, the EMA and the loss scale then run identically on every rank. On CUDA the collectives run on the
  // device through NCCL (VISION_DIST_BACKEND=mpi: through host memory and the communicator). A communicator given
  // here is used even in a world of one (its collectives are then the identity: NCCL's are still called).
  std::shared_ptr<dist::Communicator> comm;
  // With comm: BatchNorm's batch statistics over the job's batch, every rank's images together (PyTorch's
  // SyncBatchNorm; `vision train --sync-bn`), on the CPU and on CUDA (NCCL's all-gather, or host memory). Off: each
  // rank's own batch, as ultralytics' DDP trains.
  bool sync_bn = false;
  // With comm: the gradient all-reduce in buckets of bucket_floats, each started as soon as the backward has written it
  // (GradientBuckets, beside the rest of the backward, as DDP does: on the CPU through the communicator's non-blocking
  // all-reduce, on CUDA through NCCL on a stream of its own); false, or CUDA ranks reducing through host memory: the
  // whole buffer after the backward. The sums are the same either way. VISION_NCCL_BUCKETS=0 (kNcclBucketsEnv) turns
  // the NCCL buckets off (the whole buffer after the backward, as before them).
  bool overlap_reduction = true;
  size_t bucket_floats = size_t{1} << 20;  // 4 MiB of f32
};

inline constexpr const char* kNcclBucketsEnv = "VISION_NCCL_BUCKETS";

// The E2ELoss weights (o2m, o2o) after `updates` epochs (YOLO26.md "Training").
std::array<float, 2> progloss_weights(int64_t updates, int64_t epochs);

// What one train_batch did.
struct IterationResult {
  int64_t iteration = 0;            // the global batch index ni of this batch
  float loss = 0;                   // the E2E total (B·…, what backward started from)
  std::array<float, 3> items = {};  // the one-to-one head's box, cls, l1 (gains applied), what is logged
  bool stepped = false;             // the optimizer ran after this batch (applied or skipped)
  train::StepResult step;           // when stepped
  double lr = 0;                    // the first group's lr for this batch
  // With TrainerOptions::profile: milliseconds of the forward with the loss (inputs uploaded, outputs read back), the
  // backward, and the optimizer step with the EMA update.
  struct Timing {
    double forward = 0, backward = 0, optimizer = 0;
  } timing;
};

class Yolo26Trainer {
 public:
  // A model of `info` (scale, nc, names) initialised from `weights` (a full checkpoint: `vision init`, a trained
  // model or initial_weights(info)). Throws vision::Error for bad options or weights that do not fit.
  Yolo26Trainer(std::shared_ptr<graph::BackendContext> backend, const ModelInfo& info,
                const core::SafetensorsFile& weights, TrainerOptions options);
  ~Yolo26Trainer();
  Yolo26Trainer(const Yolo26Trainer&) = delete;
  Yolo26Trainer& operator=(const Yolo26Trainer&) = delete;

  const ModelInfo& info() const { return info_; }
  const TrainerOptions& options() const { return options_; }
  graph::BackendContext& backend() const { return *backend_; }
  graph::Executor& executor() { return *executor_; }
  // Whether the last batch's plan replays its step as a captured graph, and why not when a capture failed.
  bool step_replayed() const;
  std::string step_replay_error() const;
  // Whether the last optimizer step (and EMA update) ran as part of its training step — inside the captured graph when
  // the step replays — rather than queued after it (several ranks, profiling, f16's host-side loss scale, or an
  // optimizer whose step cannot be captured).
  bool update_in_step() const { return update_in_step_; }
  train::Optimizer& optimizer() { return *optimizer_; }
  const train::Schedule& schedule() const { return *schedule_; }
  const train::ModelEma* ema() const { return ema_.get(); }
  std::string optimizer_description() const;  // "AdamW(lr=0.001, momentum=0.9) with parameter groups …"

  // Where the run stands: epochs completed, the next batch's global index, optimizer steps.
  int64_t epoch() const { return epoch_; }
  int64_t iteration() const { return iteration_; }
  int64_t batches_per_epoch() const { return options_.batches_per_epoch; }
  std::array<float, 2> loss_weights() const { return progloss_weights(e2e_updates_, options_.epochs); }
  float loss_scale() const;

  // One batch: images [B, 3, S, S] f32 in [0, 1] (host or on the backend, any layout) or u8 [B, S, S, 3] RGB (host:
  // the loader's BatchPixels::u8_nhwc batches; on CUDA copied as bytes and normalised on the device, best from pinned
  // memory), targets [B, M, 5] f32 (class, x1, y1, x2, y2 in input pixels) and count [B] i32 (host). M may be any size
  // ≥ the largest count (the trainer pads it to a bucket that only grows, so few plans are built). The images reach
  // the plan in its own input format (compute dtype and layout): the conversion runs on the backend. `hsv` (u8 images
  // only): one set of HSV gains per image, the loader's deferred jitter (data::TrainBatch::hsv), applied before the
  // normalisation — on the device on CUDA, on a copy of the images on the CPU. `plans` (u8 images, CUDA only): one per
  // image, the loader's deferred warp (data::TrainBatch::plans, LoaderOptions::warp_on_device), rendered on the device
  // in place of the images' unwritten pixels (trainer_input.h).
  IterationResult train_batch(const core::Tensor& images, const core::Tensor& targets, const core::Tensor& count,
                              std::span<const data::HsvGains> hsv = {}, std::span<const data::SamplePlan> plans = {});
  // The next batch's images (and gains) ahead of its train_batch: on CUDA, u8 images start their copy to the device
  // now, on a stream of their own, overlapping the step queued before (the images must not change until then);
  // elsewhere nothing happens. Optional: train_batch uploads what was not staged.
  void stage_input(const core::Tensor& images, std::span<const data::HsvGains> hsv = {},
                   std::span<const data::SamplePlan> plans = {});
  // The batch's images as train_batch feeds them to the plan: its input format (compute dtype and layout), on the
  // backend (CUDA) or the host (CPU). On CUDA a view of the trainer's input buffer, which the next batch overwrites.
  core::Tensor model_input(const core::Tensor& images, std::span<const data::HsvGains> hsv = {},
                           std::span<const data::SamplePlan> plans = {});
  // Data-parallel ranks (TrainerOptions::comm); each call is a collective that every rank makes in the same order.
  int rank() const { return options_.comm ? options_.comm->rank() : 0; }
  // How the ranks' collectives run: "nccl" (device memory), the communicator's backend ("mpi", through host memory on
  // CUDA), or "" without a communicator.
  std::string reduction() const;
  // Sums the flat gradients over the ranks, in place (train_batch does it at each optimizer step).
  void all_reduce_gradients();
  // Of the last optimizer step's backward: the gradient buckets whose all-reduce started beside it (0: after it, or
  // no communicator), and how many buckets there are.
  size_t buckets_beside_backward() const { return buckets_ ? buckets_->started_beside_backward() : 0; }
  size_t gradient_buckets() const { return buckets_ ? buckets_->buckets() : 0; }
  // Before rank 0 alone saves a checkpoint inside an accumulation: the pending gradients summed onto rank 0, zero on
  // the others, so the checkpoint holds the job's and the next step's sum stays right (a resume zeroes them on the
  // ranks other than 0 in the same way).
  void gather_pending_gradients();
  // Ends the epoch: the E2E weights move on, epoch() += 1. The iteration counter jumps to the next epoch's first batch
  // (a shorter epoch than batches_per_epoch is allowed).
  void end_epoch();

  // The model for validation and export: a full weights file in memory (every parameter and buffer by ultralytics
  // name, metadata of info()): the EMA's values where it has them (use_ema and an EMA), the live model's otherwise.
  core::SafetensorsFile weights(bool use_ema = true) const;

  // Checkpoints (train/checkpoint.h): the model, EMA, optimizer and run state; `args` (the run's arguments) and
  // `best_fitness` go into the TrainingState as given.
  void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& args, double best_fitness,
                       const nlohmann::json& extra = nlohmann::json::object()) const;
  // Restores a checkpoint of this model (scale and nc checked): live model, EMA, optimizer, counters, loss scale.
  // Returns its TrainingState (args, best fitness, extra).
  train::TrainingState resume(const train::Checkpoint& checkpoint);

 private:
  void build_graph();
  void broadcast_state(bool parameters);
  // Runs a collective on `bytes` of the backend's memory: in place on the CPU, through host_staging_ on CUDA.
  void on_host(void* data, size_t bytes, const std::function<void(void*)>& collective);
  void pad_targets(const core::Tensor& targets, const core::Tensor& count);

  std::shared_ptr<graph::BackendContext> backend_;
  ModelInfo info_;
  TrainerOptions options_;
  std::shared_ptr<graph::Graph> graph_;
  std::unique_ptr<graph::Executor> executor_;
  std::unique_ptr<train::Optimizer> optimizer_;
  std::unique_ptr<train::Schedule> schedule_;
  std::unique_ptr<train::ModelEma> ema_;
  struct Scaler;
  std::unique_ptr<Scaler> scaler_;
  train::OptimizerChoice choice_;
  int64_t epoch_ = 0, iteration_ = 0, last_step_ = -1, e2e_updates_ = 0;
  int64_t target_rows_ = 16;
  bool grads_pending_ = false;  // a backward since the last optimizer step (the next one accumulates)
  bool update_in_step_ = false;
  core::Tensor padded_targets_;
  std::shared_ptr<void> loss_buffer_;  // 4 floats on the backend: the loss and its items, copied aside
  std::shared_ptr<void> input_buffer_;  // the images in the plan's input format (CUDA), input_capacity_ bytes
  size_t input_capacity_ = 0;
  std::unique_ptr<U8BatchUpload> u8_upload_;
  std::unique_ptr<dist::DeviceReducer> device_reducer_;  // NCCL on CUDA with a communicator
  std::vector<std::byte> host_staging_;                  // CUDA ranks reducing through MPI or TCP
  std::unique_ptr<GradientBuckets> buckets_;  // TrainerOptions::overlap_reduction, where the ranks' backend has them
  void make_gradient_buckets();
  // Starts the bucketed all-reduce of a step's backward; the GradientReady hook to give it (empty without buckets).
  graph::GradientReady begin_overlapped_reduction();
};

}  // namespace vision::models::yolo
