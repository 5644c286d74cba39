#include "vision/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <thread>
#include <type_traits>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#ifdef VISION_HAS_CUDA
#include "vision/cuda/check.h"
#include "vision/cuda/memory.h"
#endif
#include "vision/data/dataset.h"
#include "vision/dist/communicator.h"
#include "vision/data/image.h"
#include "vision/data/loader.h"
#include "vision/detector.h"
#include "vision/eval/metrics.h"
#include "vision/eval/plots.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/loss.h"
#include "vision/models/yolo/trainer.h"
#include "vision/models/yolo/trainer_input.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"
#include "vision/train/checkpoint.h"

namespace vision {
namespace {

namespace fs = std::filesystem;
namespace yolo = models::yolo;
using nlohmann::json;

// A value the trainer kept in the checkpoint's 'training.extra'; the wrong type is an error naming the file.
template <typename T>
T training_extra(const train::Checkpoint& c, const char* key) {
  try {
    return c.state.extra.at(key).get<T>();
  } catch (const json::exception& e) {
    fail("{}: checkpoint field 'training.extra.{}' is missing or of the wrong type ({})", c.path.string(), key,
         e.what());
  }
}

// project/NAME, or NAME2, NAME3, … when it exists (unless exist_ok).
fs::path new_run_dir(const TrainConfig& o) {
  const fs::path base = fs::path(o.project) / o.name;
  std::error_code ec;
  if (o.exist_ok || !fs::exists(base, ec)) return base;
  for (int i = 2;; ++i) {
    fs::path p = fs::path(o.project) / (o.name + std::to_string(i));
    if (!fs::exists(p, ec)) return p;
  }
}

// The starting weights: `weights` (a full checkpoint of this scale; another nc only with reinit_classes, which keeps
// everything but the class heads' last convolutions) or the initial weights.
core::SafetensorsFile starting_weights(const TrainConfig& o, const yolo::ModelInfo& info) {
  core::SafetensorsFile init = yolo::initial_weights(info);
  if (o.weights.empty()) return init;
  const core::SafetensorsFile file = yolo::read_model_file(o.weights);
  const yolo::ModelInfo theirs = yolo::read_model_info(file);
  VISION_CHECK(!theirs.fused(), "weights {}: an exported (fused) model cannot be trained; give a checkpoint",
               o.weights);
  VISION_CHECK(theirs.spec.scale == info.spec.scale, "weights {} holds YOLO26{}, but the scale is {}", o.weights,
               yolo::scale_name(theirs.spec.scale), yolo::scale_name(info.spec.scale));
  if (theirs.spec.nc == info.spec.nc) {
    core::SafetensorsFile f = file;
    f.metadata = init.metadata;
    return f;
  }
  VISION_CHECK(o.reinit_classes,
               "weights {} has {} classes but the dataset has {}: add --reinit-classes (reinit_classes) to fine-tune "
               "with new class heads",
               o.weights, theirs.spec.nc, info.spec.nc);
  size_t kept = 0, fresh = 0;
  for (auto& [key, t] : init.tensors) {
    const core::Tensor* mine = file.find(key);
    if (mine && mine->shape() == t.shape() && !(key.find("model.23.") == 0 && key.find("cv3.") != std::string::npos &&
                                                key.find(".2.") != std::string::npos)) {
      t = *mine;
      ++kept;
    } else {
      ++fresh;
    }
  }
  if (o.verbose)
    fmt::print("vision train: reinit_classes: {} classes → {}: {} tensors from {}, {} class-head tensors "
               "re-initialised\n",
               theirs.spec.nc, info.spec.nc, kept, o.weights, fresh);
  return init;
}

struct ValSet {
  std::vector<data::Image> images;
  std::vector<std::vector<eval::GroundTruth>> labels;
  int64_t skipped = 0;
};

ValSet load_val_images(const data::Dataset& d, int64_t workers) {
  ValSet v;
  std::vector<std::optional<data::Image>> images(d.samples.size());
  std::vector<std::string> errors(d.samples.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < std::max<int64_t>(workers, 1); ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < d.samples.size();) try {
          images[i] = data::read_image(d.samples[i].image);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
    });
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < d.samples.size(); ++i) {
    if (!images[i]) {
      fmt::print(stderr, "vision train: val image skipped: {}\n", errors[i]);
      ++v.skipped;
      continue;
    }
    v.labels.push_back(data::to_pixels(d.samples[i].labels, images[i]->width, images[i]->height));
    v.images.push_back(std::move(*images[i]));
  }
  return v;
}

eval::MetricsResult validate_epoch(Detector& detector, const ValSet& v, int64_t nc, int64_t batch) {
  eval::DetectionMetrics m(nc);
  for (size_t i = 0; i < v.images.size(); i += static_cast<size_t>(batch)) {
    const size_t n = std::min(v.images.size() - i, static_cast<size_t>(batch));
    const auto found = detector.detect(std::span<const data::Image>(v.images.data() + i, n));
    for (size_t k = 0; k < n; ++k) m.add_image(found[k], v.labels[i + k]);
  }
  return m.compute();
}

std::string clock_duration(double s) {
  const auto t = static_cast<int64_t>(std::max(s, 0.0) + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

// results.csv: the header, then one row per epoch. On resume the rows of epochs not completed are dropped.
const char* kResultsCsvHeader =
    "epoch,time,train/box_loss,train/cls_loss,train/l1_loss,metrics/precision(B),metrics/recall(B),"
    "metrics/mAP50(B),metrics/mAP50-95(B),fitness,lr";

void truncate_results_csv(const fs::path& path, int64_t epochs_done) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  int64_t rows = 0;
  if (std::getline(in, line)) kept += line + "\n";
  while (std::getline(in, line) && rows < epochs_done) kept += line + "\n", ++rows;
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

json config_json(const TrainConfig& c, bool all) {
  json j = json::object();
  visit_train_config(c, [&](const auto& value, const TrainField& f) {
    if (all || f.kept) j[f.name] = value;
  });
  return j;
}

// Sets the fields named in `j` (see read_train_config_json).
void read_config(TrainConfig& c, const json& j, bool kept_only, bool ignore_unknown) {
  VISION_CHECK(j.is_object(), "training arguments: a JSON object is expected, not {}", j.type_name());
  std::vector<std::string_view> names;
  visit_train_config(c, [&](auto& value, const TrainField& f) {
    names.emplace_back(f.name);
    if (kept_only && !f.kept) return;
    const auto it = j.find(f.name);
    if (it == j.end()) return;
    using T = std::remove_reference_t<decltype(value)>;
    const bool ok = std::is_same_v<T, bool>          ? it->is_boolean()
                    : std::is_same_v<T, std::string> ? it->is_string()
                    : std::is_integral_v<T>          ? it->is_number_integer()
                                                     : it->is_number();
    VISION_CHECK(ok, "training argument '{}': {} is of the wrong type", f.name, it->dump());
    value = it->get<T>();
  });
  if (!ignore_unknown)
    for (const auto& [key, v] : j.items())
      VISION_CHECK(std::find(names.begin(), names.end(), key) != names.end(),
                   "training argument '{}' is not one of the training options", key);
}

}  // namespace

std::vector<std::string> train_field_choices(const TrainField& field) {
  std::vector<std::string> allowed;
  if (!field.choices) return allowed;
  std::stringstream ss(field.choices);
  for (std::string s; std::getline(ss, s, ',');) allowed.push_back(s);
  if (std::string_view(field.choices).ends_with(',')) allowed.emplace_back();  // getline drops a trailing empty item
  return allowed;
}

std::string train_config_json(const TrainConfig& c, bool all) { return config_json(c, all).dump(2); }

void read_train_config_json(TrainConfig& c, const std::string& text, bool kept_only, bool ignore_unknown) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("training arguments: not JSON ({})", e.what());
  }
  read_config(c, j, kept_only, ignore_unknown);
}

void validate_train_config(const TrainConfig& c) {
  visit_train_config(c, [&](const auto& value, const TrainField& f) {
    using T = std::remove_cvref_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      std::vector<std::string> allowed = train_field_choices(f);
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
        std::erase(allowed, std::string());
        fail("{} '{}' is not one of {}", f.name, value, fmt::join(allowed, ", "));
      }
    } else if constexpr (!std::is_same_v<T, bool>) {
      const auto v = static_cast<double>(value);
      VISION_CHECK(std::isfinite(v) && v >= f.min && v <= f.max, "{} {} is out of range (allowed: {} to {})", f.name,
                   value, f.min, f.max);
    }
  });
  try {
    yolo::check_image_size(c.imgsz, c.imgsz);
  } catch (const Error& e) {
    fail("imgsz {}: {}", c.imgsz, e.what());
  }
  VISION_CHECK(!c.data.empty(), "data (--data) is required unless the run is resumed");
}

namespace {

// Rank 0's string on every rank.
std::string broadcast_string(dist::Communicator& comm, std::string s) {
  int64_t n = static_cast<int64_t>(s.size());
  comm.broadcast(&n, sizeof n, 0);
  s.resize(static_cast<size_t>(n));
  comm.broadcast(s.data(), s.size(), 0);
  return s;
}

TrainResult run_training_ranked(TrainConfig o, const TrainCallbacks& callbacks,
                                const std::shared_ptr<dist::Communicator>& comm);

}  // namespace

TrainResult run_training(TrainConfig o, const TrainCallbacks& callbacks) {
  const std::shared_ptr<dist::Communicator> comm = dist::world();
  if (comm->world() == 1) return run_training_ranked(std::move(o), callbacks, comm);
  // Several ranks: an error on one of them ends the job (the others would wait for it in their next collective).
  try {
    return run_training_ranked(std::move(o), callbacks, comm);
  } catch (const std::exception& e) {
    fmt::print(stderr, "vision train: rank {} of {}: {}\n", comm->rank(), comm->world(), e.what());
    comm->abort(1);
  }
  throw;  // not reached: abort ends the process
}

namespace {

TrainResult run_training_ranked(TrainConfig o, const TrainCallbacks& callbacks,
                                const std::shared_ptr<dist::Communicator>& comm) {
  TrainResult result;
  const int ranks = comm->world(), rank = comm->rank();
  const bool lead = rank == 0;  // rank 0 alone prints, validates and writes files
  if (!lead) o.verbose = false, o.progress = false;
  fs::path run_dir;
  std::optional<train::Checkpoint> checkpoint;
  if (o.resume) {
    fs::path p = o.resume->empty() ? fs::path(o.project) / o.name : fs::path(*o.resume);
    std::error_code ec;
    if (fs::is_directory(p, ec)) p = p / "weights" / "last.safetensors";
    VISION_CHECK(fs::is_regular_file(p, ec), "resume: {} does not exist (give a run folder or its last.safetensors)",
                 p.string());
    checkpoint = train::read_checkpoint(p);
    try {
      read_config(o, checkpoint->state.args, /*kept_only=*/true, /*ignore_unknown=*/true);
    } catch (const Error& e) {
      fail("resume: {}: checkpoint field 'training.args': {}", p.string(), e.what());
    }
    run_dir = p.parent_path().parent_path();
  }
  validate_train_config(o);
  comm->set_timeout(std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)));
  VISION_CHECK(o.batch % ranks == 0,
               "batch {} is not a multiple of the {} ranks (--batch is the job's batch, split evenly across the ranks)",
               o.batch, ranks);
  std::error_code ec;
  VISION_CHECK(fs::is_regular_file(o.data, ec), "data {}: no such file", o.data);

  const data::Dataset train_set = data::load_dataset(o.data, "train");
  const data::Dataset val_set = data::load_dataset(o.data, "val");
  for (const data::Dataset* d : {&train_set, &val_set})
    if (!d->cache_problem.empty()) fmt::print(stderr, "vision train: warning: label cache {}\n", d->cache_problem);
  for (const std::string& p : train_set.problems) fmt::print(stderr, "vision train: skipped label line {}\n", p);

  if (ranks > 1 && o.device != "cpu") dist::select_rank_gpu(*comm);
  auto backend = graph::make_backend(graph::parse_device_choice(o.device));
  const bool cuda = backend->backend() == graph::Backend::cuda;
  if (o.dtype.empty()) o.dtype = cuda ? "bf16" : "f32";
  const core::DType dtype = core::parse_dtype(o.dtype);
  VISION_CHECK(!o.tf32 || (cuda && dtype == core::DType::f32),
               "--tf32 is a mode of f32 training on CUDA (TF32 tensor cores in the convolutions); this run trains in {} "
               "on {}",
               o.dtype, graph::backend_name(backend->backend()));

  yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::parse_scale(o.scale), .nc = train_set.config.nc()});
  info.names = train_set.config.names;
  info.imgsz = {o.imgsz, o.imgsz};

  data::LoaderOptions lo;
  lo.imgsz = o.imgsz;
  lo.batch = o.batch / ranks;
  lo.rank = rank, lo.world = ranks;
  lo.workers = static_cast<int>(o.workers);
  lo.seed = static_cast<uint64_t>(o.seed);
  lo.aug.mosaic = o.mosaic;
  lo.aug.fliplr = o.fliplr;
  lo.aug.scale = o.scale_aug;
  lo.aug.translate = o.translate;
  lo.aug.hsv_h = o.hsv_h, lo.aug.hsv_s = o.hsv_s, lo.aug.hsv_v = o.hsv_v;
  lo.cache = data::parse_cache_mode(o.cache);
#ifdef VISION_HAS_CUDA
  if (cuda) {
    // u8 batches (4× fewer bytes than f32) in pinned memory: the trainer copies them without staging and normalises
    // them on the device.
    lo.pixels = data::BatchPixels::u8_nhwc;
    lo.hsv_on_device = true;  // the HSV jitter, half the augmentation's CPU time, runs on the GPU
    // And the warp (the mosaic's composition, the affine, the flips) when the ram cache's images fit on the device (in
    // the share of its free memory where the trainer's upload keeps them, yolo::kPlanSourceShare): the workers then
    // only draw and take their sources. Otherwise each image's four sources would cross PCIe with every batch, and the
    // warp stays on the workers. VISION_WARP_ON_HOST=1 keeps it there in any case (the A/B of bench/train/NOTES.md).
    const char* host_warp = std::getenv("VISION_WARP_ON_HOST");
    size_t free_bytes = 0, total_bytes = 0;
    VISION_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    lo.warp_on_device = !(host_warp && std::string_view(host_warp) == "1") && lo.cache == data::CacheMode::ram &&
                        data::estimate_cache_bytes(train_set, o.imgsz) <=
                            static_cast<double>(free_bytes) * yolo::kPlanSourceShare;
    lo.host_memory = [](size_t bytes) {
      cuda::PinnedBytes p = cuda::pinned_alloc(bytes);
      return std::shared_ptr<void>(p.release(), cuda::PinnedFree{});
    };
  }
#endif
  data::TrainLoader loader(train_set, lo);

  yolo::TrainerOptions to;
  to.epochs = o.epochs;
  to.batch = o.batch;
  to.batches_per_epoch = loader.batches_per_epoch();
  to.train_images = train_set.counts.images;
  to.imgsz = o.imgsz;
  to.optimizer = o.optimizer;
  to.lr0 = o.lr0, to.lrf = o.lrf, to.momentum = o.momentum, to.weight_decay = o.weight_decay;
  to.warmup_epochs = o.warmup_epochs;
  to.cos_lr = o.cos_lr;
  to.nbs = o.nbs;
  to.freeze = static_cast<int>(o.freeze);
  to.dtype = dtype;
  to.layout = cuda && dtype != core::DType::f32 ? core::Layout::nhwc : core::Layout::nchw;
  to.deterministic = o.deterministic;
  to.tf32 = o.tf32;
  if (ranks > 1) to.comm = comm;
  to.sync_bn = o.sync_bn;  // one process: nothing to synchronise
  yolo::Yolo26Trainer trainer(backend, info, checkpoint ? checkpoint->weights() : starting_weights(o, info), to);
  double best_fitness = -INFINITY;
  int64_t best_epoch = -1;
  if (checkpoint) {
    const train::TrainingState s = trainer.resume(*checkpoint);
    best_fitness = s.best_fitness;
    if (s.extra.contains("best_epoch")) best_epoch = training_extra<int64_t>(*checkpoint, "best_epoch");
    VISION_CHECK(trainer.epoch() < o.epochs || trainer.iteration() < o.epochs * loader.batches_per_epoch(),
                 "resume: {} has finished its {} epochs; nothing to resume", checkpoint->path.string(), o.epochs);
  } else if (lead) {
    run_dir = new_run_dir(o);
  }
  if (ranks > 1) run_dir = broadcast_string(*comm, run_dir.string());
  const fs::path weights_dir = run_dir / "weights", last = weights_dir / "last.safetensors",
                 best = weights_dir / "best.safetensors", csv = run_dir / "results.csv";
  result.run_dir = run_dir, result.last = last, result.best = best, result.names = info.names;
  if (lead) {
    fs::create_directories(weights_dir);
    // Temporaries that a killed earlier run left ("last.safetensors.tmp.<pid>", "best.safetensors.tmp.<pid>").
    for (const fs::path& p : {last, best}) train::remove_stale_temporaries(p);
    if (checkpoint)
      truncate_results_csv(csv, trainer.epoch());
    else
      std::ofstream(csv, std::ios::trunc) << kResultsCsvHeader << "\n";
    std::ofstream(run_dir / "args.json", std::ios::trunc) << train_config_json(o) << "\n";
  }

  const ValSet val = o.val && lead ? load_val_images(val_set, o.workers) : ValSet{};
  DetectorOptions dopt;
  dopt.device = cuda ? "cuda" : "cpu";
  dopt.conf = 0.001f;
  dopt.imgsz = std::array<int64_t, 2>{o.imgsz, o.imgsz};
  std::optional<Detector> detector;

  if (o.verbose) {
    fmt::print("vision train: YOLO26{} ({} classes) on {} in {}{}, {} → {}\n", o.scale, info.spec.nc,
               graph::backend_name(backend->backend()), o.tf32 ? "f32 with TF32" : o.dtype,
               o.deterministic ? " (deterministic)" : "", o.data,
               run_dir.string());
    fmt::print("vision train: {} train images ({} labels), {} val images ({} labels); batch {}{}, {} batches an epoch, "
               "imgsz {}, {} epochs; {} loader threads{}, image cache {}\n",
               train_set.counts.images, train_set.counts.instances, val.images.size(), val_set.counts.instances,
               o.batch,
               ranks > 1 ? fmt::format(" ({} ranks of {} over {}{})", ranks, lo.batch, trainer.reduction(),
                                       o.sync_bn ? ", SyncBatchNorm" : "")
                         : "",
               loader.batches_per_epoch(), o.imgsz, o.epochs, loader.workers(), ranks > 1 ? " a rank" : "",
               data::cache_mode_name(lo.cache));
    fmt::print("vision train: optimizer {}\n", trainer.optimizer_description());
    if (checkpoint)
      fmt::print("vision train: resuming {} at epoch {}, batch {} (step {})\n", checkpoint->path.string(),
                 trainer.epoch() + 1, trainer.iteration() - trainer.epoch() * loader.batches_per_epoch(),
                 trainer.optimizer().steps());
    std::fflush(stdout);
  }

  const bool tty = o.progress && ::isatty(2);
  const auto run_start = std::chrono::steady_clock::now();
  int64_t since_best = 0, batches_run = 0;
  // The running sums of the epoch in progress (an interrupted epoch's, carried over by a resume).
  std::array<double, 3> sums = {0, 0, 0};
  int64_t seen = 0;
  // results.csv's time column counts the whole run: the seconds of the invocations before a resume too.
  const double elapsed_before = checkpoint && checkpoint->state.extra.contains("elapsed")
                                    ? training_extra<double>(*checkpoint, "elapsed")
                                    : 0.0;
  auto run_seconds = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };
  if (checkpoint && checkpoint->state.extra.contains("epoch_sums")) {
    sums = training_extra<std::array<double, 3>>(*checkpoint, "epoch_sums");
    seen = training_extra<int64_t>(*checkpoint, "epoch_seen");
  }
  size_t problems_shown = 0, cache_warnings_shown = 0;
  const json args = config_json(o, false);
  auto save_last = [&](bool between_epochs) {
    json extra{{"best_epoch", best_epoch}, {"interrupted", !between_epochs}, {"elapsed", run_seconds()}};
    if (!between_epochs) extra["epoch_sums"] = sums, extra["epoch_seen"] = seen;
    trainer.save_checkpoint(last, args, best_fitness, extra);
  };
  const int64_t nb = loader.batches_per_epoch();
  for (int64_t epoch = trainer.epoch(); epoch < o.epochs; ++epoch) {
    const bool mosaic = epoch < o.epochs - o.close_mosaic;
    if (epoch == o.epochs - o.close_mosaic && o.mosaic > 0 && o.verbose) fmt::print("vision train: closing mosaic\n");
    loader.start_epoch(epoch, mosaic);
    const int64_t first = trainer.iteration() - epoch * nb;  // > 0 when resumed inside the epoch
    const auto t0 = std::chrono::steady_clock::now();
    if (first == 0) sums = {0, 0, 0}, seen = 0;
    int64_t images_done = 0;
    double lr = 0, waited = 0;  // waited: seconds this epoch spent in loader.next()
    bool stop = false;
    std::optional<data::TrainBatch> ahead;  // the next batch, taken before this one trains
    for (int64_t i = 0;; ++i) {
      const auto asked = std::chrono::steady_clock::now();
      std::optional<data::TrainBatch> b = ahead ? std::move(ahead) : loader.next();
      ahead.reset();
      if (!b) break;
      if (i < first) continue;
      // The next batch now (the loader is usually ahead: it waits rarely), so that on CUDA its copy to the device
      // overlaps this batch's step.
      if (i + 1 < nb && (ahead = loader.next())) trainer.stage_input(ahead->images, ahead->hsv, ahead->plans);
      waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
      const int64_t rows = yolo::loss_target_rows(data::max_boxes(*b));
      core::Tensor targets, count;
      data::fill_targets(*b, rows, targets, count);
      const yolo::IterationResult r = trainer.train_batch(b->images, targets, count, b->hsv, b->plans);
      for (size_t k = 0; k < 3; ++k) sums[k] += r.items[k];
      ++seen;
      images_done += b->images.dim(0);
      lr = r.lr;
      if (const data::LoaderCounts lc = loader.counts(); lc.problems.size() > problems_shown) {
        for (size_t k = problems_shown; k < lc.problems.size(); ++k)
          fmt::print(stderr, "{}vision train: unreadable image replaced: {}\n", tty ? "\r\033[K" : "", lc.problems[k]);
        problems_shown = lc.problems.size();
      }
      if (const std::vector<std::string> cw = loader.cache_warnings(); cw.size() > cache_warnings_shown) {
        for (size_t k = cache_warnings_shown; k < cw.size(); ++k)
          fmt::print(stderr, "{}vision train: warning: image cache: {}\n", tty ? "\r\033[K" : "", cw[k]);
        cache_warnings_shown = cw.size();
      }
      BatchReport report{.epoch = epoch + 1, .epochs = o.epochs, .batch = i + 1, .batches = nb};
      report.box = sums[0] / static_cast<double>(seen), report.cls = sums[1] / static_cast<double>(seen);
      report.l1 = sums[2] / static_cast<double>(seen);
      for (const auto& boxes : b->boxes) report.instances += static_cast<int64_t>(boxes.size());
      report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report.images_per_second = static_cast<double>(images_done) / std::max(report.seconds, 1e-9);
      report.data_wait = waited / std::max(report.seconds, 1e-9);
      if (tty) {
        const double rate = static_cast<double>(i + 1 - first) / std::max(report.seconds, 1e-9);
        fmt::print(stderr,
                   "\r\033[K{:>4}/{:<4} {:>4}/{}  box {:.3f} cls {:.3f} l1 {:.3f}  inst {:>3}  {:.0f} img/s  data wait "
                   "{:.0f}%  ETA {}",
                   epoch + 1, o.epochs, i + 1, nb, report.box, report.cls, report.l1, report.instances,
                   report.images_per_second, 100 * report.data_wait,
                   clock_duration(static_cast<double>(nb - i - 1) / rate));
        std::fflush(stderr);
      }
      if (callbacks.on_batch && !callbacks.on_batch(report)) stop = true;
      if (callbacks.stop && callbacks.stop->load()) stop = true;
      if (o.stop_after > 0 && ++batches_run >= o.stop_after) stop = true;
      if (ranks > 1) stop = comm->all_reduce_max(stop ? 1 : 0) != 0;  // a stop on any rank stops all after this batch
      if (stop) break;
    }
    if (tty) fmt::print(stderr, "\n");
    if (stop) {
      trainer.gather_pending_gradients();
      if (lead) save_last(false);
      result.interrupted = true;
      result.epochs_done = epoch;
      result.best_epoch = best_epoch;
      result.best_fitness = best_epoch > 0 ? best_fitness : 0.0;
      result.message = fmt::format("vision train: interrupted in epoch {} after batch {}: saved {} (resume with "
                                   "--resume {})",
                                   epoch + 1, trainer.iteration() - epoch * nb, last.string(), run_dir.string());
      if (o.verbose) fmt::print("{}\n", result.message);
      return result;
    }
    trainer.end_epoch();
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    EpochReport e;
    e.epoch = epoch + 1, e.epochs = o.epochs, e.names = info.names;
    if (o.val && !val.images.empty()) {
      if (!detector)
        detector.emplace(trainer.weights(true), dopt);
      else
        detector->set_weights(trainer.weights(true));
      e.metrics = validate_epoch(*detector, val, info.spec.nc, std::max<int64_t>(o.batch, 16));
    }
    const eval::MetricsResult& m = e.metrics;
    e.fitness = o.val ? m.fitness : 0.0;
    const double n = static_cast<double>(std::max<int64_t>(seen, 1));
    e.box = sums[0] / n, e.cls = sums[1] / n, e.l1 = sums[2] / n, e.lr = lr;
    e.seconds = train_s;
    e.images_per_second = static_cast<double>(images_done) / std::max(train_s, 1e-9);
    e.data_wait = waited / std::max(train_s, 1e-9);
    const double elapsed = run_seconds();
    if (o.verbose) {
      fmt::print("epoch {:>3}/{}  box {:.4f} cls {:.4f} l1 {:.4f}  P {:.3f} R {:.3f} mAP50 {:.3f} mAP50-95 {:.3f}  "
                 "{:.1f} s ({:.0f} img/s, data wait {:.0f}%)\n",
                 epoch + 1, o.epochs, e.box, e.cls, e.l1, m.mp, m.mr, m.map50, m.map, train_s, e.images_per_second,
                 100 * e.data_wait);
      std::fflush(stdout);
    }
    result.epochs_done = epoch + 1;
    int64_t finish = 0;  // rank 0's decision: 1 to end the run after this epoch
    if (lead) {
      std::ofstream(csv, std::ios::app) << fmt::format("{},{:.2f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.6g}\n",
                                                       epoch + 1, elapsed, e.box, e.cls, e.l1, m.mp, m.mr, m.map50,
                                                       m.map, e.fitness, lr);
      e.best = !o.val || e.fitness > best_fitness;  // without validation `best` is the last epoch
      if (e.best) best_fitness = e.fitness, best_epoch = epoch + 1, since_best = 0;
      else ++since_best;
      save_last(true);
      // Atomically, as `last` is written: a copy killed half-way must not leave a truncated `best`.
      if (e.best) core::copy_file_atomic(last, best);
      eval::write_results_plot(csv, run_dir / "results.png");
      if (o.val && o.patience > 0 && since_best >= o.patience) {
        if (o.verbose)
          fmt::print("vision train: no improvement for {} epochs (best {} at epoch {}): stopping early\n", o.patience,
                     best_fitness, best_epoch);
        finish = 1;
      } else if (callbacks.on_epoch && !callbacks.on_epoch(e)) {
        if (o.verbose) fmt::print("vision train: stopped after epoch {} (asked by a callback)\n", epoch + 1);
        finish = 1;
      }
    }
    if (ranks > 1) comm->broadcast(&finish, sizeof finish, 0);
    if (finish) {
      result.stopped_early = true;
      break;
    }
  }
  result.epochs_done = std::max(result.epochs_done, trainer.epoch());
  if (lead && o.val && detector && fs::is_regular_file(best, ec)) {
    // The best checkpoint's EMA weights: the final table, PR_curve.png and val_pred.jpg.
    try {
      detector->set_weights(train::read_checkpoint(best).weights(true));
    } catch (const Error& e) {
      fail("{}; the last epoch's weights are in {}", e.what(), last.string());
    }
    const eval::MetricsResult m = validate_epoch(*detector, val, info.spec.nc, std::max<int64_t>(o.batch, 16));
    if (o.verbose) fmt::print("vision train: validation of {}:\n{}", best.string(), eval::format_table(m, info.names));
    eval::write_pr_curve(m, info.names, run_dir / "PR_curve.png");
    const size_t n = std::min<size_t>(val.images.size(), 4);
    std::vector<std::vector<data::Detection>> found =
        detector->detect(std::span<const data::Image>(val.images.data(), n));
    for (auto& f : found) std::erase_if(f, [](const data::Detection& d) { return d.score < 0.25f; });
    eval::write_prediction_grid(std::span<const data::Image>(val.images.data(), n), found, info.names,
                                run_dir / "val_pred.jpg");
    result.best_metrics = m;
  }
  result.best_epoch = best_epoch;
  result.best_fitness = best_epoch > 0 ? best_fitness : 0.0;
  result.message = fmt::format("vision train: done in {}; best fitness {:.4f} at epoch {}; weights in {}",
                               clock_duration(run_seconds()), best_fitness, best_epoch, weights_dir.string());
  if (o.verbose) {
    fmt::print("{}\n", result.message);
    const data::LoaderCounts c = loader.counts();
    if (c.corrupt > 0 || train_set.counts.bad_lines > 0)
      fmt::print("vision train: {} unreadable train image(s) replaced, {} bad label line(s) skipped\n", c.corrupt,
                 train_set.counts.bad_lines);
  }
  return result;
}

}  // namespace

}  // namespace vision
