// vision-cpp's public API in one include: detection (Detector), a training run (run_training), validation
// (run_validation), export (export_model), images, video (data::VideoReader / VideoWriter: files, streams, cameras),
// datasets, metrics, errors and the version. Installed under
// <prefix>/include; a program needs -I<prefix>/include and links vision::vision (CMake) or `pkg-config --libs vision`.
#pragma once

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/data/detection.h"
#include "vision/data/image.h"
#include "vision/data/video.h"
#include "vision/detector.h"
#include "vision/eval/metrics.h"
#include "vision/exporter.h"
#include "vision/trainer.h"
#include "vision/validator.h"
#include "vision/version.h"
