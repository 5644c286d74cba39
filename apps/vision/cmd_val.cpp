// vision val — the detection metrics of a YOLO26 model on a split of a YOLO-format dataset (vision/data/dataset.h):
// vision::Detector over the split's images (decoded on worker threads as predict does), each image's detections and
// labels into eval::DetectionMetrics, then ultralytics' table. An unreadable image or a bad label line is reported,
// counted and skipped; the run goes on and still exits 0.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.h"
#include "image_loading.h"
#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/detector.h"
#include "vision/eval/metrics.h"
#include "vision/eval/plots.h"

namespace vision::cli {
namespace {

struct ValOptions {
  std::string model;
  std::string data;
  std::string split = "val";
  int64_t imgsz = 0;  // 0: the model's
  int64_t batch = 16;
  float conf = 0.001f;
  float iou = 0.7f;
  int64_t max_det = 300;
  bool nms = false;
  std::string device = "auto";
  std::string dtype;
  std::string save_json;
  std::string plots;  // folder for PR_curve.png and val_pred.jpg
  int64_t workers = 0;
  int64_t max_pixels = data::kDefaultMaxPixels;
  bool quiet = false;
};

double round_to(double v, int decimals) {
  const double f = std::pow(10.0, decimals);
  return std::round(v * f) / f;
}

// COCO's image_id: the file stem, as a number when it is all digits.
nlohmann::json image_id(const fs::path& image) {
  const std::string stem = image.stem().string();
  const bool numeric = !stem.empty() && stem.size() <= 18 &&
                       std::all_of(stem.begin(), stem.end(), [](unsigned char c) { return std::isdigit(c); });
  if (numeric) return std::stoll(stem);
  return stem;
}

int run_val(const ValOptions& o) {
  std::error_code ec;
  VISION_CHECK(fs::is_regular_file(o.model, ec), "--model {}: no such file", o.model);
  VISION_CHECK(fs::is_regular_file(o.data, ec), "--data {}: no such file", o.data);
  if (!o.plots.empty()) {  // before the run, so that a bad folder does not waste it
    std::error_code ec;
    fs::create_directories(o.plots, ec);
    VISION_CHECK(!ec && fs::is_directory(o.plots, ec), "--plots {}: cannot create the folder: {}", o.plots,
                 ec ? ec.message() : "a file of that name exists");
  }
  const data::Dataset dataset = data::load_dataset(o.data, o.split);
  const std::vector<std::string>& names = dataset.config.names;

  DetectorOptions options;
  options.device = o.device;
  if (!o.dtype.empty()) options.dtype = core::parse_dtype(o.dtype);
  if (o.imgsz > 0) options.imgsz = std::array<int64_t, 2>{o.imgsz, o.imgsz};
  options.conf = o.conf;
  options.max_det = o.max_det;
  options.nms = o.nms;
  options.iou = o.iou;
  Detector detector(o.model, options);
  VISION_CHECK(detector.info().spec.nc == dataset.config.nc(),
               "--model {} has {} classes but the dataset {} has {}: validate a model trained on this dataset",
               o.model, detector.info().spec.nc, o.data, dataset.config.nc());

  if (!o.quiet)
    fmt::print(stderr, "vision val: YOLO26{} on {} in {}, {} split of {}: {} images, {} labels ({} label files)\n",
               models::yolo::scale_name(detector.info().spec.scale), detector.device(),
               core::dtype_name(detector.dtype()), o.split, o.data, dataset.counts.images, dataset.counts.instances,
               dataset.counts.label_files);
  if (!dataset.cache_problem.empty())
    fmt::print(stderr, "vision val: warning: label cache {}\n", dataset.cache_problem);
  for (const std::string& p : dataset.problems) fmt::print(stderr, "vision val: skipped label line {}\n", p);

  std::vector<fs::path> paths;
  for (const data::Sample& s : dataset.samples) paths.push_back(s.image);
  const size_t workers =
      o.workers > 0 ? static_cast<size_t>(o.workers) : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  data::DecodeOptions decode;
  decode.max_pixels = o.max_pixels;
  Prefetcher prefetch(paths, workers, std::max<size_t>(2 * static_cast<size_t>(o.batch), workers), decode);
  Progress progress("val", paths.size(), !o.quiet);

  eval::DetectionMetrics metrics(dataset.config.nc());
  nlohmann::json coco = nlohmann::json::array();
  size_t next_sample = 0, done = 0, skipped = 0;
  std::vector<std::pair<size_t, data::Image>> batch;  // (sample index, pixels)
  std::vector<data::Image> shown;                     // the first images, for val_pred.jpg
  std::vector<std::vector<data::Detection>> shown_found;
  auto flush = [&] {
    if (batch.empty()) return;
    std::vector<data::Image> pixels;
    for (auto& b : batch) pixels.push_back(std::move(b.second));
    const std::vector<std::vector<data::Detection>> found = detector.detect(pixels);
    for (size_t i = 0; i < batch.size(); ++i) {
      const data::Sample& sample = dataset.samples[batch[i].first];
      const std::vector<eval::GroundTruth> labels =
          data::to_pixels(sample.labels, pixels[i].width, pixels[i].height);
      metrics.add_image(found[i], labels);
      if (!o.plots.empty() && shown.size() < 4) {
        std::vector<data::Detection> confident;
        for (const data::Detection& d : found[i])
          if (d.score >= 0.25f) confident.push_back(d);
        shown.push_back(pixels[i]);
        shown_found.push_back(std::move(confident));
      }
      if (!o.save_json.empty()) {
        const nlohmann::json id = image_id(sample.image);
        for (const data::Detection& d : found[i])
          coco.push_back({{"image_id", id},
                          {"category_id", d.cls},
                          {"bbox",
                           {round_to(d.box[0], 3), round_to(d.box[1], 3), round_to(d.box[2] - d.box[0], 3),
                            round_to(d.box[3] - d.box[1], 3)}},
                          {"score", round_to(d.score, 5)}});
      }
    }
    done += batch.size();
    progress.update(done + skipped);
    batch.clear();
  };
  while (!prefetch.done()) {
    Loaded l = prefetch.next();
    for (const std::string& w : l.warnings) progress.message(fmt::format("vision val: warning: {}", w));
    const size_t index = next_sample++;
    if (!l.error.empty()) {
      ++skipped;
      progress.message(fmt::format("vision val: skipped {}", l.error));
      progress.update(done + skipped);
      continue;
    }
    batch.emplace_back(index, std::move(l.image));
    if (batch.size() == static_cast<size_t>(o.batch)) flush();
  }
  flush();

  const eval::MetricsResult result = metrics.compute();
  fmt::print("{}", eval::format_table(result, names));
  const data::DatasetCounts& c = dataset.counts;
  fmt::print("vision val: {} of {} images evaluated, {} skipped (unreadable); {} labels, {} bad label line{} "
             "skipped, {} image{} without a label file\n",
             done, paths.size(), skipped, c.instances, c.bad_lines, c.bad_lines == 1 ? "" : "s", c.missing_labels,
             c.missing_labels == 1 ? "" : "s");
  if (skipped > 0 || c.bad_lines > 0)
    fmt::print("vision val: note: the metrics leave out the skipped images and label lines (see the messages above)\n");

  if (!o.plots.empty()) {
    eval::write_pr_curve(result, names, fs::path(o.plots) / "PR_curve.png");
    eval::write_prediction_grid(shown, shown_found, names, fs::path(o.plots) / "val_pred.jpg");
    fmt::print("vision val: PR_curve.png and val_pred.jpg (predictions with score ≥ 0.25) written to {}\n", o.plots);
  }
  if (!o.save_json.empty()) {
    const std::string text = coco.dump() + "\n";
    data::write_file(o.save_json, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    fmt::print("vision val: {} detections written to {} (COCO format)\n", coco.size(), o.save_json);
  }
  if (done == 0) {
    fmt::print(stderr, "vision val: error: none of the {} images could be read\n", paths.size());
    return 1;
  }
  return 0;
}

}  // namespace

void add_val_command(CLI::App& app) {
  auto opts = std::make_shared<ValOptions>();
  CLI::App* cmd = app.add_subcommand("val", "Detection metrics (P, R, mAP50, mAP50-95) of a model on a dataset");
  cmd->add_option("--model", opts->model,
                  "weights file (safetensors: a checkpoint or an exported model; or an ultralytics .pt checkpoint)")
      ->required();
  cmd->add_option("--plots", opts->plots, "write PR_curve.png and val_pred.jpg (the first images' predictions) here");
  cmd->add_option("--data", opts->data, "the dataset's data file (.yaml or .json, ultralytics' keys)")->required();
  cmd->add_option("--split", opts->split, "the split to evaluate")
      ->check(CLI::IsMember({"train", "val", "test"}))
      ->capture_default_str();
  cmd->add_option("--imgsz", opts->imgsz, "input size, a multiple of 32 (default: the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opts->batch, "images per model call")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--conf", opts->conf, "confidence threshold")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--iou", opts->iou, "NMS IoU threshold (with --nms)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--max-det", opts->max_det, "most detections per image")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_flag("--nms", opts->nms, "the one-to-many head and NMS instead of the end-to-end head");
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "compute dtype: f16 (CUDA default), bf16 or f32 (the CPU's)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  cmd->add_option("--save-json", opts->save_json, "write the detections to this file in COCO's results format");
  cmd->add_option("--workers", opts->workers, "image decoding threads, a fixed pool (default: the cores, at most 8)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-pixels", opts->max_pixels,
                  "refuse images of more pixels (width x height) than this, before decoding them")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_flag("--quiet", opts->quiet, "no progress bar or header on standard error");
  cmd->callback([opts] {
    if (const int rc = run_val(*opts); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vision::cli
