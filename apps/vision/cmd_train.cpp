// vision train — trains a YOLO26 on a YOLO-format dataset (issue #16): the training loader (data/loader.h: mosaic,
// affine, HSV, flips on worker threads), models::yolo::Yolo26Trainer (optimizer, schedule, EMA, mixed precision),
// validation of the EMA weights after every epoch (the val split's images decoded once, vision::Detector at conf
// 0.001), results.csv, and the checkpoints weights/last.safetensors and weights/best.safetensors (best = the highest
// fitness 0.1·mAP50 + 0.9·mAP50-95). Ctrl-C (or SIGTERM) finishes the batch, saves `last` and exits; --resume
// continues a run from its `last` exactly where it stopped.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "commands.h"
#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/loader.h"
#include "vision/detector.h"
#include "vision/eval/metrics.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/loss.h"
#include "vision/models/yolo/trainer.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"
#include "vision/train/checkpoint.h"
#include "results_plot.h"

namespace vision::cli {
namespace {

namespace fs = std::filesystem;
namespace yolo = models::yolo;
using nlohmann::json;

struct TrainOptions {
  std::string data;
  std::string scale = "n";
  std::string weights;
  bool reinit_classes = false;
  int freeze = 0;
  int64_t epochs = 100;
  int64_t batch = 16;
  int64_t imgsz = 640;
  std::string device = "auto";
  std::string dtype;  // bf16 on CUDA, f32 on the CPU
  std::string optimizer = "auto";
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 5e-4, warmup_epochs = 3.0;
  bool cos_lr = false;
  int64_t nbs = 64;
  int64_t close_mosaic = 10;
  double mosaic = 1.0, fliplr = 0.5, scale_aug = 0.5, translate = 0.1, hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  uint64_t seed = 0;
  bool deterministic = false;
  int workers = 8;
  int64_t patience = 100;
  std::string resume;  // a run folder or its last.safetensors; "" (no resume)
  bool resume_given = false;
  std::string project = "runs/train";
  std::string name = "train";
  bool exist_ok = false;
  bool val = true;
  bool quiet = false;
  int64_t stop_after = 0;  // tests: behave as if interrupted after this many batches of this invocation (0: never)
};

json options_json(const TrainOptions& o) {
  return {{"data", o.data},       {"scale", o.scale},       {"weights", o.weights},
          {"freeze", o.freeze},   {"epochs", o.epochs},     {"batch", o.batch},
          {"imgsz", o.imgsz},     {"dtype", o.dtype},       {"optimizer", o.optimizer},
          {"lr0", o.lr0},         {"lrf", o.lrf},           {"momentum", o.momentum},
          {"weight_decay", o.weight_decay}, {"warmup_epochs", o.warmup_epochs}, {"cos_lr", o.cos_lr}, {"nbs", o.nbs},
          {"close_mosaic", o.close_mosaic}, {"mosaic", o.mosaic}, {"fliplr", o.fliplr},
          {"scale_aug", o.scale_aug}, {"translate", o.translate}, {"hsv_h", o.hsv_h},
          {"hsv_s", o.hsv_s},     {"hsv_v", o.hsv_v},       {"seed", o.seed},
          {"deterministic", o.deterministic}, {"patience", o.patience}, {"val", o.val},
          {"reinit_classes", o.reinit_classes}};
}

// The arguments a resumed run takes from its checkpoint (the data, the model, the schedule, the augmentation); the
// device, workers and output options stay the command line's.
void restore_options(TrainOptions& o, const json& a) {
  auto take = [&](const char* key, auto& field) {
    if (a.contains(key)) field = a.at(key).get<std::remove_reference_t<decltype(field)>>();
  };
  take("data", o.data), take("scale", o.scale), take("weights", o.weights), take("freeze", o.freeze);
  take("epochs", o.epochs), take("batch", o.batch), take("imgsz", o.imgsz), take("dtype", o.dtype);
  take("optimizer", o.optimizer), take("lr0", o.lr0), take("lrf", o.lrf), take("momentum", o.momentum);
  take("weight_decay", o.weight_decay), take("warmup_epochs", o.warmup_epochs), take("cos_lr", o.cos_lr), take("nbs", o.nbs);
  take("close_mosaic", o.close_mosaic), take("mosaic", o.mosaic), take("fliplr", o.fliplr);
  take("scale_aug", o.scale_aug), take("translate", o.translate), take("hsv_h", o.hsv_h), take("hsv_s", o.hsv_s);
  take("hsv_v", o.hsv_v), take("seed", o.seed), take("deterministic", o.deterministic);
  take("patience", o.patience), take("val", o.val), take("reinit_classes", o.reinit_classes);
}

// A value the trainer kept in the checkpoint's 'training.extra'; the wrong type is an error naming the file.
template <typename T>
T extra_value(const train::Checkpoint& c, const char* key) {
  try {
    return c.state.extra.at(key).get<T>();
  } catch (const json::exception& e) {
    fail("{}: checkpoint field 'training.extra.{}' is missing or of the wrong type ({})", c.path.string(), key,
         e.what());
  }
}

std::atomic<int> g_interrupted{0};
extern "C" void on_interrupt(int sig) {
  if (g_interrupted.fetch_add(1) > 0) {  // a second Ctrl-C: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

// runs/train/NAME, or NAME2, NAME3, … when it exists (unless exist_ok).
fs::path new_run_dir(const TrainOptions& o) {
  const fs::path base = fs::path(o.project) / o.name;
  std::error_code ec;
  if (o.exist_ok || !fs::exists(base, ec)) return base;
  for (int i = 2;; ++i) {
    fs::path p = fs::path(o.project) / (o.name + std::to_string(i));
    if (!fs::exists(p, ec)) return p;
  }
}

// The starting weights: --weights (a full checkpoint of this scale; another nc only with --reinit-classes, which
// keeps everything but the class heads' last convolutions) or the initial weights.
core::SafetensorsFile starting_weights(const TrainOptions& o, const yolo::ModelInfo& info) {
  core::SafetensorsFile init = yolo::initial_weights(info);
  if (o.weights.empty()) return init;
  const core::SafetensorsFile file = yolo::read_model_file(o.weights);
  const yolo::ModelInfo theirs = yolo::read_model_info(file);
  VISION_CHECK(!theirs.fused(), "--weights {}: an exported (fused) model cannot be trained; give a checkpoint",
               o.weights);
  VISION_CHECK(theirs.spec.scale == info.spec.scale, "--weights {} holds YOLO26{}, but --scale is {}", o.weights,
               yolo::scale_name(theirs.spec.scale), yolo::scale_name(info.spec.scale));
  if (theirs.spec.nc == info.spec.nc) {
    core::SafetensorsFile f = file;
    f.metadata = init.metadata;
    return f;
  }
  VISION_CHECK(o.reinit_classes,
               "--weights {} has {} classes but the dataset has {}: add --reinit-classes to fine-tune with new class "
               "heads",
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
  fmt::print("vision train: --reinit-classes: {} classes → {}: {} tensors from {}, {} class-head tensors "
             "re-initialised\n",
             theirs.spec.nc, info.spec.nc, kept, o.weights, fresh);
  return init;
}

struct ValSet {
  std::vector<data::Image> images;
  std::vector<std::vector<eval::GroundTruth>> labels;
  int64_t skipped = 0;
};

ValSet load_val(const data::Dataset& d, int workers) {
  ValSet v;
  std::vector<std::optional<data::Image>> images(d.samples.size());
  std::vector<std::string> errors(d.samples.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < std::max(workers, 1); ++w)
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

eval::MetricsResult validate(Detector& detector, const ValSet& v, int64_t nc, int64_t batch) {
  eval::DetectionMetrics m(nc);
  for (size_t i = 0; i < v.images.size(); i += static_cast<size_t>(batch)) {
    const size_t n = std::min(v.images.size() - i, static_cast<size_t>(batch));
    const auto found = detector.detect(std::span<const data::Image>(v.images.data() + i, n));
    for (size_t k = 0; k < n; ++k) m.add_image(found[k], v.labels[i + k]);
  }
  return m.compute();
}

std::string duration(double s) {
  const auto t = static_cast<int64_t>(std::max(s, 0.0) + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

// results.csv: the header, then one row per epoch. On resume the rows of epochs not completed are dropped.
const char* kCsvHeader =
    "epoch,time,train/box_loss,train/cls_loss,train/l1_loss,metrics/precision(B),metrics/recall(B),"
    "metrics/mAP50(B),metrics/mAP50-95(B),fitness,lr";

void truncate_csv(const fs::path& path, int64_t epochs_done) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  int64_t rows = 0;
  if (std::getline(in, line)) kept += line + "\n";
  while (std::getline(in, line) && rows < epochs_done) kept += line + "\n", ++rows;
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

int run_train(TrainOptions o) {
  fs::path run_dir;
  std::optional<train::Checkpoint> checkpoint;
  if (o.resume_given) {
    fs::path p = o.resume.empty() ? fs::path(o.project) / o.name : fs::path(o.resume);
    std::error_code ec;
    if (fs::is_directory(p, ec)) p = p / "weights" / "last.safetensors";
    VISION_CHECK(fs::is_regular_file(p, ec), "--resume: {} does not exist (give a run folder or its last.safetensors)",
                 p.string());
    checkpoint = train::read_checkpoint(p);
    try {
      restore_options(o, checkpoint->state.args);
    } catch (const json::exception& e) {
      fail("--resume: {}: checkpoint field 'training.args' holds a value of the wrong type ({})", p.string(),
           e.what());
    }
    run_dir = p.parent_path().parent_path();
  }
  std::error_code ec;
  try {
    yolo::check_image_size(o.imgsz, o.imgsz);
  } catch (const Error& e) {
    fail("--imgsz {}: {}", o.imgsz, e.what());
  }
  VISION_CHECK(o.batch >= 1 && o.batch <= 65536 && o.epochs >= 1 && o.epochs <= 1000000,
               "--batch ({}) must be in 1–65536 and --epochs ({}) in 1–1000000", o.batch, o.epochs);
  VISION_CHECK(!o.data.empty(), "--data is required (unless --resume)");
  VISION_CHECK(fs::is_regular_file(o.data, ec), "--data {}: no such file", o.data);

  const data::Dataset train_set = data::load_dataset(o.data, "train");
  const data::Dataset val_set = data::load_dataset(o.data, "val");
  for (const data::Dataset* d : {&train_set, &val_set})
    if (!d->cache_problem.empty()) fmt::print(stderr, "vision train: warning: label cache {}\n", d->cache_problem);
  for (const std::string& p : train_set.problems) fmt::print(stderr, "vision train: skipped label line {}\n", p);

  auto backend = graph::make_backend(graph::parse_device_choice(o.device));
  const bool cuda = backend->backend() == graph::Backend::cuda;
  if (o.dtype.empty()) o.dtype = cuda ? "bf16" : "f32";
  const core::DType dtype = core::parse_dtype(o.dtype);

  yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::parse_scale(o.scale), .nc = train_set.config.nc()});
  info.names = train_set.config.names;
  info.imgsz = {o.imgsz, o.imgsz};

  data::LoaderOptions lo;
  lo.imgsz = o.imgsz;
  lo.batch = o.batch;
  lo.workers = o.workers;
  lo.seed = o.seed;
  lo.aug.mosaic = o.mosaic;
  lo.aug.fliplr = o.fliplr;
  lo.aug.scale = o.scale_aug;
  lo.aug.translate = o.translate;
  lo.aug.hsv_h = o.hsv_h, lo.aug.hsv_s = o.hsv_s, lo.aug.hsv_v = o.hsv_v;
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
  to.freeze = o.freeze;
  to.dtype = dtype;
  to.layout = cuda && dtype != core::DType::f32 ? core::Layout::nhwc : core::Layout::nchw;
  to.deterministic = o.deterministic;
  yolo::Yolo26Trainer trainer(backend, info, checkpoint ? checkpoint->weights() : starting_weights(o, info), to);
  double best_fitness = -INFINITY;
  int64_t best_epoch = -1;
  if (checkpoint) {
    const train::TrainingState s = trainer.resume(*checkpoint);
    best_fitness = s.best_fitness;
    if (s.extra.contains("best_epoch")) best_epoch = extra_value<int64_t>(*checkpoint, "best_epoch");
    VISION_CHECK(trainer.epoch() < o.epochs || trainer.iteration() < o.epochs * loader.batches_per_epoch(),
                 "--resume: {} has finished its {} epochs; nothing to resume", checkpoint->path.string(), o.epochs);
  } else {
    run_dir = new_run_dir(o);
  }
  const fs::path weights_dir = run_dir / "weights", last = weights_dir / "last.safetensors",
                 best = weights_dir / "best.safetensors", csv = run_dir / "results.csv";
  fs::create_directories(weights_dir);
  // Temporaries that a killed earlier run left ("last.safetensors.tmp.<pid>", "best.safetensors.tmp.<pid>").
  for (const fs::path& p : {last, best}) train::remove_stale_temporaries(p);
  if (checkpoint)
    truncate_csv(csv, trainer.epoch());
  else
    std::ofstream(csv, std::ios::trunc) << kCsvHeader << "\n";
  {
    std::ofstream args(run_dir / "args.json", std::ios::trunc);
    args << options_json(o).dump(2) << "\n";
  }

  const ValSet val = o.val ? load_val(val_set, std::max(o.workers, 1)) : ValSet{};
  DetectorOptions dopt;
  dopt.device = cuda ? "cuda" : "cpu";
  dopt.conf = 0.001f;
  dopt.imgsz = std::array<int64_t, 2>{o.imgsz, o.imgsz};
  std::optional<Detector> detector;

  fmt::print("vision train: YOLO26{} ({} classes) on {} in {}{}, {} → {}\n", o.scale, info.spec.nc,
             graph::backend_name(backend->backend()), o.dtype, o.deterministic ? " (deterministic)" : "", o.data,
             run_dir.string());
  fmt::print("vision train: {} train images ({} labels), {} val images ({} labels); batch {}, {} batches an epoch, "
             "imgsz {}, {} epochs\n",
             train_set.counts.images, train_set.counts.instances, val.images.size(), val_set.counts.instances,
             o.batch, loader.batches_per_epoch(), o.imgsz, o.epochs);
  fmt::print("vision train: optimizer {}\n", trainer.optimizer_description());
  if (checkpoint)
    fmt::print("vision train: resuming {} at epoch {}, batch {} (step {})\n", checkpoint->path.string(),
               trainer.epoch() + 1, trainer.iteration() - trainer.epoch() * loader.batches_per_epoch(),
               trainer.optimizer().steps());

  g_interrupted = 0;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const bool tty = !o.quiet && ::isatty(2);
  const auto run_start = std::chrono::steady_clock::now();
  int64_t since_best = 0, batches_run = 0;
  // The running sums of the epoch in progress (an interrupted epoch's, carried over by a resume).
  std::array<double, 3> sums = {0, 0, 0};
  int64_t seen = 0;
  // results.csv's time column counts the whole run: the seconds of the invocations before a resume too.
  const double elapsed_before = checkpoint && checkpoint->state.extra.contains("elapsed")
                                    ? extra_value<double>(*checkpoint, "elapsed")
                                    : 0.0;
  auto run_seconds = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };
  if (checkpoint && checkpoint->state.extra.contains("epoch_sums")) {
    sums = extra_value<std::array<double, 3>>(*checkpoint, "epoch_sums");
    seen = extra_value<int64_t>(*checkpoint, "epoch_seen");
  }
  size_t problems_shown = 0;
  auto save_last = [&](bool between_epochs) {
    json extra{{"best_epoch", best_epoch}, {"interrupted", !between_epochs}, {"elapsed", run_seconds()}};
    if (!between_epochs) extra["epoch_sums"] = sums, extra["epoch_seen"] = seen;
    trainer.save_checkpoint(last, options_json(o), best_fitness, extra);
  };
  const int64_t nb = loader.batches_per_epoch();
  for (int64_t epoch = trainer.epoch(); epoch < o.epochs; ++epoch) {
    const bool mosaic = epoch < o.epochs - o.close_mosaic;
    if (epoch == o.epochs - o.close_mosaic && o.mosaic > 0) fmt::print("vision train: closing mosaic\n");
    loader.start_epoch(epoch, mosaic);
    const int64_t first = trainer.iteration() - epoch * nb;  // > 0 when resumed inside the epoch
    const auto t0 = std::chrono::steady_clock::now();
    if (first == 0) sums = {0, 0, 0}, seen = 0;
    int64_t instances = 0, timed = 0;
    double lr = 0;
    for (int64_t i = 0;; ++i) {
      std::optional<data::TrainBatch> b = loader.next();
      if (!b) break;
      if (i < first) continue;
      const int64_t rows = yolo::loss_target_rows(data::max_boxes(*b));
      core::Tensor targets, count;
      data::fill_targets(*b, rows, targets, count);
      const yolo::IterationResult r = trainer.train_batch(b->images, targets, count);
      for (int k = 0; k < 3; ++k) sums[static_cast<size_t>(k)] += r.items[static_cast<size_t>(k)];
      ++seen, ++timed;
      lr = r.lr;
      if (const data::LoaderCounts lc = loader.counts(); lc.problems.size() > problems_shown) {
        for (size_t k = problems_shown; k < lc.problems.size(); ++k)
          fmt::print(stderr, "{}vision train: unreadable image replaced: {}\n", tty ? "\r\033[K" : "", lc.problems[k]);
        problems_shown = lc.problems.size();
      }
      instances = 0;
      for (const auto& boxes : b->boxes) instances += static_cast<int64_t>(boxes.size());
      if (tty) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double rate = timed / std::max(s, 1e-9);
        fmt::print(stderr, "\r\033[K{:>4}/{:<4} {:>4}/{}  box {:.3f} cls {:.3f} l1 {:.3f}  inst {:>3}  {:.1f} it/s  ETA {}",
                   epoch + 1, o.epochs, i + 1, nb, sums[0] / seen, sums[1] / seen, sums[2] / seen, instances, rate,
                   duration((nb - i - 1) / rate));
        std::fflush(stderr);
      }
      if (o.stop_after > 0 && ++batches_run >= o.stop_after) g_interrupted = 1;
      if (g_interrupted) break;
    }
    if (tty) fmt::print(stderr, "\n");
    if (g_interrupted) {
      save_last(false);
      fmt::print("vision train: interrupted in epoch {} after batch {}: saved {} (resume with --resume {})\n",
                 epoch + 1, trainer.iteration() - epoch * nb, last.string(), run_dir.string());
      return 130;
    }
    trainer.end_epoch();
    const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    eval::MetricsResult m;
    if (o.val && !val.images.empty()) {
      if (!detector)
        detector.emplace(trainer.weights(true), dopt);
      else
        detector->set_weights(trainer.weights(true));
      m = validate(*detector, val, info.spec.nc, std::max<int64_t>(o.batch, 16));
    }
    const double fitness = o.val ? m.fitness : 0.0;
    const double n = std::max<int64_t>(seen, 1);
    const double elapsed = run_seconds();
    fmt::print("epoch {:>3}/{}  box {:.4f} cls {:.4f} l1 {:.4f}  P {:.3f} R {:.3f} mAP50 {:.3f} mAP50-95 {:.3f}  "
               "{:.1f} s ({:.0f} img/s)\n",
               epoch + 1, o.epochs, sums[0] / n, sums[1] / n, sums[2] / n, m.mp, m.mr, m.map50, m.map, train_s,
               timed * o.batch / std::max(train_s, 1e-9));
    std::fflush(stdout);
    std::ofstream(csv, std::ios::app) << fmt::format("{},{:.2f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.5f},{:.6g}\n",
                                                     epoch + 1, elapsed, sums[0] / n, sums[1] / n, sums[2] / n, m.mp,
                                                     m.mr, m.map50, m.map, fitness, lr);
    const bool improved = !o.val || fitness > best_fitness;  // without validation `best` is the last epoch
    if (improved) best_fitness = fitness, best_epoch = epoch + 1, since_best = 0;
    else ++since_best;
    save_last(true);
    // Atomically, as `last` is written: a copy killed half-way must not leave a truncated `best`.
    if (improved) core::copy_file_atomic(last, best);
    write_results_plot(csv, run_dir / "results.png");
    if (o.val && o.patience > 0 && since_best >= o.patience) {
      fmt::print("vision train: no improvement for {} epochs (best {} at epoch {}): stopping early\n", o.patience,
                 best_fitness, best_epoch);
      break;
    }
  }
  if (o.val && detector && fs::is_regular_file(best, ec)) {
    // The best checkpoint's EMA weights: the final table, PR_curve.png and val_pred.jpg.
    try {
      detector->set_weights(train::read_checkpoint(best).weights(true));
    } catch (const Error& e) {
      fail("{}; the last epoch's weights are in {}", e.what(), last.string());
    }
    const eval::MetricsResult m = validate(*detector, val, info.spec.nc, std::max<int64_t>(o.batch, 16));
    fmt::print("vision train: validation of {}:\n{}", best.string(), eval::format_table(m, info.names));
    write_pr_curve(m, info.names, run_dir / "PR_curve.png");
    const size_t n = std::min<size_t>(val.images.size(), 4);
    std::vector<std::vector<data::Detection>> found =
        detector->detect(std::span<const data::Image>(val.images.data(), n));
    for (auto& f : found) std::erase_if(f, [](const data::Detection& d) { return d.score < 0.25f; });
    write_prediction_grid(std::span<const data::Image>(val.images.data(), n), found, info.names,
                          run_dir / "val_pred.jpg");
  }
  fmt::print("vision train: done in {}; best fitness {:.4f} at epoch {}; weights in {}\n", duration(run_seconds()),
             best_fitness, best_epoch, weights_dir.string());
  const data::LoaderCounts c = loader.counts();
  if (c.corrupt > 0 || train_set.counts.bad_lines > 0)
    fmt::print("vision train: {} unreadable train image(s) replaced, {} bad label line(s) skipped\n", c.corrupt,
               train_set.counts.bad_lines);
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto opts = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a YOLO26 on a YOLO-format dataset");
  cmd->add_option("--data", opts->data, "data file (YAML or JSON: path, train, val, names)");
  cmd->add_option("--scale", opts->scale, "model scale: n, s, m, l or x")
      ->check(CLI::IsMember({"n", "s", "m", "l", "x"}))
      ->capture_default_str();
  cmd->add_option("--weights", opts->weights, "start from these weights (a full checkpoint, or an ultralytics .pt) instead of scratch");
  cmd->add_flag("--reinit-classes", opts->reinit_classes,
                "with --weights of another number of classes: re-initialise the class heads, keep the rest");
  cmd->add_option("--freeze", opts->freeze, "freeze the first N layers")->check(CLI::Range(0, 23));
  cmd->add_option("--epochs", opts->epochs, "epochs")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", opts->batch, "images per batch")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--imgsz", opts->imgsz, "training image size (a multiple of 32)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "compute dtype: bf16 (CUDA default), f16 (loss scaling) or f32 (CPU)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_option("--optimizer", opts->optimizer, "auto, SGD, AdamW or MuSGD")
      ->check(CLI::IsMember({"auto", "SGD", "AdamW", "MuSGD", "sgd", "adamw", "musgd"}))
      ->capture_default_str();
  cmd->add_option("--lr0", opts->lr0, "initial learning rate (not with optimizer auto)")->capture_default_str();
  cmd->add_option("--lrf", opts->lrf, "final learning rate, as a fraction of lr0")->capture_default_str();
  cmd->add_option("--momentum", opts->momentum, "SGD momentum / AdamW beta1")->capture_default_str();
  cmd->add_option("--weight-decay", opts->weight_decay, "weight decay")->capture_default_str();
  cmd->add_option("--warmup-epochs", opts->warmup_epochs, "warmup epochs")->capture_default_str();
  cmd->add_flag("--cos-lr", opts->cos_lr, "cosine learning-rate decay instead of linear");
  cmd->add_option("--nbs", opts->nbs, "nominal batch size: gradients of nbs / batch batches are accumulated per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--close-mosaic", opts->close_mosaic, "turn mosaic off for the last N epochs")->capture_default_str();
  cmd->add_option("--mosaic", opts->mosaic, "mosaic probability")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--fliplr", opts->fliplr, "horizontal flip probability")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--scale-aug", opts->scale_aug, "random scale gain (±)")->check(CLI::Range(0.0, 0.9))->capture_default_str();
  cmd->add_option("--translate", opts->translate, "random translation (± fraction)")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  cmd->add_option("--hsv-h", opts->hsv_h, "hue gain (±, fraction)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--hsv-s", opts->hsv_s, "saturation gain (±, fraction)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--hsv-v", opts->hsv_v, "value gain (±, fraction)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed (data order and augmentation)")->capture_default_str();
  cmd->add_flag("--deterministic", opts->deterministic, "deterministic kernels: a run repeats bit for bit");
  cmd->add_option("--workers", opts->workers, "data loading threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--patience", opts->patience, "stop after N epochs without a better fitness (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--resume", opts->resume, "continue a run: its folder or its last.safetensors (default: project/name)")
      ->expected(0, 1);
  cmd->add_option("--project", opts->project, "folder of runs")->capture_default_str();
  cmd->add_option("--name", opts->name, "run name (NAME2, NAME3, … when it exists)")->capture_default_str();
  cmd->add_flag("--exist-ok", opts->exist_ok, "write into project/name even when it exists");
  cmd->add_flag("!--no-val", opts->val, "no validation after each epoch (best = last)");
  cmd->add_flag("--quiet", opts->quiet, "no progress bar");
  cmd->add_option("--stop-after", opts->stop_after, "(tests) stop as Ctrl-C does after N batches")
      ->group("");  // hidden
  cmd->callback([opts, cmd] {
    TrainOptions o = *opts;
    o.resume_given = cmd->count("--resume") > 0;
    if (const int rc = run_train(o); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vision::cli
