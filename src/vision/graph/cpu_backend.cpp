// The CPU backend context: aligned host memory, memcpy copies, OpenMP axpy.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "vision/cpu/dnnl_context.h"
#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"

namespace vision::graph {

namespace {

// Element i of dst (in dst's memory order) is element source(i) of src (in src's): the same logical (N, C, H, W)
// index, each side in its own layout.
struct ConvertIndex {
  ConvertIndex(const Tensor& dst, const Tensor& src) {
    relayout = dst.rank() == 4 && dst.layout() != src.layout();
    if (relayout) {
      n = dst.dim(0), c = dst.dim(1), h = dst.dim(2), w = dst.dim(3);
      to_nhwc = dst.layout() == core::Layout::nhwc;
    }
  }
  int64_t source(int64_t i) const {
    if (!relayout) return i;
    if (to_nhwc) {  // i walks (n, h, w, c); src is NCHW
      const int64_t ci = i % c, wi = (i / c) % w, hi = (i / (c * w)) % h, ni = i / (c * w * h);
      return ((ni * c + ci) * h + hi) * w + wi;
    }
    const int64_t wi = i % w, hi = (i / w) % h, ci = (i / (w * h)) % c, ni = i / (w * h * c);  // i walks NCHW
    return ((ni * h + hi) * w + wi) * c + ci;
  }
  bool relayout = false, to_nhwc = false;
  int64_t n = 1, c = 1, h = 1, w = 1;
};

// An f32 NCHW ↔ NHWC copy through oneDNN's reorder (a blocked transpose; the element loop below divides per element).
void relayout_f32(const Tensor& dst, const Tensor& src) {
  using tag = dnnl::memory::format_tag;
  const auto dims = cpu::dims_of(src.shape());
  auto md = [&](core::Layout l) {
    return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, l == core::Layout::nhwc ? tag::nhwc : tag::nchw);
  };
  const dnnl::memory from = cpu::as_memory(md(src.layout()), src), to = cpu::as_memory(md(dst.layout()), dst);
  cpu::execute(dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, "NCHW/NHWC reorder");
}

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
  void convert(const Tensor& dst, const Tensor& src, bool accumulate) override {
    check_convertible(dst, src);
    if (!accumulate && dst.dtype() == DType::f32 && src.dtype() == DType::f32 && dst.rank() == 4 &&
        dst.layout() != src.layout())
      return dst.numel() ? relayout_f32(dst, src) : void();
    const ConvertIndex index(dst, src);
    cpu::parallel_for(dst.numel(), [&](int64_t i) {
      const int64_t j = index.source(i);
      const float v = load(src, j);
      store(dst, i, accumulate ? load(dst, i) + v : v);
    });
  }
  bool scale_and_check_finite(const Tensor& t, float factor) override {
    VISION_CHECK(t.dtype() == DType::f32, "scale_and_check_finite takes an f32 tensor, got {}", t.str());
    float* p = t.data<float>();
    bool finite = true;
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] *= factor;
      finite = finite && std::isfinite(p[i]);
    }
    return finite;
  }
  void synchronize() override {}

 private:
  static float load(const Tensor& t, int64_t i) {
    switch (t.dtype()) {
      case DType::f32: return static_cast<const float*>(t.raw())[i];
      case DType::f16: return core::half_to_float(static_cast<const uint16_t*>(t.raw())[i]);
      default: return core::bf16_to_float(static_cast<const uint16_t*>(t.raw())[i]);
    }
  }
  static void store(const Tensor& t, int64_t i, float v) {
    switch (t.dtype()) {
      case DType::f32: static_cast<float*>(t.raw())[i] = v; break;
      case DType::f16: static_cast<uint16_t*>(t.raw())[i] = core::float_to_half(v); break;
      default: static_cast<uint16_t*>(t.raw())[i] = core::float_to_bf16(v); break;
    }
  }
};

}  // namespace

std::shared_ptr<BackendContext> cpu_backend() {
  static std::shared_ptr<BackendContext> ctx = std::make_shared<CpuBackendContext>();
  return ctx;
}

}  // namespace vision::graph
