// TrainLoader — the training data loader: each epoch a seeded permutation of a Dataset's samples in batches, every
// image decoded (or taken from the image cache, image_cache.h), augmented (augment.h) and written by worker threads
// straight into its slot of the batch tensor — f32 NCHW, RGB / 255, or the u8 RGB pixels as they are (NHWC, 4× fewer
// bytes, for a trainer that normalises on the device) — `prefetch` batches ahead of the consumer.
//
// Determinism: the permutation is drawn from derive_seed(seed, epoch, kPermutationStream) and sample i of the epoch is
// augmented with a Random seeded derive_seed(seed, epoch, i), so a batch's content depends only on (seed, epoch) —
// not on the number of workers or their timing. An image that cannot be read is reported once (the message names the
// path; counts().problems), counted, and replaced by the next readable sample in dataset order (wrapping round), so
// batches stay full; when no sample is readable, next() throws vision::Error. Errors in a worker come out of next().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "vision/core/tensor.h"
#include "vision/data/augment.h"
#include "vision/data/dataset.h"
#include "vision/data/image_cache.h"

namespace vision::data {

// The format of a batch's images.
enum class BatchPixels {
  f32_nchw,  // f32 [B, 3, S, S], RGB / 255 (data/image_tensor.h's write_normalized)
  u8_nhwc,   // u8 [B, S, S, 3], the augmented RGB pixels
};

struct LoaderOptions {
  int64_t imgsz = 640;
  int64_t batch = 16;
  int workers = 0;  // 0: min(hardware threads, 8)
  uint64_t seed = 0;
  bool augment = true;  // false: the training load and a letterbox to imgsz × imgsz (no upscaling), nothing random
  bool shuffle = true;  // false: dataset order
  AugmentOptions aug;
  int prefetch = 4;  // batches ahead
  // Data-parallel training: this rank's shard of every epoch, as PyTorch's DistributedSampler (drop_last off) makes
  // it — the epoch's permutation (the same on every rank) padded to a multiple of `world` by repeating its start,
  // then positions rank, rank + world, … — and `batch` is this rank's share of the global batch. Sample seeds follow
  // the global position, so a sample's image is the same whatever the world size.
  int rank = 0, world = 1;
  BatchPixels pixels = BatchPixels::f32_nchw;
  CacheMode cache = CacheMode::none;  // decoded, resized images kept in memory or on disk (image_cache.h)
  // The HSV jitter drawn but left to the consumer (augment_sample_into's defer_hsv): each batch carries the gains
  // (TrainBatch::hsv) and its pixels are the rest of the pipeline's. The CUDA trainer applies them on the device (the
  // jitter is about half the augmentation's CPU time); the pixels after it are the same.
  bool hsv_on_device = false;
  // The warp left to the consumer too (with hsv_on_device, for u8 batches, when augmenting): each image of a batch is
  // a plan (TrainBatch::plans: the draws made, the boxes final, the pixels described — plan_sample) and the batch's
  // images tensor is left unwritten. Workers then only draw and take their sources (with the ram cache, its own
  // images, shared: a device can keep copies of them); the CUDA trainer renders the plans on the device, which gives
  // the same pixels. Without augmentation the pixels are made as before.
  bool warp_on_device = false;
  // Host memory for a new batch buffer of `bytes` (e.g. pinned memory, for uploads without staging); default:
  // aligned_alloc. Buffers are pooled: a batch's buffer is reused for a later batch of the same size once every tensor
  // using it is dropped; buffers are not zeroed, since every image overwrites its whole slot.
  std::function<std::shared_ptr<void>(size_t bytes)> host_memory = {};
};

struct TrainBatch {
  int64_t index = 0;                         // batch index in the epoch
  core::Tensor images;                       // host: f32 [B, 3, S, S] NCHW RGB / 255, or u8 [B, S, S, 3] RGB
  std::vector<std::vector<TargetBox>> boxes;  // per image, in its pixels
  std::vector<size_t> samples;               // the dataset sample each image came from (after any replacement)
  std::vector<HsvGains> hsv;                 // per image, with LoaderOptions::hsv_on_device (else empty)
  std::vector<SamplePlan> plans;             // per image, with LoaderOptions::warp_on_device (else empty)
};

struct LoaderCounts {
  int64_t images = 0;                 // images written into batches, over all epochs
  int64_t corrupt = 0;                // distinct unreadable images met
  std::vector<std::string> problems;  // one per unreadable image: "path: why"
};

// The stream of derive_seed that draws an epoch's permutation (sample seeds use the stream `epoch` with index i).
inline constexpr uint64_t kPermutationStream = ~uint64_t{0};

class TrainLoader {
 public:
  // The dataset must outlive the loader. Throws vision::Error for an empty dataset or a non-positive imgsz or batch.
  TrainLoader(const Dataset& dataset, LoaderOptions options);
  ~TrainLoader();
  TrainLoader(const TrainLoader&) = delete;
  TrainLoader& operator=(const TrainLoader&) = delete;

  int64_t batches_per_epoch() const;  // ceil(shard / batch), shard = ceil(n / world); the last batch may be smaller
  int workers() const { return workers_; }

  // Starts (or restarts: an epoch in progress is abandoned) epoch `epoch`; `mosaic` false turns the mosaic off
  // (close_mosaic).
  void start_epoch(int64_t epoch, bool mosaic);
  // The epoch's next batch, in order; nullopt after the last (or before any start_epoch).
  std::optional<TrainBatch> next();

  LoaderCounts counts() const;
  ImageCacheStats cache_stats() const { return cache_.stats(); }
  // Problems with image cache files (image_cache.h), one per problem, in the order met.
  std::vector<std::string> cache_warnings() const { return cache_.warnings(); }

 private:
  struct Slot {
    TrainBatch batch;
    int64_t remaining = 0;
  };
  void stop();
  void work();
  // The training load of sample `index`, or of the next readable one (its index in `used`).
  LabeledImage load(size_t index, size_t& used);
  // The same, shared from the cache rather than copied (the plans' sources).
  SourceImage load_source(size_t index, size_t& used);
  // The index of the first readable sample from `index` on (wrapping round), and the call's result on it.
  template <typename Load>
  auto first_readable(size_t index, size_t& used, const Load& load);
  // A worker's buffers: the augmentation's and, for f32 batches, the augmented image before its normalisation.
  struct WorkerScratch {
    AugmentScratch augment;
    Image staged;
  };
  void make_item(int64_t batch, int64_t slot, Slot& s, WorkerScratch& scratch);

  struct BatchPool;
  core::Tensor allocate_batch(const core::Shape& shape, core::DType dtype);

  const Dataset& dataset_;
  LoaderOptions o_;
  std::shared_ptr<BatchPool> pool_;
  ImageCache cache_;
  int workers_ = 1;

  // Epoch state (guarded by mu_).
  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  int64_t epoch_ = 0;
  bool mosaic_ = true;
  bool started_ = false;
  std::vector<size_t> order_;      // the epoch's samples of this rank, in order
  std::vector<uint64_t> position_;  // their positions in the (padded) global epoch: the sample seeds' index
  int64_t next_item_ = 0;     // next (batch · batch size + slot) to hand out
  int64_t next_deliver_ = 0;  // next batch next() returns
  std::map<int64_t, Slot> slots_;
  std::exception_ptr error_;

  // Unreadable images (guarded by bad_mu_).
  mutable std::mutex bad_mu_;
  std::vector<char> bad_;
  LoaderCounts counts_;
};

// The most boxes any image of the batch has.
int64_t max_boxes(const TrainBatch& batch);

// The loss targets of a batch: targets [B, rows, 5] f32 (class, x1, y1, x2, y2 in input pixels; rows past an image's
// count are zero) and count [B] i32. Tensors that are not host tensors of those shapes and dtypes are replaced by new
// ones; tensors that are, are written in place. Throws when an image has more than `rows` boxes (see max_boxes).
void fill_targets(const TrainBatch& batch, int64_t rows, core::Tensor& targets, core::Tensor& count);

}  // namespace vision::data
