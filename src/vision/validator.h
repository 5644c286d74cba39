// vision::run_validation — the detection metrics of a YOLO26 model on a split of a YOLO-format dataset, as `vision val`
// and the Python `YOLO.val` compute them: vision::Detector over the split's images (decoded on worker threads,
// data/prefetch.h), each image's detections and labels into eval::DetectionMetrics, then ultralytics' table. An
// unreadable image or a bad label line is reported, counted and skipped; the run goes on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vision/data/image.h"
#include "vision/eval/metrics.h"

namespace vision {

struct ValConfig {
  std::string model;           // weights: a checkpoint, an exported model or an ultralytics .pt
  std::string data;            // the dataset's data file (.yaml or .json)
  std::string split = "val";   // train, val or test
  int64_t imgsz = 0;           // 0: the model's
  int64_t batch = 16;          // images per model call, 1–1024
  float conf = 0.001f;
  float iou = 0.7f;            // NMS IoU threshold (with nms)
  int64_t max_det = 300;
  bool nms = false;            // the one-to-many head and NMS instead of the end-to-end head
  std::string device = "auto";
  std::string dtype;           // "": f16 on CUDA, f32 on the CPU
  int threads = 0;             // the CPU: threads for the model (OpenMP, oneDNN); 0: every core
  std::string save_json;       // write the detections here in COCO's results format ("": not)
  std::string plots;           // write PR_curve.png and val_pred.jpg into this folder ("": not)
  int64_t workers = 0;         // decoding threads; 0: the cores, at most 8
  int64_t max_pixels = data::kDefaultMaxPixels;
  bool verbose = true;         // the header, the table and the counts on standard output
  bool progress = true;        // the header and the progress bar (a terminal only) on standard error
};

struct ValResult {
  eval::MetricsResult metrics;
  std::vector<std::string> names;  // the dataset's class names
  std::string table;               // ultralytics' table (eval::format_table)
  int64_t images = 0, evaluated = 0, skipped = 0;  // the split's images; those evaluated; unreadable ones skipped
  int64_t bad_label_lines = 0, missing_labels = 0;
  double seconds = 0;
};

// Throws vision::Error for a missing model or data file, a model of another number of classes than the dataset, a bad
// option, or a plots folder that cannot be made (before the run); a split none of whose images can be read gives a
// result with evaluated == 0.
ValResult run_validation(const ValConfig& config);

}  // namespace vision
