// The CPU backend context: aligned host memory, memcpy copies, OpenMP axpy.
#include <cstdlib>
#include <cstring>

#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"

namespace vision::graph {

namespace {

class CpuBackendContext final : public BackendContext {
 public:
  Backend backend() const override { return Backend::cpu; }
  std::shared_ptr<void> allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    VISION_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void fill_zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    cpu::parallel_for(
        static_cast<int64_t>(rows),
        [&](int64_t r) { std::memmove(d + static_cast<size_t>(r) * dst_pitch, s + static_cast<size_t>(r) * src_pitch, width); },
        static_cast<int64_t>(rows * width / 4));
  }
  void axpy(const Tensor& dst, float alpha, const Tensor& src) override {
    VISION_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype() && dst.dtype() == DType::f32,
                 "axpy: {} += α·{} (f32 tensors of one shape only on the CPU)", dst.str(), src.str());
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    cpu::parallel_for(dst.numel(), [&](int64_t i) { d[i] += alpha * s[i]; });
  }
  void synchronize() override {}
};

}  // namespace

std::shared_ptr<BackendContext> cpu_backend() {
  static std::shared_ptr<BackendContext> ctx = std::make_shared<CpuBackendContext>();
  return ctx;
}

}  // namespace vision::graph
