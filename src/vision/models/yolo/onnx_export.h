// ONNX export — YOLO26's inference graph as an ONNX model (the protobuf of Debian's libonnx), for ONNX Runtime,
// TensorRT, OpenVINO and the like.
//
// The model is the graph the engine runs, walked node by node (ops/ and the PSA ops mapped to standard ONNX ops):
// convolutions with BatchNorm folded (in float64, as `vision export` folds), SiLU as x·Sigmoid(x), the PSA attention
// as Reshape/Split/MatMul/Softmax, the nearest upsample as Resize; then the decode (the anchor grid an initializer of
// the exported size, or computed in the graph from the feature maps' shapes when the model is dynamic) and the output:
//   end-to-end (default), as ultralytics' YOLO26 export: output0 [B, K, 6] rows (x1, y1, x2, y2 in input pixels,
//     score, class) by descending score, K = min(max_det, anchors): the top K anchors by their best class logit, then
//     the top K of their K × nc (anchor, class) pairs (TopK and GatherElements, no NMS, no confidence threshold: the
//     caller keeps rows whose score passes its own);
//   raw: the one-to-many head as ultralytics' non-end-to-end export, output0 [B, 4 + nc, anchors]: boxes (cx, cy, w,
//     h) in input pixels, then the nc class scores (sigmoid), for the caller's NMS.
// Input "images" [B, 3, H, W] RGB in [0, 1] (letterboxed, as the engine's input). Metadata as ultralytics writes it:
// description, author, version, task, stride, batch, imgsz, names, end2end, channels.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>

#include "vision/core/safetensors.h"

namespace vision::models::yolo {

struct OnnxExportOptions {
  bool half = false;       // f16 weights, activations, input and output (GPU runtimes); f32 otherwise
  bool dynamic = false;    // batch, height and width symbolic (dim_params "batch", "height", "width")
  bool end2end = true;     // output0 [B, K, 6]; false: the raw one-to-many output [B, 4 + nc, anchors]
  int64_t opset = 17;      // 17 up to onnx_max_opset()
  std::array<int64_t, 2> imgsz = {0, 0};  // height, width (multiples of 32); 0: the model's own
  int64_t batch = 1;       // the batch of a static model
  int64_t max_det = 300;   // end-to-end rows per image (K = min(max_det, anchors))
  std::string producer_version;  // the engine's version, written as the producer's and in the metadata
};

struct OnnxExportSummary {
  std::string scale;
  int64_t nc = 0;
  int64_t opset = 0, nodes = 0, initializers = 0, parameters = 0, bytes = 0;
  std::string input, output;  // "images f32[1, 3, 640, 640]", "output0 f32[1, 300, 6]"
};

// The newest opset of the linked ONNX library (its checker and shape inference know the ops up to it).
int64_t onnx_max_opset();

// Builds the ONNX model of `model` (a full checkpoint, BatchNorm folded here, or an exported "fused" model; the raw
// output needs the one-to-many head, which only a full checkpoint has), checks it (onnx::checker, then strict shape
// inference with type checks, which must give output0 the shape declared), and writes it to `out` atomically.
// Throws vision::Error naming the option, the model's problem, or the checker's finding.
OnnxExportSummary export_onnx(const core::SafetensorsFile& model, const std::filesystem::path& out,
                              const OnnxExportOptions& options);

}  // namespace vision::models::yolo
