// RAII CUDA resources: device memory, streams, events and captured graphs (every status checked).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace vision::cuda {

// cudaMalloc'd bytes, freed when the last owner goes.
std::shared_ptr<void> device_alloc(size_t bytes);

class Stream {
 public:
  Stream();  // a non-blocking stream on the current device
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) const;
  void synchronize() const;
  // Milliseconds from start to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

// A CUDA graph captured from the work a callable queues on a stream, instantiated for replay.
class CapturedGraph {
 public:
  template <typename F>
  static std::unique_ptr<CapturedGraph> capture(cudaStream_t stream, F&& work) {
    begin(stream);
    try {
      work();
    } catch (...) {
      abort_capture(stream);
      throw;
    }
    return end(stream);
  }
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void replay(cudaStream_t stream) const;

 private:
  CapturedGraph() = default;
  static void begin(cudaStream_t stream);
  static void abort_capture(cudaStream_t stream);
  static std::unique_ptr<CapturedGraph> end(cudaStream_t stream);
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace vision::cuda
