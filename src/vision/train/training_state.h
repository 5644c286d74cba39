// TrainingState — where a training run stands, and its JSON form (the "training" metadata of a checkpoint,
// train/checkpoint.h). Apart from the checkpoint so that the parser can be tested and fuzzed alone.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vision::train {

// Where a run stands; generic (nothing model-specific). Stored as JSON in the metadata under "training";
// non-finite best_fitness / loss_scale are stored as the strings "nan", "inf", "-inf".
struct TrainingState {
  int64_t epoch = 0;            // epochs completed: a resumed run starts at epoch index `epoch`
  int64_t iteration = 0;        // batches done over the whole run (the global index of the next batch)
  int64_t step = 0;             // applied optimizer steps (Optimizer::steps())
  int64_t skipped_steps = 0;    // optimizer steps skipped for a non-finite gradient
  int64_t ema_updates = 0;      // ModelEma::updates() (0 without an EMA)
  double best_fitness = -std::numeric_limits<double>::infinity();  // best validation fitness so far (-inf: none)
  float loss_scale = 1.0f;      // the dynamic loss scale of mixed precision (1: none)
  std::string optimizer;        // the optimizer's name ("SGD", "AdamW", "MuSGD")
  nlohmann::json args = nlohmann::json::object();   // the run's arguments, as given
  std::vector<uint64_t> rng;    // RNG states, as 64-bit words (the trainer defines their order)
  nlohmann::json extra = nlohmann::json::object();  // anything else the trainer keeps (E2E loss weight updates, …)
};

nlohmann::json training_state_to_json(const TrainingState& state);
// Throws vision::Error naming `where` and the field for a missing or malformed field (unknown fields are ignored).
TrainingState training_state_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace vision::train
