#include "vision/models/yolo/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

#include "vision/core/error.h"
#include "vision/core/json.h"
#include "vision/data/augment.h"
#include "vision/data/image_tensor.h"
#include "vision/graph/loss_scaler.h"
#include "vision/models/yolo/loss.h"
#include "vision/models/yolo/optim_rules.h"
#include "vision/models/yolo/trainer_dist.h"

namespace vision::models::yolo {

using core::DType;
using core::Shape;
using core::Tensor;

std::array<float, 2> progloss_weights(int64_t updates, int64_t epochs) {
  const double span = static_cast<double>(std::max<int64_t>(epochs - 1, 1));
  const double o2m = std::max(1.0 - static_cast<double>(updates) / span, 0.0) * 0.7 + 0.1;
  return {static_cast<float>(o2m), static_cast<float>(std::max(1.0 - o2m, 0.0))};
}

// The dynamic loss scale of f16 training (none for f32 and bf16).
struct Yolo26Trainer::Scaler {
  explicit Scaler(float initial) : scaler(graph::LossScaler::Options{.initial_scale = initial}) {}
  graph::LossScaler scaler;
};

namespace {

// The gradients accumulated since the last optimizer step, in a checkpoint written between steps.
constexpr const char* kAccumulatedGradients = "optimizer.accumulated_gradients";

void check_options(const TrainerOptions& o) {
  VISION_CHECK(o.epochs >= 1, "train: epochs must be at least 1, got {}", o.epochs);
  VISION_CHECK(o.batch >= 1, "train: batch must be at least 1, got {}", o.batch);
  VISION_CHECK(o.batches_per_epoch >= 1, "train: an epoch needs at least one batch, got {}", o.batches_per_epoch);
  VISION_CHECK(o.nbs >= 1, "train: nbs must be at least 1, got {}", o.nbs);
  check_image_size(o.imgsz, o.imgsz);
  VISION_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16 || o.dtype == DType::f16,
               "train: the compute dtype must be f32, bf16 or f16, not {}", core::dtype_name(o.dtype));
  VISION_CHECK(o.lr0 > 0 && std::isfinite(o.lr0), "train: lr0 must be positive, got {}", o.lr0);
  VISION_CHECK(o.lrf >= 0 && std::isfinite(o.lrf), "train: lrf must be ≥ 0, got {}", o.lrf);
  VISION_CHECK(o.freeze >= 0 && o.freeze <= 23, "train: --freeze must be in [0, 23] (the model's layers), got {}",
               o.freeze);
}

}  // namespace

Yolo26Trainer::Yolo26Trainer(std::shared_ptr<graph::BackendContext> backend, const ModelInfo& info,
                             const core::SafetensorsFile& weights, TrainerOptions options)
    : backend_(std::move(backend)), info_(info), options_(std::move(options)) {
  check_options(options_);
  VISION_CHECK(!info_.fused(), "train: a training model needs BatchNorm layers, not an exported (fused) model");
  VISION_CHECK(options_.dtype == DType::f32 || backend_->backend() == graph::Backend::cuda,
               "train: the CPU backend trains in f32; {} needs --device cuda", core::dtype_name(options_.dtype));
  info_.imgsz = {options_.imgsz, options_.imgsz};
#ifdef VISION_HAS_CUDA
  if (options_.comm) {  // before the plans: SyncBatchNorm's collective goes through it
    const char* choice = std::getenv("VISION_DIST_BACKEND");
    const std::string backend_choice = choice ? choice : "";
    VISION_CHECK(backend_choice.empty() || backend_choice == "nccl" || backend_choice == "mpi",
                 "VISION_DIST_BACKEND={}: expected nccl or mpi", backend_choice);
    if (backend_->backend() == graph::Backend::cuda && backend_choice != "mpi")
      device_reducer_ = make_cuda_reducer(*backend_, options_.comm);
  }
#endif
  build_graph();

  const Shape shapes_images{options_.batch, 3, options_.imgsz, options_.imgsz};
  graph::StateStore& state = executor_->state(
      graph::Mode::train, {shapes_images, Shape{options_.batch, target_rows_, 5}, Shape{options_.batch}, Shape{2}});
  load_weights(state, info_.spec, weights);
  if (options_.comm) broadcast_state(/*parameters=*/true);  // every rank starts from rank 0's model, as DDP does
  make_gradient_buckets();

  // The optimizer: "auto" as YOLO26.md says, else the one named with lr0 and momentum.
  std::string name = options_.optimizer;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  double warmup_bias_lr = options_.warmup_bias_lr;
  if (name == "auto") {
    choice_ = train::choose_auto_optimizer(options_.train_images, options_.batch, options_.nbs, options_.epochs,
                                           info_.spec.nc);
    warmup_bias_lr = choice_.warmup_bias_lr;
  } else {
    choice_.kind = train::parse_optimizer(options_.optimizer);
    choice_.lr = options_.lr0;
    choice_.momentum = options_.momentum;
    choice_.warmup_bias_lr = warmup_bias_lr;
  }
  const int64_t accumulate = train::accumulate_steps(options_.nbs, options_.batch);
  train::OptimizerOptions oo;
  oo.kind = choice_.kind;
  oo.lr = choice_.lr;
  oo.momentum = choice_.momentum;
  oo.weight_decay = train::scaled_weight_decay(options_.weight_decay, options_.batch, accumulate, options_.nbs);
  oo.max_grad_norm = options_.max_grad_norm;
  oo.rules = yolo26_group_rules(options_.freeze);
  optimizer_ = std::make_unique<train::Optimizer>(state, oo);

  train::ScheduleOptions so;
  so.epochs = options_.epochs;
  so.lr0 = choice_.lr;
  so.lrf = options_.lrf;
  so.cos_lr = options_.cos_lr;
  so.momentum = choice_.momentum;
  so.warmup_epochs = options_.warmup_epochs;
  so.warmup_momentum = options_.warmup_momentum;
  so.warmup_bias_lr = warmup_bias_lr;
  so.nbs = options_.nbs;
  so.batch = options_.batch;
  so.batches_per_epoch = options_.batches_per_epoch;
  schedule_ = std::make_unique<train::Schedule>(so);

  if (options_.ema) ema_ = std::make_unique<train::ModelEma>(state);
  if (options_.dtype == DType::f16) scaler_ = std::make_unique<Scaler>(65536.0f);
  optimizer_->zero_grad();
}

Yolo26Trainer::~Yolo26Trainer() = default;

void Yolo26Trainer::build_graph() {
  graph_ = std::make_shared<graph::Graph>();
  graph::Graph& g = *graph_;
  constexpr int64_t any = Shape::kAny;
  // The images come in the plan's own format (model_input converts them on the backend): no cast step in the plan.
  const graph::SymTensor images = g.input("images", Shape{any, 3, any, any}, options_.dtype, options_.layout);
  LossTargets t;
  t.targets = g.input("targets", Shape{any, any, 5});
  t.count = g.input("count", Shape{any}, DType::i32);
  const graph::SymTensor weights = g.input("weights", Shape{2});
  const Yolo26Outputs out = record_yolo26_training(images, info_.spec);
  t.levels = out.features;
  e2e_loss(*out.one2many, *out.one2one, t, weights);
  executor_ = std::make_unique<graph::Executor>(
      graph_, backend_,
      graph::PlanOptions{.deterministic = options_.deterministic,
                         .compute_dtype = options_.dtype,
                         .layout = options_.layout,
                         .fuse_training = options_.fuse,
                         .tf32 = options_.tf32,
                         .collective = options_.comm && options_.sync_bn
                                           ? make_batchnorm_collective(backend_, options_.comm, device_reducer_.get())
                                           : nullptr});
  // A plan per (batch, target rows): the full batch, the epoch's last partial batch and a bucket that grows.
  executor_->set_max_plans(3);
}

std::string Yolo26Trainer::optimizer_description() const {
  std::string groups;
  for (const train::ParamGroup& g : optimizer_->groups())
    groups += fmt::format("{}{} {}", groups.empty() ? "" : ", ", g.tensors.size(), g.name());
  const bool automatic = options_.optimizer == "auto" || options_.optimizer == "AUTO";
  return fmt::format("{}(lr={:g}, momentum={:g}){} with parameter groups {} (weight decay {:g}){}",
                     train::optimizer_name(choice_.kind), choice_.lr, choice_.momentum,
                     automatic ? " chosen by optimizer=auto" : "", groups,
                     train::scaled_weight_decay(options_.weight_decay, options_.batch,
                                                train::accumulate_steps(options_.nbs, options_.batch), options_.nbs),
                     optimizer_->assignment().frozen.empty()
                         ? ""
                         : fmt::format(", {} tensors frozen", optimizer_->assignment().frozen.size()));
}

bool Yolo26Trainer::step_replayed() const {
  const graph::Plan* p = executor_->last_train_plan();
  return p && p->train_step_replayed();
}

std::string Yolo26Trainer::step_replay_error() const {
  const graph::Plan* p = executor_->last_train_plan();
  return p ? p->train_step_replay_error() : std::string();
}

float Yolo26Trainer::loss_scale() const { return scaler_ ? scaler_->scaler.scale() : 1.0f; }

void Yolo26Trainer::pad_targets(const Tensor& targets, const Tensor& count) {
  VISION_CHECK(targets.device() == core::Device::cpu && count.device() == core::Device::cpu,
               "train: targets and count must be host tensors");
  VISION_CHECK(targets.dtype() == DType::f32 && targets.rank() == 3 && targets.dim(2) == 5,
               "train: targets must be f32 [B, M, 5] (class, x1, y1, x2, y2), got {} {}",
               core::dtype_name(targets.dtype()), targets.shape().str());
  VISION_CHECK(count.dtype() == DType::i32 && count.rank() == 1 && count.dim(0) == targets.dim(0),
               "train: count must be i32 [B] with B = {} (the targets' batch), got {} {}", targets.dim(0),
               core::dtype_name(count.dtype()), count.shape().str());
  const int64_t b = targets.dim(0), m = targets.dim(1);
  int64_t largest = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int32_t n = count.data<int32_t>()[i];
    VISION_CHECK(n >= 0 && n <= m, "train: count[{}] = {} is outside [0, {}] (the targets' rows)", i, n, m);
    largest = std::max<int64_t>(largest, n);
  }
  target_rows_ = std::max(target_rows_, loss_target_rows(largest));
  padded_targets_ = Tensor::zeros(Shape{b, target_rows_, 5});
  const int64_t rows = std::min(m, target_rows_);
  for (int64_t i = 0; i < b; ++i)
    std::memcpy(padded_targets_.data<float>() + i * target_rows_ * 5, targets.data<float>() + i * m * 5,
                static_cast<size_t>(rows * 5) * sizeof(float));
}

void Yolo26Trainer::stage_input(const Tensor& images, std::span<const data::HsvGains> hsv,
                                std::span<const data::SamplePlan> plans) {
  if (backend_->backend() != graph::Backend::cuda || !images.defined() || images.dtype() != DType::u8 ||
      images.device() != core::Device::cpu)
    return;
  if (!u8_upload_) u8_upload_ = std::make_unique<U8BatchUpload>();
  u8_upload_->stage(*backend_, images, hsv, plans);
}

Tensor Yolo26Trainer::model_input(const Tensor& images, std::span<const data::HsvGains> hsv,
                                  std::span<const data::SamplePlan> plans) {
  const bool u8 = images.defined() && images.dtype() == DType::u8;
  VISION_CHECK(images.defined() && images.rank() == 4 &&
                   (u8 ? images.dim(3) == 3 && images.device() == core::Device::cpu
                       : images.dim(1) == 3 && images.dtype() == DType::f32),
               "train: images must be f32 [B, 3, H, W] or host u8 [B, H, W, 3], got {}",
               images.defined() ? images.str() : std::string("an undefined tensor"));
  const int64_t b = images.dim(0), h = u8 ? images.dim(1) : images.dim(2), w = u8 ? images.dim(2) : images.dim(3);
  check_image_size(h, w);
  const DType dtype = options_.dtype;
  const core::Layout layout = options_.layout;
  if (!u8 && dtype == DType::f32 && images.layout() == layout) return images;  // the plan's format already
  VISION_CHECK(hsv.empty() || (u8 && static_cast<int64_t>(hsv.size()) == b),
               "train: HSV gains ({}) come with u8 images, one per image ({} given)", hsv.size(),
               u8 ? b : int64_t{0});
  VISION_CHECK(plans.empty() || (u8 && backend_->backend() == graph::Backend::cuda),
               "train: augmentation plans (the loader's warp_on_device) are rendered on a CUDA backend, for u8 batches");
  if (backend_->backend() == graph::Backend::cpu) {  // the CPU plans compute in f32
    if (u8 && !hsv.empty()) {  // the jitter on a copy: the caller's batch stays as it is
      const Tensor jittered = images.clone();
      const int64_t pixels = h * w;
      for (int64_t i = 0; i < b; ++i)
        data::apply_hsv(jittered.data<uint8_t>() + i * pixels * 3, pixels, hsv[static_cast<size_t>(i)]);
      return data::normalize_u8_batch(jittered, layout);
    }
    if (u8) return data::normalize_u8_batch(images, layout);
    Tensor out = Tensor::zeros(images.shape(), DType::f32, layout);
    backend_->convert(out, images);
    return out;
  }
  const Shape shape{b, 3, h, w};
  const size_t bytes = static_cast<size_t>(shape.numel()) * core::dtype_size(dtype);
  if (input_capacity_ < bytes) {
    if (input_buffer_) backend_->synchronize();  // queued work may still read the old buffer
    input_buffer_ = backend_->allocate(bytes);
    input_capacity_ = bytes;
  }
  const Tensor dst = Tensor::view(input_buffer_.get(), shape, dtype, core::Device::cuda, layout);
  if (u8) {
    if (!u8_upload_) u8_upload_ = std::make_unique<U8BatchUpload>();
    u8_upload_->run(*backend_, images, dst, hsv, plans);
  } else {
    backend_->convert(dst, images.device() == core::Device::cpu ? backend_->upload(images) : images);
  }
  return dst;
}

IterationResult Yolo26Trainer::train_batch(const Tensor& images, const Tensor& targets, const Tensor& count,
                                           std::span<const data::HsvGains> hsv,
                                           std::span<const data::SamplePlan> plans) {
  const Tensor input = model_input(images, hsv, plans);
  VISION_CHECK(images.dim(0) == targets.dim(0), "train: {} images but targets for {}", images.dim(0), targets.dim(0));
  pad_targets(targets, count);

  IterationResult r;
  r.iteration = iteration_;
  const int64_t ni = iteration_;
  schedule_->apply(*optimizer_, epoch_, ni);
  const int64_t accumulate = schedule_->accumulate(ni);
  r.lr = optimizer_->group_settings(0).lr;

  const std::array<float, 2> w = loss_weights();
  const Tensor weights = Tensor::from_vector(Shape{2}, std::vector<float>{w[0], w[1]});
  using Clock = std::chrono::steady_clock;
  auto lap = [&, t = Clock::now()](double& into) mutable {
    if (!options_.profile) return;
    backend_->synchronize();
    const auto now = Clock::now();
    into = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
  };
  if (options_.profile) backend_->synchronize();
  lap(r.timing.forward);
  // The loss and its items are copied aside on the device right after the forward and read back after the backward is
  // queued: no wait between the two passes.
  if (!loss_buffer_) loss_buffer_ = backend_->allocate(4 * sizeof(float));
  auto* lb = static_cast<float*>(loss_buffer_.get());
  const std::vector<Tensor> inputs = {input, padded_targets_, count, weights};
  auto copy_loss = [&](const std::vector<Tensor>& out) {
    VISION_CHECK(out.size() >= 2 && out[0].numel() == 1 && out[1].numel() == 3 && out[0].dtype() == DType::f32 &&
                     out[1].dtype() == DType::f32,
                 "train: the training plan's outputs are not the loss [] and its items [3]");
    backend_->copy_on_device(lb, out[0].raw(), sizeof(float));
    backend_->copy_on_device(lb + 1, out[1].raw(), 3 * sizeof(float));
  };
  const float seed = scaler_ ? scaler_->scaler.scale() : 1.0f;
  const bool step_now = ni - last_step_ >= accumulate;
  // At a step of several ranks, the gradients' all-reduce starts bucket by bucket beside the backward.
  const graph::GradientReady ready = step_now ? begin_overlapped_reduction() : graph::GradientReady();
  // The optimizer step and the EMA queued behind the backward, following the step's decision on the device, and read
  // back with the loss: one wait for the device per step, none between the passes and the update. Profiling (each
  // pass timed) and f16 (the loss scale's decision is the host's) take the step after the loss is read. In a single
  // process with an optimizer whose step can be captured, the update is part of the step itself (after_backward: in
  // the captured graph when the step is replayed), its host settings — lr, momentum, the EMA's decay — staged first.
  const bool queued = step_now && !options_.profile && !scaler_;
  const bool update_in_step = queued && !options_.comm && optimizer_->capturable();
  std::function<void()> update;
  if (update_in_step) {
    optimizer_->stage_step();
    if (ema_) ema_->stage_update();
    update = [&] {
      optimizer_->launch_step();
      if (ema_) ema_->launch_update(executor_->state(), optimizer_->step_status());
      optimizer_->zero_grad();
    };
  }
  try {
    if (options_.profile || !options_.capture) {  // eager, each pass timed apart when profiling
      copy_loss(executor_->forward_train(inputs));
      lap(r.timing.forward);
      executor_->backward({}, grads_pending_, seed, ready);
      if (update) update();
    } else {  // one captured graph from the plan's second step on (graph::Plan::train_step)
      executor_->train_step(inputs, grads_pending_, seed, copy_loss, ready, update);
    }
  } catch (...) {
    if (update_in_step) {  // the staged update will not be finished: the trainer stays usable (e.g. a smaller batch)
      optimizer_->cancel_step();
      if (ema_) ema_->cancel_update();
    }
    throw;
  }
  grads_pending_ = true;
  auto begin_step = [&] {  // the job's gradients summed over the ranks, rank 0's buffers everywhere
    r.stepped = true;
    last_step_ = ni;
    if (options_.comm) {
      if (!ready) {
        all_reduce_gradients();
      } else if (device_reducer_) {
        device_reducer_->finish();  // the buckets, joined into the stream by the backward's end
      } else {
        options_.comm->finish_all_reduces();
      }
      broadcast_state(/*parameters=*/false);
    }
  };
  if (step_now) update_in_step_ = update_in_step;
  if (update_in_step) {  // no ranks (update_in_step's condition): begin_step has nothing to reduce before the update
    begin_step();
    grads_pending_ = false;
  } else if (queued) {
    begin_step();
    optimizer_->queue_step();
    if (ema_) ema_->queue_update(executor_->state(), optimizer_->step_status());
    optimizer_->zero_grad();
    grads_pending_ = false;
  }
  const std::vector<float> loss =
      backend_->download(Tensor::view(lb, Shape{4}, DType::f32, backend_->device())).to_vector();
  lap(r.timing.backward);
  r.loss = loss[0];
  r.items = {loss[1], loss[2], loss[3]};

  if (queued) {
    r.step = optimizer_->finish_step();
    if (ema_) ema_->finish_update(r.step.applied);
  } else if (step_now) {
    begin_step();
    const bool finite = !scaler_ || scaler_->scaler.unscale(executor_->state());
    if (finite) {
      r.step = optimizer_->step();
    } else {
      r.step.applied = false;
      r.step.grad_norm = INFINITY;
    }
    optimizer_->zero_grad();
    grads_pending_ = false;
    if (r.step.applied && ema_) ema_->update(executor_->state());
    lap(r.timing.optimizer);
  }
  ++iteration_;
  return r;
}

void Yolo26Trainer::end_epoch() {
  ++e2e_updates_;
  ++epoch_;
  iteration_ = std::max(iteration_, epoch_ * options_.batches_per_epoch);
}

core::SafetensorsFile Yolo26Trainer::weights(bool use_ema) const {
  core::SafetensorsFile f;
  f.tensors = executor_->state().to_host();
  if (use_ema && ema_)
    for (auto& [key, t] : ema_->to_host())
      for (auto& [k, v] : f.tensors)
        if (k == key) v = t;
  f.metadata = weights_metadata(info_);
  return f;
}

void Yolo26Trainer::save_checkpoint(const std::filesystem::path& path, const nlohmann::json& args,
                                    double best_fitness, const nlohmann::json& extra) const {
  train::TrainingState s;
  s.epoch = epoch_;
  s.iteration = iteration_;
  s.step = optimizer_->steps();
  s.skipped_steps = optimizer_->skipped_steps() + (scaler_ ? scaler_->scaler.skipped_steps() : 0);
  s.ema_updates = ema_ ? ema_->updates() : 0;
  s.best_fitness = best_fitness;
  s.loss_scale = loss_scale();
  s.optimizer = std::string(train::optimizer_name(choice_.kind));
  s.args = args;
  s.extra = extra;
  s.extra["last_step"] = last_step_;
  s.extra["e2e_updates"] = e2e_updates_;
  s.extra["target_rows"] = target_rows_;
  s.extra["grads_pending"] = grads_pending_;
  // Between optimizer steps (gradient accumulation), the gradients summed so far are part of the state.
  train::NamedTensors opt = optimizer_->state_dict();
  if (grads_pending_) opt.emplace_back(kAccumulatedGradients, backend_->download(executor_->state().flat_grads()));
  train::write_checkpoint(path, executor_->state().to_host(), weights_metadata(info_),
                          ema_ ? ema_->to_host() : train::NamedTensors{}, opt, s);
}

train::TrainingState Yolo26Trainer::resume(const train::Checkpoint& checkpoint) {
  load_checkpoint_model(executor_->state(), info_.spec, checkpoint);
  const train::TrainingState& s = checkpoint.state;
  VISION_CHECK(s.optimizer == train::optimizer_name(choice_.kind),
               "{}: the checkpoint's optimizer is {} but this run uses {}", checkpoint.path.string(), s.optimizer,
               train::optimizer_name(choice_.kind));
  train::NamedTensors opt;
  const core::Tensor* accumulated = nullptr;
  for (const auto& [name, t] : checkpoint.optimizer)
    if (name == kAccumulatedGradients)
      accumulated = &t;
    else
      opt.emplace_back(name, t);
  optimizer_->load_state_dict(opt);
  if (ema_) {
    VISION_CHECK(checkpoint.has_ema(), "{}: the checkpoint has no EMA but this run keeps one",
                 checkpoint.path.string());
    ema_->load(checkpoint.ema, s.ema_updates);
  }
  epoch_ = s.epoch;
  iteration_ = s.iteration;
  auto get = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    if (!s.extra.contains(key)) return fallback;
    const nlohmann::json& v = s.extra.at(key);
    VISION_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
                 "{}: checkpoint field 'training.extra.{}' must be an integer in {}–{}, got {}",
                 checkpoint.path.string(), key, lo, hi, core::json_excerpt(v));
    return v.get<int64_t>();
  };
  last_step_ = get("last_step", iteration_ - 1, -1, int64_t{1} << 40);
  e2e_updates_ = get("e2e_updates", epoch_, 0, int64_t{1} << 40);
  target_rows_ = std::max(target_rows_, get("target_rows", 16, 0, int64_t{1} << 20));
  if (scaler_) {
    VISION_CHECK(std::isfinite(s.loss_scale) && s.loss_scale > 0,
                 "{}: checkpoint field 'training.loss_scale' is {}; a run with loss scaling needs a positive finite one",
                 checkpoint.path.string(), s.loss_scale);
    scaler_ = std::make_unique<Scaler>(s.loss_scale);
  }
  optimizer_->zero_grad();
  grads_pending_ = accumulated != nullptr;
  if (accumulated) {
    const core::Tensor grads = executor_->state().flat_grads();
    VISION_CHECK(accumulated->dtype() == DType::f32 && accumulated->numel() == grads.numel(),
                 "{}: {} has {} elements, the model {}", checkpoint.path.string(), kAccumulatedGradients,
                 accumulated->numel(), grads.numel());
    // The checkpoint holds the job's pending sum (gather_pending_gradients): rank 0 carries it.
    if (rank() == 0) backend_->copy_to_device(grads.raw(), accumulated->raw(), static_cast<size_t>(grads.numel()) * 4);
  }
  return s;
}

std::string Yolo26Trainer::reduction() const {
  if (!options_.comm) return "";
  return device_reducer_ ? device_reducer_->name() : options_.comm->backend();
}

void Yolo26Trainer::on_host(void* data, size_t bytes, const std::function<void(void*)>& collective) {
  if (backend_->backend() == graph::Backend::cpu) {
    collective(data);
    return;
  }
  // CUDA without a device reducer: through host memory (the copy waits for the queued work), a buffer kept between
  // steps.
  if (host_staging_.size() < bytes) host_staging_.resize(bytes);
  backend_->copy_to_host(host_staging_.data(), data, bytes);
  collective(host_staging_.data());
  backend_->copy_to_device(data, host_staging_.data(), bytes);
}

void Yolo26Trainer::make_gradient_buckets() {
  if (!options_.comm || !options_.overlap_reduction) return;
  const graph::StateStore& state = executor_->state();
  if (backend_->backend() == graph::Backend::cpu) {
    dist::Communicator* comm = options_.comm.get();
    buckets_ = std::make_unique<GradientBuckets>(
        state, options_.bucket_floats, [comm](float* p, size_t n) { comm->start_all_reduce_sum(p, n); },
        [comm] { comm->progress(); }, nullptr);
    return;
  }
  // CUDA: through NCCL unless VISION_NCCL_BUCKETS=0; through host memory, the whole buffer after the backward.
  const char* v = std::getenv(kNcclBucketsEnv);
  if (!device_reducer_ || (v && std::string_view(v) == "0")) return;
  dist::DeviceReducer* reducer = device_reducer_.get();
  buckets_ = std::make_unique<GradientBuckets>(
      state, options_.bucket_floats, [reducer](float* p, size_t n) { reducer->start_all_reduce_sum(p, n); }, nullptr,
      [reducer] { reducer->join(); });
}

graph::GradientReady Yolo26Trainer::begin_overlapped_reduction() {
  if (!buckets_) return {};
  buckets_->begin();
  GradientBuckets* buckets = buckets_.get();
  return [buckets](const Tensor& grad) { buckets->ready(grad); };
}

void Yolo26Trainer::all_reduce_gradients() {
  if (!options_.comm) return;
  const Tensor grads = executor_->state().flat_grads();
  const size_t n = static_cast<size_t>(grads.numel());
  if (device_reducer_)
    device_reducer_->all_reduce_sum(static_cast<float*>(grads.raw()), n);
  else
    on_host(grads.raw(), n * sizeof(float), [&](void* p) { options_.comm->all_reduce_sum(static_cast<float*>(p), n); });
}

void Yolo26Trainer::gather_pending_gradients() {
  if (!options_.comm || !grads_pending_) return;
  all_reduce_gradients();
  if (rank() != 0) optimizer_->zero_grad();
}

void Yolo26Trainer::broadcast_state(bool parameters) {
  graph::StateStore& state = executor_->state();
  auto bcast = [&](void* device_data, size_t bytes) {
    if (bytes == 0) return;
    if (device_reducer_)
      device_reducer_->broadcast(device_data, bytes, 0);
    else
      on_host(device_data, bytes, [&](void* p) { options_.comm->broadcast(p, bytes, 0); });
  };
  if (parameters) {
    const Tensor p = state.flat_params();
    bcast(p.raw(), static_cast<size_t>(p.numel()) * sizeof(float));
  }
  bcast(state.buffer_region(), state.buffer_region_bytes());
  state.mark_updated();
}

}  // namespace vision::models::yolo
