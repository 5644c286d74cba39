// vision::Detector — the engine's public API for detection: load a YOLO26 weights file, choose the device and the
// dtype, and detect objects in decoded images; boxes come back in each image's own pixels.
//
//   vision::Detector detector("yolo26n.safetensors", {.device = "cuda", .conf = 0.25f});
//   for (const vision::data::Detection& d : detector.detect(vision::data::read_image("bus.jpg")))
//     std::printf("%s %.2f\n", detector.names()[d.cls].c_str(), d.score);
//
// Preprocessing is ultralytics' predict (YOLO26.md): the letterbox to imgsz (the model's training size unless
// given), with the minimal stride-aligned padding when every image of a call has the same size, else the whole
// imgsz; grey 114 padding, RGB / 255. On CUDA it runs on the GPU (the 8-bit images are uploaded and letterboxed,
// normalised and converted to the plan's input format by one kernel each), on the CPU on the host; both give the
// model the same input values. The model's plans (one per input size and batch, at most 8) are CUDA graphs replayed
// on CUDA. A Detector is not thread-safe: use one per thread (tests/api/test_detector_input.cpp runs one per thread
// at once and checks each gives the single-threaded detections).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/data/detection.h"
#include "vision/data/image.h"
#include "vision/data/yuv.h"

namespace vision {

// The engine's own types, used by the engine's callers (a trainer's weights in memory); a program using the public
// API needs neither.
namespace core {
struct SafetensorsFile;
}
namespace models::yolo {
struct ModelInfo;
}

struct DetectorOptions {
  std::string device = "auto";              // "auto" (CUDA when a usable GPU is present), "cpu" or "cuda"
  std::optional<core::DType> dtype = {};    // CUDA: f16 (default), bf16 or f32; the CPU: f32
  std::optional<std::array<int64_t, 2>> imgsz = {};  // target height, width (multiples of 32); the model's if unset
  float conf = 0.25f;                       // keep detections with score > conf
  int64_t max_det = 300;                    // at most this many per image
  std::vector<int64_t> classes = {};        // keep only these classes; empty: all
  bool nms = false;                         // the one-to-many head and NMS instead of the end-to-end head
  float iou = 0.7f;                         // NMS IoU threshold
  int threads = 0;  // the CPU: threads per call (OpenMP and oneDNN); 0: every core (or OMP_NUM_THREADS)
};

// Where the time of the last detect() went, in milliseconds (wall clock, the whole batch).
struct DetectTiming {
  double preprocess = 0, inference = 0, postprocess = 0;
};

class Detector {
 public:
  // `model`: a safetensors weights file or an ultralytics .pt checkpoint (models/yolo/ultralytics_checkpoint.h:
  // read_model_file). Throws vision::Error naming the file or the option for a missing or invalid weights file, an
  // image size that is not a multiple of 32, an unknown device or dtype, or a device that is not available.
  explicit Detector(const std::filesystem::path& model, const DetectorOptions& options = {});
  // The same from a weights file already in memory (a trainer's EMA weights: Yolo26Trainer::weights()).
  explicit Detector(const core::SafetensorsFile& weights, const DetectorOptions& options = {});
  ~Detector();
  // Movable; a moved-from Detector throws vision::Error from every call but destruction and assignment.
  Detector(Detector&&) noexcept;
  Detector& operator=(Detector&&) noexcept;

  const std::vector<std::string>& names() const;  // the nc class names
  std::string scale() const;                      // "n", "s", "m", "l" or "x"
  int64_t nc() const;
  bool fused() const;                             // an exported model (BatchNorm folded, the one-to-one head only)
  const models::yolo::ModelInfo& info() const;    // all of it (models/yolo/weights.h)
  const DetectorOptions& options() const;
  std::string device() const;     // "cpu" or "cuda"
  core::DType dtype() const;      // the plan's compute dtype
  std::array<int64_t, 2> imgsz() const;

  // Detections per image (RGB, 3 channels, any size), by descending score, boxes in the image's pixels clipped to
  // it. All images of one call run as one batch.
  std::vector<std::vector<data::Detection>> detect(std::span<const data::Image> images);
  std::vector<data::Detection> detect(const data::Image& image);
  // The same from caller-owned pixels (RGB or BGR, any row stride: data::ImageView), read in place: on the CPU the
  // letterbox reads them directly; on CUDA contiguous RGB is uploaded as it is, anything else packed to RGB first.
  std::vector<std::vector<data::Detection>> detect(std::span<const data::ImageView> images);
  std::vector<data::Detection> detect(const data::ImageView& image);
  // The same from video frames as decoded: YUV 4:2:0 planes (data/yuv.h), in host or (NVDEC) device memory. On CUDA
  // the planes are uploaded as they are (half the bytes of RGB; device planes are read in place) and converted in the
  // letterbox kernel; on the CPU each frame is converted first (data::yuv420_to_rgb, the kernel's twin). Either way the
  // model sees letterbox(yuv420_to_rgb(frame)).
  std::vector<std::vector<data::Detection>> detect(std::span<const data::Yuv420View> frames);

  const DetectTiming& last_timing() const;

  // Replaces the model's weights with another file's of the same model (scale, nc, format): validation during
  // training, each epoch's EMA weights into the same plans. Throws naming both models when they differ.
  void set_weights(const core::SafetensorsFile& weights);

 private:
  struct Impl;
  Impl& impl() const;  // throws for a moved-from Detector
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision
