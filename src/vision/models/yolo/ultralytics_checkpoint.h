// YOLO26 weights straight from an ultralytics checkpoint (.pt), without PyTorch: the same core::SafetensorsFile that
// tools/convert_ultralytics.py would have written and read_safetensors would have returned, so every model-reading
// path takes a .pt as it takes a safetensors file (read_model_file).
//
// The model is the checkpoint's "ema" when it is not None (a training checkpoint, last.pt / best.pt while training),
// else its "model" (a stripped checkpoint: the released yolo26n.pt, a final best.pt), or the pickled object itself
// when it is a module. Its state_dict is rebuilt as PyTorch's Module.state_dict() builds it: per module, its
// _parameters, then its _buffers (less _non_persistent_buffers_set), then its _modules in order, dotted
// ("model.10.m.0.attn.qkv.conv.weight"); None entries are skipped; tensors keep their dtype (ultralytics stores f16,
// num_batches_tracked i64). Metadata as the converter writes it: format "full" when a BatchNorm is present (a ".bn."
// key), else "fused" (a model saved after ultralytics' fuse()); scale from the model's yaml ("scale", else the
// "yolo26n.yaml" file name; absent otherwise, and read_model_info tells it from the tensors); nc from the one-to-one
// head's class convolution; names from model.names (a dict {index: name} or a list); imgsz from the checkpoint's
// train_args, else the model's args (640 without either); stride from model.stride; source (the file name) and
// ultralytics_version; the values are the converter's to the byte (JSON lists as Python writes them). Tensors are
// ordered as a written file's data (element size, then name).
//
// The module tree is walked with bounds: at most 64 levels and 2^20 module visits (a tree whose submodules are shared
// or cyclic cannot make the walk exponential or endless). Errors name the file and what is wrong.
#pragma once

#include <filesystem>

#include "vision/core/safetensors.h"
#include "vision/core/torch_checkpoint.h"

namespace vision::models::yolo {

core::SafetensorsFile ultralytics_weights(const core::TorchCheckpoint& checkpoint);
core::SafetensorsFile read_ultralytics_checkpoint(const std::filesystem::path& path);

// A YOLO26 weights file, told apart by its first bytes: a zip archive ("PK\3\4") is read as an ultralytics
// checkpoint, anything else as safetensors (or, named *.pt / *.pth, by the checkpoint reader, for its errors). A
// PyTorch checkpoint of the legacy format (PyTorch < 1.6, not a zip) is refused with what to do. Every path that
// reads a model file (predict, val, export, bench, train --weights, vision::Detector, Yolo26Model::load) reads it
// through this.
core::SafetensorsFile read_model_file(const std::filesystem::path& path);

}  // namespace vision::models::yolo
