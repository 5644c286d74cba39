// Tensor — a contiguous block of elements on one device: owning, or a view into memory owned elsewhere (an arena).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/shape.h"

namespace vision::core {

enum class Device : uint8_t { cpu, cuda };
std::string_view device_name(Device d);

// Memory order of a rank-4 tensor. The shape is always given as (N, C, H, W); the layout says how
// those are laid out in memory. Tensors of other ranks are row-major and ignore the layout.
enum class Layout : uint8_t { nchw, nhwc };
std::string_view layout_name(Layout l);

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled host tensor (64-byte aligned).
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Layout layout = Layout::nchw);
  // A new host tensor holding a copy of values.
  static Tensor from_vector(Shape shape, std::span<const float> values);
  // A non-owning view of memory that outlives the tensor (arena slices, buffers of a plan).
  static Tensor view(void* data, Shape shape, DType dtype, Device device, Layout layout = Layout::nchw);
  // A tensor whose memory is kept alive by owner (device allocations, mapped files).
  static Tensor wrap(std::shared_ptr<void> owner, void* data, Shape shape, DType dtype, Device device,
                     Layout layout = Layout::nchw);

  bool defined() const { return defined_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  Layout layout() const { return layout_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    if constexpr (std::is_same_v<std::remove_const_t<T>, uint16_t>) {
      VISION_CHECK(dtype_ == DType::f16 || dtype_ == DType::bf16, "tensor holds {}, accessed as 16-bit floats",
                   dtype_name(dtype_));
    } else {
      VISION_CHECK(dtype_of<std::remove_const_t<T>>() == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                   dtype_name(dtype_of<std::remove_const_t<T>>()));
    }
    return static_cast<T*>(data_);
  }

  // Same memory, another shape with the same element count.
  Tensor reshape(Shape shape) const;

  // Host-only helpers (throw for device tensors).
  std::vector<float> to_vector() const;  // any floating dtype, converted to f32
  void copy_from(const Tensor& src);     // same shape, dtype and layout
  void fill(float value);
  Tensor clone() const;

  std::string str() const;  // "f32[2, 3] nchw cpu"

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::nchw;
  Device device_ = Device::cpu;
  bool defined_ = false;
};

// Row-major NCHW <-> NHWC reordering of host tensors.
Tensor to_layout(const Tensor& t, Layout layout);

}  // namespace vision::core
