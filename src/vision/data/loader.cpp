#include "vision/data/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "vision/core/error.h"
#include "vision/data/image.h"
#include "vision/data/image_tensor.h"
#include "vision/data/random.h"

namespace vision::data {

// Batch buffers by size: a batch tensor's memory comes back here when its last user drops it, and the next batch of
// that size takes it (at most kKept buffers a size are kept; the others are freed). A recycled buffer has its pages
// mapped already, and nothing is zeroed: a fresh zero-filled tensor per batch cost a memset of the whole batch (315 MB
// at batch 64 of 640²) under the loader's lock, and its page faults.
struct TrainLoader::BatchPool {
  static constexpr size_t kKept = 16;
  std::mutex mu;
  std::map<size_t, std::vector<std::shared_ptr<void>>> free;  // by byte count
};

namespace {

// The bytes of one batch buffer.
double batch_bytes(const LoaderOptions& o) {
  const double per_sample = o.pixels == BatchPixels::u8_nhwc ? 3.0 : 12.0;
  return per_sample * static_cast<double>(o.batch) * static_cast<double>(o.imgsz) * static_cast<double>(o.imgsz);
}

const LoaderOptions& checked(const Dataset& dataset, const LoaderOptions& o) {
  VISION_CHECK(!dataset.samples.empty(), "TrainLoader: the dataset ('{}' split of {}) has no samples", dataset.split,
               dataset.config.file.string());
  VISION_CHECK(o.imgsz > 0 && o.batch > 0, "TrainLoader: imgsz ({}) and batch ({}) must be positive", o.imgsz,
               o.batch);
  VISION_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "TrainLoader: rank {} of a world of {}", o.rank,
               o.world);
  VISION_CHECK(!o.hsv_on_device || o.pixels == BatchPixels::u8_nhwc,
               "TrainLoader: hsv_on_device leaves the HSV jitter to the consumer of u8 batches; f32 batches are "
               "normalised on the loader's threads, after which it cannot be applied");
  VISION_CHECK(!o.warp_on_device || o.hsv_on_device,
               "TrainLoader: warp_on_device leaves the warp to the consumer, and the HSV jitter after it: it needs "
               "hsv_on_device (u8 batches) too");
  return o;
}

}  // namespace

TrainLoader::TrainLoader(const Dataset& dataset, LoaderOptions options)
    : dataset_(dataset),
      o_(checked(dataset, options)),
      pool_(std::make_shared<BatchPool>()),
      // The ram cache may fill what the batches in flight leave of the memory available.
      cache_(dataset, o_.imgsz, o_.cache, batch_bytes(o_) * (std::max(1, o_.prefetch) + 2)) {
  if (o_.workers <= 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    workers_ = static_cast<int>(std::clamp<unsigned>(hw, 1, 8));
  } else {
    workers_ = o_.workers;
  }
  o_.prefetch = std::max(1, o_.prefetch);
  // Up to `prefetch` batches wait ahead of the consumer, one is in use and one being made: refuse a size whose batches
  // cannot fit in the machine's memory now, rather than fail on a worker thread later.
  const double bytes = batch_bytes(o_);
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (!(physical <= 0 || bytes * (o_.prefetch + 2) <= physical))
    fail_as(ErrorKind::out_of_memory,
               "TrainLoader: a batch of {} images at {}x{} takes {:.2f} GB, and the loader holds up to {} batches "
               "({:.1f} GB), more than this machine's {:.1f} GB of memory; use a smaller batch or image size",
               o_.batch, o_.imgsz, o_.imgsz, bytes / 1e9, o_.prefetch + 2, bytes * (o_.prefetch + 2) / 1e9,
               physical / 1e9);
  bad_.assign(dataset_.samples.size(), 0);
}

TrainLoader::~TrainLoader() { stop(); }

int64_t TrainLoader::batches_per_epoch() const {
  const int64_t n = static_cast<int64_t>(dataset_.samples.size());
  const int64_t shard = (n + o_.world - 1) / o_.world;
  return (shard + o_.batch - 1) / o_.batch;
}

void TrainLoader::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard lk(mu_);
  stopping_ = false;
  started_ = false;
  slots_.clear();
  error_ = nullptr;
}

void TrainLoader::start_epoch(int64_t epoch, bool mosaic) {
  stop();
  const size_t n = dataset_.samples.size();
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  if (o_.shuffle) {  // Fisher–Yates
    Random rng(derive_seed(o_.seed, static_cast<uint64_t>(epoch), kPermutationStream));
    for (size_t i = n - 1; i > 0; --i)
      std::swap(perm[i], perm[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(i)))]);
  }
  // This rank's shard of the permutation padded to a multiple of the world (by repeating its start).
  const size_t world = static_cast<size_t>(o_.world), shard = (n + world - 1) / world;
  order_.resize(shard);
  position_.resize(shard);
  for (size_t i = 0; i < shard; ++i) {
    const size_t p = static_cast<size_t>(o_.rank) + world * i;
    order_[i] = perm[p % n];
    position_[i] = p;
  }
  {
    std::lock_guard lk(mu_);
    epoch_ = epoch;
    mosaic_ = mosaic;
    next_item_ = 0;
    next_deliver_ = 0;
    started_ = true;
  }
  for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { work(); });
}

void TrainLoader::work() {
  const int64_t n = static_cast<int64_t>(order_.size()), B = o_.batch;
  WorkerScratch scratch;  // this thread's buffers, reused item after item
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] {
      return stopping_ || (!error_ && next_item_ < n && next_item_ / B < next_deliver_ + o_.prefetch);
    });
    if (stopping_) return;
    const int64_t k = next_item_++, b = k / B, slot = k % B;
    if (slot == 0) {  // the batch's first item: make its slot (items are handed out in order)
      // Under the lock, so that no item of batch b is made before its slot exists; a failure (out of memory, a
      // `host_memory` hook that throws) stops the loader and is rethrown by next(), as a failed item is.
      try {
        const int64_t size = std::min(B, n - b * B);
        const bool u8 = o_.pixels == BatchPixels::u8_nhwc;
        const core::Shape shape = u8 ? core::Shape{size, o_.imgsz, o_.imgsz, 3} : core::Shape{size, 3, o_.imgsz, o_.imgsz};
        core::Tensor images = allocate_batch(shape, u8 ? core::DType::u8 : core::DType::f32);
        Slot& s = slots_[b];
        s.batch.index = b;
        s.batch.images = std::move(images);
        s.batch.boxes.resize(static_cast<size_t>(size));
        s.batch.samples.resize(static_cast<size_t>(size));
        s.batch.hsv.assign(o_.hsv_on_device ? static_cast<size_t>(size) : 0, HsvGains{1, 1, 1});
        s.batch.plans.assign(o_.warp_on_device && o_.augment ? static_cast<size_t>(size) : 0, SamplePlan{});
        s.remaining = size;
      } catch (...) {
        if (!error_) error_ = std::current_exception();
        ready_cv_.notify_all();
        continue;
      }
    }
    Slot& s = slots_.at(b);  // map nodes stay put while other batches come and go
    lk.unlock();
    try {
      make_item(b, slot, s, scratch);
    } catch (...) {
      lk.lock();
      if (!error_) error_ = std::current_exception();
      ready_cv_.notify_all();
      continue;
    }
    lk.lock();
    if (--s.remaining == 0) ready_cv_.notify_all();
  }
}

core::Tensor TrainLoader::allocate_batch(const core::Shape& shape, core::DType dtype) {
  const size_t bytes = (static_cast<size_t>(shape.numel()) * core::dtype_size(dtype) + 63) / 64 * 64;
  std::shared_ptr<void> memory;
  {
    std::lock_guard lk(pool_->mu);
    std::vector<std::shared_ptr<void>>& buffers = pool_->free[bytes];
    if (!buffers.empty()) memory = std::move(buffers.back()), buffers.pop_back();
  }
  if (!memory) {
    if (o_.host_memory) {
      memory = o_.host_memory(bytes);
    } else if (void* p = std::aligned_alloc(64, bytes)) {
      memory = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    }
  }
  VISION_CHECK(memory,
               "TrainLoader: out of host memory allocating a batch of {} images at {}x{} ({:.2f} GB); use a smaller "
               "batch or image size",
               shape.dim(0), o_.imgsz, o_.imgsz, static_cast<double>(bytes) / 1e9);
  void* p = memory.get();
  // The tensor's owner gives the buffer back to the pool (or frees it) when the last user drops it.
  std::shared_ptr<void> owner(p, [pool = pool_, bytes, memory](void*) mutable {
    std::lock_guard lk(pool->mu);
    std::vector<std::shared_ptr<void>>& buffers = pool->free[bytes];
    if (buffers.size() < BatchPool::kKept) buffers.push_back(std::move(memory));
    memory.reset();
  });
  return core::Tensor::wrap(std::move(owner), p, shape, dtype, core::Device::cpu);
}

template <typename Load>
auto TrainLoader::first_readable(size_t index, size_t& used, const Load& load) {
  const size_t n = dataset_.samples.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t j = (index + k) % n;
    {
      std::lock_guard lk(bad_mu_);
      if (bad_[j]) continue;
    }
    try {
      auto x = load(j);
      used = j;
      return x;
    } catch (const Error& e) {
      std::lock_guard lk(bad_mu_);
      if (!bad_[j]) {
        bad_[j] = 1;
        ++counts_.corrupt;
        counts_.problems.push_back(e.what());
      }
    }
  }
  fail("TrainLoader: no image of the dataset ('{}' split of {}, {} images) can be read; the first problem: {}",
       dataset_.split, dataset_.config.file.string(), n, counts().problems.empty() ? "?" : counts().problems[0]);
}

LabeledImage TrainLoader::load(size_t index, size_t& used) {
  return first_readable(index, used, [&](size_t j) {
    return load_for_training(cache_.get(j), dataset_.samples[j].labels, o_.imgsz);
  });
}

SourceImage TrainLoader::load_source(size_t index, size_t& used) {
  return first_readable(index, used, [&](size_t j) {
    SourceImage x;
    x.image = cache_.share(j);
    VISION_CHECK(x.image->channels == 3 && std::max(x.image->width, x.image->height) == o_.imgsz,
                 "TrainLoader: the cached image of sample {} is {}×{}×{}, not a training load at {}", j, x.image->width,
                 x.image->height, x.image->channels, o_.imgsz);
    x.boxes = training_boxes(dataset_.samples[j].labels, x.image->width, x.image->height);
    x.lasting = cache_.mode() == CacheMode::ram;
    return x;
  });
}

void TrainLoader::make_item(int64_t b, int64_t slot, Slot& s, WorkerScratch& scratch) {
  const int64_t k = b * o_.batch + slot;
  const size_t sample = order_[static_cast<size_t>(k)];
  const size_t n = dataset_.samples.size();  // mosaic partners come from the whole dataset
  Random rng(derive_seed(o_.seed, static_cast<uint64_t>(epoch_), position_[static_cast<size_t>(k)]));
  size_t used = sample;
  bool first = true;
  const SampleLoader loader = [&](size_t index) {
    size_t j = index;
    LabeledImage x = load(index, j);
    if (first) used = j, first = false;  // the batch records the sample its image (not a mosaic partner) came from
    return x;
  };
  const size_t bytes = static_cast<size_t>(o_.imgsz * o_.imgsz * 3);
  std::vector<TargetBox> boxes;
  if (o_.augment && o_.warp_on_device) {  // the draws and the boxes here, the pixels as a plan (the consumer's)
    const SourceLoader sources = [&](size_t index) {
      size_t j = index;
      SourceImage x = load_source(index, j);
      if (first) used = j, first = false;
      return x;
    };
    SamplePlan& plan = s.batch.plans[static_cast<size_t>(slot)];
    boxes = plan_sample(sample, n, sources, o_.imgsz, o_.aug, mosaic_, rng, plan);
    s.batch.hsv[static_cast<size_t>(slot)] = plan.hsv;
  } else if (o_.augment) {
    // u8 batches: augmented straight into the batch's slot; f32: into the worker's image, then normalised.
    uint8_t* dst;
    if (o_.pixels == BatchPixels::u8_nhwc) {
      dst = s.batch.images.data<uint8_t>() + static_cast<size_t>(slot) * bytes;
    } else {
      scratch.staged.width = scratch.staged.height = o_.imgsz;
      scratch.staged.channels = 3;
      scratch.staged.pixels.resize(bytes);
      dst = scratch.staged.pixels.data();
    }
    boxes = augment_sample_into(sample, n, loader, o_.imgsz, o_.aug, mosaic_, rng, dst, scratch.augment,
                                o_.hsv_on_device ? &s.batch.hsv[static_cast<size_t>(slot)] : nullptr);
    if (o_.pixels != BatchPixels::u8_nhwc) write_normalized(scratch.staged, s.batch.images, slot);
  } else {
    LabeledImage x = letterbox_square(loader(sample), o_.imgsz);
    if (o_.pixels == BatchPixels::u8_nhwc) {
      VISION_CHECK(x.image.width == o_.imgsz && x.image.height == o_.imgsz && x.image.pixels.size() == bytes,
                   "TrainLoader: an image of {}×{} for a batch of {}×{}", x.image.width, x.image.height, o_.imgsz,
                   o_.imgsz);
      std::memcpy(s.batch.images.data<uint8_t>() + static_cast<size_t>(slot) * bytes, x.image.pixels.data(), bytes);
    } else {
      write_normalized(x.image, s.batch.images, slot);
    }
    boxes = std::move(x.boxes);
  }
  s.batch.boxes[static_cast<size_t>(slot)] = std::move(boxes);
  s.batch.samples[static_cast<size_t>(slot)] = used;
}

std::optional<TrainBatch> TrainLoader::next() {
  std::unique_lock lk(mu_);
  if (!started_ || next_deliver_ >= batches_per_epoch()) return std::nullopt;
  const int64_t b = next_deliver_;
  ready_cv_.wait(lk, [&] {
    if (error_) return true;
    const auto it = slots_.find(b);
    return it != slots_.end() && it->second.remaining == 0;
  });
  if (error_) std::rethrow_exception(error_);
  TrainBatch out = std::move(slots_.at(b).batch);
  slots_.erase(b);
  ++next_deliver_;
  lk.unlock();
  work_cv_.notify_all();
  {
    std::lock_guard bl(bad_mu_);
    counts_.images += static_cast<int64_t>(out.samples.size());
  }
  return out;
}

LoaderCounts TrainLoader::counts() const {
  std::lock_guard lk(bad_mu_);
  return counts_;
}

// ---------------------------------------------------------------------------------------------------------------

int64_t max_boxes(const TrainBatch& batch) {
  size_t m = 0;
  for (const auto& b : batch.boxes) m = std::max(m, b.size());
  return static_cast<int64_t>(m);
}

void fill_targets(const TrainBatch& batch, int64_t rows, core::Tensor& targets, core::Tensor& count) {
  const int64_t B = static_cast<int64_t>(batch.boxes.size());
  VISION_CHECK(rows >= 0, "fill_targets: rows must not be negative, got {}", rows);
  VISION_CHECK(max_boxes(batch) <= rows,
               "fill_targets: an image of batch {} has {} boxes, more than the {} rows given; pass max_boxes(batch) "
               "rows or more",
               batch.index, max_boxes(batch), rows);
  const core::Shape ts{B, rows, 5}, cs{B};
  if (!targets.defined() || targets.device() != core::Device::cpu || targets.dtype() != core::DType::f32 ||
      targets.shape() != ts)
    targets = core::Tensor::zeros(ts, core::DType::f32);
  if (!count.defined() || count.device() != core::Device::cpu || count.dtype() != core::DType::i32 ||
      count.shape() != cs)
    count = core::Tensor::zeros(cs, core::DType::i32);
  float* t = targets.data<float>();
  int32_t* c = count.data<int32_t>();
  std::fill_n(t, static_cast<size_t>(B * rows * 5), 0.0f);
  for (int64_t i = 0; i < B; ++i) {
    const auto& boxes = batch.boxes[static_cast<size_t>(i)];
    c[i] = static_cast<int32_t>(boxes.size());
    float* row = t + i * rows * 5;
    for (const TargetBox& b : boxes) {
      row[0] = static_cast<float>(b.cls), row[1] = b.x1, row[2] = b.y1, row[3] = b.x2, row[4] = b.y2;
      row += 5;
    }
  }
}

}  // namespace vision::data
