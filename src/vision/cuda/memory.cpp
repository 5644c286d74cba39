#include "vision/cuda/memory.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "vision/cuda/check.h"

namespace vision::cuda {

std::shared_ptr<void> device_alloc(size_t bytes) {
  void* p = nullptr;
  VISION_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

void PinnedFree::operator()(void* p) const {
  if (p) cudaFreeHost(p);
}

PinnedBytes pinned_alloc(size_t bytes) {
  void* p = nullptr;
  VISION_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
  return PinnedBytes(p);
}

Stream::Stream() { VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { VISION_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(unsigned flags) { VISION_CUDA_CHECK(cudaEventCreateWithFlags(&e_, flags)); }
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) const { VISION_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::synchronize() const { VISION_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  VISION_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

ReplayableUpload::ReplayableUpload(size_t bytes)
    : bytes_(bytes), device_(device_alloc(bytes)), host_(pinned_alloc(bytes)) {
  std::memset(host_.get(), 0, bytes ? bytes : 1);
}

ReplayableUpload::~ReplayableUpload() { cudaEventSynchronize(done_.get()); }  // a destructor reports nothing

void ReplayableUpload::stage(const void* host, size_t bytes) {
  VISION_CHECK(bytes == bytes_, "a replayable upload of {} bytes was staged with {}", bytes_, bytes);
  done_.synchronize();  // the copy that last read the buffer (never recorded: returns at once)
  if (bytes) std::memcpy(host_.get(), host, bytes);
}

void ReplayableUpload::queue(cudaStream_t stream) const {
  if (!bytes_) return;
  VISION_CUDA_CHECK(cudaMemcpyAsync(device_.get(), host_.get(), bytes_, cudaMemcpyHostToDevice, stream));
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  VISION_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  // While capturing, an external record becomes a node of the graph: each replay records the event after its copy.
  VISION_CUDA_CHECK(cudaEventRecordWithFlags(done_.get(), stream,
                                             capturing == cudaStreamCaptureStatusNone ? cudaEventRecordDefault
                                                                                      : cudaEventRecordExternal));
}

StagedUploader::~StagedUploader() {
  for (Slot& slot : slots_)
    if (slot.in_flight) cudaEventSynchronize(slot.done.get());  // no throwing here; the buffer is freed right after
}

void StagedUploader::upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (!bytes) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  VISION_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  VISION_CHECK(capturing == cudaStreamCaptureStatusNone,
               "a host-to-device copy of {} bytes was queued while the stream is captured into a CUDA graph: upload "
               "before capturing (a replay would read a staging buffer that later uploads overwrite)",
               bytes);
  cudaPointerAttributes attributes{};
  VISION_CUDA_CHECK(cudaPointerGetAttributes(&attributes, src));
  VISION_CHECK(attributes.type != cudaMemoryTypeDevice,
               "a host-to-device copy was given device memory {} as its source: copy on the device instead", src);
  std::lock_guard lock(mutex_);
  if (attributes.type == cudaMemoryTypeHost) {  // pinned already: the DMA reads it where it is
    VISION_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    direct_done_.record(stream);
    direct_done_.synchronize();  // the caller may reuse its memory once upload() returns
    return;
  }
  for (size_t offset = 0; offset < bytes; offset += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - offset);
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (slot.in_flight) {
      slot.done.synchronize();  // the copy that last read this buffer, not the whole stream
      slot.in_flight = false;
    }
    if (slot.capacity < n) {
      const size_t capacity = std::min(kChunkBytes, std::bit_ceil(std::max(n, size_t{64} << 10)));
      slot.host.reset();
      slot.capacity = 0;
      slot.host = pinned_alloc(capacity);
      slot.capacity = capacity;
    }
    std::memcpy(slot.host.get(), static_cast<const std::byte*>(src) + offset, n);
    VISION_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(dst) + offset, slot.host.get(), n,
                                      cudaMemcpyHostToDevice, stream));
    slot.in_flight = true;  // set before recording: a failed record must not let the buffer be overwritten unwaited
    slot.done.record(stream);
  }
}

void CapturedGraph::begin(cudaStream_t stream) {
  VISION_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

void CapturedGraph::abort_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream, &g);  // the capture is invalid: end it and drop what it held
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
}

std::unique_ptr<CapturedGraph> CapturedGraph::end(cudaStream_t stream) {
  std::unique_ptr<CapturedGraph> cg(new CapturedGraph());
  VISION_CUDA_CHECK(cudaStreamEndCapture(stream, &cg->graph_));
  VISION_CUDA_CHECK(cudaGraphInstantiate(&cg->exec_, cg->graph_, 0));
  return cg;
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CapturedGraph::replay(cudaStream_t stream) const { VISION_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

namespace {

size_t graph_launches(cudaGraph_t graph) {
  size_t n = 0;
  VISION_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) VISION_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  size_t launches = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    VISION_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel || type == cudaGraphNodeTypeMemcpy || type == cudaGraphNodeTypeMemset) {
      ++launches;
    } else if (type == cudaGraphNodeTypeGraph) {
      cudaGraph_t child = nullptr;
      VISION_CUDA_CHECK(cudaGraphChildGraphNodeGetGraph(node, &child));
      launches += graph_launches(child);
    }
  }
  return launches;
}

}  // namespace

size_t CapturedGraph::launches() const { return graph_launches(graph_); }

}  // namespace vision::cuda
