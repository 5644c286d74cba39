// dist::world() and the single-rank communicator; the MPI one is in mpi_communicator.cpp.
#include "vision/dist/communicator.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "vision/core/error.h"
#include "vision/dist/mpi_communicator.h"
#include "vision/dist/tcp_communicator.h"

namespace vision::dist {
namespace {


// An integer environment variable; nullopt when unset or empty, an error when it is not a number in [lo, hi].
std::optional<int> env_int(const char* name, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  VISION_CHECK(end != v && *end == '\0' && errno == 0 && x >= lo && x <= hi,
               "environment variable {}='{}' is not an integer in [{}, {}]", name, v, lo, hi);
  return static_cast<int>(x);
}

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "single"; }
  void all_reduce_sum(float*, size_t) override {}
  int64_t all_reduce_max(int64_t value) override { return value; }
  void broadcast(void*, size_t, int root) override {
    VISION_CHECK(root == 0, "broadcast from rank {} in a world of one rank", root);
  }
  std::vector<std::string> all_gather(const std::string& bytes) override { return {bytes}; }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
  constexpr int kMaxRanks = 1 << 20;
  // Open MPI's mpirun, then PMIx / PMI (Slurm's srun, MPICH's hydra): the variables each sets in its ranks.
  struct Source {
    const char *size, *rank, *local;
  };
  for (const Source& s : {Source{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
                          Source{"PMIX_SIZE", "PMIX_RANK", "PMIX_LOCAL_RANK"},
                          Source{"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"},
                          Source{"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"}}) {
    const std::optional<int> size = env_int(s.size, 1, kMaxRanks);
    const std::optional<int> rank = env_int(s.rank, 0, kMaxRanks);
    // PMIx sets PMIX_RANK without a size: MPI tells the size once initialised.
    if (!rank || (!size && std::string_view(s.rank) != "PMIX_RANK")) continue;
    // srun inside a batch allocation of one task is a single process: only a step of several tasks is a job.
    if (std::string_view(s.size) == "SLURM_NTASKS" && (!size || *size <= 1 || !std::getenv("SLURM_STEP_ID"))) continue;
    info.launcher = "mpi";
    info.world = size.value_or(0);
    info.rank = *rank;
    info.local_rank = env_int(s.local, 0, kMaxRanks).value_or(0);
    return info;
  }
  const std::optional<int> world = env_int("WORLD_SIZE", 1, kMaxRanks);
  const std::optional<int> rank = env_int("RANK", 0, kMaxRanks);
  if (world && rank) {
    VISION_CHECK(*rank < *world, "environment: RANK={} is not below WORLD_SIZE={}", *rank, *world);
    info.launcher = "torchrun";
    info.world = *world;
    info.rank = *rank;
    info.local_rank = env_int("LOCAL_RANK", 0, kMaxRanks).value_or(0);
  }
  return info;
}

std::string Communicator::timeout_message(const std::string& what) const {
  return fmt::format("{} did not complete within the collective timeout ({:.0f} s, --dist-timeout): another rank died "
                     "or hangs",
                     what, std::chrono::duration<double>(timeout_).count());
}

std::shared_ptr<Communicator> make_single() { return std::make_shared<SingleCommunicator>(); }

bool has_mpi() {
#ifdef VISION_HAS_MPI
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> world() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> the_world;
  const std::lock_guard lock(mutex);
  if (the_world) return the_world;
  const LaunchInfo info = detect_launch();
  if (info.launcher == "mpi") {
#ifdef VISION_HAS_MPI
    the_world = make_mpi_world();
#else
    fail("this process was started by an MPI launcher (rank {} of {}), but vision was built without MPI: rebuild with "
         "Open MPI installed (Debian: libopenmpi-dev), or run a single process",
         info.rank, info.world);
#endif
  } else if (info.launcher == "torchrun" && info.world > 1) {
    const char* addr = std::getenv("MASTER_ADDR");
    const std::optional<int> port = env_int("MASTER_PORT", 1, 65535);
    VISION_CHECK(addr && *addr && port,
                 "RANK={} WORLD_SIZE={} (torchrun's environment) need MASTER_ADDR and MASTER_PORT: rank 0's address and a "
                 "free port, where the ranks meet",
                 info.rank, info.world);
    // How long the ranks wait for each other to connect: VISION_RENDEZVOUS_TIMEOUT seconds, 5 minutes by default.
    const int seconds = env_int("VISION_RENDEZVOUS_TIMEOUT", 1, 86400).value_or(300);
    try {  // its errors name the peer; this rank is named here
      the_world = make_tcp_world(info.rank, info.world, info.local_rank, addr, *port, std::chrono::seconds(seconds));
    } catch (const Error& e) {
      throw Error(fmt::format("rank {} of {}: {}", info.rank, info.world, e.what()), e.kind());
    }
  } else {
    the_world = make_single();
  }
  return the_world;
}

void select_rank_gpu(const Communicator& comm) {
  auto split = [](const char* list) {
    std::vector<std::string> out;
    std::stringstream ss(list ? list : "");
    for (std::string d; std::getline(ss, d, ',');)
      if (!d.empty()) out.push_back(d);
    return out;
  };
  const char* listed = std::getenv("VISION_DEVICES");
  const char* name = "VISION_DEVICES";
  std::vector<std::string> devices = split(listed);
  if (devices.empty()) {
    listed = std::getenv("CUDA_VISIBLE_DEVICES"), name = "CUDA_VISIBLE_DEVICES";
    devices = split(listed);
    if (devices.size() == 1) return;  // the launcher gave this rank its GPU
  }
  const size_t local = static_cast<size_t>(comm.local_rank());
  if (devices.empty()) {  // the GPU of the local rank's index
    ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(local).c_str(), 1);
    return;
  }
  VISION_CHECK(local < devices.size(), "rank {}: local rank {} but {} lists {} GPUs ({})", comm.rank(), local, name,
               devices.size(), listed ? listed : "");
  ::setenv("CUDA_VISIBLE_DEVICES", devices[local].c_str(), 1);
}

}  // namespace vision::dist
