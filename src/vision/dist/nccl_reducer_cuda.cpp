#include "vision/dist/nccl_reducer_cuda.h"

#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/memory.h"

namespace vision::dist {
namespace {

void nccl_check(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  fail_as(ErrorKind::device, "NCCL: {} failed: {}", call, ncclGetErrorString(status));
}

class NcclReducer final : public DeviceReducer {
 public:
  NcclReducer(std::shared_ptr<Communicator> bootstrap, cudaStream_t stream)
      : bootstrap_(std::move(bootstrap)), stream_(stream) {
    ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off unless the user decided
    ncclUniqueId id{};
    // Rank 0 makes the id; a failure there must reach the other ranks, which would otherwise wait in the broadcast.
    int64_t ok = 1;
    std::string why;
    if (bootstrap_->rank() == 0) {
      try {
        nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      } catch (const Error& e) {
        ok = 0, why = e.what();
      }
    }
    bootstrap_->broadcast(&ok, sizeof ok, 0);
    if (!ok) fail_as(ErrorKind::device, "{}", bootstrap_->rank() == 0 ? why : "NCCL could not be set up on rank 0");
    bootstrap_->broadcast(&id, sizeof id, 0);
    nccl_check(ncclCommInitRank(&comm_, bootstrap_->world(), id, bootstrap_->rank()), "ncclCommInitRank");
  }
  ~NcclReducer() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string name() const override { return "nccl"; }

  void all_reduce_sum(float* device, size_t n) override {
    if (n == 0) return;
    nccl_check(ncclAllReduce(device, device, n, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
    wait("the gradient all-reduce (NCCL)");
  }

  // On side_, behind the buckets started before it (every collective of this communicator then runs in the order it
  // was called, as on PyTorch's one NCCL stream: two of them never run side by side), and the stream waits for it.
  void all_gather(const void* send, void* recv, size_t bytes) override {
    if (bytes == 0) return;
    fork();
    nccl_check(ncclAllGather(send, recv, bytes, ncclUint8, comm_, side_.get()), "ncclAllGather");
    gathered_.record(side_.get());
    VISION_CUDA_CHECK(cudaStreamWaitEvent(stream_, gathered_.get(), 0));
  }

  void start_all_reduce_sum(float* device, size_t n) override {
    if (n == 0) return;
    fork();  // the bucket's gradients are queued before this
    nccl_check(ncclAllReduce(device, device, n, ncclFloat32, ncclSum, comm_, side_.get()), "ncclAllReduce (bucket)");
    started_ = true;
  }
  void join() override {
    if (!started_) return;
    joined_.record(side_.get());
    VISION_CUDA_CHECK(cudaStreamWaitEvent(stream_, joined_.get(), 0));
    started_ = false;
  }
  void finish() override { wait("the gradient all-reduce (NCCL, buckets)"); }

  void broadcast(void* device, size_t bytes, int root) override {
    if (bytes == 0) return;
    nccl_check(ncclBroadcast(device, device, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
    wait("a broadcast (NCCL)");
  }

 private:
  // side_ waits for what stream_ has queued so far.
  void fork() {
    forked_.record(stream_);
    VISION_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), forked_.get(), 0));
  }
  // Waits for the stream (the collective just queued and what came before it) at most the timeout; past it the
  // communicator is aborted and the job ended.
  void wait(const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t s = cudaStreamQuery(stream_);
      if (s == cudaSuccess) return;
      if (s != cudaErrorNotReady) VISION_CUDA_CHECK(s);
      ncclResult_t async = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      nccl_check(async, what);
      if (Clock::now() - start > bootstrap_->timeout()) {
        std::fprintf(stderr, "vision: rank %d of %d: %s; ending the job\n", bootstrap_->rank(), bootstrap_->world(),
                     bootstrap_->timeout_message(what).c_str());
        ncclCommAbort(comm_);
        comm_ = nullptr;
        bootstrap_->abort(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::shared_ptr<Communicator> bootstrap_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  // The buckets' stream, forked from stream_ at each start and joined back by join().
  cuda::Stream side_;
  cuda::Event forked_{cudaEventDisableTiming}, joined_{cudaEventDisableTiming}, gathered_{cudaEventDisableTiming};
  bool started_ = false;
};

}  // namespace

std::unique_ptr<DeviceReducer> make_nccl_reducer(std::shared_ptr<Communicator> bootstrap, cudaStream_t stream) {
  return std::make_unique<NcclReducer>(std::move(bootstrap), stream);
}

}  // namespace vision::dist
