// vision::export_model — a full YOLO26 checkpoint → the fused inference model (BatchNorm folded into each convolution,
// the one-to-one head only, f16 or f32, with its metadata: format "fused"), written atomically; and vision::export_onnx
// — a model → an ONNX model that ONNX Runtime, TensorRT or OpenVINO run (models/yolo/onnx_export.h says what it
// holds). `vision export` and the Python `YOLO.export` call them.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>

namespace vision {

struct ExportSummary {
  std::filesystem::path out;
  std::string format;  // "safetensors" or "onnx"
  std::string scale, dtype;
  int64_t nc = 0, tensors = 0, values = 0, bytes = 0;
  // ONNX only: the opset, the number of nodes, and the input's and output's names, dtypes and shapes.
  int64_t opset = 0, nodes = 0;
  std::string input, output;
  int64_t calibration_images = 0;  // int8 only
};

// `dtype`: "f16" or "f32". Throws vision::Error for a missing or invalid model, an already exported one, another
// dtype, or `out` naming the input itself.
ExportSummary export_model(const std::filesystem::path& model, const std::filesystem::path& out,
                           const std::string& dtype = "f16");

// Post-training int8 quantisation for the CPU (issue #31): the exported f32 model (BatchNorm folded) with, in its
// metadata "int8_absmax", the largest |input| of every convolution over `images` images of the dataset's `split`
// (letterboxed to `imgsz`, the model's when 0). On the CPU every convolution of that model then runs oneDNN's int8
// kernels (s8 activations and weights); on CUDA it runs as the f32 model. `model`: a full checkpoint or an exported
// model (f16 or f32). Throws vision::Error for a bad option, a dataset without readable images, or `out` naming the
// input.
struct Int8Options {
  std::string data;           // the dataset's data file (.yaml or .json)
  std::string split = "train";
  int64_t images = 64;        // calibration images (the split's first ones, in order)
  int64_t imgsz = 0;
  // Each convolution's range: the largest |input| seen (1), or where this share of the |inputs| lies below. On the
  // bundled model (500 val images, mAP50-95 0.954 in f32): 1 → 0.945, 0.9999 → 0.944, 0.999 → 0.949, 0.998 → 0.941,
  // 0.995 → 0.879: the largest is the safe default.
  double percentile = 1.0;
};
ExportSummary export_int8(const std::filesystem::path& model, const std::filesystem::path& out,
                          const Int8Options& options);

struct OnnxOptions {
  bool half = false;     // f16 weights, input and output (GPU runtimes)
  bool dynamic = false;  // batch, height and width symbolic
  bool end2end = true;   // output0 [B, K, 6] (x1, y1, x2, y2, score, class); false: raw [B, 4 + nc, anchors]
  int64_t opset = 17;
  std::array<int64_t, 2> imgsz = {0, 0};  // height, width; 0: the model's
  int64_t batch = 1;      // of a static model
  int64_t max_det = 300;  // end-to-end rows per image
};

// The newest ONNX opset export_onnx writes (that of the linked ONNX library), 0 in a build without ONNX.
int64_t onnx_max_opset();

// `model`: a full checkpoint, an exported model or an ultralytics .pt. Throws vision::Error for a bad option, a model
// that cannot give the output asked for, `out` naming the input, or a build without ONNX (-DVISION_ONNX=OFF).
ExportSummary export_onnx(const std::filesystem::path& model, const std::filesystem::path& out,
                          const OnnxOptions& options = {});

}  // namespace vision
