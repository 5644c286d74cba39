#include "vision/graph/backend.h"

namespace vision::graph {

Tensor BackendContext::upload(const Tensor& host) {
  VISION_CHECK(host.defined() && host.device() == core::Device::cpu, "upload needs a defined host tensor");
  const size_t bytes = host.nbytes();
  auto mem = allocate(bytes);
  if (bytes) copy_to_device(mem.get(), host.raw(), bytes);
  void* p = mem.get();
  return Tensor::wrap(std::move(mem), p, host.shape(), host.dtype(), device(), host.layout());
}

Tensor BackendContext::download(const Tensor& dev) {
  VISION_CHECK(dev.defined() && dev.device() == device(), "download needs a defined {} tensor",
               core::device_name(device()));
  Tensor host = Tensor::zeros(dev.shape(), dev.dtype(), dev.layout());
  if (host.nbytes()) copy_to_host(host.raw(), dev.raw(), host.nbytes());
  return host;
}

}  // namespace vision::graph
