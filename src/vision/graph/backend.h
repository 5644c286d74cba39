// BackendContext — the memory and stream services a plan needs from a backend (CPU or CUDA).
#pragma once

#include <functional>
#include <memory>

#include "vision/graph/op.h"

namespace vision::graph {

class BackendContext {
 public:
  virtual ~BackendContext() = default;
  virtual Backend backend() const = 0;
  core::Device device() const { return backend() == Backend::cpu ? core::Device::cpu : core::Device::cuda; }

  // One allocation of bytes on this backend (64-byte aligned or better), freed with the returned owner.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  // Copies between host memory and this backend's memory (or within it), ordered on the backend's stream.
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // rows runs of width bytes, from src (rows src_pitch bytes apart) to dst (dst_pitch apart), on this
  // backend's memory: the copy of a slice along one axis (concat, split).
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) = 0;
  // dst += alpha · src, same shape and dtype (gradient accumulation, plain SGD steps).
  virtual void axpy(const Tensor& dst, float alpha, const Tensor& src) = 0;
  void add_into(const Tensor& dst, const Tensor& src) { axpy(dst, 1.0f, src); }
  // dst = src (or dst += src when accumulate) converted element by element: same shape, any of f32, f16 and
  // bf16 on either side (rounded to nearest even), each rank-4 tensor in its own layout (Tensor::layout()).
  // The plan's cast and layout steps, the low-precision copies of parameters and their gradients.
  virtual void convert(const Tensor& dst, const Tensor& src, bool accumulate = false) = 0;
  // t *= factor (f32, in place) and whether every element of t is finite afterwards: the unscaling of gradients
  // under dynamic loss scaling. Waits for the result.
  virtual bool scale_and_check_finite(const Tensor& t, float factor) = 0;
  // Waits for all work queued on the backend.
  virtual void synchronize() = 0;

  // Profiling: a timestamp taken in the backend's stream order (a CUDA event; on the CPU the wall clock, where
  // every op has finished when it returns), and the milliseconds between two of them (waits for `to`).
  virtual std::shared_ptr<void> mark();
  virtual double elapsed_ms(const void* from, const void* to);

  // Graph capture (CUDA graphs): records the work `work` queues and returns a handle to replay it.
  virtual bool supports_graph_capture() const { return false; }
  virtual std::shared_ptr<void> capture(const std::function<void()>& work) {
    (void)work;
    fail("backend {} has no graph capture", backend_name(backend()));
  }
  virtual void replay(void* captured) { (void)captured; }

  // A device tensor with a copy of a host tensor, and back.
  Tensor upload(const Tensor& host);
  Tensor download(const Tensor& dev);
};

// Throws unless convert(dst, src) can run: floating tensors of one shape.
void check_convertible(const Tensor& dst, const Tensor& src);

// The CPU backend's context (always available).
std::shared_ptr<BackendContext> cpu_backend();

enum class DeviceChoice { automatic, cpu, cuda };
// "auto" (CUDA when a usable GPU is present, else the CPU), "cpu" or "cuda" (an error without a GPU).
DeviceChoice parse_device_choice(std::string_view s);
std::shared_ptr<BackendContext> make_backend(DeviceChoice choice);
// Whether this build has the CUDA backend and a usable GPU is present (probed once).
bool cuda_usable();

}  // namespace vision::graph
