#include "vision/graph/backend.h"

namespace vision::graph {

Tensor BackendContext::upload(const Tensor& host) {
  VISION_CHECK(host.device() == core::Device::cpu, "upload takes a host tensor, got {}", host.str());
  if (backend() == Backend::cpu) return host;
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
