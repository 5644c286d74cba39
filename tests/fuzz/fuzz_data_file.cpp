// libFuzzer target: data files (data::read_data_config; YAML through yaml-cpp, or JSON when the first byte is '{')
// and COCO annotation files (data::load_dataset with the input as the val split's annotations).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

// A folder with images/a.jpg (4 × 2) and a data file naming the COCO file, made once per process.
const fs::path& root() {
  static const fs::path r = [] {
    const fs::path dir = fs::temp_directory_path() / ("vision-fuzz-data-" + std::to_string(::getpid()));
    fs::create_directories(dir / "images");
    vision::data::write_image(vision::data::Image(4, 2, 3, 90), dir / "images" / "a.jpg");
    const std::string yaml = "train: images\nval: ann.json\nnames: [x, y]\n";
    write(dir / "coco.yaml", reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
    return dir;
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = root();
  const bool json = size > 0 && data[0] == '{';
  const fs::path file = dir / (json ? "data.json" : "data.yaml");
  write(file, data, size);
  try {
    (void)vision::data::read_data_config(file);
  } catch (const vision::Error&) {
  }
  if (json) {  // the same bytes as COCO annotations
    write(dir / "ann.json", data, size);
    try {
      (void)vision::data::load_dataset(dir / "coco.yaml", "val", /*use_cache=*/false);
    } catch (const vision::Error&) {
    }
  }
  return 0;
}
