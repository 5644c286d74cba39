// libFuzzer target: a checkpoint's training state (core::parse_json with its depth limit, then
// train::training_state_from_json): accepted states have counters in range.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vision/core/error.h"
#include "vision/core/json.h"
#include "vision/train/training_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = vision::core::parse_json(text, "fuzz");
    const vision::train::TrainingState s = vision::train::training_state_from_json(j, "fuzz");
    if (s.epoch < 0 || s.iteration < 0 || s.step < 0 || !s.args.is_object() || !s.extra.is_object()) __builtin_trap();
    (void)vision::train::training_state_to_json(s).dump();
  } catch (const vision::Error&) {
  }
  return 0;
}
