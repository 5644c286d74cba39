// YOLO26 weights in safetensors files, by ultralytics state_dict names: what a file holds (metadata), the loading
// rules, the export with BatchNorm folded, and initial weights (`vision init`).
//
// Two formats. A full checkpoint ("format": "full", or no format: tools/convert_ultralytics.py, `vision init`) has
// both Detect heads and every BatchNorm (weight, bias, running_mean, running_var, num_batches_tracked); it loads into
// a training model and into an inference model, whose missing head's tensors are ignored. An exported model
// ("format": "fused") has BatchNorm folded into each convolution's weight and a bias ("model.0.conv.bias") and the
// one-to-one head only, in f16 or f32; it loads into an inference model built with ConvNorm::folded.
//
// Metadata (strings): "scale" (n, s, m, l or x), "nc", "names" (a JSON list of nc class names), "imgsz" (JSON: a side
// or [height, width]), "stride" (JSON list, [8, 16, 32]), "format".
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/state.h"
#include "vision/models/yolo/model_info.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/train/checkpoint.h"

namespace vision::models::yolo {

// Loads the file into the state of a YOLO26 graph recorded with `spec` (any heads). First the file's model must be
// that one (its scale, nc and format: clear errors otherwise); then every state tensor must be in the file with its
// shape (floating tensors of any dtype are converted to f32); tensors of a Detect head the graph did not record are
// ignored, and so are a training checkpoint's "train.*" and "optimizer.*" tensors (train/checkpoint.h: its plain
// names hold the EMA weights); any other missing, unexpected or mis-shaped tensor is an error listing them all.
void load_weights(graph::StateStore& state, const Yolo26Spec& spec, const core::SafetensorsFile& file);

// Checks that a training checkpoint holds the YOLO26 model `spec` describes (scale and nc, via read_model_info): a
// mismatch is a vision::Error naming the file and both models.
void check_checkpoint_model(const train::Checkpoint& checkpoint, const Yolo26Spec& spec);
// check_checkpoint_model, then the live model (or the EMA's weights with use_ema) into a YOLO26 state (load_weights).
void load_checkpoint_model(graph::StateStore& state, const Yolo26Spec& spec, const train::Checkpoint& checkpoint,
                           bool use_ema = false);

// An exported model from a full checkpoint: each Conv's BatchNorm folded into its convolution in float64 (weight·γ/σ,
// bias β − μ·γ/σ, σ = sqrt(running_var + 1e-3)), the one-to-many head dropped, tensors in dtype (f32 or f16),
// metadata with format "fused". both_heads keeps the one-to-many head too (folded the same way: the ONNX export's raw
// output). Throws for a file that is not a full checkpoint.
struct ExportedWeights {
  std::vector<std::pair<std::string, core::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};
ExportedWeights fold_batchnorm(const core::SafetensorsFile& full, core::DType dtype = core::DType::f32,
                               bool both_heads = false);

// Sets the biases YOLO26 initialises in the last convolution of every Detect branch the state has: box 2.0, class
// log(5 / nc / (640 / stride)²).
void init_detect_biases(graph::StateStore& state, const Yolo26Spec& spec);

// A full checkpoint of initial weights: the ops' default initialisation (deterministic, seeded by each tensor's name:
// convolutions uniform ±1/sqrt(fan_in), BatchNorm γ 1, β 0, statistics 0 and 1) and YOLO26's Detect biases.
// initial_weights returns it in memory (host tensors and the metadata, as read_safetensors would return the file);
// write_initial_weights writes it.
core::SafetensorsFile initial_weights(const ModelInfo& info);
void write_initial_weights(const std::filesystem::path& path, const ModelInfo& info);

}  // namespace vision::models::yolo
