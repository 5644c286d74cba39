// Training checkpoints (issue #15, the storage part): everything a run needs to resume — the live model, its EMA,
// the optimizer's state and the run's counters, arguments and RNG states — in ONE safetensors file, written
// atomically, that is at the same time a full YOLO26 weights file (weights.h) which inference loads as it is.
//
// File layout (the ultralytics way: the EMA is what inference should use):
//   KEY              the inference weights under their plain ultralytics names: every parameter and buffer of the
//                    model, the EMA's value where the EMA has the key (its floating state), the live model's for the
//                    others (num_batches_tracked); the live model's when the checkpoint has no EMA.
//   "train.KEY"      with an EMA only: the live model's value of every key the EMA averages.
//   "optimizer.NAME" the optimizer's state_dict (Optimizer::state_dict names; "optimizer." is added when missing).
//   metadata         the model's metadata as given (weights_metadata(info): scale, nc, names, imgsz, stride), plus
//                    "checkpoint" = {"version": 1, "ema": true|false} and "training" = the TrainingState as JSON.
// load_weights (so Yolo26Model::load and vision::Detector) skips the "train." and "optimizer." tensors, so a
// checkpoint loads into an inference model with the EMA weights; read_checkpoint splits the groups back. (Loading
// a checkpoint into a YOLO26 model: models/yolo/weights.h, load_checkpoint_model.)
//
// Atomicity: write_safetensors writes "<path>.tmp.<pid>", fsyncs it and renames it over path, so a writer killed at
// any moment (SIGKILL, power loss after the rename's directory entry is durable) leaves the previous checkpoint
// intact. A killed writer's temporary file stays behind; write_checkpoint first removes the temporaries
// "<path>.tmp.<pid>" next to path whose pid is no live process on this machine (a temporary of a live writer — a
// second process writing the same path — is left alone; on a file system shared between machines a pid may name
// another machine's process, so such a stale file may be removed late or not at all, but it never harms a write or a
// read: every writer uses its own name and the rename is what publishes a checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/state.h"
#include "vision/train/training_state.h"

namespace vision::train {

using NamedTensors = std::vector<std::pair<std::string, core::Tensor>>;

// A checkpoint read back, its tensors split into groups (host tensors).
struct Checkpoint {
  std::filesystem::path path;                     // where it was read from
  NamedTensors model;                             // the live model: every parameter and buffer, plain keys
  NamedTensors ema;                               // the EMA's tensors, plain keys (ModelEma::load); empty: no EMA
  NamedTensors optimizer;                         // "optimizer.…" names (Optimizer::load_state_dict)
  std::map<std::string, std::string> metadata;    // the model's metadata (without "checkpoint" and "training")
  TrainingState state;

  bool has_ema() const { return !ema.empty(); }
  // The model as a full weights file (path and model metadata kept) for load_weights / read_model_info: the live
  // model (resume), or with use_ema the EMA's values over it (what the file's plain names hold).
  core::SafetensorsFile weights(bool use_ema = false) const;
};

// Writes a checkpoint (layout above) atomically, after removing stale temporaries of dead writers.
//   model:     host copies of every parameter and buffer (StateStore::to_host()), plain keys;
//   metadata:  the model's metadata (weights_metadata(info)); must not use the keys "checkpoint" or "training";
//   ema:       ModelEma::to_host() (plain keys, each one of model's with its shape), or empty for none;
//   optimizer: Optimizer::state_dict() (names get "optimizer." in front unless they have it);
// Throws vision::Error for duplicate or clashing names, an EMA key the model lacks or a shape mismatch, and any
// I/O error (whatever was at path is then left as it was).
void write_checkpoint(const std::filesystem::path& path, const NamedTensors& model,
                      const std::map<std::string, std::string>& metadata, const NamedTensors& ema,
                      const NamedTensors& optimizer, const TrainingState& state);

// Reads and validates a checkpoint. A truncated or corrupt file, a file that is no training checkpoint (a weights
// file), or inconsistent groups: vision::Error naming the file and what is wrong.
Checkpoint read_checkpoint(const std::filesystem::path& path);

// Removes "<path>.tmp.<pid>" files next to path whose pid is not a live process (not this one); returns how many.
size_t remove_stale_temporaries(const std::filesystem::path& path);

}  // namespace vision::train
