// The MPI communicator: every collective is posted non-blocking and polled until done or past the timeout, so that a
// rank that died or hangs never leaves the others waiting forever.
#include "vision/dist/mpi_communicator.h"

#ifdef VISION_HAS_MPI

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "vision/core/error.h"

namespace vision::dist {
namespace {

void mpi_check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  fail_as(ErrorKind::device, "MPI: {} failed: {}", call, std::string(text, static_cast<size_t>(std::max(length, 0))));
}

void finalize_mpi_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      int provided = 0;
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize_mpi_at_exit);
    }
    // Errors come back as statuses (checked), not as MPI's default abort without a word.
    mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world_), "MPI_Comm_size");
    MPI_Comm node = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    mpi_check(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank (node)");
    MPI_Comm_free(&node);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(float* data, size_t n) override {
    std::vector<MPI_Request> requests;
    for (size_t at = 0; at < n; at += bucket_floats()) {
      const int count = static_cast<int>(std::min(bucket_floats(), n - at));
      requests.emplace_back();
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data + at, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &requests.back()),
                "MPI_Iallreduce");
    }
    wait(requests, "the gradient all-reduce");
  }

  void start_all_reduce_sum(float* data, size_t n) override {
    for (size_t at = 0; at < n; at += bucket_floats()) {
      const int count = static_cast<int>(std::min(bucket_floats(), n - at));
      started_.emplace_back();
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data + at, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &started_.back()),
                "MPI_Iallreduce");
    }
  }
  void progress() override {
    if (started_.empty()) return;
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(started_.size()), started_.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
  }
  void finish_all_reduces() override {
    if (started_.empty()) return;
    wait(started_, "the gradient all-reduce");
    started_.clear();
  }

  int64_t all_reduce_max(int64_t value) override {
    std::vector<MPI_Request> requests(1);
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, requests.data()),
              "MPI_Iallreduce");
    wait(requests, "an all-reduce of the run's state");
    return value;
  }

  void broadcast(void* data, size_t bytes, int root) override {
    VISION_CHECK(root >= 0 && root < world_, "broadcast from rank {} in a world of {} ranks", root, world_);
    std::vector<MPI_Request> requests;
    auto* p = static_cast<char*>(data);
    constexpr size_t kChunk = size_t{1} << 30;
    for (size_t at = 0; at < bytes; at += kChunk) {
      requests.emplace_back();
      mpi_check(MPI_Ibcast(p + at, static_cast<int>(std::min(kChunk, bytes - at)), MPI_BYTE, root, MPI_COMM_WORLD,
                           &requests.back()),
                "MPI_Ibcast");
    }
    wait(requests, "a broadcast");
  }

  std::vector<std::string> all_gather(const std::string& bytes) override {
    VISION_CHECK(bytes.size() < INT_MAX / static_cast<size_t>(world_), "all_gather of {} bytes: too large",
                 bytes.size());
    int64_t mine = static_cast<int64_t>(bytes.size());
    std::vector<int64_t> sizes(static_cast<size_t>(world_));
    std::vector<MPI_Request> requests(1);
    mpi_check(MPI_Iallgather(&mine, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, MPI_COMM_WORLD, requests.data()),
              "MPI_Iallgather");
    wait(requests, "an all-gather");
    std::vector<int> counts(sizes.size()), displacements(sizes.size());
    int64_t total = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      VISION_CHECK(sizes[r] >= 0 && total + sizes[r] < INT_MAX, "all_gather: rank {} sends {} bytes", r, sizes[r]);
      counts[r] = static_cast<int>(sizes[r]);
      displacements[r] = static_cast<int>(total);
      total += sizes[r];
    }
    std::string all(static_cast<size_t>(total), '\0');
    mpi_check(MPI_Iallgatherv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, all.data(), counts.data(),
                              displacements.data(), MPI_BYTE, MPI_COMM_WORLD, requests.data()),
              "MPI_Iallgatherv");
    wait(requests, "an all-gather");
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(displacements[r]), static_cast<size_t>(counts[r])));
    return out;
  }

  void barrier() override {
    std::vector<MPI_Request> requests(1);
    mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, requests.data()), "MPI_Ibarrier");
    wait(requests, "a barrier");
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; in case it does
  }

 private:
  // Polls the requests until all are done; past the timeout, the job is aborted with a message (a collective left
  // half-done cannot be cancelled, and the other ranks are stuck in it too).
  void wait(std::vector<MPI_Request>& requests, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(0);
    for (;;) {
      int done = 0;
      mpi_check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
      if (done) return;
      if (Clock::now() - start > timeout_) {
        std::fprintf(stderr, "vision: rank %d of %d: %s; ending the job\n", rank_, world_, timeout_message(what).c_str());
        abort(1);
      }
      // Spin briefly (a gradient bucket is often done within microseconds), then back off to 1 ms.
      if (Clock::now() - start > std::chrono::microseconds(200)) {
        pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
        std::this_thread::sleep_for(pause);
      }
    }
  }

  int rank_ = 0, world_ = 1, local_rank_ = 0;
  std::vector<MPI_Request> started_;  // start_all_reduce_sum's, until finish_all_reduces
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_world() { return std::make_shared<MpiCommunicator>(); }

}  // namespace vision::dist

#endif  // VISION_HAS_MPI
