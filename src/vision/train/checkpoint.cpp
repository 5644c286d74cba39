#include "vision/train/checkpoint.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <set>
#include <system_error>

#include "vision/core/error.h"
#include "vision/core/json.h"

namespace vision::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kVersion = 1;
const std::string kTrainPrefix = "train.";
const std::string kOptimizerPrefix = "optimizer.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool same_shape(const core::Tensor& a, const core::Tensor& b) { return a.shape() == b.shape(); }

}  // namespace

core::SafetensorsFile Checkpoint::weights(bool use_ema) const {
  core::SafetensorsFile file;
  file.path = path;
  file.metadata = metadata;
  std::map<std::string, const core::Tensor*> averaged;
  if (use_ema)
    for (const auto& [key, t] : ema) averaged[key] = &t;
  for (const auto& [key, t] : model) {
    auto it = averaged.find(key);
    file.tensors.emplace_back(key, it == averaged.end() ? t : *it->second);
  }
  return file;
}

size_t remove_stale_temporaries(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string prefix = path.filename().string() + ".tmp.";
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!starts_with(name, prefix)) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(digits);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

void write_checkpoint(const fs::path& path, const NamedTensors& model, const std::map<std::string, std::string>& metadata,
                      const NamedTensors& ema, const NamedTensors& optimizer, const TrainingState& state) {
  const std::string where = path.string();
  VISION_CHECK(!model.empty(), "{}: a checkpoint needs the model's tensors", where);
  VISION_CHECK(!metadata.count("checkpoint") && !metadata.count("training"),
               "{}: the model metadata must not use the keys 'checkpoint' and 'training' (the checkpoint's own)",
               where);
  std::map<std::string, size_t> model_index;
  for (size_t i = 0; i < model.size(); ++i) {
    const std::string& key = model[i].first;
    VISION_CHECK(!starts_with(key, kTrainPrefix) && !starts_with(key, kOptimizerPrefix),
                 "{}: model tensor '{}' uses a prefix a checkpoint reserves ('train.', 'optimizer.')", where, key);
    VISION_CHECK(model_index.emplace(key, i).second, "{}: model tensor '{}' is given twice", where, key);
  }

  NamedTensors tensors;
  tensors.reserve(model.size() + 2 * ema.size() + optimizer.size());
  std::map<std::string, const core::Tensor*> averaged;
  for (const auto& [key, t] : ema) {
    auto it = model_index.find(key);
    VISION_CHECK(it != model_index.end(), "{}: EMA tensor '{}' is not one of the model's", where, key);
    const core::Tensor& live = model[it->second].second;
    VISION_CHECK(same_shape(t, live), "{}: EMA tensor '{}' is {}, the model's is {}", where, key, t.shape().str(),
                 live.shape().str());
    VISION_CHECK(averaged.emplace(key, &t).second, "{}: EMA tensor '{}' is given twice", where, key);
  }
  for (const auto& [key, t] : model) {
    auto it = averaged.find(key);
    if (it == averaged.end()) {
      tensors.emplace_back(key, t);
    } else {
      tensors.emplace_back(key, *it->second);
      tensors.emplace_back(kTrainPrefix + key, t);
    }
  }
  std::set<std::string> optimizer_names;
  for (const auto& [name, t] : optimizer) {
    std::string full = starts_with(name, kOptimizerPrefix) ? name : kOptimizerPrefix + name;
    VISION_CHECK(optimizer_names.insert(full).second, "{}: optimizer tensor '{}' is given twice", where, full);
    tensors.emplace_back(std::move(full), t);
  }

  std::map<std::string, std::string> md = metadata;
  md["checkpoint"] = json{{"version", kVersion}, {"ema", !ema.empty()}}.dump();
  md["training"] = training_state_to_json(state).dump();
  remove_stale_temporaries(path);
  core::write_safetensors(path, tensors, md);
}

Checkpoint read_checkpoint(const fs::path& path) {
  const std::string where = path.string();
  core::SafetensorsFile file = core::read_safetensors(path);  // throws naming the file for truncated / corrupt ones
  auto info = file.metadata.find("checkpoint");
  VISION_CHECK_INPUT(info != file.metadata.end(),
               "{} is not a training checkpoint: its metadata has no 'checkpoint' entry (a weights file?)", where);
  const json header = core::parse_json(info->second, fmt::format("{}: checkpoint metadata 'checkpoint'", where), 4);
  VISION_CHECK_INPUT(header.is_object() && header.contains("version") && header["version"].is_number_integer() &&
                   header.contains("ema") && header["ema"].is_boolean(),
               "{}: checkpoint metadata 'checkpoint' must be {{\"version\": N, \"ema\": bool}}, got {}", where,
               info->second);
  VISION_CHECK_INPUT(header["version"].get<int64_t>() == kVersion,
               "{}: checkpoint version {} is not supported (this build reads version {})", where,
               header["version"].get<int64_t>(), kVersion);
  const bool has_ema = header["ema"].get<bool>();

  auto training = file.metadata.find("training");
  VISION_CHECK_INPUT(training != file.metadata.end(), "{}: checkpoint metadata has no 'training' entry", where);
  const json state = core::parse_json(training->second, fmt::format("{}: checkpoint metadata 'training'", where));

  Checkpoint out;
  out.path = path;
  out.state = training_state_from_json(state, where);
  out.metadata = file.metadata;
  out.metadata.erase("checkpoint");
  out.metadata.erase("training");

  std::map<std::string, core::Tensor> live;  // "train.KEY" by KEY
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, kOptimizerPrefix)) {
      out.optimizer.emplace_back(name, t);
    } else if (starts_with(name, kTrainPrefix)) {
      VISION_CHECK_INPUT(has_ema, "{}: tensor '{}' holds the live model of an EMA, but the checkpoint has no EMA", where,
                   name);
      live.emplace(name.substr(kTrainPrefix.size()), t);
    }
  }
  size_t matched = 0;
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, kOptimizerPrefix) || starts_with(name, kTrainPrefix)) continue;
    auto it = live.find(name);
    if (it == live.end()) {
      out.model.emplace_back(name, t);
      continue;
    }
    VISION_CHECK_INPUT(same_shape(t, it->second), "{}: tensor '{}' is {}, its live model '{}{}' is {}", where, name,
                 t.shape().str(), kTrainPrefix, name, it->second.shape().str());
    out.ema.emplace_back(name, t);
    out.model.emplace_back(name, it->second);
    ++matched;
  }
  if (matched != live.size())
    for (const auto& [key, t] : live)
      VISION_CHECK_INPUT(file.find(key) != nullptr, "{}: tensor '{}{}' has no '{}' (the EMA's value) beside it", where,
                   kTrainPrefix, key, key);
  VISION_CHECK_INPUT(!has_ema || !live.empty(), "{}: the checkpoint says it has an EMA but holds no 'train.' tensors",
               where);
  VISION_CHECK_INPUT(!out.model.empty(), "{}: the checkpoint holds no model tensors", where);
  // Training never writes a non-finite weight (a step with a non-finite gradient is skipped): one in the file is damage,
  // and resuming from it would train NaNs silently.
  for (const NamedTensors* group : {&out.model, &out.ema, &out.optimizer})
    for (const auto& [name, t] : *group)
      if (core::is_floating(t.dtype()))
        for (const float v : t.to_vector())
          VISION_CHECK_INPUT(std::isfinite(v),
                       "{}: tensor '{}' holds a non-finite value ({}): the checkpoint is damaged; resume from another "
                       "one (weights/last.safetensors or an earlier copy)",
                       where, name, v);
  return out;
}

}  // namespace vision::train
