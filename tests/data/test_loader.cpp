// The training loader (vision/data/loader.h) over a small `vision synth` dataset: batches identical byte for byte
// with 1 and 3 workers, epochs that differ, every sample once per epoch, the partial last batch, the plain
// (augment = false) path against the decoded image, unreadable images counted once and replaced, an unreadable
// dataset, restart and destruction mid-epoch, the allocate hook, and the loss-target layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/data/loader.h"
#include "vision/data/synth/shapes.h"
#include "vision/data/image_tensor.h"

namespace vision::data {
namespace {

namespace fs = std::filesystem;

Dataset make_dataset(const test::TempDir& dir, int64_t n = 10, int64_t imgsz = 64) {
  synth::DatasetOptions o;
  o.out = dir.path() / "shapes";
  o.train = n;
  o.val = 1;
  o.imgsz = imgsz;
  o.seed = 11;
  synth::write_dataset(o);
  return load_dataset(o.out / "data.yaml", "train");
}

std::vector<TrainBatch> epoch(TrainLoader& loader, int64_t e, bool mosaic = true) {
  loader.start_epoch(e, mosaic);
  std::vector<TrainBatch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

bool same_bytes(const core::Tensor& a, const core::Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

LoaderOptions small(int workers) {
  LoaderOptions o;
  o.imgsz = 64;
  o.batch = 4;
  o.workers = workers;
  o.seed = 3;
  o.prefetch = 2;
  return o;
}

TEST(Loader, SameSeedSameBatchesWhateverTheWorkers) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir);
  TrainLoader one(d, small(1)), three(d, small(3));
  EXPECT_EQ(one.batches_per_epoch(), 3);
  for (int64_t e : {0, 1}) {
    const auto a = epoch(one, e), b = epoch(three, e);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].index, static_cast<int64_t>(i));
      EXPECT_TRUE(same_bytes(a[i].images, b[i].images)) << "epoch " << e << " batch " << i;
      EXPECT_EQ(a[i].boxes, b[i].boxes);
      EXPECT_EQ(a[i].samples, b[i].samples);
    }
    // The last batch is partial; every sample appears once.
    EXPECT_EQ(a[2].images.shape(), (core::Shape{2, 3, 64, 64}));
    EXPECT_EQ(a[0].images.shape(), (core::Shape{4, 3, 64, 64}));
    std::vector<size_t> all;
    for (const auto& batch : a) all.insert(all.end(), batch.samples.begin(), batch.samples.end());
    std::sort(all.begin(), all.end());
    std::vector<size_t> want(10);
    std::iota(want.begin(), want.end(), size_t{0});
    EXPECT_EQ(all, want);
  }
  EXPECT_EQ(one.counts().images, 20);
  EXPECT_EQ(one.counts().corrupt, 0);
}

// hsv_on_device: the same draws and boxes, pixels without the jitter, and the gains that, applied afterwards
// (apply_hsv), give the batch the loader makes with the jitter applied; f32 batches refuse the option.
TEST(Loader, DeferredHsvGivesTheSameBatchOnceApplied) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir);
  LoaderOptions o = small(2);
  o.pixels = BatchPixels::u8_nhwc;
  TrainLoader applied(d, o);
  o.hsv_on_device = true;
  TrainLoader deferred(d, o);
  const auto a = epoch(applied, 1), b = epoch(deferred, 1);
  ASSERT_EQ(a.size(), b.size());
  int64_t jittered = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].hsv.empty());
    ASSERT_EQ(b[i].hsv.size(), static_cast<size_t>(b[i].images.dim(0)));
    EXPECT_EQ(a[i].boxes, b[i].boxes);
    EXPECT_EQ(a[i].samples, b[i].samples);
    const size_t bytes = 64 * 64 * 3;
    for (int64_t k = 0; k < b[i].images.dim(0); ++k) {
      Image im(64, 64, 3);
      std::memcpy(im.pixels.data(), b[i].images.data<uint8_t>() + static_cast<size_t>(k) * bytes, bytes);
      const bool same_before = std::memcmp(im.pixels.data(), a[i].images.data<uint8_t>() + k * bytes, bytes) == 0;
      const HsvGains& g = b[i].hsv[static_cast<size_t>(k)];
      apply_hsv(im, g[0], g[1], g[2]);
      EXPECT_EQ(std::memcmp(im.pixels.data(), a[i].images.data<uint8_t>() + k * bytes, bytes), 0)
          << "batch " << i << " image " << k;
      jittered += !same_before;  // the deferred batch lacked the jitter
    }
  }
  EXPECT_GT(jittered, 0);
  o.pixels = BatchPixels::f32_nchw;
  EXPECT_THROW(TrainLoader(d, o), Error);
}

// warp_on_device: each image a plan whose pixels (warp_plan_cpu, the GPU kernel's twin, then the jitter with the
// plan's gains) are the batch the loader makes itself, with the same boxes, samples and gains — mosaic on (epoch 1)
// and off (close_mosaic); with the ram cache the plans' sources are the cache's own images (lasting: a device may keep
// copies), without it they are not. The option needs hsv_on_device.
TEST(Loader, PlansRenderToTheLoadersOwnBatches) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir);
  for (const CacheMode cache : {CacheMode::ram, CacheMode::none}) {
    SCOPED_TRACE(cache_mode_name(cache));
    LoaderOptions o = small(2);
    o.pixels = BatchPixels::u8_nhwc;
    o.hsv_on_device = true;
    o.cache = cache;
    TrainLoader pixels(d, o);
    o.warp_on_device = true;
    TrainLoader plans(d, o);
    int64_t compared = 0, lasting = 0, sources = 0;
    for (const bool mosaic : {true, false}) {
      const auto a = epoch(pixels, 1, mosaic), b = epoch(plans, 1, mosaic);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(a[i].plans.empty());
        const int64_t n = b[i].images.dim(0);
        ASSERT_EQ(b[i].plans.size(), static_cast<size_t>(n));
        EXPECT_EQ(a[i].boxes, b[i].boxes);
        EXPECT_EQ(a[i].samples, b[i].samples);
        EXPECT_EQ(a[i].hsv, b[i].hsv);
        const size_t bytes = 64 * 64 * 3;
        std::vector<uint8_t> px(bytes, 7);
        for (int64_t k = 0; k < n; ++k) {
          const SamplePlan& plan = b[i].plans[static_cast<size_t>(k)];
          EXPECT_EQ(plan.warp.tiles, mosaic ? 4 : 1);
          for (int t = 0; t < plan.warp.tiles; ++t) lasting += plan.lasting[static_cast<size_t>(t)], ++sources;
          warp_plan_cpu(host_warp_plan(plan), px.data());
          EXPECT_EQ(std::memcmp(px.data(), a[i].images.data<uint8_t>() + static_cast<size_t>(k) * bytes, bytes), 0)
              << "batch " << i << " image " << k;
          ++compared;
        }
      }
    }
    EXPECT_EQ(compared, 20);
    EXPECT_EQ(lasting, cache == CacheMode::ram ? sources : 0);
  }
  LoaderOptions o = small(1);
  o.pixels = BatchPixels::u8_nhwc;
  o.warp_on_device = true;
  EXPECT_THROW(TrainLoader(d, o), Error);
}

TEST(Loader, EpochsDiffer) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir);
  TrainLoader loader(d, small(2));
  const auto a = epoch(loader, 0), b = epoch(loader, 1), a2 = epoch(loader, 0);
  EXPECT_NE(a[0].samples, b[0].samples);
  EXPECT_FALSE(same_bytes(a[0].images, b[0].images));
  EXPECT_TRUE(same_bytes(a[0].images, a2[0].images));  // an epoch replays
  // Without mosaic (close_mosaic) the batch differs again, and boxes stay in the image.
  const auto c = epoch(loader, 0, false);
  EXPECT_FALSE(same_bytes(a[0].images, c[0].images));
  int64_t boxes = 0;
  for (const auto& batch : c)
    for (const auto& img : batch.boxes)
      for (const TargetBox& t : img) {
        ++boxes;
        EXPECT_TRUE(t.x1 >= 0 && t.y1 >= 0 && t.x2 <= 64 && t.y2 <= 64 && t.x2 - t.x1 > 2 && t.y2 - t.y1 > 2);
      }
  EXPECT_GT(boxes, 0);
  // Pixel values are samples / 255.
  for (float v : a[1].images.to_vector()) {
    const float s = v * 255.0f;
    ASSERT_NEAR(s, std::round(s), 1e-3f);
    ASSERT_TRUE(v >= 0 && v <= 1);
  }
}

TEST(Loader, WithoutAugmentationTheImageIsTheDecodedOne) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir, 5);
  LoaderOptions o = small(2);
  o.augment = false;
  o.shuffle = false;
  TrainLoader loader(d, o);
  const auto batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].samples, (std::vector<size_t>{0, 1, 2, 3}));
  const Image im = read_image(d.samples[2].image);
  const core::Tensor want = images_to_tensor(std::span(&im, 1));
  EXPECT_EQ(0, std::memcmp(want.raw(), batches[0].images.data<float>() + 2 * 3 * 64 * 64, want.nbytes()));
  const auto& boxes = batches[0].boxes[2];
  ASSERT_EQ(boxes.size(), d.samples[2].labels.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    const LabelBox& l = d.samples[2].labels[i];
    EXPECT_EQ(boxes[i].cls, l.cls);
    EXPECT_NEAR(boxes[i].x1, (l.cx - l.w / 2) * 64, 1e-3);
    EXPECT_NEAR(boxes[i].y2, (l.cy + l.h / 2) * 64, 1e-3);
  }
}

TEST(Loader, CorruptImageIsCountedOnceAndReplaced) {
  test::TempDir dir;
  Dataset d = make_dataset(dir, 6);
  test::write_file(d.samples[3].image, std::string("this is not a JPEG at all"));
  LoaderOptions o = small(3);
  o.shuffle = false;
  o.aug.mosaic = 0;  // only the sample itself is read
  TrainLoader loader(d, o);
  for (int64_t e : {0, 1}) {
    const auto batches = epoch(loader, e);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].images.dim(0), 4);
    EXPECT_EQ(batches[0].samples, (std::vector<size_t>{0, 1, 2, 4}));  // 3 → the next readable, 4
    EXPECT_EQ(batches[1].samples, (std::vector<size_t>{4, 5}));
  }
  const LoaderCounts c = loader.counts();
  EXPECT_EQ(c.corrupt, 1);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find(d.samples[3].image.string()), std::string::npos) << c.problems[0];
  EXPECT_EQ(c.images, 12);

  // With mosaic, shuffling and several workers: still full batches and the one problem.
  LoaderOptions m = small(3);
  TrainLoader mosaic(d, m);
  const auto batches = epoch(mosaic, 0);
  size_t n = 0;
  for (const auto& b : batches) {
    n += b.samples.size();
    for (size_t s : b.samples) EXPECT_NE(s, 3u);
  }
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(mosaic.counts().corrupt, 1);
}

TEST(Loader, NothingReadableThrows) {
  test::TempDir dir;
  Dataset d = make_dataset(dir, 3);
  for (const Sample& s : d.samples) test::write_file(s.image, std::string("garbage"));
  TrainLoader loader(d, small(2));
  loader.start_epoch(0, true);
  EXPECT_THROW(loader.next(), Error);
  EXPECT_EQ(loader.counts().corrupt, 3);
}

TEST(Loader, RestartAndDestroyMidEpoch) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir, 12);
  TrainLoader loader(d, small(3));
  EXPECT_FALSE(loader.next().has_value());  // no epoch started
  loader.start_epoch(0, true);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(0, true);  // restart: the same epoch from its first batch
  const auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 0);
  {
    TrainLoader other(d, small(2));
    other.start_epoch(5, true);  // destroyed with workers busy or waiting: joins
  }
  while (loader.next()) {
  }
  EXPECT_FALSE(loader.next().has_value());
}

// Memory from the host_memory hook (pinned memory in the trainer) holds the batches, poisoned (0xFF bytes: NaN in
// f32, 255 in u8): every element must be written.
std::shared_ptr<void> poisoned_memory(size_t bytes) {
  void* p = std::malloc(bytes);
  std::memset(p, 0xFF, bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

TEST(Loader, HostMemoryHookHoldsTheImages) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir, 5);
  std::atomic<int> calls{0};
  LoaderOptions o = small(2);
  o.host_memory = [&](size_t bytes) {
    ++calls;
    return poisoned_memory(bytes);
  };
  TrainLoader loader(d, o);
  const auto batches = epoch(loader, 0);
  EXPECT_EQ(calls.load(), 2);
  for (const auto& b : batches)
    for (float v : b.images.to_vector()) ASSERT_GE(v, 0.0f);
}

// An allocation that fails (a hook that throws, out of memory) is the error next() throws, never std::terminate on a
// worker thread (issue #33); batches before it are delivered.
TEST(Loader, AFailedAllocationIsAnErrorOfNext) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir, 6);
  std::atomic<int> calls{0};
  LoaderOptions o = small(2);
  o.prefetch = 1;
  o.host_memory = [&](size_t bytes) {
    if (++calls == 2) throw Error("no memory for this batch");
    return poisoned_memory(bytes);
  };
  TrainLoader loader(d, o);
  loader.start_epoch(0, false);
  const std::optional<TrainBatch> first = loader.next();  // held: the second batch cannot reuse its buffer
  ASSERT_TRUE(first.has_value());
  try {
    loader.next();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no memory for this batch"), std::string::npos) << e.what();
  }
  // A size whose batches cannot fit in memory is refused when the loader is made.
  LoaderOptions huge = small(2);
  huge.batch = 1 << 16;
  huge.imgsz = 8192;
  EXPECT_NE(test::error_of([&] { TrainLoader l(d, huge); }).find("use a smaller batch or image size"),
            std::string::npos);
}

// The default allocation reuses a dropped batch's buffer for a later batch without zeroing it: every element must be
// written again. Epoch 1 of a loader whose buffers hold epoch 0's images equals epoch 1 of a fresh loader.
TEST(Loader, BatchBuffersAreReusedAndRewrittenWhole) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir);
  TrainLoader reused(d, small(2));
  std::vector<const void*> seen;
  reused.start_epoch(0, true);
  while (auto b = reused.next()) seen.push_back(b->images.raw());  // each batch dropped before the next is asked for
  const std::vector<TrainBatch> again = epoch(reused, 1);
  size_t recycled = 0;
  for (const TrainBatch& b : again) recycled += std::count(seen.begin(), seen.end(), b.images.raw()) > 0;
  EXPECT_GT(recycled, 0u) << "no buffer of epoch 0 was reused";
  TrainLoader fresh(d, small(2));
  const std::vector<TrainBatch> want = epoch(fresh, 1);
  ASSERT_EQ(again.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bytes(again[i].images, want[i].images)) << "batch " << i;
  // A batch still held is never handed out again.
  for (size_t i = 0; i < again.size(); ++i)
    for (size_t j = i + 1; j < again.size(); ++j) EXPECT_NE(again[i].images.raw(), again[j].images.raw());
}

TEST(Loader, FillTargetsLayout) {
  TrainBatch b;
  b.index = 7;
  b.boxes = {{{2, 1, 2, 3, 4}, {0, 5, 6, 7, 8}}, {}, {{5, 9, 10, 11, 12}}};
  EXPECT_EQ(max_boxes(b), 2);
  core::Tensor targets, count;
  fill_targets(b, 3, targets, count);
  ASSERT_EQ(targets.shape(), (core::Shape{3, 3, 5}));
  ASSERT_EQ(count.shape(), (core::Shape{3}));
  ASSERT_EQ(count.dtype(), core::DType::i32);
  const std::vector<float> want = {2, 1, 2, 3, 4, 0, 5, 6, 7, 8, 0, 0, 0, 0, 0,  //
                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                   5, 9, 10, 11, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(targets.to_vector(), want);
  EXPECT_EQ(std::vector<int32_t>(count.data<int32_t>(), count.data<int32_t>() + 3), (std::vector<int32_t>{2, 0, 1}));
  // Tensors of the right shape are written in place (stale rows cleared).
  targets.fill(99.0f);
  const void* where = targets.raw();
  fill_targets(b, 3, targets, count);
  EXPECT_EQ(targets.raw(), where);
  EXPECT_EQ(targets.to_vector(), want);
  EXPECT_THROW(fill_targets(b, 1, targets, count), Error);
}

}  // namespace
}  // namespace vision::data

namespace vision::data {
namespace {

// A rank's shard (LoaderOptions::rank / world, PyTorch's DistributedSampler): the ranks' shards together are the
// single-rank epoch — the same samples in the same global positions, each image byte for byte the single-rank one
// (sample seeds follow the global position) — with the permutation's start repeated to pad the last positions; the
// shards differ from epoch to epoch and from rank to rank; a bad rank is an error.
TEST(LoaderShards, RanksTogetherAreTheSingleRankEpoch) {
  test::TempDir dir;
  const Dataset d = make_dataset(dir, 10);
  LoaderOptions one = small(2);
  one.batch = 1;
  TrainLoader single(d, one);
  for (int64_t e : {0, 1}) {
    const std::vector<TrainBatch> all = epoch(single, e);
    ASSERT_EQ(all.size(), 10u);
    for (int world : {2, 3, 4}) {
      const size_t shard = (10 + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
      std::vector<int> seen(10, 0);
      for (int rank = 0; rank < world; ++rank) {
        LoaderOptions o = small(2);
        o.batch = 2;
        o.rank = rank;
        o.world = world;
        TrainLoader loader(d, o);
        EXPECT_EQ(loader.batches_per_epoch(), static_cast<int64_t>((shard + 1) / 2));
        const std::vector<TrainBatch> mine = epoch(loader, e);
        size_t i = 0;
        for (const TrainBatch& b : mine)
          for (int64_t slot = 0; slot < b.images.dim(0); ++slot, ++i) {
            const size_t p = static_cast<size_t>(rank) + static_cast<size_t>(world) * i;  // the global position
            const TrainBatch& want = all[p % 10];
            EXPECT_EQ(b.samples[static_cast<size_t>(slot)], want.samples[0]) << "world " << world << " rank " << rank;
            if (p < 10) {
              ++seen[p];
              const size_t bytes = static_cast<size_t>(b.images.numel() / b.images.dim(0)) * sizeof(float);
              EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(b.images.raw()) + slot * static_cast<int64_t>(bytes),
                                    want.images.raw(), bytes),
                        0)
                  << "world " << world << " rank " << rank << " position " << p;
            }
          }
        EXPECT_EQ(i, shard) << "world " << world << " rank " << rank;
      }
      EXPECT_EQ(seen, std::vector<int>(10, 1)) << "world " << world;
    }
  }
  LoaderOptions bad = small(1);
  bad.rank = 2;
  bad.world = 2;
  EXPECT_NE(test::error_of([&] { TrainLoader l(d, bad); }).find("rank 2 of a world of 2"), std::string::npos);
}

}  // namespace
}  // namespace vision::data
