#include "vision/detector.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/data/image_tensor.h"
#include "vision/data/letterbox.h"
#include "vision/data/yuv.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/model.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"

#ifdef VISION_HAS_CUDA
#include "vision/cuda/memory.h"
#include "vision/data/letterbox_cuda.h"
#include "vision/graph/cuda/cuda_backend.h"
#endif

namespace vision {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A device allocation that grows to the largest size asked for.
struct GrowingBuffer {
  std::shared_ptr<void> memory;
  size_t capacity = 0;
  void* get(graph::BackendContext& backend, size_t bytes) {
    if (bytes > capacity) {
      memory.reset();
      memory = backend.allocate(bytes);
      capacity = bytes;
    }
    return memory.get();
  }
};

}  // namespace

struct Detector::Impl {
  DetectorOptions options;
  std::shared_ptr<graph::BackendContext> backend;
  std::unique_ptr<models::yolo::Yolo26Model> model;
  graph::Format input_format;
  std::array<int64_t, 2> imgsz = {640, 640};
  DetectTiming timing;
#ifdef VISION_HAS_CUDA
  // The GPU letterbox's buffers (made when the backend is CUDA).
  struct CudaInput {
    cuda::StagedUploader uploader;
    GrowingBuffer images, batch;
  };
  std::unique_ptr<CudaInput> cuda_input;
#endif

  bool on_cuda() const { return backend->backend() == graph::Backend::cuda; }

  // The letterboxed batch in the model's input format, on the model's backend (CUDA) or the host (CPU).
  // A view that is not contiguous RGB is first packed into `packed` (which must outlive the upload).
  core::Tensor preprocess(std::span<const data::ImageView> images, std::span<const data::LetterboxTransform> t,
                          std::vector<data::Image>& packed) {
    const core::Shape shape{static_cast<int64_t>(images.size()), 3, t[0].input_h, t[0].input_w};
#ifdef VISION_HAS_CUDA
    if (on_cuda()) {
      std::vector<const uint8_t*> sources;
      std::vector<size_t> bytes;
      packed.reserve(images.size());
      for (const data::ImageView& im : images) {
        if (im.contiguous_rgb()) {
          sources.push_back(im.pixels);
        } else {
          packed.push_back(data::to_image(im));
          sources.push_back(packed.back().pixels.data());
        }
        bytes.push_back(static_cast<size_t>(im.width * im.height * 3));
      }
      const std::vector<const uint8_t*> copies = upload(sources, bytes);
      const core::Tensor tensor = device_batch(shape);
      for (size_t i = 0; i < images.size(); ++i)
        data::launch_letterbox_normalize(stream(), copies[i], t[i], tensor, static_cast<int64_t>(i));
      return tensor;
    }
#endif
    core::Tensor tensor = core::Tensor::zeros(shape, core::DType::f32, input_format.layout);
    for (size_t i = 0; i < images.size(); ++i)
      data::write_normalized(data::letterbox(images[i], t[i]), tensor, static_cast<int64_t>(i));
    return tensor;
  }

#ifdef VISION_HAS_CUDA
  // YUV 4:2:0 frames letterboxed on the GPU (CUDA only): host planes uploaded as they are (half the bytes of RGB),
  // device planes (NVDEC) read in place; conversion and letterbox in one kernel per frame.
  core::Tensor preprocess_yuv(std::span<const data::Yuv420View> frames, std::span<const data::LetterboxTransform> t) {
    std::vector<const uint8_t*> sources;
    std::vector<size_t> bytes;
    const auto span_of = [](int64_t pitch, int64_t rows, int64_t row_bytes) {
      return static_cast<size_t>(pitch * (rows - 1) + row_bytes);
    };
    for (const data::Yuv420View& f : frames) {
      if (f.device) continue;
      const int64_t cw = f.chroma_width(), ch = f.chroma_height();
      sources.push_back(f.y);
      bytes.push_back(span_of(f.y_pitch, f.height, f.width));
      if (f.nv12()) {
        sources.push_back(f.u);
        bytes.push_back(span_of(f.uv_pitch, ch, 2 * cw));
      } else {
        for (const uint8_t* plane : {f.u, f.v}) {
          sources.push_back(plane);
          bytes.push_back(span_of(f.uv_pitch, ch, f.uv_step * (cw - 1) + 1));
        }
      }
    }
    const std::vector<const uint8_t*> copies = upload(sources, bytes);
    const core::Tensor tensor =
        device_batch(core::Shape{static_cast<int64_t>(frames.size()), 3, t[0].input_h, t[0].input_w});
    size_t next = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
      data::Yuv420View f = frames[i];
      if (!f.device) {
        const bool nv12 = f.nv12();
        f.y = copies[next++];
        f.u = copies[next++];
        f.v = nv12 ? f.u + 1 : copies[next++];
      }
      data::launch_letterbox_yuv_normalize(stream(), f, t[i], tensor, static_cast<int64_t>(i));
    }
    return tensor;
  }

  cudaStream_t stream() const { return graph::stream_of(backend.get()); }

  // Device copies of host buffers (each on a 256-byte boundary of one growing device buffer), queued on the stream
  // through pinned staging.
  std::vector<const uint8_t*> upload(std::span<const uint8_t* const> sources, std::span<const size_t> bytes) {
    if (!cuda_input) cuda_input = std::make_unique<CudaInput>();
    CudaInput& c = *cuda_input;
    constexpr size_t kAlign = 256;
    std::vector<size_t> offsets;
    size_t total = 0;
    for (size_t b : bytes) {
      offsets.push_back(total);
      total += (b + kAlign - 1) / kAlign * kAlign;
    }
    const auto* base = static_cast<const uint8_t*>(c.images.get(*backend, std::max<size_t>(total, 1)));
    std::vector<const uint8_t*> copies;
    for (size_t i = 0; i < sources.size(); ++i) {
      copies.push_back(base + offsets[i]);
      c.uploader.upload(const_cast<uint8_t*>(copies.back()), sources[i], bytes[i], stream());
    }
    return copies;
  }

  // The model's input batch in device memory (reused from call to call).
  core::Tensor device_batch(const core::Shape& shape) {
    if (!cuda_input) cuda_input = std::make_unique<CudaInput>();
    const size_t batch_bytes = static_cast<size_t>(shape.numel()) * core::dtype_size(input_format.dtype);
    void* batch_data = cuda_input->batch.get(*backend, batch_bytes);
    return core::Tensor::view(batch_data, shape, input_format.dtype, core::Device::cuda, input_format.layout);
  }
#endif

  // The rest of a detection after the batch is preprocessed: the model, its output back to the host, and each
  // image's detections mapped back through its letterbox.
  std::vector<std::vector<data::Detection>> finish(const core::Tensor& input,
                                                   std::span<const data::LetterboxTransform> t, Clock::time_point t0);
};

Detector::Detector(const std::filesystem::path& model, const DetectorOptions& options)
    : Detector(models::yolo::read_model_file(model), options) {}

Detector::Detector(const core::SafetensorsFile& weights, const DetectorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  VISION_CHECK(options.threads >= 0, "threads must be 0 (every core) or more, got {}", options.threads);
  m.backend = graph::make_backend(graph::parse_device_choice(options.device));
  const bool cuda = m.on_cuda();
  const core::DType dtype = options.dtype.value_or(cuda ? core::DType::f16 : core::DType::f32);
  VISION_CHECK(core::is_floating(dtype), "the detector computes in f32, f16 or bf16, not {}", core::dtype_name(dtype));
  VISION_CHECK(cuda || dtype == core::DType::f32,
               "the CPU backend computes in f32: {} needs the CUDA device (--device cuda)", core::dtype_name(dtype));
  if (options.imgsz) models::yolo::check_image_size((*options.imgsz)[0], (*options.imgsz)[1]);

  // CUDA: f16 and bf16 plans run NHWC (their fast path), f32 NCHW. The CPU: f32 NHWC (oneDNN's convolutions with no
  // reorder between steps). The input comes in the plan's own format, so the plan converts nothing.
  const core::Layout layout = !cuda || dtype != core::DType::f32 ? core::Layout::nhwc : core::Layout::nchw;
  m.input_format = {.dtype = cuda ? dtype : core::DType::f32, .layout = layout};
  models::yolo::Yolo26Model::Options o;
  o.inference.nms = options.nms;
  o.inference.postprocess.conf = options.conf;
  o.inference.postprocess.max_det = options.max_det;
  o.inference.postprocess.classes = options.classes;
  o.inference.postprocess.iou = options.iou;
  o.inference.input_format = m.input_format;
  o.compute_dtype = dtype;
  o.layout = layout;
  models::yolo::kernels::check_postprocess_options(o.inference.postprocess);
  m.model = std::make_unique<models::yolo::Yolo26Model>(weights, m.backend, o);
  const models::yolo::ModelInfo& info = m.model->info();
  for (int64_t c : options.classes)
    VISION_CHECK(c >= 0 && c < info.spec.nc, "class {} is not one of the model's {} classes (0 to {})", c,
                 info.spec.nc, info.spec.nc - 1);
  m.imgsz = options.imgsz.value_or(info.imgsz);
  models::yolo::check_image_size(m.imgsz[0], m.imgsz[1]);
}

Detector::~Detector() = default;

// The implementation, or a clear error for a moved-from Detector (its impl_ went to the Detector it was moved into).
Detector::Impl& Detector::impl() const {
  VISION_CHECK(impl_ != nullptr,
               "vision::Detector: this Detector was moved from and holds no model; use the Detector it was moved into");
  return *impl_;
}

void Detector::set_weights(const core::SafetensorsFile& weights) {
  models::yolo::Yolo26Model& model = *impl().model;
  const models::yolo::ModelInfo info = models::yolo::read_model_info(weights);
  VISION_CHECK(info.spec.scale == model.info().spec.scale && info.spec.nc == model.info().spec.nc &&
                   info.fused() == model.info().fused(),
               "set_weights: {} holds YOLO26{} with {} classes{}, the detector YOLO26{} with {} classes{}",
               weights.path.empty() ? std::string("the weights") : weights.path.string(),
               models::yolo::scale_name(info.spec.scale), info.spec.nc, info.fused() ? " (fused)" : "",
               models::yolo::scale_name(model.info().spec.scale), model.info().spec.nc,
               model.info().fused() ? " (fused)" : "");
  models::yolo::load_weights(model.executor().state(), model.info().spec, weights);
}
Detector::Detector(Detector&&) noexcept = default;
Detector& Detector::operator=(Detector&&) noexcept = default;

const models::yolo::ModelInfo& Detector::info() const { return impl().model->info(); }
const std::vector<std::string>& Detector::names() const { return info().names; }
std::string Detector::scale() const { return std::string(models::yolo::scale_name(info().spec.scale)); }
int64_t Detector::nc() const { return info().spec.nc; }
bool Detector::fused() const { return info().fused(); }
const DetectorOptions& Detector::options() const { return impl().options; }
std::string Detector::device() const { return impl().on_cuda() ? "cuda" : "cpu"; }
core::DType Detector::dtype() const { return impl().model->executor().options().compute_dtype; }
std::array<int64_t, 2> Detector::imgsz() const { return impl().imgsz; }
const DetectTiming& Detector::last_timing() const { return impl().timing; }

std::vector<std::vector<data::Detection>> Detector::detect(std::span<const data::Image> images) {
  std::vector<data::ImageView> views;
  views.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const data::Image& im = images[i];
    VISION_CHECK(!im.empty() && im.channels == 3 && im.width > 0 && im.height > 0 &&
                     im.pixels.size() == static_cast<size_t>(im.width * im.height * 3),
                 "detect: image {} of the batch must be 8-bit RGB (3 channels), got {}×{} with {} channels", i,
                 im.width, im.height, im.channels);
    views.emplace_back(im);
  }
  return detect(std::span<const data::ImageView>(views));
}

std::vector<std::vector<data::Detection>> Detector::detect(std::span<const data::ImageView> images) {
  Impl& m = impl();
  if (images.empty()) return {};
  const cpu::ThreadLimit threads(m.on_cuda() ? 0 : m.options.threads);
  const auto t0 = Clock::now();
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (size_t i = 0; i < images.size(); ++i) {
    data::check_image_view(images[i], fmt::format("detect: image {} of the batch", i));
    sizes.emplace_back(images[i].height, images[i].width);
  }
  const std::vector<data::LetterboxTransform> t =
      data::letterbox_batch(sizes, m.imgsz[0], m.imgsz[1], models::yolo::kSizeMultiple);
  std::vector<data::Image> packed;
  const core::Tensor input = m.preprocess(images, t, packed);
  return m.finish(input, t, t0);
}

std::vector<std::vector<data::Detection>> Detector::detect(std::span<const data::Yuv420View> frames) {
  Impl& m = impl();
  if (frames.empty()) return {};
  for (size_t i = 0; i < frames.size(); ++i) data::check_yuv_view(frames[i], fmt::format("detect: frame {} of the batch", i));
#ifdef VISION_HAS_CUDA
  if (m.on_cuda()) {
    const auto t0 = Clock::now();
    std::vector<std::pair<int64_t, int64_t>> sizes;
    for (const data::Yuv420View& f : frames) sizes.emplace_back(f.height, f.width);
    const std::vector<data::LetterboxTransform> t =
        data::letterbox_batch(sizes, m.imgsz[0], m.imgsz[1], models::yolo::kSizeMultiple);
    const core::Tensor input = m.preprocess_yuv(frames, t);
    return m.finish(input, t, t0);
  }
#endif
  // The CPU: each frame converted to RGB (the GPU kernel's twin), then as images.
  std::vector<data::Image> images;
  for (const data::Yuv420View& f : frames) images.push_back(data::yuv420_to_rgb(f));
  return detect(std::span<const data::Image>(images));
}

std::vector<std::vector<data::Detection>> Detector::Impl::finish(const core::Tensor& input,
                                                                 std::span<const data::LetterboxTransform> t,
                                                                 Clock::time_point t0) {
  backend->synchronize();
  timing.preprocess = ms_since(t0);

  t0 = Clock::now();
  const std::vector<core::Tensor> out = model->forward(input);
  const core::Tensor detections = backend->download(out.at(0));
  const core::Tensor count = backend->download(out.at(1));
  timing.inference = ms_since(t0);

  t0 = Clock::now();
  std::vector<std::vector<data::Detection>> result(t.size());
  const int64_t rows = detections.dim(1);
  const auto* d = detections.data<float>();
  const auto* n = count.data<int32_t>();
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t valid = std::min<int64_t>(n[i], rows);
    result[i].reserve(static_cast<size_t>(valid));
    for (int64_t r = 0; r < valid; ++r) {
      const float* row = d + (static_cast<int64_t>(i) * rows + r) * 6;
      data::Detection det;
      det.box = t[i].to_original({row[0], row[1], row[2], row[3]});
      det.score = row[4];
      det.cls = static_cast<int64_t>(row[5]);
      result[i].push_back(det);
    }
  }
  timing.postprocess = ms_since(t0);
  return result;
}

std::vector<data::Detection> Detector::detect(const data::Image& image) {
  return std::move(detect(std::span<const data::Image>(&image, 1)).front());
}

std::vector<data::Detection> Detector::detect(const data::ImageView& image) {
  return std::move(detect(std::span<const data::ImageView>(&image, 1)).front());
}

}  // namespace vision
