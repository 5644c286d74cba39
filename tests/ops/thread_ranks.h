// ThreadRanks — the ranks of a data-parallel job as threads of one process, for op tests of SyncBatchNorm
// (graph::Collective) without MPI: rank(r) is rank r's collective, whose all_gather meets the other ranks' calls at a
// barrier. Memory on any backend (copied through the host: the backend's copy waits for its stream).
#pragma once

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "vision/graph/backend.h"
#include "vision/graph/collective.h"

namespace vision::test {

class ThreadRanks {
 public:
  explicit ThreadRanks(int world) : world_(world), slots_(static_cast<size_t>(world)) {
    for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  // Rank r's collective, for plans and ops on `backend` (rank r's own, from r's thread).
  graph::Collective* rank(int r, std::shared_ptr<graph::BackendContext> backend) {
    ranks_[static_cast<size_t>(r)]->backend = std::move(backend);
    return ranks_[static_cast<size_t>(r)].get();
  }
  int64_t gathers() const { return gathers_; }  // all_gather calls of rank 0

 private:
  struct Rank final : graph::Collective {
    Rank(ThreadRanks& all, int r) : all(all), r(r) {}
    int rank() const override { return r; }
    int world() const override { return all.world_; }
    void all_gather(const void* send, void* recv, size_t bytes) override {
      std::vector<std::byte> mine(bytes);
      copy_out(mine.data(), send, bytes);
      all.slots_[static_cast<size_t>(r)] = std::move(mine);
      all.barrier();  // every rank's bytes are in
      std::vector<std::byte> joined;
      for (const auto& s : all.slots_) joined.insert(joined.end(), s.begin(), s.end());
      if (r == 0) ++all.gathers_;
      all.barrier();  // every rank has read them: the next gather may write
      copy_in(recv, joined.data(), joined.size());
    }
    void copy_out(void* host, const void* from, size_t bytes) {
      if (backend->device() == core::Device::cpu)
        std::memcpy(host, from, bytes);
      else
        backend->copy_to_host(host, from, bytes);
    }
    void copy_in(void* to, const void* host, size_t bytes) {
      if (backend->device() == core::Device::cpu)
        std::memcpy(to, host, bytes);
      else
        backend->copy_to_device(to, host, bytes);
    }
    ThreadRanks& all;
    int r;
    std::shared_ptr<graph::BackendContext> backend;
  };

  void barrier() {
    std::unique_lock lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

  int world_;
  std::vector<std::vector<std::byte>> slots_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int64_t gathers_ = 0;
};

}  // namespace vision::test
