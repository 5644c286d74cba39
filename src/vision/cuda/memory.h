// RAII CUDA resources: device and pinned host memory, streams, events, captured graphs, and staged host-to-device
// uploads (every status checked).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>

namespace vision::cuda {

// cudaMalloc'd bytes, freed when the last owner goes.
std::shared_ptr<void> device_alloc(size_t bytes);

// Page-locked (pinned) host memory from cudaHostAlloc, freed with cudaFreeHost.
struct PinnedFree {
  void operator()(void* p) const;
};
using PinnedBytes = std::unique_ptr<void, PinnedFree>;
PinnedBytes pinned_alloc(size_t bytes);

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
  explicit Event(unsigned flags = cudaEventDefault);  // cudaEventDisableTiming for events that only order work
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

// Host-to-device copies that do not wait for the stream. The caller's bytes are copied into a pinned staging buffer
// and the DMA reads them from there, so the caller may free or modify its source as soon as upload() returns while
// the copy is still queued. kSlots buffers are used in turn, each grown as needed up to kChunkBytes (larger copies go
// through in chunks, the host copy of one overlapping the DMA of the previous); before a buffer is reused, upload()
// waits for the event recorded after the copy that last read it, never for the whole stream. A source that is already
// pinned is copied directly, and that copy is waited for (so the same contract holds). Not capturable into a CUDA
// graph: a replay would read staging buffers that later uploads overwrite (upload() throws while the stream captures).
class StagedUploader {
 public:
  static constexpr size_t kSlots = 2;
  static constexpr size_t kChunkBytes = size_t{32} << 20;

  StagedUploader() = default;
  ~StagedUploader();  // waits for the copies still reading its buffers, then frees them
  StagedUploader(const StagedUploader&) = delete;
  StagedUploader& operator=(const StagedUploader&) = delete;

  // Queues dst (device memory) ← src (host memory) on stream. Throws vision::Error for a device source, while the
  // stream is capturing, or on a CUDA failure.
  void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    PinnedBytes host;
    size_t capacity = 0;
    Event done{cudaEventDisableTiming};  // recorded after the copy that reads `host`
    bool in_flight = false;              // `done` was recorded since the slot was last waited for
  };
  std::mutex mutex_;
  std::array<Slot, kSlots> slots_;
  size_t next_ = 0;
  Event direct_done_{cudaEventDisableTiming};
};

// A host-to-device copy of a fixed size that a CUDA graph may capture (a training step's settings: the optimizer's
// group table, the EMA's decay). stage() writes the bytes into a pinned buffer of its own; queue() copies that buffer
// into its device memory on a stream — at once, or at each replay of a graph that captured the call, which then reads
// what was staged last. After the copy queue() records an event (captured as an event-record node while the stream
// captures), and stage() waits for it before writing: the copy that last read the buffer, eager or replayed, is done
// before it changes — never a wait for the whole stream.
class ReplayableUpload {
 public:
  explicit ReplayableUpload(size_t bytes);
  ~ReplayableUpload();  // waits for the copy that last read its buffers
  ReplayableUpload(const ReplayableUpload&) = delete;
  ReplayableUpload& operator=(const ReplayableUpload&) = delete;
  size_t bytes() const { return bytes_; }
  void stage(const void* host, size_t bytes);  // bytes must be bytes(); the copy a graph captured has that size
  void queue(cudaStream_t stream) const;
  void* device() const { return device_.get(); }

 private:
  size_t bytes_;
  std::shared_ptr<void> device_;
  PinnedBytes host_;
  Event done_{cudaEventDisableTiming};
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
  // The operations a replay runs: the graph's kernel, copy and memset nodes (those of child graphs included), each of
  // which eager execution launches on its own.
  size_t launches() const;

 private:
  CapturedGraph() = default;
  static void begin(cudaStream_t stream);
  static void abort_capture(cudaStream_t stream);
  static std::unique_ptr<CapturedGraph> end(cudaStream_t stream);
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace vision::cuda
