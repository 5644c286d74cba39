// results.png of a training run (vision/trainer.h): one small line chart per column of results.csv (the losses, P, R, mAP50, mAP50-95,
// fitness and lr against the epoch), drawn into an 8-bit image with the default font for the titles, and written as
// PNG. Without a font the charts are drawn without titles.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"
#include "vision/data/image.h"
#include "vision/eval/metrics.h"

namespace vision::eval {

// Reads results.csv (a header line, then numbers) and writes the chart image; a CSV with no rows writes nothing.
// Throws vision::Error when the file cannot be read or the image cannot be written.
void write_results_plot(const std::filesystem::path& csv, const std::filesystem::path& png);

// PR_curve.png: each class's precision-recall curve at IoU 0.5 (grey) and their mean (blue, thick), titled with the
// mAP50; the legend names the classes when there are at most 10.
void write_pr_curve(const eval::MetricsResult& result, std::span<const std::string> names,
                    const std::filesystem::path& png);

// A grid (2 × 2 at most) of the first images with their detections drawn (vision/data/annotate.h), written as JPEG.
void write_prediction_grid(std::span<const data::Image> images, std::span<const std::vector<data::Detection>> found,
                           std::span<const std::string> names, const std::filesystem::path& jpg);

}  // namespace vision::eval
