// The CPU backend context: aligned host memory, memcpy copies, OpenMP accumulation.
#include <cstdlib>
#include <cstring>

#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"

namespace vision::graph {
namespace {

class CpuBackend final : public BackendContext {
 public:
  Backend backend() const override { return Backend::cpu; }

  std::shared_ptr<void> allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) fail("out of host memory allocating {} bytes", bytes);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override { copy(dst, host_src, bytes); }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override { copy(host_dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void fill_zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }

  void add_into(const Tensor& dst, const Tensor& src) override {
    VISION_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "add_into: {} += {}: shapes differ",
                 dst.str(), src.str());
    VISION_CHECK(dst.dtype() == DType::f32, "add_into on the CPU supports f32 only, got {}", dst.str());
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    cpu::parallel_for(dst.numel(), [&](int64_t i) { d[i] += s[i]; });
  }

  void synchronize() override {}

 private:
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
};

}  // namespace

std::shared_ptr<BackendContext> cpu_backend() {
  static std::shared_ptr<BackendContext> ctx = std::make_shared<CpuBackend>();
  return ctx;
}

}  // namespace vision::graph
