#include "vision/models/yolo/ultralytics_checkpoint.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/yolo26.h"

namespace vision::models::yolo {

namespace {

namespace fs = std::filesystem;
using core::PyValue;
using Kind = PyValue::Kind;

// The bias of the one-to-one head's class convolution at P3: nc outputs (as the converter finds nc).
constexpr std::string_view kClassBias = "model.23.one2one_cv3.0.2.bias";
constexpr int kMaxModuleDepth = 64;
constexpr size_t kMaxModuleVisits = size_t{1} << 20;

// s with any invalid UTF-8 replaced (metadata values are written as JSON strings).
std::string utf8(const std::string& s) {
  return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

// A JSON list as Python's json.dumps writes it (", " between items, non-ASCII escaped), so that the metadata is the
// converter's to the byte.
template <typename T>
std::string json_list(const std::vector<T>& items) {
  std::vector<std::string> parts;
  for (const T& item : items)
    parts.push_back(nlohmann::json(item).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// A module's, parameter's or buffer's name: what PyTorch allows in a state_dict key part.
bool plain_name(const std::string& s) {
  return !s.empty() && s.size() <= 256 && std::all_of(s.begin(), s.end(), [](char c) {
    return c > 0x20 && c < 0x7f && c != '.';
  });
}

// The entries of a pickled dict by string key, in first-insertion order with the last value (Python's dict).
std::vector<std::pair<std::string, const PyValue*>> entries(const PyValue& dict, const std::string& what,
                                                            const std::string& where) {
  VISION_CHECK_INPUT(dict.kind == Kind::dict, "{}: {} is a {}, not a dict", where, what, dict.describe());
  std::vector<std::pair<std::string, const PyValue*>> out;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const PyValue& key = *dict.items[i];
    VISION_CHECK_INPUT(key.kind == Kind::string && plain_name(key.text), "{}: {} has a key that is not a plain name: {}",
                 where, what, key.describe());
    const auto [it, fresh] = index.emplace(key.text, out.size());
    if (fresh) out.emplace_back(key.text, dict.items[i + 1]);
    else out[it->second].second = dict.items[i + 1];
  }
  return out;
}

// Module.state_dict(): the tensors of a module tree by dotted name.
struct StateDictWalk {
  const std::string where;
  std::vector<std::pair<std::string, const PyValue*>> tensors;
  size_t visits = 0;

  void module(const PyValue& m, const std::string& prefix, int depth) {
    const std::string name =
        prefix.empty() ? std::string("the model") : fmt::format("module '{}'", prefix.substr(0, prefix.size() - 1));
    VISION_CHECK_INPUT(m.kind == Kind::object, "{}: {} is a {}, not a module", where, name, m.describe());
    VISION_CHECK_INPUT(depth <= kMaxModuleDepth, "{}: modules nest deeper than {} levels at {} (a cycle?)", where,
                 kMaxModuleDepth, name);
    VISION_CHECK_INPUT(++visits <= kMaxModuleVisits,
                 "{}: the module tree has more than {} modules (shared or cyclic submodules?)", where, kMaxModuleVisits);
    VISION_CHECK_INPUT(m.state && m.state->kind == Kind::dict, "{}: {} ({}) has no attribute dict: not a torch.nn.Module",
                 where, name, m.text);
    std::vector<std::string> non_persistent;
    if (const PyValue* set = m.get("_non_persistent_buffers_set"); set && set->kind == Kind::set)
      for (const PyValue* v : set->items)
        if (v->kind == Kind::string) non_persistent.push_back(v->text);
    for (const char* field : {"_parameters", "_buffers"}) {
      const PyValue* dict = m.get(field);
      if (!dict || dict->is_none()) continue;
      for (const auto& [key, value] : entries(*dict, fmt::format("{}'s {}", name, field), where)) {
        if (value->is_none()) continue;
        if (std::string_view(field) == "_buffers" &&
            std::find(non_persistent.begin(), non_persistent.end(), key) != non_persistent.end())
          continue;
        VISION_CHECK_INPUT(value->kind == Kind::tensor, "{}: {} '{}{}' is a {}, not a tensor", where,
                     std::string_view(field) == "_buffers" ? "buffer" : "parameter", prefix, key, value->describe());
        tensors.emplace_back(prefix + key, value);
      }
    }
    if (const PyValue* children = m.get("_modules"); children && !children->is_none())
      for (const auto& [key, child] : entries(*children, fmt::format("{}'s _modules", name), where))
        if (!child->is_none()) module(*child, prefix + key + ".", depth + 1);
  }
};

// The model of the checkpoint: its ema, else its model; or the pickled module itself.
const PyValue& model_of(const core::TorchCheckpoint& ck) {
  const PyValue& root = ck.root();
  if (root.kind == Kind::object) return root;
  VISION_CHECK_INPUT(root.kind == Kind::dict, "{}: holds a {}; an ultralytics checkpoint is a dict with 'model' or 'ema'",
               ck.where(), root.describe());
  const PyValue* ema = root.get("ema");
  const PyValue* model = ema && !ema->is_none() ? ema : root.get("model");
  if (!model || model->kind != Kind::object) {
    std::vector<std::string> keys;
    for (size_t i = 0; i + 1 < root.items.size() && keys.size() < 16; i += 2)
      keys.push_back(root.items[i]->kind == Kind::string ? root.items[i]->text.substr(0, 40) : root.items[i]->describe());
    fail_input("{}: neither 'ema' nor 'model' holds a model (keys: {})", ck.where(), fmt::join(keys, ", "));
  }
  return *model;
}

std::string scale_of(const PyValue& model) {
  const PyValue* yaml = model.get("yaml");
  if (!yaml || yaml->kind != Kind::dict) return "";
  const auto valid = [](const std::string& s) {
    return s.size() == 1 && std::string_view("nsmlx").find(s[0]) != std::string_view::npos;
  };
  if (const PyValue* s = yaml->get("scale"); s && s->kind == Kind::string && valid(s->text)) return s->text;
  if (const PyValue* f = yaml->get("yaml_file"); f && f->kind == Kind::string) {  // "yolo26n.yaml" names its scale
    const std::string stem = fs::path(f->text).stem().string();
    if (stem.size() == 7 && stem.starts_with("yolo26") && valid(stem.substr(6))) return stem.substr(6);
  }
  return "";
}

std::vector<std::string> names_of(const PyValue& model, int64_t nc, const std::string& where) {
  const PyValue* names = model.get("names");
  std::vector<std::string> out;
  if (!names || names->is_none()) {
    for (int64_t i = 0; i < nc; ++i) out.push_back(fmt::format("class{}", i));
    return out;
  }
  const auto text = [&](const PyValue& v) {
    if (v.kind == Kind::string) return v.text;
    VISION_CHECK_INPUT(v.kind == Kind::integer, "{}: the model's names hold a {}, not a string", where, v.describe());
    return std::to_string(v.integer);
  };
  if (names->kind == Kind::dict) {  // {0: "person", 1: "bicycle", …}: the names in the order of their indices
    std::map<int64_t, std::string> by_index;
    for (size_t i = 0; i + 1 < names->items.size(); i += 2) {
      const PyValue& key = *names->items[i];
      VISION_CHECK_INPUT(key.kind == Kind::integer, "{}: the model's names are keyed by a {}, not a class index", where,
                   key.describe());
      by_index[key.integer] = text(*names->items[i + 1]);
    }
    for (auto& [i, n] : by_index) out.push_back(std::move(n));
  } else {
    VISION_CHECK_INPUT(names->kind == Kind::list || names->kind == Kind::tuple,
                 "{}: the model's names are a {}, not a dict or a list", where, names->describe());
    for (const PyValue* n : names->items) out.push_back(text(*n));
  }
  VISION_CHECK_INPUT(static_cast<int64_t>(out.size()) == nc, "{}: {} class names for {} classes", where, out.size(), nc);
  return out;
}

// The training image size: train_args' imgsz, else the model's args', else 640 (as JSON: a side or a list).
std::string imgsz_of(const PyValue& root, const PyValue& model, const std::string& where) {
  const PyValue* args = root.kind == Kind::dict ? root.get("train_args") : nullptr;
  if (!args || !((args->kind == Kind::dict && args->dict_size() > 0) || args->kind == Kind::object))
    args = model.get("args");
  const PyValue* imgsz = args ? args->get("imgsz") : nullptr;
  if (!imgsz || imgsz->is_none()) return "640";
  if (imgsz->kind == Kind::integer) return std::to_string(imgsz->integer);
  VISION_CHECK_INPUT((imgsz->kind == Kind::list || imgsz->kind == Kind::tuple) && imgsz->items.size() <= 2 &&
                   std::all_of(imgsz->items.begin(), imgsz->items.end(),
                               [](const PyValue* s) { return s->kind == Kind::integer; }),
               "{}: imgsz is a {}, not a size or [height, width]", where, imgsz->describe());
  std::vector<int64_t> sides;
  for (const PyValue* s : imgsz->items) sides.push_back(s->integer);
  return json_list(sides);
}

// model.stride: a tensor (or a list) of the Detect levels' strides; [8, 16, 32] when absent.
std::vector<int64_t> stride_of(const core::TorchCheckpoint& ck, const PyValue& model) {
  const PyValue* stride = model.get("stride");
  if (!stride || stride->is_none()) return {8, 16, 32};
  std::vector<double> values;
  if (stride->kind == Kind::tensor) {
    const core::TorchTensorInfo& info = ck.tensor_info(*stride);
    int64_t numel = 1;
    for (int64_t s : info.sizes) numel *= s;  // checked against the storage when the pickle was read
    VISION_CHECK_INPUT(numel <= 16, "{}: model.stride has {} values", ck.where(), numel);
    const core::Tensor t = ck.tensor(*stride, "model.stride");
    if (core::is_floating(t.dtype())) {
      for (float v : t.to_vector()) values.push_back(v);
    } else {
      VISION_CHECK_INPUT(t.dtype() == core::DType::i64 || t.dtype() == core::DType::i32, "{}: model.stride is {}", ck.where(),
                   core::dtype_name(t.dtype()));
      for (int64_t i = 0; i < t.numel(); ++i)
        values.push_back(t.dtype() == core::DType::i64 ? static_cast<double>(t.data<int64_t>()[i])
                                                        : static_cast<double>(t.data<int32_t>()[i]));
    }
  } else {
    VISION_CHECK_INPUT((stride->kind == Kind::list || stride->kind == Kind::tuple) && stride->items.size() <= 16,
                 "{}: model.stride is a {}", ck.where(), stride->describe());
    for (const PyValue* v : stride->items) {
      VISION_CHECK_INPUT(v->kind == Kind::integer || v->kind == Kind::floating, "{}: model.stride holds a {}", ck.where(),
                   v->describe());
      values.push_back(v->kind == Kind::integer ? static_cast<double>(v->integer) : v->floating);
    }
  }
  std::vector<int64_t> out;
  for (double v : values) {
    VISION_CHECK_INPUT(std::isfinite(v) && std::abs(v) < 1e6, "{}: model.stride holds {}", ck.where(), v);
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

}  // namespace

core::SafetensorsFile ultralytics_weights(const core::TorchCheckpoint& ck) {
  const std::string where = ck.where();
  const PyValue& model = model_of(ck);
  StateDictWalk walk{where, {}, 0};
  walk.module(model, "", 0);
  VISION_CHECK_INPUT(!walk.tensors.empty(), "{}: the model ({}) has no tensors", where, model.text);

  core::SafetensorsFile file;
  file.path = ck.path();
  const PyValue* class_bias = nullptr;
  bool batchnorm = false;
  for (const auto& [name, value] : walk.tensors) {
    file.tensors.emplace_back(name, ck.tensor(*value, name));
    if (name == kClassBias) class_bias = value;
    if (name.find(".bn.") != std::string::npos) batchnorm = true;
  }
  VISION_CHECK_INPUT(class_bias != nullptr, "{}: no YOLO26 end-to-end Detect head ({}) in the model ({}, {} tensors)", where,
               kClassBias, model.text, walk.tensors.size());
  const int64_t nc = file.at(std::string(kClassBias)).numel();
  VISION_CHECK_INPUT(nc >= 1 && nc <= kMaxClasses, "{}: {} has {} outputs; YOLO26 takes 1–{} classes", where, kClassBias, nc,
               kMaxClasses);
  // The order of a written file's data: larger elements first, then by name.
  std::stable_sort(file.tensors.begin(), file.tensors.end(), [](const auto& a, const auto& b) {
    const size_t sa = core::dtype_size(a.second.dtype()), sb = core::dtype_size(b.second.dtype());
    return sa != sb ? sa > sb : a.first < b.first;
  });

  auto& md = file.metadata;
  md["format"] = batchnorm ? "full" : "fused";
  if (const std::string scale = scale_of(model); !scale.empty()) md["scale"] = scale;
  md["nc"] = std::to_string(nc);
  md["names"] = json_list(names_of(model, nc, where));
  md["imgsz"] = imgsz_of(ck.root(), model, where);
  md["stride"] = json_list(stride_of(ck, model));
  md["source"] = utf8(ck.path().filename().string());
  if (ck.root().kind == Kind::dict)
    if (const PyValue* v = ck.root().get("version"); v && v->kind == Kind::string)
      md["ultralytics_version"] = utf8(v->text.substr(0, 64));
  return file;
}

core::SafetensorsFile read_ultralytics_checkpoint(const fs::path& path) {
  return ultralytics_weights(core::TorchCheckpoint::read(path));
}

core::SafetensorsFile read_model_file(const fs::path& path) {
  unsigned char magic[9] = {};
  ssize_t n = -1;
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    n = ::pread(fd, magic, sizeof magic, 0);
    ::close(fd);
  }
  const auto starts = [&](std::string_view m) {
    return n >= static_cast<ssize_t>(m.size()) && std::equal(m.begin(), m.end(), magic, [](char a, unsigned char b) {
             return static_cast<unsigned char>(a) == b;
           });
  };
  if (starts("PK\x03\x04") || starts("PK\x05\x06")) return read_ultralytics_checkpoint(path);
  // torch.save(..., _use_new_zipfile_serialization=False) and PyTorch < 1.6: a pickle of a magic number first.
  if (starts("\x80\x02\x8a\x0a\x6c\xfc"))
    fail_input("PyTorch checkpoint '{}': the legacy format of PyTorch < 1.6 (not a zip archive), which is not read: save it "
         "again with torch.save(torch.load(path), path) in PyTorch 1.6 or later",
         path.string());
  // A safetensors file: an 8-byte header length, then the header's JSON object (also when it is named .pt).
  if (n == static_cast<ssize_t>(sizeof magic) && magic[8] == '{') return core::read_safetensors(path);
  // Anything else named .pt: the checkpoint reader's own errors ("file not found", "not a readable zip archive").
  const std::string ext = path.extension().string();
  if (ext == ".pt" || ext == ".pth") return read_ultralytics_checkpoint(path);
  return core::read_safetensors(path);
}

}  // namespace vision::models::yolo
