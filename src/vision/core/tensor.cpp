#include "vision/core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace vision::core {

std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }
std::string_view layout_name(Layout l) { return l == Layout::nchw ? "nchw" : "nhwc"; }

namespace {
std::shared_ptr<void> host_alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) fail("out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, rounded ? rounded : 64);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor Tensor::zeros(Shape shape, DType dtype, Layout layout) {
  VISION_CHECK(shape.is_concrete(), "cannot allocate a tensor of symbolic shape {}", shape.str());
  auto mem = host_alloc(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  void* p = mem.get();
  return wrap(std::move(mem), p, std::move(shape), dtype, Device::cpu, layout);
}

Tensor Tensor::from_vector(Shape shape, std::span<const float> values) {
  Tensor t = zeros(std::move(shape));
  VISION_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: {} values for shape {}", values.size(),
               t.shape().str());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * 4);  // an empty span's data() may be null
  return t;
}

Tensor Tensor::view(void* data, Shape shape, DType dtype, Device device, Layout layout) {
  return wrap(nullptr, data, std::move(shape), dtype, device, layout);
}

Tensor Tensor::wrap(std::shared_ptr<void> owner, void* data, Shape shape, DType dtype, Device device, Layout layout) {
  VISION_CHECK(shape.is_concrete(), "a tensor needs a concrete shape, got {}", shape.str());
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.layout_ = layout;
  t.defined_ = true;
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  VISION_CHECK(shape.is_concrete() && shape.numel() == numel(), "cannot reshape {} to {}", shape_.str(), shape.str());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::vector<float> Tensor::to_vector() const {
  VISION_CHECK(device_ == Device::cpu, "to_vector needs a host tensor, this one is on {}", device_name(device_));
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (dtype_) {
    case DType::f32: std::memcpy(out.data(), data_, static_cast<size_t>(n) * 4); break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(static_cast<const uint16_t*>(data_)[i]);
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(static_cast<const uint16_t*>(data_)[i]);
      break;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<const int32_t*>(data_)[i]);
      break;
    case DType::i64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<const int64_t*>(data_)[i]);
      break;
    case DType::u8:
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const uint8_t*>(data_)[i];
      break;
  }
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  VISION_CHECK(device_ == Device::cpu && src.device_ == Device::cpu, "copy_from is for host tensors");
  VISION_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_ && src.layout_ == layout_, "copy_from: {} into {}",
               src.str(), str());
  if (nbytes()) std::memmove(data_, src.data_, nbytes());
}

void Tensor::fill(float value) {
  VISION_CHECK(device_ == Device::cpu, "fill is for host tensors");
  const int64_t n = numel();
  switch (dtype_) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(data_)[i] = value;
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(data_)[i] = float_to_half(value);
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(data_)[i] = float_to_bf16(value);
      break;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(data_)[i] = static_cast<int32_t>(value);
      break;
    case DType::i64:
      for (int64_t i = 0; i < n; ++i) static_cast<int64_t*>(data_)[i] = static_cast<int64_t>(value);
      break;
    case DType::u8:
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(data_)[i] = static_cast<uint8_t>(value);
      break;
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(data_)[i] = value != 0.0f ? 1 : 0;
      break;
  }
}

Tensor Tensor::clone() const {
  Tensor t = zeros(shape_, dtype_, layout_);
  t.copy_from(*this);
  return t;
}

std::string Tensor::str() const {
  return fmt::format("{}{} {} {}", dtype_name(dtype_), shape_.str(), layout_name(layout_), device_name(device_));
}

Tensor to_layout(const Tensor& t, Layout layout) {
  if (t.layout() == layout || t.rank() != 4) {
    Tensor c = t.clone();
    return c;
  }
  VISION_CHECK(t.device() == Device::cpu, "to_layout is for host tensors");
  const int64_t n = t.dim(0), c = t.dim(1), h = t.dim(2), w = t.dim(3);
  const size_t es = dtype_size(t.dtype());
  Tensor out = Tensor::zeros(t.shape(), t.dtype(), layout);
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < w; ++iw) {
          const int64_t nchw = ((in * c + ic) * h + ih) * w + iw;
          const int64_t nhwc = ((in * h + ih) * w + iw) * c + ic;
          const int64_t s = t.layout() == Layout::nchw ? nchw : nhwc;
          const int64_t d = layout == Layout::nchw ? nchw : nhwc;
          std::memcpy(dst + d * es, src + s * es, es);
        }
  return out;
}

}  // namespace vision::core
