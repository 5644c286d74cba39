#include <cuda_runtime_api.h>

#include <array>
#include <map>
#include <optional>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/memory.h"
#include "vision/data/hsv_cuda.h"
#include "vision/data/letterbox_cuda.h"
#include "vision/data/warp_cuda.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/trainer_input.h"

namespace vision::models::yolo {

namespace {

void check_images(const core::Tensor& images, std::span<const data::HsvGains> hsv,
                  std::span<const data::SamplePlan> plans) {
  VISION_CHECK(images.defined() && images.dtype() == core::DType::u8 && images.device() == core::Device::cpu &&
                   images.rank() == 4 && images.dim(3) == 3,
               "train: u8 images must be a host tensor [B, H, W, 3], got {}",
               images.defined() ? images.str() : std::string("an undefined tensor"));
  VISION_CHECK(hsv.empty() || static_cast<int64_t>(hsv.size()) == images.dim(0),
               "train: HSV gains for {} images with a batch of {}", hsv.size(), images.dim(0));
  VISION_CHECK(plans.empty() || (static_cast<int64_t>(plans.size()) == images.dim(0) && images.dim(1) == images.dim(2)),
               "train: {} augmentation plans for a batch of {} images of {}×{} (one plan an image, square images)",
               plans.size(), images.dim(0), images.dim(2), images.dim(1));
  for (const data::SamplePlan& p : plans) {
    VISION_CHECK(p.warp.out == images.dim(1) && p.warp.tiles >= 1 && p.warp.tiles <= data::kWarpMaxTiles,
                 "train: an augmentation plan of {} tiles to {}×{} for images of {}×{}", p.warp.tiles, p.warp.out,
                 p.warp.out, images.dim(2), images.dim(1));
    for (int t = 0; t < p.warp.tiles; ++t) {
      const data::Image* im = p.sources[static_cast<size_t>(t)].get();
      const data::WarpTile& k = p.warp.tile[t];
      VISION_CHECK(im && im->channels == 3 && im->width == k.width && im->height == k.height &&
                       im->pixels.size() == static_cast<size_t>(im->width * im->height * 3) && k.w >= 0 && k.h >= 0 &&
                       k.sx >= 0 && k.sy >= 0 && k.sx + k.w <= k.width && k.sy + k.h <= k.height,
                   "train: tile {} of an augmentation plan does not match its source image", t);
    }
  }
}

}  // namespace

// Two slots, used in turn: a batch staged into one (copied, jittered: on the copy stream) while the step reads the
// other's normalised input.
struct U8BatchUpload::Impl {
  struct Slot {
    std::shared_ptr<void> device;  // the u8 pixels on the device
    size_t capacity = 0;
    std::vector<uint8_t> records;  // the HSV jitter's records (data::hsv_record), one per image
    std::shared_ptr<void> device_records;
    size_t records_capacity = 0;
    cuda::Event ready{cudaEventDisableTiming};     // on the copy stream: pixels copied and jittered
    cuda::Event consumed{cudaEventDisableTiming};  // on the compute stream: the normalisation has read the pixels
    bool consumed_recorded = false;
    core::Tensor held;  // the host batch, until the slot is staged again
    // Plans: the device's WarpPlans, and the sources copied for this batch only (back to back).
    std::vector<data::WarpPlan> warps;
    std::shared_ptr<void> device_warps, transient;
    size_t warps_capacity = 0, transient_capacity = 0;
    // What is staged here, not yet normalised: the batch's memory, shape and gains.
    bool staged = false;
    const void* source = nullptr;
    core::Shape shape;
    std::vector<data::HsvGains> gains;
  };
  std::optional<cuda::Stream> copy_stream;
  cuda::StagedUploader staged;
  std::array<Slot, 2> slots;
  size_t next = 0;
  // The plans' lasting sources on the device (the image is kept, so its address names it while the entry lives), and
  // the bytes they may take: kPlanSourceShare of the device memory free when the first plans came.
  struct Resident {
    std::shared_ptr<const data::Image> image;
    std::shared_ptr<void> device;
  };
  std::map<const data::Image*, Resident> resident;
  size_t resident_bytes = 0;
  double resident_budget = -1;

  // Device memory of at least `bytes` in (buffer, capacity), reallocated after the copy stream's queued work (which
  // may read the old buffer) has finished.
  void reserve(graph::BackendContext& backend, std::shared_ptr<void>& buffer, size_t& capacity, size_t bytes) {
    if (capacity >= bytes) return;
    if (buffer) copy_stream->synchronize();
    buffer.reset();
    buffer = backend.allocate(bytes);
    capacity = bytes;
  }
  // The plans rendered into `pixels` on the copy stream.
  void render(graph::BackendContext& backend, Slot& s, uint8_t* pixels, int64_t side,
              std::span<const data::SamplePlan> plans);

  Slot* find(const core::Tensor& images, std::span<const data::HsvGains> hsv) {
    for (Slot& s : slots)
      if (s.staged && s.source == images.raw() && s.shape == images.shape() &&
          std::equal(s.gains.begin(), s.gains.end(), hsv.begin(), hsv.end()))
        return &s;
    return nullptr;
  }
  Slot& stage(graph::BackendContext& backend, const core::Tensor& images, std::span<const data::HsvGains> hsv,
              std::span<const data::SamplePlan> plans);
};

void U8BatchUpload::Impl::render(graph::BackendContext& backend, Slot& s, uint8_t* pixels, int64_t side,
                                 std::span<const data::SamplePlan> plans) {
  const cudaStream_t copy = copy_stream->get();
  if (resident_budget < 0) {
    size_t free = 0, total = 0;
    VISION_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    resident_budget = static_cast<double>(free) * kPlanSourceShare;
  }
  // Each source's device address: resident (copied once), or copied for this batch into the slot's transient buffer.
  s.warps.resize(plans.size());
  std::vector<std::pair<size_t, int>> transient_tiles;  // (plan, tile) whose source goes to the transient buffer
  size_t transient_bytes = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const data::SamplePlan& p = plans[i];
    s.warps[i] = p.warp;
    for (int t = 0; t < p.warp.tiles; ++t) {
      const std::shared_ptr<const data::Image>& im = p.sources[static_cast<size_t>(t)];
      const size_t bytes = im->pixels.size();
      if (p.lasting[static_cast<size_t>(t)]) {
        auto it = resident.find(im.get());
        if (it == resident.end() && static_cast<double>(resident_bytes + bytes) <= resident_budget) {
          Resident r{im, backend.allocate(bytes)};
          staged.upload(r.device.get(), im->pixels.data(), bytes, copy);
          resident_bytes += bytes;
          it = resident.emplace(im.get(), std::move(r)).first;
        }
        if (it != resident.end()) {
          s.warps[i].source[t] = reinterpret_cast<uint64_t>(it->second.device.get());
          continue;
        }
      }
      transient_tiles.emplace_back(i, t);
      transient_bytes += (bytes + 255) / 256 * 256;
    }
  }
  if (!transient_tiles.empty()) {
    reserve(backend, s.transient, s.transient_capacity, transient_bytes);
    auto* base = static_cast<uint8_t*>(s.transient.get());
    size_t offset = 0;
    for (const auto& [i, t] : transient_tiles) {
      const std::shared_ptr<const data::Image>& im = plans[i].sources[static_cast<size_t>(t)];
      staged.upload(base + offset, im->pixels.data(), im->pixels.size(), copy);
      s.warps[i].source[t] = reinterpret_cast<uint64_t>(base + offset);
      offset += (im->pixels.size() + 255) / 256 * 256;
    }
  }
  const size_t plan_bytes = s.warps.size() * sizeof(data::WarpPlan);
  reserve(backend, s.device_warps, s.warps_capacity, plan_bytes);
  staged.upload(s.device_warps.get(), s.warps.data(), plan_bytes, copy);
  data::launch_augment_warp(copy, pixels, side, static_cast<int64_t>(plans.size()),
                            static_cast<const data::WarpPlan*>(s.device_warps.get()));
}

U8BatchUpload::Impl::Slot& U8BatchUpload::Impl::stage(graph::BackendContext& backend, const core::Tensor& images,
                                                       std::span<const data::HsvGains> hsv,
                                                       std::span<const data::SamplePlan> plans) {
  if (!copy_stream) copy_stream.emplace();
  const cudaStream_t copy = copy_stream->get();
  Slot& s = slots[next];
  next = (next + 1) % slots.size();
  if (s.held.defined()) {  // its previous copy has finished before that batch goes back to the loader
    s.ready.synchronize();
    s.held = {};
  }
  const size_t bytes = images.nbytes();
  if (s.capacity < bytes) {
    if (s.consumed_recorded) s.consumed.synchronize();  // the old buffer may still be read by queued kernels
    s.device = backend.allocate(bytes);
    s.capacity = bytes;
  }
  // The copy overwrites what the compute stream's last normalisation from this slot read: after it, on the device.
  if (s.consumed_recorded) VISION_CUDA_CHECK(cudaStreamWaitEvent(copy, s.consumed.get(), 0));
  auto* pixels = static_cast<uint8_t*>(s.device.get());
  if (!plans.empty()) {
    render(backend, s, pixels, images.dim(1), plans);
  } else {
    cudaPointerAttributes attributes{};
    VISION_CUDA_CHECK(cudaPointerGetAttributes(&attributes, images.raw()));
    if (attributes.type == cudaMemoryTypeHost)
      VISION_CUDA_CHECK(cudaMemcpyAsync(pixels, images.raw(), bytes, cudaMemcpyHostToDevice, copy));
    else
      staged.upload(pixels, images.raw(), bytes, copy);
  }
  // Held in both cases: a direct copy reads the batch where it is, and while the batch lives its memory cannot come
  // back as another batch's that find() would take for this one.
  s.held = images;
  if (!hsv.empty()) {
    s.records.resize(hsv.size() * data::kHsvRecordBytes);
    bool any = false;
    for (size_t i = 0; i < hsv.size(); ++i) {
      uint8_t* record = s.records.data() + i * data::kHsvRecordBytes;
      data::hsv_record(hsv[i], record);
      any = any || record[data::kHsvRecordApplies] != 0;
    }
    if (any) {
      if (s.records_capacity < s.records.size()) {
        if (s.consumed_recorded) s.consumed.synchronize();  // an earlier jitter from it has run (it precedes that)
        s.device_records = backend.allocate(s.records.size());
        s.records_capacity = s.records.size();
      }
      auto* records = static_cast<uint8_t*>(s.device_records.get());
      staged.upload(records, s.records.data(), s.records.size(), copy);
      data::launch_hsv_jitter(copy, pixels, images.dim(1) * images.dim(2), images.dim(0), records);
    }
  }
  s.ready.record(copy);
  s.staged = true;
  s.source = images.raw();
  s.shape = images.shape();
  s.gains.assign(hsv.begin(), hsv.end());
  return s;
}

U8BatchUpload::U8BatchUpload() : impl_(std::make_unique<Impl>()) {}
U8BatchUpload::~U8BatchUpload() {
  if (!impl_) return;
  for (Impl::Slot& s : impl_->slots) {
    if (s.held.defined()) s.ready.synchronize();
    if (s.consumed_recorded) s.consumed.synchronize();
  }
}

void U8BatchUpload::stage(graph::BackendContext& backend, const core::Tensor& images,
                          std::span<const data::HsvGains> hsv, std::span<const data::SamplePlan> plans) {
  VISION_CHECK(backend.backend() == graph::Backend::cuda, "train: the u8 batch upload needs the CUDA backend");
  check_images(images, hsv, plans);
  if (!impl_->find(images, hsv)) impl_->stage(backend, images, hsv, plans);
}

void U8BatchUpload::run(graph::BackendContext& backend, const core::Tensor& images, const core::Tensor& dst,
                        std::span<const data::HsvGains> hsv, std::span<const data::SamplePlan> plans) {
  VISION_CHECK(backend.backend() == graph::Backend::cuda, "train: the u8 batch upload needs the CUDA backend");
  check_images(images, hsv, plans);
  VISION_CHECK(dst.device() == core::Device::cuda && dst.rank() == 4 && dst.dim(0) == images.dim(0) &&
                   dst.dim(1) == 3 && dst.dim(2) == images.dim(1) && dst.dim(3) == images.dim(2),
               "train: the device input {} does not fit the u8 images {}", dst.str(), images.shape().str());
  Impl& m = *impl_;
  Impl::Slot* slot = m.find(images, hsv);
  if (!slot) slot = &m.stage(backend, images, hsv, plans);
  const cudaStream_t stream = graph::stream_of(&backend);
  VISION_CUDA_CHECK(cudaStreamWaitEvent(stream, slot->ready.get(), 0));
  const auto* pixels = static_cast<const uint8_t*>(slot->device.get());
  const int64_t h = images.dim(1), w = images.dim(2);
  data::LetterboxTransform t;  // the identity: the image is the input
  t.orig_w = t.resized_w = t.input_w = w;
  t.orig_h = t.resized_h = t.input_h = h;
  for (int64_t i = 0; i < images.dim(0); ++i)
    data::launch_letterbox_normalize(stream, pixels + i * h * w * 3, t, dst, i);
  slot->consumed.record(stream);
  slot->consumed_recorded = true;
  slot->staged = false;
}

}  // namespace vision::models::yolo
