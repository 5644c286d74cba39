// The training image cache (vision/data/image_cache.h) and the loader's u8 batches: every cache mode gives the
// decoded, resized image; ram and disk caches give the loader's batches byte for byte; disk cache files are written
// once, read back by the next run, and rewritten when stale or damaged; a ram cache that cannot fit is refused; a
// folder where no cache file can be written leaves the images uncached with one warning; u8 batches are the f32
// batches' pixels.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/data/augment.h"
#include "vision/data/image_cache.h"
#include "vision/data/loader.h"
#include "vision/data/synth/shapes.h"

namespace vision::data {
namespace {

namespace fs = std::filesystem;

// A dataset of n images of 96 × 96 (resized to imgsz 64 by the training load), with a few rectangular ones.
Dataset cache_dataset(const test::TempDir& dir, int64_t n = 8) {
  synth::DatasetOptions o;
  o.out = dir.path() / "shapes";
  o.train = n;
  o.val = 1;
  o.imgsz = 96;
  o.seed = 5;
  synth::write_dataset(o);
  Dataset d = load_dataset(o.out / "data.yaml", "train");
  // Two images made rectangular (the cache keeps the long side at imgsz whatever the aspect).
  for (size_t i : {size_t{1}, size_t{4}}) {
    if (i >= d.samples.size()) continue;
    Image im = read_image(d.samples[i].image);
    write_image(resize_bilinear(im, 96, 40 + static_cast<int64_t>(i)), d.samples[i].image);
  }
  return d;
}

std::vector<TrainBatch> cached_epoch(TrainLoader& loader, int64_t e) {
  loader.start_epoch(e, true);
  std::vector<TrainBatch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

LoaderOptions cache_options(CacheMode cache, BatchPixels pixels = BatchPixels::f32_nchw) {
  LoaderOptions o;
  o.imgsz = 64;
  o.batch = 3;
  o.workers = 2;
  o.seed = 9;
  o.cache = cache;
  o.pixels = pixels;
  return o;
}

TEST(ImageCache, EveryModeGivesTheResizedImage) {
  test::TempDir dir;
  const Dataset d = cache_dataset(dir);
  for (CacheMode mode : {CacheMode::none, CacheMode::ram, CacheMode::disk}) {
    SCOPED_TRACE(cache_mode_name(mode));
    ImageCache cache(d, 64, mode);
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < d.samples.size(); ++i) {
        const Image want = load_for_training(read_image(d.samples[i].image), {}, 64).image;
        const Image got = cache.get(i);
        ASSERT_EQ(got, want) << "sample " << i << " pass " << pass;
        EXPECT_EQ(std::max(got.width, got.height), 64);
      }
    const ImageCacheStats s = cache.stats();
    const int64_t n = static_cast<int64_t>(d.samples.size());
    EXPECT_EQ(s.decoded, mode == CacheMode::none ? 2 * n : n);
    EXPECT_EQ(s.from_cache, mode == CacheMode::none ? 0 : n);
    EXPECT_EQ(s.files_written, mode == CacheMode::disk ? n : 0);
    EXPECT_GT(s.ram_bytes, mode == CacheMode::ram ? 0.0 : -1.0);
    EXPECT_TRUE(cache.warnings().empty());
  }
  // The disk cache files are there for the next run, which decodes nothing.
  for (const Sample& s : d.samples) EXPECT_TRUE(fs::is_regular_file(cache_file_path(s.image, 64))) << s.image;
  ImageCache again(d, 64, CacheMode::disk);
  for (size_t i = 0; i < d.samples.size(); ++i) again.get(i);
  EXPECT_EQ(again.stats().decoded, 0);
  EXPECT_EQ(again.stats().from_cache, static_cast<int64_t>(d.samples.size()));
  // Another imgsz has files of its own.
  ImageCache other(d, 32, CacheMode::disk);
  EXPECT_EQ(std::max(other.get(0).width, other.get(0).height), 32);
  EXPECT_EQ(other.stats().files_written, 1);
}

TEST(ImageCache, CachedBatchesEqualUncachedOnes) {
  test::TempDir dir;
  const Dataset d = cache_dataset(dir, 7);
  TrainLoader plain(d, cache_options(CacheMode::none)), ram(d, cache_options(CacheMode::ram)),
      disk(d, cache_options(CacheMode::disk));
  for (int64_t e : {0, 1}) {
    const auto a = cached_epoch(plain, e), b = cached_epoch(ram, e), c = cached_epoch(disk, e);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].images.nbytes(), b[i].images.nbytes());
      EXPECT_EQ(std::memcmp(a[i].images.raw(), b[i].images.raw(), a[i].images.nbytes()), 0) << "ram, batch " << i;
      EXPECT_EQ(std::memcmp(a[i].images.raw(), c[i].images.raw(), a[i].images.nbytes()), 0) << "disk, batch " << i;
      EXPECT_EQ(a[i].samples, b[i].samples);
      EXPECT_EQ(a[i].samples, c[i].samples);
      ASSERT_EQ(a[i].boxes.size(), c[i].boxes.size());
      for (size_t k = 0; k < a[i].boxes.size(); ++k) {
        ASSERT_EQ(a[i].boxes[k].size(), c[i].boxes[k].size());
        for (size_t j = 0; j < a[i].boxes[k].size(); ++j) {
          EXPECT_EQ(a[i].boxes[k][j].x1, c[i].boxes[k][j].x1);
          EXPECT_EQ(a[i].boxes[k][j].y2, c[i].boxes[k][j].y2);
        }
      }
    }
  }
  // Mosaic draws each image about four times an epoch: after the first epoch the caches serve every image.
  EXPECT_EQ(ram.cache_stats().decoded, static_cast<int64_t>(d.samples.size()));
  EXPECT_GT(ram.cache_stats().from_cache, static_cast<int64_t>(d.samples.size()));
  EXPECT_EQ(disk.cache_stats().files_written, static_cast<int64_t>(d.samples.size()));
}

TEST(ImageCache, U8BatchesHoldTheF32BatchesPixels) {
  test::TempDir dir;
  const Dataset d = cache_dataset(dir, 5);
  TrainLoader f32(d, cache_options(CacheMode::none)), u8(d, cache_options(CacheMode::ram, BatchPixels::u8_nhwc));
  const auto a = cached_epoch(f32, 0), b = cached_epoch(u8, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t n = a[i].images.dim(0);
    ASSERT_EQ(b[i].images.dtype(), core::DType::u8);
    ASSERT_EQ(b[i].images.shape(), (core::Shape{n, 64, 64, 3}));
    const float* f = a[i].images.data<float>();
    const uint8_t* p = b[i].images.data<uint8_t>();
    for (int64_t k = 0; k < n; ++k)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t px = 0; px < 64 * 64; ++px)
          ASSERT_EQ(f[(k * 3 + c) * 4096 + px], static_cast<float>(p[(k * 4096 + px) * 3 + c]) / 255.0f)
              << "batch " << i << " image " << k << " channel " << c << " pixel " << px;
    EXPECT_EQ(a[i].samples, b[i].samples);
  }
}

TEST(ImageCache, StaleAndDamagedFilesAreRewritten) {
  test::TempDir dir;
  const Dataset d = cache_dataset(dir, 3);
  {
    ImageCache cache(d, 64, CacheMode::disk);
    for (size_t i = 0; i < 3; ++i) cache.get(i);
  }
  const fs::path damaged = cache_file_path(d.samples[0].image, 64);
  fs::resize_file(damaged, fs::file_size(damaged) - 7);  // truncated
  {
    std::fstream f(cache_file_path(d.samples[1].image, 64), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put(static_cast<char>(0xFF));  // width 255 + …: a header that does not fit imgsz 64
  }
  // Sample 2's image changes (a new file, written later): its cache file is stale.
  const Image flipped = resize_bilinear(read_image(d.samples[0].image), 50, 50);
  write_image(flipped, d.samples[2].image);
  fs::last_write_time(d.samples[2].image, fs::last_write_time(d.samples[2].image) + std::chrono::seconds(5));
  ImageCache cache(d, 64, CacheMode::disk);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(cache.get(i), load_for_training(read_image(d.samples[i].image), {}, 64).image) << i;
  const std::vector<std::string> w = cache.warnings();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find(damaged.string()), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("bytes of pixels"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("damaged image cache header"), std::string::npos) << w[1];
  EXPECT_EQ(cache.stats().files_written, 3);
  ImageCache again(d, 64, CacheMode::disk);
  for (size_t i = 0; i < 3; ++i) again.get(i);
  EXPECT_EQ(again.stats().decoded, 0);
  EXPECT_TRUE(again.warnings().empty());
}

TEST(ImageCache, ParserRefusesWhatItCannotTrust) {
  Image im(10, 4, 3, 7);
  const CacheFileSource src{123, 456};
  const std::vector<uint8_t> good = encode_cache_file(im, 10, src);
  ASSERT_EQ(parse_cache_file(good, "f", 10, src), im);
  EXPECT_FALSE(parse_cache_file(good, "f", 12, src).has_value());            // another imgsz
  EXPECT_FALSE(parse_cache_file(good, "f", 10, {124, 456}).has_value());     // the source changed
  EXPECT_FALSE(parse_cache_file(good, "f", 10, {123, 457}).has_value());
  auto refused = [&](std::vector<uint8_t> bytes, const std::string& why) {
    const std::string e = test::error_of([&] { parse_cache_file(bytes, "f.vcache", 10, src); });
    EXPECT_NE(e.find("f.vcache"), std::string::npos) << e;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  };
  refused({}, "not an image cache file");
  refused(std::vector<uint8_t>(good.begin(), good.begin() + 39), "not an image cache file");
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  refused(b, "not an image cache file");
  b = good;
  b.pop_back();
  refused(b, "bytes of pixels");
  b = good;
  b.push_back(0);
  refused(b, "bytes of pixels");
  b = good;
  b[11] = 0x80;  // width 2^31 + 10
  refused(b, "damaged image cache header");
  b = good;
  b[12] = 0;  // height 0
  refused(b, "damaged image cache header");
  b = good;
  b[8] = 9;  // 9 × 4: neither side is imgsz
  refused(b, "damaged image cache header");
}

TEST(ImageCache, RamCacheThatCannotFitIsRefused) {
  test::TempDir dir;
  const Dataset d = cache_dataset(dir, 4);
  // 4 images at 64, 6 of 8 sampled square and two nearly half as tall: about 40 KB.
  const double need = estimate_cache_bytes(d, 64);
  EXPECT_GT(need, 4 * 64 * 64 * 3 * 0.6);
  EXPECT_LE(need, 4 * 64 * 64 * 3);
  const std::string e = test::error_of([&] { ImageCache c(d, 64, CacheMode::ram, 0, need / 2); });
  EXPECT_NE(e.find("cache ram"), std::string::npos) << e;
  EXPECT_NE(e.find("use --cache disk or --cache none"), std::string::npos) << e;
  ImageCache fits(d, 64, CacheMode::ram, 0, need * 1.01);
  EXPECT_EQ(parse_cache_mode("true"), CacheMode::ram);
  EXPECT_EQ(parse_cache_mode(""), CacheMode::none);
  EXPECT_NE(test::error_of([] { parse_cache_mode("gpu"); }).find("cache 'gpu'"), std::string::npos);
}

TEST(ImageCache, UnwritableFolderLeavesImagesUncachedWithOneWarning) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a read-only folder";
  test::TempDir dir;
  const Dataset d = cache_dataset(dir, 4);
  const fs::path folder = d.samples[0].image.parent_path();
  fs::permissions(folder, fs::perms::owner_write, fs::perm_options::remove);
  ImageCache cache(d, 64, CacheMode::disk);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < d.samples.size(); ++i)
      EXPECT_EQ(cache.get(i), load_for_training(read_image(d.samples[i].image), {}, 64).image);
  fs::permissions(folder, fs::perms::owner_write, fs::perm_options::add);
  const std::vector<std::string> w = cache.warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find(folder.string()), std::string::npos) << w[0];
  EXPECT_EQ(cache.stats().files_written, 0);
  EXPECT_EQ(cache.stats().decoded, 2 * static_cast<int64_t>(d.samples.size()));
}

}  // namespace
}  // namespace vision::data
