// dist::Communicator — the ranks of a data-parallel training job and the collectives the trainer needs (issue #30):
// the gradient all-reduce, broadcasts of the parameters, buffers and run decisions from rank 0, and a barrier.
//
// Who launches the ranks decides the backend; dist::world() reads the environment once per process:
//   - a launcher of MPI (`mpirun`, `mpiexec`, Slurm's `srun` with PMI/PMIx): MPI, on MPI_COMM_WORLD (rank, world size
//     and local rank from MPI; MPI_Init_thread on the first call, MPI_Finalize at exit);
//   - torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) without an MPI launcher, and a world
//     larger than 1: the ranks meet over TCP at MASTER_ADDR:MASTER_PORT (tcp_communicator.h), whose
//     collectives go through rank 0 — for the run's control messages and NCCL's id; MPI is the fast path of CPU ranks
//     (the rendezvous waits VISION_RENDEZVOUS_TIMEOUT seconds, default 300, for every rank);
//   - neither: a world of one rank, whose collectives do nothing.
//
// Every collective waits at most timeout() (set_timeout(); `vision train --dist-timeout`): a rank that died or hangs
// makes the others fail with an error that names the collective and the timeout, and the job is aborted
// (MPI_Abort), never left hanging. Collectives are called by every rank in the same order, from one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vision::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual int local_rank() const = 0;  // the rank among those of this machine (which GPU to take)
  virtual std::string backend() const = 0;  // "single", "mpi" or "tcp"

  // Sums `n` floats of host memory across the ranks, in place; every rank gets the same bits. Large buffers go in
  // buckets of bucket_floats(), all posted before the first wait.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // all_reduce_sum started, not waited for (a bucket of gradients, beside the rest of the backward): the data must stay
  // untouched until finish_all_reduces(), which waits for every one started (at most timeout()); progress() lets the
  // started ones advance (MPI progresses a non-blocking collective only inside its calls). Every rank starts the same
  // reductions in the same order. Default (TCP, a world of one): reduced at once.
  virtual void start_all_reduce_sum(float* data, size_t n) { all_reduce_sum(data, n); }
  virtual void progress() {}
  virtual void finish_all_reduces() {}
  // The largest of one value of every rank, on every rank (run decisions: a stop asked on any rank).
  virtual int64_t all_reduce_max(int64_t value) = 0;
  // Rank `root`'s `bytes` bytes of host memory to every rank.
  virtual void broadcast(void* data, size_t bytes, int root = 0) = 0;
  // Every rank's bytes (any length each), in rank order, on every rank.
  virtual std::vector<std::string> all_gather(const std::string& bytes) = 0;
  virtual void barrier() = 0;
  // Ends the job: every rank, with `code` (MPI_Abort under MPI; exit otherwise). For an error on one rank that the
  // others would otherwise wait for.
  [[noreturn]] virtual void abort(int code) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  // "WHAT did not complete within the collective timeout (N s, --dist-timeout): another rank died or hangs": what
  // every backend says when a collective outlives timeout().
  std::string timeout_message(const std::string& what) const;
  static constexpr size_t bucket_floats() { return size_t{1} << 22; }  // 16 MiB of f32

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
};

// How this process was launched (read from the environment; nothing is initialised).
struct LaunchInfo {
  std::string launcher;  // "mpi", "torchrun" or "" (a single process)
  int rank = 0, world = 1, local_rank = 0;
};
LaunchInfo detect_launch();

// The process's communicator: made on the first call from detect_launch() (MPI is initialised then), the same object
// after. Throws vision::Error when the launch asks for a backend this build lacks (an MPI launch of a build without
// MPI) or the ranks cannot meet (torchrun's variables without MASTER_ADDR / MASTER_PORT, a rank missing).
std::shared_ptr<Communicator> world();
// A world of one rank (collectives are copies or nothing): what world() is in a single process, and what tests use to
// compute a rank's numbers alone.
std::shared_ptr<Communicator> make_single();
// Whether this build can run several ranks (it was built with MPI).
bool has_mpi();

// Before CUDA starts: a rank of several takes one GPU, its local rank's among those VISION_DEVICES lists ("0,1,2,3",
// what `vision train --devices` passes), else among CUDA_VISIBLE_DEVICES when that lists several, else the GPU of
// its local rank's index, by setting CUDA_VISIBLE_DEVICES to it. A CUDA_VISIBLE_DEVICES of one GPU (Slurm's
// --gpus-per-task) is left as the launcher set it. Throws vision::Error when the list is shorter than the local ranks.
void select_rank_gpu(const Communicator& comm);

}  // namespace vision::dist
