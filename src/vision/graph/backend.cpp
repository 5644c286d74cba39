#include "vision/graph/backend.h"

#include <chrono>

namespace vision::graph {

void check_convertible(const Tensor& dst, const Tensor& src) {
  VISION_CHECK(dst.defined() && src.defined() && dst.shape() == src.shape() && core::is_floating(dst.dtype()) &&
                   core::is_floating(src.dtype()),
               "convert: {} from {} (floating tensors of one shape only)", dst.defined() ? dst.str() : "undefined",
               src.defined() ? src.str() : "undefined");
}

std::shared_ptr<void> BackendContext::mark() {
  synchronize();
  return std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
}

double BackendContext::elapsed_ms(const void* from, const void* to) {
  using Point = std::chrono::steady_clock::time_point;
  return std::chrono::duration<double, std::milli>(*static_cast<const Point*>(to) - *static_cast<const Point*>(from))
      .count();
}

Tensor BackendContext::upload(const Tensor& host) {
  VISION_CHECK(host.device() == core::Device::cpu, "upload takes a host tensor, got {}", host.str());
  if (backend() == Backend::cpu) return host.clone();
  auto mem = allocate(std::max<size_t>(host.nbytes(), 1));
  copy_to_device(mem.get(), host.raw(), host.nbytes());
  void* p = mem.get();
  return Tensor::wrap(std::move(mem), p, host.shape(), host.dtype(), device(), host.layout());
}

Tensor BackendContext::download(const Tensor& dev) {
  Tensor host = Tensor::zeros(dev.shape(), dev.dtype(), dev.layout());
  if (dev.device() == core::Device::cpu) {
    host.copy_from(dev);
  } else {
    copy_to_host(host.raw(), dev.raw(), dev.nbytes());
    synchronize();
  }
  return host;
}

}  // namespace vision::graph

#ifdef VISION_HAS_CUDA
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#endif

namespace vision::graph {

DeviceChoice parse_device_choice(std::string_view s) {
  if (s == "auto") return DeviceChoice::automatic;
  if (s == "cpu") return DeviceChoice::cpu;
  if (s == "cuda") return DeviceChoice::cuda;
  fail("unknown device '{}' (expected auto, cpu or cuda)", s);
}

bool cuda_usable() {
#ifdef VISION_HAS_CUDA
  return cuda::gpu_available();
#else
  return false;
#endif
}

std::shared_ptr<BackendContext> make_backend(DeviceChoice choice) {
  if (choice == DeviceChoice::cpu || (choice == DeviceChoice::automatic && !cuda_usable())) return cpu_backend();
#ifdef VISION_HAS_CUDA
  return cuda_backend();
#else
  fail("this build of vision-cpp has no CUDA backend (configured with -DVISION_CUDA=OFF); use --device cpu");
#endif
}

}  // namespace vision::graph
