#include "vision/validator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/progress.h"
#include "vision/data/dataset.h"
#include "vision/data/prefetch.h"
#include "vision/detector.h"
#include "vision/eval/metrics.h"
#include "vision/eval/plots.h"

namespace vision {
namespace {

namespace fs = std::filesystem;

double round_decimals(double v, int decimals) {
  const double f = std::pow(10.0, decimals);
  return std::round(v * f) / f;
}

// COCO's image_id: the file stem, as a number when it is all digits.
nlohmann::json coco_image_id(const fs::path& image) {
  const std::string stem = image.stem().string();
  const bool numeric = !stem.empty() && stem.size() <= 18 &&
                       std::all_of(stem.begin(), stem.end(), [](unsigned char c) { return std::isdigit(c); });
  if (numeric) return std::stoll(stem);
  return stem;
}

}  // namespace

ValResult run_validation(const ValConfig& o) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  VISION_CHECK(fs::is_regular_file(o.model, ec), "model {}: no such file", o.model);
  VISION_CHECK(fs::is_regular_file(o.data, ec), "data {}: no such file", o.data);
  VISION_CHECK(o.split == "train" || o.split == "val" || o.split == "test", "split '{}' is not one of train, val, test",
               o.split);
  VISION_CHECK(o.batch >= 1 && o.batch <= 1024, "batch {} is out of range (allowed: 1 to 1024)", o.batch);
  VISION_CHECK(o.max_det >= 1 && o.max_det <= 4096, "max_det {} is out of range (allowed: 1 to 4096)", o.max_det);
  VISION_CHECK(o.conf >= 0 && o.conf <= 1 && o.iou >= 0 && o.iou <= 1, "conf ({}) and iou ({}) must be in 0 to 1", o.conf,
               o.iou);
  VISION_CHECK(o.workers >= 0 && o.max_pixels >= 1, "workers ({}) must be 0 or more and max_pixels ({}) positive", o.workers,
               o.max_pixels);
  if (!o.plots.empty()) {  // before the run, so that a bad folder does not waste it
    std::error_code ec;
    fs::create_directories(o.plots, ec);
    VISION_CHECK(!ec && fs::is_directory(o.plots, ec), "plots {}: cannot create the folder: {}", o.plots,
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
  options.threads = o.threads;
  Detector detector(o.model, options);
  VISION_CHECK(detector.nc() == dataset.config.nc(),
               "model {} has {} classes but the dataset {} has {}: validate a model trained on this dataset",
               o.model, detector.nc(), o.data, dataset.config.nc());

  if (o.verbose && o.progress)
    fmt::print(stderr, "vision val: YOLO26{} on {} in {}, {} split of {}: {} images, {} labels ({} label files)\n",
               detector.scale(), detector.device(),
               core::dtype_name(detector.dtype()), o.split, o.data, dataset.counts.images, dataset.counts.instances,
               dataset.counts.label_files);
  if (!dataset.cache_problem.empty())
    fmt::print(stderr, "vision val: warning: label cache {}\n", dataset.cache_problem);
  for (const std::string& p : dataset.problems) fmt::print(stderr, "vision val: skipped label line {}\n", p);

  std::vector<fs::path> paths;
  for (const data::Sample& s : dataset.samples) paths.push_back(s.image);
  const size_t workers =
      o.workers > 0 ? static_cast<size_t>(o.workers) : data::default_decode_workers();
  data::DecodeOptions decode;
  decode.max_pixels = o.max_pixels;
  data::Prefetcher prefetch(paths, workers, std::max<size_t>(2 * static_cast<size_t>(o.batch), workers), decode);
  core::ProgressBar progress("val", paths.size(), o.progress);

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
        const nlohmann::json id = coco_image_id(sample.image);
        for (const data::Detection& d : found[i])
          coco.push_back({{"image_id", id},
                          {"category_id", d.cls},
                          {"bbox",
                           {round_decimals(d.box[0], 3), round_decimals(d.box[1], 3), round_decimals(d.box[2] - d.box[0], 3),
                            round_decimals(d.box[3] - d.box[1], 3)}},
                          {"score", round_decimals(d.score, 5)}});
      }
    }
    done += batch.size();
    progress.update(done + skipped);
    batch.clear();
  };
  while (!prefetch.done()) {
    data::Loaded l = prefetch.next();
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

  ValResult r;
  r.metrics = metrics.compute();
  r.names = names;
  r.table = eval::format_table(r.metrics, names);
  const data::DatasetCounts& c = dataset.counts;
  r.images = static_cast<int64_t>(paths.size()), r.evaluated = static_cast<int64_t>(done);
  r.skipped = static_cast<int64_t>(skipped), r.bad_label_lines = c.bad_lines, r.missing_labels = c.missing_labels;
  if (o.verbose) {
    fmt::print("{}", r.table);
    fmt::print("vision val: {} of {} images evaluated, {} skipped (unreadable); {} labels, {} bad label line{} "
               "skipped, {} image{} without a label file\n",
               done, paths.size(), skipped, c.instances, c.bad_lines, c.bad_lines == 1 ? "" : "s", c.missing_labels,
               c.missing_labels == 1 ? "" : "s");
    if (skipped > 0 || c.bad_lines > 0)
      fmt::print("vision val: note: the metrics leave out the skipped images and label lines (see the messages above)\n");
  }
  if (!o.plots.empty()) {
    eval::write_pr_curve(r.metrics, names, fs::path(o.plots) / "PR_curve.png");
    eval::write_prediction_grid(shown, shown_found, names, fs::path(o.plots) / "val_pred.jpg");
    if (o.verbose)
      fmt::print("vision val: PR_curve.png and val_pred.jpg (predictions with score ≥ 0.25) written to {}\n", o.plots);
  }
  if (!o.save_json.empty()) {
    const std::string text = coco.dump() + "\n";
    data::write_file(o.save_json, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    if (o.verbose) fmt::print("vision val: {} detections written to {} (COCO format)\n", coco.size(), o.save_json);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace vision
