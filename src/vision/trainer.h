// vision::run_training — a whole training run of YOLO26 on a YOLO-format dataset, as `vision train` and the Python
// `YOLO.train` run it (the CLI and the bindings only parse arguments):
//
//   vision::TrainConfig config;
//   config.data = "shapes/data.yaml", config.epochs = 30, config.imgsz = 320, config.batch = 32;
//   vision::TrainCallbacks callbacks;
//   callbacks.on_epoch = [](const vision::EpochReport& e) { return e.metrics.map50 < 0.99; };  // false: stop
//   const vision::TrainResult result = vision::run_training(config, callbacks);   // runs/train/train/weights/best.safetensors
//
// A run owns: the training loader (data/loader.h: mosaic, affine, HSV, flips on worker threads; `cache` keeps the
// decoded images in memory or on disk, data/image_cache.h; on CUDA its batches are u8 in pinned memory, normalised
// on the device); the trainer
// (models/yolo/trainer.h: optimizer, schedule, EMA, mixed precision); validation of the EMA weights after every epoch
// (the val split decoded once, vision::Detector at conf 0.001); RUN/results.csv and results.png; RUN/args.json; the
// checkpoints RUN/weights/last.safetensors and best.safetensors (best = the highest fitness 0.1·mAP50 +
// 0.9·mAP50-95), both written atomically; early stopping after `patience` epochs without a better fitness; at the end
// the best weights' validation table, PR_curve.png and val_pred.jpg. A stop request (a callback returning false, or
// `TrainCallbacks::stop` set, e.g. by a Ctrl-C handler) finishes the batch, saves `last` and returns; a run resumed from
// that `last` continues exactly where it stopped.
//
// TrainConfig is one definition: visit_train_config() lists each field once with its name, help, allowed values and
// whether a checkpoint keeps it; the JSON of args.json and of the checkpoints, its validation and the CLI's options are
// all generated from that list.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "vision/eval/metrics.h"

namespace vision {

struct TrainConfig {
  // What a checkpoint keeps (a resumed run takes these from it).
  std::string data;          // the data file (YAML or JSON: path, train, val, names)
  std::string scale = "n";   // n, s, m, l or x
  std::string weights;       // start from these weights (a full checkpoint or an ultralytics .pt); "": from scratch
  bool reinit_classes = false;
  int64_t freeze = 0;
  int64_t epochs = 100;
  int64_t batch = 16;
  int64_t imgsz = 640;
  std::string dtype;  // "": bf16 on CUDA, f32 on the CPU
  std::string optimizer = "auto";
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 5e-4, warmup_epochs = 3.0;
  bool cos_lr = false;
  int64_t nbs = 64;
  int64_t close_mosaic = 10;
  double mosaic = 1.0, fliplr = 0.5, scale_aug = 0.5, translate = 0.1, hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  int64_t seed = 0;
  bool deterministic = false;
  bool tf32 = false;  // f32 on CUDA: convolutions may use TF32 tensor cores (graph::PlanOptions::tf32)
  bool sync_bn = false;  // data-parallel ranks: BatchNorm's statistics over the job's batch (SyncBatchNorm)
  int64_t patience = 100;
  bool val = true;
  // How this invocation runs (not kept).
  std::string device = "auto";
  int64_t workers = 8;
  std::string cache = "none";  // decoded, resized training images kept in "ram", on "disk" or "none"
  std::string project = "runs/train";
  std::string name = "train";
  bool exist_ok = false;
  bool verbose = true;   // the header, the per-epoch lines and the final table on standard output
  bool progress = true;  // the per-batch progress line on standard error (when it is a terminal)
  // Continue a run: nullopt: a new run; "": project/name; else a run folder or its last.safetensors.
  std::optional<std::string> resume;
  // Data-parallel ranks (launched by mpirun or srun; vision/dist/communicator.h): the seconds a collective waits for
  // the other ranks before the job ends with an error (a rank that died or hangs).
  double dist_timeout = 1800;
  int64_t stop_after = 0;  // tests: stop as a stop request does after this many batches of this invocation (0: never)
};

// One field of TrainConfig as visit_train_config() describes it.
struct TrainField {
  const char* name;     // the JSON key and the Python keyword; the CLI's option is --name with '_' → '-'
  const char* help;
  bool kept;            // saved in args.json and checkpoints, restored by a resume
  const char* choices = nullptr;  // comma-separated allowed values of a string field (train_field_choices), nullptr: any
  double min = -std::numeric_limits<double>::infinity(), max = std::numeric_limits<double>::infinity();
  bool hidden = false;  // tests only: not in --help
};

// Calls f(field_reference, TrainField) for every field of `c` but `resume`, in one fixed order. `Config` is TrainConfig
// or const TrainConfig.
template <typename Config, typename F>
void visit_train_config(Config& c, F&& f) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  f(c.data, TrainField{"data", "data file (YAML or JSON: path, train, val, names)", true});
  f(c.scale, TrainField{"scale", "model scale: n, s, m, l or x", true, "n,s,m,l,x"});
  f(c.weights, TrainField{"weights", "start from these weights (a full checkpoint, or an ultralytics .pt) instead of scratch", true});
  f(c.reinit_classes, TrainField{"reinit_classes", "with weights of another number of classes: re-initialise the class heads, keep the rest", true});
  f(c.freeze, TrainField{"freeze", "freeze the first N layers", true, nullptr, 0, 23});
  f(c.epochs, TrainField{"epochs", "epochs", true, nullptr, 1, 1000000});
  f(c.batch, TrainField{"batch", "images per batch", true, nullptr, 1, 65536});
  f(c.imgsz, TrainField{"imgsz", "training image size (a multiple of 32)", true, nullptr, 1, inf});
  f(c.dtype, TrainField{"dtype", "compute dtype: bf16 (CUDA default), f16 (loss scaling) or f32 (CPU)", true, ",f32,bf16,f16"});
  f(c.optimizer, TrainField{"optimizer", "auto, SGD, AdamW or MuSGD", true, "auto,SGD,AdamW,MuSGD,sgd,adamw,musgd"});
  f(c.lr0, TrainField{"lr0", "initial learning rate (not with optimizer auto)", true, nullptr, 0, inf});
  f(c.lrf, TrainField{"lrf", "final learning rate, as a fraction of lr0", true, nullptr, 0, inf});
  f(c.momentum, TrainField{"momentum", "SGD momentum / AdamW beta1", true, nullptr, 0, 1});
  f(c.weight_decay, TrainField{"weight_decay", "weight decay", true, nullptr, 0, inf});
  f(c.warmup_epochs, TrainField{"warmup_epochs", "warmup epochs", true, nullptr, 0, inf});
  f(c.cos_lr, TrainField{"cos_lr", "cosine learning-rate decay instead of linear", true});
  f(c.nbs, TrainField{"nbs", "nominal batch size: gradients of nbs / batch batches are accumulated per step", true, nullptr, 1, inf});
  f(c.close_mosaic, TrainField{"close_mosaic", "turn mosaic off for the last N epochs", true, nullptr, 0, inf});
  f(c.mosaic, TrainField{"mosaic", "mosaic probability", true, nullptr, 0, 1});
  f(c.fliplr, TrainField{"fliplr", "horizontal flip probability", true, nullptr, 0, 1});
  f(c.scale_aug, TrainField{"scale_aug", "random scale gain (±)", true, nullptr, 0, 0.9});
  f(c.translate, TrainField{"translate", "random translation (± fraction)", true, nullptr, 0, 0.9});
  f(c.hsv_h, TrainField{"hsv_h", "hue gain (±, fraction)", true, nullptr, 0, 1});
  f(c.hsv_s, TrainField{"hsv_s", "saturation gain (±, fraction)", true, nullptr, 0, 1});
  f(c.hsv_v, TrainField{"hsv_v", "value gain (±, fraction)", true, nullptr, 0, 1});
  f(c.seed, TrainField{"seed", "random seed (data order and augmentation)", true, nullptr, 0, inf});
  f(c.deterministic, TrainField{"deterministic", "deterministic kernels: a run repeats bit for bit", true});
  f(c.tf32, TrainField{"tf32", "f32 on CUDA: let convolutions use TF32 tensor cores (faster, not exact f32)", true});
  f(c.sync_bn, TrainField{"sync_bn", "data-parallel ranks: BatchNorm's batch statistics over every rank's images (PyTorch's SyncBatchNorm); default: each rank's own, as ultralytics' DDP", true});
  f(c.patience, TrainField{"patience", "stop after N epochs without a better fitness (0: never)", true, nullptr, 0, inf});
  f(c.val, TrainField{"val", "validate the EMA weights after each epoch (without: best = last)", true});
  f(c.device, TrainField{"device", "auto, cpu or cuda", false, "auto,cpu,cuda"});
  f(c.workers, TrainField{"workers", "data loading threads", false, nullptr, 1, 256});
  f(c.cache, TrainField{"cache", "keep the decoded, resized training images in ram, on disk (files beside the images) or none", false, "none,ram,disk"});
  f(c.project, TrainField{"project", "folder of runs", false});
  f(c.name, TrainField{"name", "run name (NAME2, NAME3, … when it exists)", false});
  f(c.exist_ok, TrainField{"exist_ok", "write into project/name even when it exists", false});
  f(c.verbose, TrainField{"verbose", "print the header, each epoch's line and the final table", false});
  f(c.progress, TrainField{"progress", "a progress line per batch on standard error (a terminal only)", false});
  f(c.dist_timeout, TrainField{"dist_timeout", "data-parallel ranks: seconds a collective waits for the other ranks before the job ends", false, nullptr, 1, 1e6});
  f(c.stop_after, TrainField{"stop_after", "(tests) stop as Ctrl-C does after N batches", false, nullptr, 0, inf, true});
}

// A string field's allowed values (its `choices` split at commas; an empty item allows ""); empty: any value.
std::vector<std::string> train_field_choices(const TrainField& field);

// args.json's text: the kept fields (all of them with `all`), as a JSON object.
std::string train_config_json(const TrainConfig& c, bool all = false);
// Sets the fields named in a JSON object's text (a checkpoint's args: the kept ones only, with `kept_only`); throws
// vision::Error naming a field of the wrong type or, unless `ignore_unknown`, a key that is no field.
void read_train_config_json(TrainConfig& c, const std::string& json, bool kept_only = false, bool ignore_unknown = true);
// Throws vision::Error naming the first field whose value is not allowed (a choice, a range, imgsz not a multiple of
// 32, no data file without resume).
void validate_train_config(const TrainConfig& c);

// Progress after each batch (the epoch's running means).
struct BatchReport {
  int64_t epoch = 0, epochs = 0;    // 1-based
  int64_t batch = 0, batches = 0;   // 1-based
  double box = 0, cls = 0, l1 = 0;  // the epoch's mean losses so far (the one-to-one head's, as ultralytics logs)
  int64_t instances = 0;            // labels in this batch
  double seconds = 0;               // since the epoch started
  double images_per_second = 0;     // the epoch's so far
  double data_wait = 0;             // the fraction of the epoch so far spent waiting for the loader's batches
};

// After each epoch: its losses, the EMA weights' validation, the learning rate.
struct EpochReport {
  int64_t epoch = 0, epochs = 0;  // 1-based
  double box = 0, cls = 0, l1 = 0, lr = 0;
  eval::MetricsResult metrics;  // empty without validation
  std::vector<std::string> names;  // the dataset's class names (metrics.classes index them)
  double fitness = 0;           // 0.1·mAP50 + 0.9·mAP50-95
  bool best = false;            // the best fitness so far (written to best.safetensors)
  double seconds = 0, images_per_second = 0;
  double data_wait = 0;  // the fraction of the epoch's training time spent waiting for the loader's batches
};

struct TrainCallbacks {
  std::function<bool(const BatchReport&)> on_batch;  // after each batch; false: stop (save `last` and return)
  std::function<bool(const EpochReport&)> on_epoch;  // after each epoch is saved; false: end the run there
  const std::atomic<bool>* stop = nullptr;           // read after each batch; true: stop as on_batch's false does
};

struct TrainResult {
  std::filesystem::path run_dir, last, best;
  int64_t epochs_done = 0;  // epochs completed over the whole run (resumed ones too)
  int64_t best_epoch = -1;
  double best_fitness = 0;
  bool interrupted = false;    // stopped inside an epoch by a stop request: `last` holds the point to resume from
  bool stopped_early = false;  // patience ran out, or on_epoch returned false
  std::optional<eval::MetricsResult> best_metrics;  // the best weights' validation at the end (with val)
  std::vector<std::string> names;                   // the dataset's class names
  std::string message;         // the run's last line ("done in …", or how to resume)
};

// Runs (or resumes) the training run `config` describes. Throws vision::Error for a bad config, dataset or weights
// file, before anything is written.
//
// Launched as several ranks (`mpirun -np 4 vision train …`, `srun`; issue #30), each process trains on its shard of
// every epoch with `batch` / ranks images a batch, and the gradients are summed at each optimizer step, so every rank
// holds the same model. Rank 0 alone prints, validates and writes the run's files; the other ranks return its run
// folder and no metrics, and get no on_epoch calls. A stop request on any rank stops every rank after the same batch.
// An error on one rank ends the whole job (MPI_Abort) after printing it, since the others would wait for it.
TrainResult run_training(TrainConfig config, const TrainCallbacks& callbacks = {});

}  // namespace vision
