#include "vision/data/letterbox_cuda.h"

#include "vision/core/error.h"

namespace vision::data {
namespace {

constexpr int kThreads = 256;

void register_letterbox_kernels(cuda::KernelRegistry& r) {
  for (core::DType t : {core::DType::f32, core::DType::f16, core::DType::bf16}) {
    r.add<LetterboxNormalize>(t);
    r.add<LetterboxYuvNormalize>(t);
  }
}
VISION_REGISTER_KERNELS(register_letterbox_kernels);

}  // namespace

LetterboxNormalize::LetterboxNormalize(core::DType t)
    : KernelDescriptor({"letterbox_normalize", "vision/data/letterbox.cuh", t, {},
                        "const uint8_t*, int64_t, int64_t, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, "
                        "int32_t",
                        "vision::data"}) {
  VISION_CHECK(core::is_floating(t), "letterbox_normalize: no kernel for {} batches (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

LetterboxYuvNormalize::LetterboxYuvNormalize(core::DType t)
    : KernelDescriptor({"letterbox_yuv_normalize", "vision/data/letterbox_yuv.cuh", t, {},
                        "const uint8_t*, int64_t, const uint8_t*, const uint8_t*, int64_t, int32_t, int64_t, int64_t, "
                        "{T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, "
                        "int32_t, int32_t, int32_t, int32_t",
                        "vision::data"}) {
  VISION_CHECK(core::is_floating(t), "letterbox_yuv_normalize: no kernel for {} batches (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

namespace {

// Item `index` of the batch, after checking that the transform fits it.
void* letterbox_item(const LetterboxTransform& t, const core::Tensor& batch, int64_t index) {
  VISION_CHECK(batch.defined() && batch.device() == core::Device::cuda && batch.rank() == 4 && batch.dim(1) == 3 &&
                   core::is_floating(batch.dtype()),
               "letterbox (GPU): the batch must be a floating device tensor [N, 3, H, W], got {}",
               batch.defined() ? batch.str() : std::string("an undefined tensor"));
  VISION_CHECK(index >= 0 && index < batch.dim(0), "letterbox (GPU): index {} is outside the batch of {}", index,
               batch.dim(0));
  VISION_CHECK(t.input_w == batch.dim(3) && t.input_h == batch.dim(2) && t.orig_w > 0 && t.orig_h > 0 &&
                   t.resized_w > 0 && t.resized_h > 0 && t.pad_x >= 0 && t.pad_y >= 0 &&
                   t.pad_x + static_cast<double>(t.resized_w) <= static_cast<double>(t.input_w) &&
                   t.pad_y + static_cast<double>(t.resized_h) <= static_cast<double>(t.input_h),
               "letterbox (GPU): the transform (a {}×{} image resized to {}×{} at ({}, {}) in {}×{}) does not fit "
               "the batch {}",
               t.orig_w, t.orig_h, t.resized_w, t.resized_h, t.pad_x, t.pad_y, t.input_w, t.input_h, batch.str());
  return static_cast<std::byte*>(batch.raw()) + index * 3 * t.input_w * t.input_h * core::dtype_size(batch.dtype());
}

}  // namespace

void launch_letterbox_normalize(cudaStream_t stream, const uint8_t* image, const LetterboxTransform& t,
                                const core::Tensor& batch, int64_t index) {
  void* item = letterbox_item(t, batch, index);
  const int64_t plane = t.input_w * t.input_h;
  cuda::kernel_instance<LetterboxNormalize>(batch.dtype())
      .launch_over(stream, plane, kThreads, image, t.orig_w, t.orig_h,
              item, t.input_w, t.input_h, t.resized_w, t.resized_h,
              static_cast<int64_t>(t.pad_x), static_cast<int64_t>(t.pad_y),
              static_cast<int32_t>(batch.layout() == core::Layout::nhwc ? 1 : 0));
}

void launch_letterbox_yuv_normalize(cudaStream_t stream, const Yuv420View& frame, const LetterboxTransform& t,
                                    const core::Tensor& batch, int64_t index) {
  check_yuv_view(frame, "letterbox (GPU)");
  VISION_CHECK(t.orig_w == frame.width && t.orig_h == frame.height,
               "letterbox (GPU): the transform is for a {}×{} image, the frame is {}×{}", t.orig_w, t.orig_h,
               frame.width, frame.height);
  void* item = letterbox_item(t, batch, index);
  const YuvCoefficients k = yuv_coefficients(frame.matrix, frame.full_range);
  cuda::kernel_instance<LetterboxYuvNormalize>(batch.dtype())
      .launch_over(stream, t.input_w * t.input_h, kThreads, static_cast<const void*>(frame.y), frame.y_pitch,
                   static_cast<const void*>(frame.u), static_cast<const void*>(frame.v), frame.uv_pitch,
                   frame.uv_step, frame.width, frame.height, item, t.input_w, t.input_h, t.resized_w, t.resized_h,
                   static_cast<int64_t>(t.pad_x), static_cast<int64_t>(t.pad_y),
                   static_cast<int32_t>(batch.layout() == core::Layout::nhwc ? 1 : 0), k.y_offset, k.y_scale, k.r_v,
                   k.g_u, k.g_v, k.b_u);
}

}  // namespace vision::data
