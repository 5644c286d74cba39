// Post-training int8 quantisation of YOLO26 for the CPU (issue #31): the calibration (the largest |input| of every
// convolution over a set of images) and the graph transform that gives each convolution its calibration
// (ops::Conv2dAttrs::int8_absmax: oneDNN's int8 convolutions in the CPU's NHWC plans). vision::export_int8 writes
// the calibration into an exported model's metadata ("int8_absmax"); Yolo26Model applies it on the CPU.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/graph.h"

namespace vision::models::yolo {

// Gives every convolution node named in `absmax` that calibration; other nodes are unchanged. Throws naming a
// calibrated name that is no convolution of the graph.
void apply_int8(graph::Graph& g, const std::map<std::string, float>& absmax);

// Whether convolution node `node` stays in floating point in an int8 model: the detect head's box branches (on the
// bundled model, quantising them too cost 0.017 of mAP50-95 on its validation split, the rest together 0.009).
bool int8_keeps_float(const std::string& node);

// The largest |input| of each convolution (but those int8_keeps_float keeps) of the inference graph of `weights` (an exported f32 model: format
// "fused") over the calibration batches (normalised images [B, 3, H, W], f32 host tensors of one layout), run on the
// CPU in floating point. Throws for no batch, or a model that is not an exported f32 one.
// percentile < 1: the range ends where that share of the |values| lies below (e.g. 0.9999), not at the largest.
std::map<std::string, float> calibrate_int8(const core::SafetensorsFile& weights,
                                            const std::vector<core::Tensor>& batches, double percentile = 1.0);

}  // namespace vision::models::yolo
