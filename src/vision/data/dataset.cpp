#include "vision/data/dataset.h"

#include <glob.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "vision/core/error.h"
#include "vision/core/json.h"

namespace vision::data {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& file, const char* what) {
  std::error_code ec;
  VISION_CHECK_INPUT(fs::exists(file, ec), "{} '{}' does not exist", what, file.string());
  return core::read_text_file(file, what);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_image_file(const fs::path& p) {
  const std::string ext = lower(p.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The keys, from YAML or JSON, in one form.
struct RawConfig {
  std::optional<std::string> path;
  std::map<std::string, std::vector<std::string>> splits;
  std::optional<int64_t> nc;
  std::vector<std::pair<std::string, std::string>> names;  // (index or "", name)
  bool names_is_map = false, has_names = false;
  std::string where_names, where_nc;  // "file:line" for messages
};

constexpr std::string_view kKeys[] = {"path", "train", "val", "test", "nc", "names"};

// The data file through yaml-cpp: the known keys of the top-level map (others ignored, whatever is below them);
// scalars, sequences of scalars, and for names a map of scalars. Messages name file:line.
RawConfig read_yaml(const fs::path& file) {
  const std::string name = file.string();
  YAML::Node root;
  try {
    root = YAML::Load(read_text(file, "data file"));
  } catch (const YAML::DeepRecursion& e) {
    fail_input("{}:{}: the YAML nests deeper than a data file can ({} levels at least)", name, e.mark.line + 1, e.depth());
  } catch (const YAML::Exception& e) {
    fail_input("{}:{}: {}", name, e.mark.line + 1, e.msg);
  }
  VISION_CHECK_INPUT(root.IsMap(), "{}: the data file must be a YAML map of keys (train, val, names, …)", name);
  RawConfig raw;
  auto where = [&](const YAML::Node& n) { return fmt::format("{}:{}", name, n.Mark().line + 1); };
  auto scalars = [&](const YAML::Node& n, const std::string& key) {
    std::vector<std::pair<std::string, std::string>> items;
    for (const auto& item : n) {
      const YAML::Node v = n.IsMap() ? item.second : item;
      VISION_CHECK_INPUT(v.IsScalar(), "{}: each item of '{}' must be a single value", where(v), key);
      items.emplace_back(n.IsMap() ? item.first.Scalar() : std::string(), v.Scalar());
    }
    return items;
  };
  for (const auto& kv : root) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    const YAML::Node& v = kv.second;
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys) || v.IsNull()) continue;
    if (key == "path") {
      VISION_CHECK_INPUT(v.IsScalar(), "{}: 'path' must be a single value", where(v));
      raw.path = v.Scalar();
    } else if (key == "nc") {
      VISION_CHECK_INPUT(v.IsScalar(), "{}: 'nc' must be a number", where(v));
      raw.nc = parse_int(v.Scalar());
      VISION_CHECK_INPUT(raw.nc && *raw.nc > 0, "{}: 'nc' must be a positive integer, got '{}'", where(v), v.Scalar());
      raw.where_nc = where(v);
    } else if (key == "names") {
      VISION_CHECK_INPUT(v.IsSequence() || v.IsMap(), "{}: 'names' must be a list or an {{index: name}} map", where(v));
      raw.has_names = true;
      raw.names_is_map = v.IsMap();
      raw.names = scalars(v, key);
      raw.where_names = where(v);
    } else {  // a split
      VISION_CHECK_INPUT(!v.IsMap(), "{}: '{}' must be a path or a list of paths", where(v), key);
      std::vector<std::string>& paths = raw.splits[key];
      if (v.IsScalar()) paths.push_back(v.Scalar());
      else
        for (const auto& item : scalars(v, key)) paths.push_back(item.second);
    }
  }
  return raw;
}

RawConfig read_json(const fs::path& file) {
  const std::string name = file.string();
  const nlohmann::json j = core::parse_json(read_text(file, "data file"), name);
  VISION_CHECK_INPUT(j.is_object(), "{}: the data file must be a JSON object", name);
  RawConfig raw;
  raw.where_names = raw.where_nc = name;
  auto as_string = [&](const nlohmann::json& v, const std::string& what) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    fail_input("{}: {} must be a string", name, what);
  };
  for (const auto& [key, v] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys) || v.is_null()) continue;
    if (key == "path") {
      raw.path = as_string(v, "'path'");
    } else if (key == "nc") {
      VISION_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() > 0, "{}: 'nc' must be a positive integer", name);
      raw.nc = v.get<int64_t>();
    } else if (key == "names") {
      raw.has_names = true;
      if (v.is_array()) {
        for (const auto& n : v) raw.names.emplace_back("", as_string(n, "each name"));
      } else {
        VISION_CHECK_INPUT(v.is_object(), "{}: 'names' must be a list or an {{index: name}} map", name);
        raw.names_is_map = true;
        for (const auto& [k, n] : v.items()) raw.names.emplace_back(k, as_string(n, "each name"));
      }
    } else {
      std::vector<std::string>& paths = raw.splits[key];
      if (v.is_array()) {
        for (const auto& p : v) paths.push_back(as_string(p, fmt::format("each path of '{}'", key)));
      } else {
        paths.push_back(as_string(v, fmt::format("'{}'", key)));
      }
    }
  }
  return raw;
}

}  // namespace

const std::vector<fs::path>& DataConfig::split(const std::string& name) const {
  const std::vector<fs::path>* paths = name == "train" ? &train : name == "val" ? &val : name == "test" ? &test
                                                                                                        : nullptr;
  VISION_CHECK(paths, "unknown split '{}' (train, val or test)", name);
  VISION_CHECK_INPUT(!paths->empty(), "{}: the data file has no '{}' split", file.string(), name);
  return *paths;
}

DataConfig read_data_config(const fs::path& file) {
  const std::string ext = lower(file.extension().string());
  const RawConfig raw = ext == ".json" ? read_json(file) : read_yaml(file);
  DataConfig config;
  config.file = file;
  const fs::path folder = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  config.root = raw.path ? (fs::path(*raw.path).is_absolute() ? fs::path(*raw.path) : folder / *raw.path) : folder;
  config.root = config.root.lexically_normal();

  // Names.
  VISION_CHECK_INPUT(raw.has_names, "{}: no 'names' (a list of class names or an {{index: name}} map)", file.string());
  if (raw.names_is_map) {
    std::map<int64_t, std::string> by_index;
    for (const auto& [k, n] : raw.names) {
      const std::optional<int64_t> index = parse_int(k);
      VISION_CHECK_INPUT(index && *index >= 0, "{}: a 'names' key must be a class index, got '{}'", raw.where_names, k);
      VISION_CHECK_INPUT(by_index.emplace(*index, n).second, "{}: class {} is named twice", raw.where_names, *index);
    }
    int64_t expect = 0;
    for (const auto& [index, n] : by_index) {
      VISION_CHECK_INPUT(index == expect, "{}: 'names' has no class {} (the indices must be 0, 1, …, n−1)",
                   raw.where_names, expect);
      config.names.push_back(n);
      ++expect;
    }
  } else {
    for (const auto& item : raw.names) config.names.push_back(item.second);
  }
  VISION_CHECK_INPUT(!config.names.empty(), "{}: 'names' is empty", raw.where_names);
  VISION_CHECK_INPUT(!raw.nc || *raw.nc == config.nc(), "{}: nc {} does not match the {} names", raw.where_nc,
               raw.nc.value_or(0), config.nc());

  // Splits: each path must exist.
  for (const auto& [split, paths] : raw.splits) {
    std::vector<fs::path>& out = split == "train" ? config.train : split == "val" ? config.val : config.test;
    for (const std::string& p : paths) {
      const fs::path resolved = (fs::path(p).is_absolute() ? fs::path(p) : config.root / p).lexically_normal();
      // train and val must exist; test (often named but not downloaded) only when it is listed.
      std::error_code ec;
      VISION_CHECK_INPUT(split == "test" || fs::exists(resolved, ec), "{}: the '{}' split's '{}' does not exist",
                   file.string(), split, resolved.string());
      out.push_back(resolved);
    }
  }
  VISION_CHECK_INPUT(!config.train.empty() || !config.val.empty(), "{}: no 'train' or 'val' split", file.string());
  return config;
}

std::string label_box_problem(const LabelBox& box, int64_t nc) {
  if (box.cls < 0 || box.cls >= nc) return fmt::format("class {} is not one of the {} classes (0–{})", box.cls, nc, nc - 1);
  const std::array<std::pair<const char*, double>, 4> values = {
      {{"cx", box.cx}, {"cy", box.cy}, {"w", box.w}, {"h", box.h}}};
  for (const auto& [name, v] : values)
    if (!(v >= -kLabelTolerance && v <= 1 + kLabelTolerance)) return fmt::format("{} {} is outside [0, 1]", name, v);
  for (size_t k = 2; k < 4; ++k)
    if (!(values[k].second > 0)) return fmt::format("{} {} is not positive", values[k].first, values[k].second);
  return {};
}

LabelFile parse_labels(std::string_view text, const std::string& name, int64_t nc) {
  LabelFile out;
  int number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    ++number;
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    auto bad = [&](const std::string& why) { out.problems.push_back(fmt::format("{}:{}: {}", name, number, why)); };
    if (fields.size() != 5) {
      bad(fmt::format("expected 5 fields (class cx cy w h), got {}", fields.size()));
      continue;
    }
    std::array<double, 5> v{};
    bool numbers = true;
    for (size_t k = 0; k < 5 && numbers; ++k) {
      const std::optional<double> d = parse_double(fields[k]);
      if (!d) {
        bad(fmt::format("'{}' is not a number", fields[k]));
        numbers = false;
      } else {
        v[k] = *d;
      }
    }
    if (!numbers) continue;
    if (v[0] != std::floor(v[0]) || v[0] < 0 || v[0] >= static_cast<double>(nc)) {
      bad(fmt::format("class {} is not one of the {} classes (0–{})", fields[0], nc, nc - 1));
      continue;
    }
    const LabelBox box{static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4]};
    if (const std::string why = label_box_problem(box, nc); !why.empty()) {
      bad(why);
      continue;
    }
    out.boxes.push_back(box);
  }
  return out;
}

LabelFile read_labels(const fs::path& file, int64_t nc) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};
  if (fs::is_directory(file, ec))  // its image is listed with the others, as one without labels
    return {{}, {fmt::format("{}: a folder where the image's label file should be; the image has no labels",
                             file.string())}};
  return parse_labels(read_text(file, "label file"), file.string(), nc);
}

fs::path label_path(const fs::path& image) {
  std::vector<fs::path> parts(image.begin(), image.end());
  for (size_t i = parts.size(); i-- > 1;)  // the last folder named images (not the file name)
    if (i + 1 < parts.size() && parts[i] == "images") {
      parts[i] = "labels";
      break;
    }
  fs::path out;
  for (const fs::path& p : parts) out /= p;
  return out.replace_extension(".txt");
}

std::vector<GroundTruth> to_pixels(std::span<const LabelBox> labels, int64_t width, int64_t height) {
  std::vector<GroundTruth> out;
  out.reserve(labels.size());
  const double W = static_cast<double>(width), H = static_cast<double>(height);
  for (const LabelBox& l : labels)
    out.push_back({{static_cast<float>((l.cx - l.w / 2) * W), static_cast<float>((l.cy - l.h / 2) * H),
                    static_cast<float>((l.cx + l.w / 2) * W), static_cast<float>((l.cy + l.h / 2) * H)},
                   l.cls});
  return out;
}

std::vector<fs::path> list_images(std::span<const fs::path> sources) {
  std::vector<fs::path> images;
  for (const fs::path& source : sources) {
    std::error_code ec;
    if (fs::is_directory(source, ec)) {
      for (auto it = fs::recursive_directory_iterator(source, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec))
        if (it->is_regular_file(ec) && is_image_file(it->path())) images.push_back(it->path());
      VISION_CHECK_INPUT(!ec, "cannot list the folder '{}': {}", source.string(), ec.message());
    } else if (fs::is_regular_file(source, ec) && lower(source.extension().string()) == ".txt") {
      const std::string text = read_text(source, "image list");
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        const std::string_view t = trim(line);
        if (t.empty()) continue;
        fs::path p(t);
        if (p.is_relative()) p = source.parent_path() / p;
        p = p.lexically_normal();
        if (is_image_file(p)) images.push_back(p);
      }
    } else if (fs::is_regular_file(source, ec) && is_image_file(source)) {
      images.push_back(source);
    } else {
      VISION_CHECK_INPUT(fs::exists(source, ec), "'{}' does not exist", source.string());
      fail_input("'{}' is not a folder of images, a .txt list of images or an image", source.string());
    }
  }
  std::sort(images.begin(), images.end());
  return images;
}

namespace {

// The label cache: one JSON file per split beside its labels, valid while the fingerprint — the image paths, each
// label file's presence, size and modification time, nc and the cache version — is unchanged.
constexpr int kLabelCacheVersion = 1;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string label_fingerprint(const std::vector<fs::path>& images, int64_t nc) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const auto& v) { h = fnv1a(h, &v, sizeof v); };
  mix(kLabelCacheVersion);
  mix(nc);
  for (const fs::path& image : images) {
    const std::string path = image.string();
    mix(path.size());
    h = fnv1a(h, path.data(), path.size());
    const fs::path label = label_path(image);
    std::error_code ec;
    const bool exists = fs::is_regular_file(label, ec);
    mix(exists);
    if (!exists) continue;
    const auto size = static_cast<uint64_t>(fs::file_size(label, ec));
    const auto time = static_cast<int64_t>(fs::last_write_time(label, ec).time_since_epoch().count());
    mix(size);
    mix(time);
  }
  return fmt::format("{:016x}", h);
}

// Samples, problems and counts from a cache whose fingerprint matches; false for any other file (it is rebuilt):
// missing or of another fingerprint or version (`why` stays empty: the labels changed), or malformed or holding a
// box that a label file could not hold (`why` says what, naming the cache: the fingerprint covers the label files'
// sizes and times, not the cache's own content, so what the cache yields is checked as label lines are).
bool read_label_cache(const fs::path& file, const std::string& fingerprint, const std::vector<fs::path>& images,
                      int64_t nc, Dataset& d, std::string& why) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return false;
  try {
    return parse_label_cache(core::read_text_file(file, "label cache"), file.string(), fingerprint, images, nc, d, why);
  } catch (const std::exception& e) {
    why = fmt::format("{}: unreadable ({})", file.string(), e.what());
    return false;
  }
}

}  // namespace

bool parse_label_cache(std::string_view text, const std::string& name, const std::string& fingerprint,
                       const std::vector<fs::path>& images, int64_t nc, Dataset& d, std::string& why) {
  try {
    const nlohmann::json j = core::parse_json(text, name, 8);
    if (!j.is_object() || !j.contains("version") || !j.contains("fingerprint")) {
      why = fmt::format("{}: not a label cache", name);
      return false;
    }
    if (j.at("version") != nlohmann::json(kLabelCacheVersion) || j.at("fingerprint") != nlohmann::json(fingerprint))
      return false;
    const nlohmann::json& samples = j.at("samples");
    if (!samples.is_array() || samples.size() != images.size()) {
      why = fmt::format("{}: {} samples for {} images", name, samples.is_array() ? samples.size() : 0, images.size());
      return false;
    }
    std::vector<Sample> out;
    DatasetCounts counts;
    out.reserve(images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      Sample s{images[i], label_path(images[i]), {}};
      const nlohmann::json& e = samples[i];
      if (e.at("label").get<bool>()) ++counts.label_files;
      else ++counts.missing_labels;
      for (const nlohmann::json& b : e.at("boxes")) {
        if (!b.is_array() || b.size() != 5 || !b[0].is_number_integer()) {
          why = fmt::format("{}: sample {} ({}) holds {}, not [class, cx, cy, w, h]", name, i, images[i].string(),
                            core::json_excerpt(b));
          return false;
        }
        const LabelBox box{b[0].get<int64_t>(), b[1].get<double>(), b[2].get<double>(), b[3].get<double>(),
                           b[4].get<double>()};
        const std::string problem = label_box_problem(box, nc);
        if (!problem.empty()) {
          why = fmt::format("{}: sample {} ({}): {}", name, i, images[i].string(), problem);
          return false;
        }
        s.labels.push_back(box);
      }
      counts.instances += static_cast<int64_t>(s.labels.size());
      out.push_back(std::move(s));
    }
    std::vector<std::string> problems = j.at("problems").get<std::vector<std::string>>();
    counts.bad_lines = static_cast<int64_t>(problems.size());
    counts.images = static_cast<int64_t>(out.size());
    d.samples = std::move(out);
    d.problems = std::move(problems);
    d.counts = counts;
    return true;
  } catch (const std::exception& e) {
    why = fmt::format("{}: malformed ({})", name, e.what());
    return false;
  }
}

namespace {

// Writes the cache atomically (a temporary file renamed over it); a folder that cannot be written is no error: the
// next run parses the labels again.
void write_label_cache(const fs::path& file, const std::string& fingerprint, const Dataset& d) {
  nlohmann::json samples = nlohmann::json::array();
  for (const Sample& s : d.samples) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const LabelBox& b : s.labels) boxes.push_back({b.cls, b.cx, b.cy, b.w, b.h});
    std::error_code ec;
    samples.push_back({{"label", fs::is_regular_file(s.label, ec)}, {"boxes", std::move(boxes)}});
  }
  const nlohmann::json j{{"version", kLabelCacheVersion}, {"fingerprint", fingerprint}, {"samples", std::move(samples)},
                         {"problems", d.problems}};
  const fs::path tmp = fs::path(file).concat(fmt::format(".tmp{}", static_cast<long>(::getpid())));
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << j.dump();
    if (!out.flush()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

bool is_coco_source(const fs::path& source) {
  std::error_code ec;
  return fs::is_regular_file(source, ec) && lower(source.extension().string()) == ".json";
}

// Where a COCO image's file_name lives (see dataset.h); empty when it is nowhere.
fs::path coco_image_path(const fs::path& root, const fs::path& json, const std::string& file_name) {
  std::string stem = json.stem().string();
  if (stem.starts_with("instances_")) stem = stem.substr(10);
  const fs::path dir = json.parent_path();
  std::error_code ec;
  for (const fs::path& base : {root, dir, dir.parent_path() / stem, root / "images" / stem, root / stem}) {
    const fs::path p = (base / file_name).lexically_normal();
    if (fs::is_regular_file(p, ec)) return p;
  }
  return {};
}

// The samples of a COCO annotations file: one per image entry whose file exists (a missing one is a problem), its
// non-crowd boxes normalised to the image's width and height; categories map to class indices in id order.
void read_coco(const fs::path& json, const DataConfig& config, Dataset& d) {
  const std::string name = json.string();
  const nlohmann::json j = core::parse_json(read_text(json, "COCO annotations file"), name);
  VISION_CHECK_INPUT(j.is_object() && j.contains("images") && j["images"].is_array() && j.contains("annotations") &&
                   j["annotations"].is_array() && j.contains("categories") && j["categories"].is_array(),
               "{}: a COCO annotations file needs the arrays images, annotations and categories", name);
  std::vector<int64_t> ids;
  try {
    for (const nlohmann::json& c : j["categories"]) ids.push_back(c.at("id").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: a category without an integer id: {}", name, e.what());
  }
  std::sort(ids.begin(), ids.end());
  VISION_CHECK_INPUT(std::adjacent_find(ids.begin(), ids.end()) == ids.end(), "{}: two categories share an id", name);
  VISION_CHECK_INPUT(static_cast<int64_t>(ids.size()) == config.nc(),
               "{}: {} categories, but the data file {} names {} classes", name, ids.size(), config.file.string(),
               config.nc());
  std::map<int64_t, int64_t> class_of;
  for (size_t i = 0; i < ids.size(); ++i) class_of[ids[i]] = static_cast<int64_t>(i);

  struct Entry {
    fs::path image;
    double width = 0, height = 0;
    std::vector<LabelBox> boxes;
  };
  std::map<int64_t, Entry> images;         // by image id
  std::map<int64_t, std::string> file_of;  // every image entry's file_name by id: an id given twice is an error
  for (const nlohmann::json& im : j["images"]) {
    try {
      const int64_t id = im.at("id").get<int64_t>();
      const std::string file = im.at("file_name").get<std::string>();
      // Annotations find their image by id: with two entries of one id, one image would take the other's boxes.
      if (const auto [it, added] = file_of.emplace(id, file); !added)
        fail_input("{}: images '{}' and '{}' share the id {}; every image entry needs its own id", name, it->second, file,
             id);
      const double w = im.at("width").get<double>(), h = im.at("height").get<double>();
      if (!(w > 0 && h > 0)) {
        d.problems.push_back(fmt::format("{}: image {} ({}): width and height must be positive", name, id, file));
        continue;
      }
      const fs::path p = coco_image_path(config.root, json, file);
      if (p.empty()) {
        d.problems.push_back(fmt::format("{}: image {}: {} not found", name, id, file));
        continue;
      }
      images[id] = Entry{p, w, h, {}};
    } catch (const nlohmann::json::exception& e) {
      d.problems.push_back(fmt::format("{}: an image entry without id, file_name, width and height: {}", name, e.what()));
    }
  }
  for (const nlohmann::json& a : j["annotations"]) {
    try {
      if (a.contains("iscrowd") && a["iscrowd"].get<int64_t>() != 0) continue;  // crowd regions are no targets
      const int64_t id = a.at("id").get<int64_t>(), image = a.at("image_id").get<int64_t>(),
                    category = a.at("category_id").get<int64_t>();
      const auto e = images.find(image);
      if (e == images.end()) continue;  // an image skipped above, or not listed
      const auto c = class_of.find(category);
      const std::vector<double> b = a.at("bbox").get<std::vector<double>>();
      std::string why;
      if (c == class_of.end()) why = fmt::format("category {} is not among the categories", category);
      else if (b.size() != 4) why = fmt::format("bbox has {} values, not 4 (x, y, w, h)", b.size());
      else if (!(b[2] > 0 && b[3] > 0)) why = fmt::format("bbox size {}×{} is not positive", b[2], b[3]);
      if (why.empty()) {
        const double W = e->second.width, H = e->second.height;
        const double x1 = std::clamp(b[0], 0.0, W), y1 = std::clamp(b[1], 0.0, H),
                     x2 = std::clamp(b[0] + b[2], 0.0, W), y2 = std::clamp(b[1] + b[3], 0.0, H);
        if (x2 > x1 && y2 > y1)
          e->second.boxes.push_back({c->second, (x1 + x2) / 2 / W, (y1 + y2) / 2 / H, (x2 - x1) / W, (y2 - y1) / H});
        else
          why = "bbox lies outside the image";
      }
      if (!why.empty()) d.problems.push_back(fmt::format("{}: annotation {}: {}", name, id, why));
    } catch (const nlohmann::json::exception& e) {
      d.problems.push_back(fmt::format("{}: an annotation without id, image_id, category_id and bbox: {}", name, e.what()));
    }
  }
  for (auto& [id, e] : images) {
    ++d.counts.label_files;
    d.counts.instances += static_cast<int64_t>(e.boxes.size());
    d.samples.push_back(Sample{e.image, json, std::move(e.boxes)});
  }
}

}  // namespace

fs::path label_cache_path(const std::vector<fs::path>& sources) {
  if (sources.empty()) return {};
  const fs::path& first = sources.front();
  std::error_code ec;
  if (fs::is_directory(first, ec)) return fs::path(label_path(first / "x.jpg").parent_path()).concat(".cache");
  return fs::path(first).replace_extension(".cache");
}

Dataset load_dataset(const fs::path& data_file, const std::string& split, bool use_cache) {
  Dataset d;
  d.config = read_data_config(data_file);
  d.split = split;
  std::vector<fs::path> sources, coco;  // YOLO-format sources; COCO annotation files
  for (const fs::path& p : d.config.split(split)) (is_coco_source(p) ? coco : sources).push_back(p);
  for (const fs::path& json : coco) read_coco(json, d.config, d);
  const std::vector<fs::path> images = sources.empty() ? std::vector<fs::path>{} : list_images(sources);
  if (images.empty() && d.samples.empty()) {
    std::string where;
    for (const fs::path& p : d.config.split(split)) where += (where.empty() ? "" : ", ") + p.string();
    fail_input("{}: the '{}' split has no images (.jpg, .jpeg, .png) in {}", data_file.string(), split, where);
  }
  // The label cache serves YOLO-format splits (a COCO file is parsed as fast as a cache would be).
  const bool cached = use_cache && coco.empty();
  std::string fingerprint;
  if (cached) {
    d.cache = label_cache_path(sources);
    fingerprint = label_fingerprint(images, d.config.nc());
    std::string why;
    if (read_label_cache(d.cache, fingerprint, images, d.config.nc(), d, why)) {
      d.from_cache = true;
      return d;
    }
    if (!why.empty()) d.cache_problem = why + "; rebuilt from the label files";
  }
  for (const fs::path& image : images) {
    Sample s{image, label_path(image), {}};
    std::error_code ec;
    if (fs::exists(s.label, ec)) {
      ++d.counts.label_files;
      LabelFile labels = read_labels(s.label, d.config.nc());
      for (std::string& p : labels.problems) d.problems.push_back(std::move(p));
      s.labels = std::move(labels.boxes);
    } else {
      ++d.counts.missing_labels;
    }
    d.counts.instances += static_cast<int64_t>(s.labels.size());
    d.samples.push_back(std::move(s));
  }
  if (!coco.empty())
    std::stable_sort(d.samples.begin(), d.samples.end(),
                     [](const Sample& a, const Sample& b) { return a.image < b.image; });
  d.counts.bad_lines = static_cast<int64_t>(d.problems.size());
  d.counts.images = static_cast<int64_t>(d.samples.size());
  if (cached) write_label_cache(d.cache, fingerprint, d);
  return d;
}

namespace {

bool predict_image_extension(const fs::path& p) {
  const std::string ext = lower(p.extension().string());
  // JPEG and PNG are decoded; the other common image formats are listed so that they are reported as unsupported
  // rather than silently passed over.
  for (const char* e : {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
    if (ext == e) return true;
  return false;
}

}  // namespace

std::vector<fs::path> expand_image_source(const std::string& source) {
  std::error_code ec;
  const fs::path path(source);
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec) && predict_image_extension(e.path())) files.push_back(e.path());
    VISION_CHECK(!ec, "source {}: cannot list the directory: {}", source, ec.message());
    VISION_CHECK(!files.empty(), "source {}: no images (.jpg, .jpeg, .png) in the directory", source);
    std::sort(files.begin(), files.end());
    return files;
  }
  if (fs::exists(path, ec)) return {path};
  if (source.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(source.c_str(), 0, nullptr, &g);
    std::vector<fs::path> files;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i], ec)) files.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    VISION_CHECK(!files.empty(), "source {}: the pattern matches no files", source);
    return files;
  }
  fail("source {}: no such file or directory (the source does not exist)", source);
}


}  // namespace vision::data
