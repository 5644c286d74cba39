#include <cuda_runtime_api.h>

#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/memory.h"
#include "vision/data/hsv_cuda.h"
#include "vision/data/letterbox_cuda.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/trainer_input.h"

namespace vision::models::yolo {

struct U8BatchUpload::Impl {
  cuda::StagedUploader staged;
  std::shared_ptr<void> device;  // the u8 pixels on the device
  size_t capacity = 0;
  cuda::Event copied{cudaEventDisableTiming};  // recorded after a direct copy from a pinned batch
  core::Tensor held;                            // that batch, until `copied` has happened
  // The HSV jitter's records (data::hsv_record), one per image: built here, staged, on the device.
  std::vector<uint8_t> records;
  cuda::StagedUploader staged_records;
  std::shared_ptr<void> device_records;
  size_t records_capacity = 0;
};

U8BatchUpload::U8BatchUpload() : impl_(std::make_unique<Impl>()) {}
U8BatchUpload::~U8BatchUpload() {
  if (impl_ && impl_->held.defined()) impl_->copied.synchronize();
}

void U8BatchUpload::run(graph::BackendContext& backend, const core::Tensor& images, const core::Tensor& dst,
                        std::span<const data::HsvGains> hsv) {
  VISION_CHECK(backend.backend() == graph::Backend::cuda, "train: the u8 batch upload needs the CUDA backend");
  VISION_CHECK(images.defined() && images.dtype() == core::DType::u8 && images.device() == core::Device::cpu &&
                   images.rank() == 4 && images.dim(3) == 3,
               "train: u8 images must be a host tensor [B, H, W, 3], got {}",
               images.defined() ? images.str() : std::string("an undefined tensor"));
  VISION_CHECK(dst.device() == core::Device::cuda && dst.rank() == 4 && dst.dim(0) == images.dim(0) &&
                   dst.dim(1) == 3 && dst.dim(2) == images.dim(1) && dst.dim(3) == images.dim(2),
               "train: the device input {} does not fit the u8 images {}", dst.str(), images.shape().str());
  VISION_CHECK(hsv.empty() || static_cast<int64_t>(hsv.size()) == images.dim(0),
               "train: HSV gains for {} images with a batch of {}", hsv.size(), images.dim(0));
  Impl& m = *impl_;
  const cudaStream_t stream = graph::CudaBackendContext::of(&backend).stream();
  if (m.held.defined()) {  // the previous direct copy has finished before its batch goes back to the loader
    m.copied.synchronize();
    m.held = {};
  }
  const size_t bytes = images.nbytes();
  if (m.capacity < bytes) {
    backend.synchronize();  // the old buffer may still be read by queued kernels
    m.device = backend.allocate(bytes);
    m.capacity = bytes;
  }
  auto* pixels = static_cast<uint8_t*>(m.device.get());
  cudaPointerAttributes attributes{};
  VISION_CUDA_CHECK(cudaPointerGetAttributes(&attributes, images.raw()));
  if (attributes.type == cudaMemoryTypeHost) {
    VISION_CUDA_CHECK(cudaMemcpyAsync(pixels, images.raw(), bytes, cudaMemcpyHostToDevice, stream));
    m.copied.record(stream);
    m.held = images;
  } else {
    m.staged.upload(pixels, images.raw(), bytes, stream);
  }
  const int64_t h = images.dim(1), w = images.dim(2);
  if (!hsv.empty()) {
    m.records.resize(hsv.size() * data::kHsvRecordBytes);
    bool any = false;
    for (size_t i = 0; i < hsv.size(); ++i) {
      uint8_t* record = m.records.data() + i * data::kHsvRecordBytes;
      data::hsv_record(hsv[i], record);
      any = any || record[768] != 0;
    }
    if (any) {
      if (m.records_capacity < m.records.size()) {
        backend.synchronize();  // queued kernels may still read the old buffer
        m.device_records = backend.allocate(m.records.size());
        m.records_capacity = m.records.size();
      }
      auto* records = static_cast<uint8_t*>(m.device_records.get());
      m.staged_records.upload(records, m.records.data(), m.records.size(), stream);
      data::launch_hsv_jitter(stream, pixels, h * w, images.dim(0), records);
    }
  }
  data::LetterboxTransform t;  // the identity: the image is the input
  t.orig_w = t.resized_w = t.input_w = w;
  t.orig_h = t.resized_h = t.input_h = h;
  for (int64_t i = 0; i < images.dim(0); ++i)
    data::launch_letterbox_normalize(stream, pixels + i * h * w * 3, t, dst, i);
}

}  // namespace vision::models::yolo
