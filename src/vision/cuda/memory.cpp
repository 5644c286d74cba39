#include "vision/cuda/memory.h"

#include "vision/cuda/check.h"

namespace vision::cuda {

std::shared_ptr<void> device_alloc(size_t bytes) {
  void* p = nullptr;
  VISION_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

Stream::Stream() { VISION_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { VISION_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { VISION_CUDA_CHECK(cudaEventCreate(&e_)); }
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

}  // namespace vision::cuda
