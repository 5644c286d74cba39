// TrainingState <-> JSON (train/checkpoint.h): apart from the checkpoint file so that it can be fuzzed alone.
#include <cmath>
#include <limits>

#include "vision/core/error.h"
#include "vision/core/json.h"
#include "vision/train/training_state.h"

namespace vision::train {

using nlohmann::json;

namespace {

json real_to_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double real_from_json(const json& j, const std::string& where, const char* field) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  fail("{}: checkpoint field 'training.{}' must be a number (or \"nan\", \"inf\", \"-inf\"), got {}", where, field,
       core::json_excerpt(j));
}

const json& field(const json& j, const std::string& where, const char* name) {
  auto it = j.find(name);
  VISION_CHECK(it != j.end(), "{}: checkpoint field 'training.{}' is missing", where, name);
  return *it;
}

int64_t int_field(const json& j, const std::string& where, const char* name) {
  const json& v = field(j, where, name);
  VISION_CHECK(v.is_number_integer(), "{}: checkpoint field 'training.{}' must be an integer, got {}", where, name,
               core::json_excerpt(v));
  return v.get<int64_t>();
}

}  // namespace

json training_state_to_json(const TrainingState& s) {
  return json{{"epoch", s.epoch},
              {"iteration", s.iteration},
              {"step", s.step},
              {"skipped_steps", s.skipped_steps},
              {"ema_updates", s.ema_updates},
              {"best_fitness", real_to_json(s.best_fitness)},
              {"loss_scale", real_to_json(static_cast<double>(s.loss_scale))},
              {"optimizer", s.optimizer},
              {"args", s.args},
              {"rng", s.rng},
              {"extra", s.extra}};
}

TrainingState training_state_from_json(const json& j, const std::string& where) {
  VISION_CHECK(j.is_object(), "{}: checkpoint metadata 'training' must be a JSON object, got {}", where,
               core::json_excerpt(j));
  TrainingState s;
  // Counters are bounded so that nothing derived from them (a schedule, an index) overflows: no run comes near.
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  auto counter = [&](const char* name) {
    const int64_t v = int_field(j, where, name);
    VISION_CHECK(v >= 0 && v <= kMaxCount, "{}: checkpoint field 'training.{}' is {}, outside 0–2^40", where, name, v);
    return v;
  };
  s.epoch = counter("epoch");
  s.iteration = counter("iteration");
  s.step = counter("step");
  s.skipped_steps = counter("skipped_steps");
  s.ema_updates = counter("ema_updates");

  s.best_fitness = real_from_json(field(j, where, "best_fitness"), where, "best_fitness");
  s.loss_scale = static_cast<float>(real_from_json(field(j, where, "loss_scale"), where, "loss_scale"));
  VISION_CHECK(!std::isnan(s.best_fitness), "{}: checkpoint field 'training.best_fitness' is NaN", where);
  const json& opt = field(j, where, "optimizer");
  VISION_CHECK(opt.is_string(), "{}: checkpoint field 'training.optimizer' must be a string, got {}", where,
               core::json_excerpt(opt));
  s.optimizer = opt.get<std::string>();
  s.args = field(j, where, "args");
  if (s.args.is_null()) s.args = json::object();  // a run without arguments (the API's trainer)
  VISION_CHECK(s.args.is_object(), "{}: checkpoint field 'training.args' must be an object, got {}", where,
               core::json_excerpt(s.args));
  const json& rng = field(j, where, "rng");
  VISION_CHECK(rng.is_array(), "{}: checkpoint field 'training.rng' must be a list of 64-bit words", where);
  for (const json& w : rng) {
    VISION_CHECK(w.is_number_unsigned() || (w.is_number_integer() && w.get<int64_t>() >= 0),
                 "{}: checkpoint field 'training.rng' holds {}, not a 64-bit unsigned word", where, core::json_excerpt(w));
    s.rng.push_back(w.get<uint64_t>());
  }
  if (auto it = j.find("extra"); it != j.end()) s.extra = *it;
  VISION_CHECK(s.extra.is_object(), "{}: checkpoint field 'training.extra' must be an object, got {}", where,
               core::json_excerpt(s.extra));
  return s;
}

}  // namespace vision::train
