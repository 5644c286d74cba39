// bench_loader — throughput of the training data loader (vision/data/loader.h): images per second through
// TrainLoader (JPEG decode, training load, default augmentation — mosaic, affine, HSV, flips — and the write into the
// batch tensor: f32 NCHW, or u8 NHWC as the CUDA trainer takes it) over a `vision synth` dataset made in a temporary
// folder, for each image size, worker count, image cache mode (none: decode every image each time; ram: decoded once,
// kept resized) and batch pixel format asked (u8-gpu-warp: the workers only make each image's draws, boxes and
// sources, as for the CUDA trainer, which renders the plans). A row "decode only" (augment = false: decode, resize,
// letterbox) with every worker shows what the augmentation costs. Timed: whole epochs (start_epoch to the last
// next()), after one untimed warm-up epoch; the median of --epochs epochs. Prints one table. There is no peer in this
// run (ultralytics' loader needs PyTorch); see NOTES.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/data/loader.h"
#include "vision/data/synth/shapes.h"

using namespace vision;
namespace fs = std::filesystem;

namespace {

struct Row {
  int64_t imgsz = 0;
  std::string what;
  int workers = 0;
  double images_per_s = 0, ms_per_batch = 0;
};

Row measure(const data::Dataset& d, int64_t imgsz, int64_t batch, int workers, bool augment, int epochs,
            data::CacheMode cache = data::CacheMode::none, data::BatchPixels pixels = data::BatchPixels::f32_nchw,
            bool hsv_on_device = false, bool warp_on_device = false) {
  data::LoaderOptions o;
  o.imgsz = imgsz;
  o.batch = batch;
  o.workers = workers;
  o.augment = augment;
  o.cache = cache;
  o.pixels = pixels;
  o.hsv_on_device = hsv_on_device;
  o.warp_on_device = warp_on_device;
  data::TrainLoader loader(d, o);
  std::vector<double> seconds;
  for (int e = 0; e <= epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    loader.start_epoch(e, true);
    while (loader.next()) {
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (e > 0) seconds.push_back(s);  // epoch 0 warms caches (and fills the image cache) and threads
  }
  std::sort(seconds.begin(), seconds.end());
  const double med = seconds[seconds.size() / 2];
  const double n = static_cast<double>(d.samples.size());
  const std::string what =
      augment ? fmt::format("default aug, cache {}, {}", data::cache_mode_name(cache),
                            warp_on_device  ? "plans, pixels left to GPU"
                            : hsv_on_device ? "u8, HSV left to GPU"
                            : pixels == data::BatchPixels::u8_nhwc ? "u8"
                                                                   : "f32")
              : "decode only";
  return {imgsz, what, loader.workers(), n / med, 1000.0 * med / static_cast<double>(loader.batches_per_epoch())};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_loader: images/s of the training data loader over a vision synth dataset"};
  std::vector<int64_t> sizes = {640, 320};
  std::vector<int> workers = {1, 2, 0};
  int64_t images = 64, batch = 16;
  int epochs = 3;
  std::string keep;
  std::vector<std::string> caches = {"none", "ram"}, pixel_formats = {"f32", "u8"};
  app.add_option("--cache", caches, "image cache modes: none, ram, disk")->delimiter(',');
  app.add_option("--pixels", pixel_formats,
                 "batch pixel formats: f32 (NCHW / 255), u8 (NHWC), u8-gpu-hsv (u8, the HSV jitter left to the "
                 "consumer), u8-gpu-warp (each image a plan: the draws, boxes and sources, the warp and the jitter left "
                 "to the consumer, as the CUDA trainer takes them)")
      ->delimiter(',');
  app.add_option("--imgsz", sizes, "image sizes (the synth images are made at each size)");
  app.add_option("--workers", workers, "worker counts; 0 = every hardware thread (up to 8)");
  app.add_option("--images", images, "images in the synth dataset")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--epochs", epochs, "timed epochs per row (median)")->check(CLI::PositiveNumber);
  app.add_option("--keep", keep, "make the datasets in this folder and keep them (default: a temporary folder)");
  CLI11_PARSE(app, argc, argv);
  try {
    const fs::path root = keep.empty() ? fs::temp_directory_path() / fmt::format("bench_loader.{}", ::getpid()) : fs::path(keep);
    std::vector<Row> rows;
    for (int64_t imgsz : sizes) {
      data::synth::DatasetOptions so;
      so.out = root / fmt::format("shapes{}", imgsz);
      so.train = images;
      so.val = 1;
      so.imgsz = imgsz;
      so.overwrite = true;
      data::synth::write_dataset(so);
      const data::Dataset d = data::load_dataset(so.out / "data.yaml", "train");
      for (int w : workers)
        for (const std::string& c : caches)
          for (const std::string& p : pixel_formats) {
            VISION_CHECK(p == "f32" || p == "u8" || p == "u8-gpu-hsv" || p == "u8-gpu-warp",
                         "--pixels {}: use f32, u8, u8-gpu-hsv or u8-gpu-warp", p);
            rows.push_back(measure(d, imgsz, batch, w, true, epochs, data::parse_cache_mode(c),
                                   p == "f32" ? data::BatchPixels::f32_nchw : data::BatchPixels::u8_nhwc,
                                   p == "u8-gpu-hsv" || p == "u8-gpu-warp", p == "u8-gpu-warp"));
          }
      rows.push_back(measure(d, imgsz, batch, 0, false, epochs));
    }
    if (keep.empty()) fs::remove_all(root);
    fmt::print("TrainLoader: {} synth JPEG images (made at imgsz), batch {}, median of {} epochs; {} hardware threads\n",
               images, batch, epochs, std::thread::hardware_concurrency());
    fmt::print("{:>6}  {:<48} {:>8} {:>10} {:>10}\n", "imgsz", "pipeline", "workers", "images/s", "ms/batch");
    for (const Row& r : rows)
      fmt::print("{:>6}  {:<48} {:>8} {:>10.1f} {:>10.1f}\n", r.imgsz, r.what, r.workers, r.images_per_s,
                 r.ms_per_batch);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_loader: {}\n", e.what());
    return 1;
  }
  return 0;
}
