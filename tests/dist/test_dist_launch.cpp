// Data-parallel training from the outside (issue #30): how a process reads its launch (Open MPI's, PMI's, Slurm's and
// torchrun's variables), and `mpirun -np 2 vision train` on CPU ranks end to end: a run whose rank 0 alone writes the
// run's files, a resume of it as one process, a bad split of the batch, and a rank that dies or hangs ending the job
// with an error within the collective timeout instead of hanging.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "cli_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/dist/communicator.h"

namespace vision {
namespace {

namespace fs = std::filesystem;
using test::CliRun;
using test::ScopedEnv;

// Every variable detect_launch reads, unset.
std::vector<std::pair<std::string, std::optional<std::string>>> no_launch() {
  std::vector<std::pair<std::string, std::optional<std::string>>> v;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_SIZE",
                           "PMIX_RANK", "PMIX_LOCAL_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_NTASKS",
                           "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID", "WORLD_SIZE", "RANK", "LOCAL_RANK"})
    v.emplace_back(name, std::nullopt);
  return v;
}

TEST(DistLaunch, ReadsTheLaunchersVariables) {
  {
    ScopedEnv env(no_launch());
    const dist::LaunchInfo i = dist::detect_launch();
    EXPECT_EQ(i.launcher, "");
    EXPECT_EQ(i.world, 1);
  }
  {
    auto v = no_launch();
    v.insert(v.end(), {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
    ScopedEnv env(v);
    const dist::LaunchInfo i = dist::detect_launch();
    EXPECT_EQ(i.launcher, "mpi");
    EXPECT_EQ(i.world, 4);
    EXPECT_EQ(i.rank, 3);
    EXPECT_EQ(i.local_rank, 1);
  }
  {  // srun: a step of several tasks is a job; one task of a batch allocation is a single process
    auto v = no_launch();
    v.insert(v.end(), {{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}});
    ScopedEnv env(v);
    const dist::LaunchInfo i = dist::detect_launch();
    EXPECT_EQ(i.launcher, "mpi");
    EXPECT_EQ(i.world, 8);
    EXPECT_EQ(i.rank, 5);
    EXPECT_EQ(i.local_rank, 1);
  }
  {
    auto v = no_launch();
    v.insert(v.end(), {{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}});
    ScopedEnv env(v);
    EXPECT_EQ(dist::detect_launch().launcher, "");
  }
  {
    auto v = no_launch();
    v.insert(v.end(), {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
    ScopedEnv env(v);
    const dist::LaunchInfo i = dist::detect_launch();
    EXPECT_EQ(i.launcher, "torchrun");
    EXPECT_EQ(i.rank, 1);
  }
  for (const auto& [size, rank] : {std::pair<const char*, const char*>{"2", "2"}, {"two", "0"}, {"2", "-1"}}) {
    auto v = no_launch();
    v.insert(v.end(), {{"WORLD_SIZE", size}, {"RANK", rank}});
    ScopedEnv env(v);
    EXPECT_THROW(dist::detect_launch(), Error) << size << " " << rank;
  }
}

TEST(DistLaunch, SingleCommunicatorIsAWorldOfOne) {
  const auto c = dist::make_single();
  EXPECT_EQ(c->world(), 1);
  float x[2] = {1.5f, -2};
  c->all_reduce_sum(x, 2);
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(c->all_reduce_max(7), 7);
  EXPECT_EQ(c->all_gather("abc"), std::vector<std::string>{"abc"});
  EXPECT_THROW(c->broadcast(x, sizeof x, 1), Error);
}

// A rank's GPU (dist::select_rank_gpu): its local rank's among VISION_DEVICES, else among a CUDA_VISIBLE_DEVICES of
// several, else its local rank's index; a CUDA_VISIBLE_DEVICES of one GPU stays as the launcher set it.
TEST(DistLaunch, EachLocalRankTakesItsOwnGpu) {
  struct LocalRank final : dist::Communicator {
    explicit LocalRank(int local) : local(local) {}
    int rank() const override { return local; }
    int world() const override { return 4; }
    int local_rank() const override { return local; }
    std::string backend() const override { return "test"; }
    void all_reduce_sum(float*, size_t) override {}
    int64_t all_reduce_max(int64_t v) override { return v; }
    void broadcast(void*, size_t, int) override {}
    std::vector<std::string> all_gather(const std::string& b) override { return {b}; }
    void barrier() override {}
    [[noreturn]] void abort(int code) override { std::exit(code); }
    int local;
  };
  auto chosen = [](int local, std::optional<std::string> devices, std::optional<std::string> visible) {
    const test::ScopedEnv env({{"VISION_DEVICES", devices}, {"CUDA_VISIBLE_DEVICES", visible}});
    dist::select_rank_gpu(LocalRank(local));
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return std::string(v ? v : "(unset)");
  };
  EXPECT_EQ(chosen(1, "4,6,7", std::nullopt), "6");
  EXPECT_EQ(chosen(1, "4,6,7", "0,1,2,3"), "6") << "VISION_DEVICES (vision train --devices) first";
  EXPECT_EQ(chosen(2, std::nullopt, "3,2,1,0"), "1") << "mpirun under a CUDA_VISIBLE_DEVICES of every GPU";
  EXPECT_EQ(chosen(2, std::nullopt, "5"), "5") << "srun --gpus-per-task 1: the launcher's choice";
  EXPECT_EQ(chosen(3, std::nullopt, std::nullopt), "3");
  EXPECT_THROW(chosen(2, "0,1", std::nullopt), Error) << "two GPUs listed for a third local rank";
}

std::string mpirun() {
#ifdef VISION_MPIEXEC
  return VISION_MPIEXEC;
#else
  return "";
#endif
}

// `mpirun -np N` (oversubscribed, allowed as root: CI runs as root) of the CLI with `args`; output and status.
CliRun ranks_cli(int n, const std::string& args, const std::string& env = "") {
  return test::run_cli(fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 {} "
                                   "'{}' -np {} --oversubscribe '{}' {} 2>&1",
                                   env, mpirun(), n, VISION_CLI, args));
}
CliRun one_cli(const std::string& args) { return test::run_cli(fmt::format("'{}' {} 2>&1", VISION_CLI, args)); }

// The tests that run mpirun skip in a build without MPI (the sanitizer presets).
#define REQUIRE_MPIRUN() \
  if (mpirun().empty()) GTEST_SKIP() << "built without MPI (VISION_MPI=OFF)"

class DistTrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    const CliRun s = one_cli(fmt::format("synth --out '{}' --train 12 --val 4 --imgsz 64 --seed 3", data().string()));
    ASSERT_EQ(s.code, 0) << s.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path data() { return dir_->path() / "shapes"; }
  static std::string train_args(const std::string& name, const std::string& extra, int batch = 4, int nbs = 4) {
    return fmt::format("train --data '{}' --scale n --imgsz 64 --batch {} --nbs {} --device cpu --optimizer SGD "
                       "--warmup-epochs 0 --workers 1 --project '{}' --name {} {}",
                       (data() / "data.yaml").string(), batch, nbs, (dir_->path() / "runs").string(), name, extra);
  }
  static fs::path run_dir(const std::string& name) { return dir_->path() / "runs" / name; }
  static inline test::TempDir* dir_ = nullptr;
};

size_t lines_of(const fs::path& p) {
  std::ifstream in(p);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST_F(DistTrainCli, TwoRanksTrainAndRankZeroAloneWrites) {
  REQUIRE_MPIRUN();
  const CliRun r = ranks_cli(2, train_args("two", "--epochs 2 --close-mosaic 0"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 4 (2 ranks of 2 over mpi)"), std::string::npos) << r.out;
  // One header and one line per epoch: rank 0's alone (a second writer would double them).
  EXPECT_EQ(lines_of(run_dir("two") / "results.csv"), 3u);
  EXPECT_TRUE(fs::is_regular_file(run_dir("two") / "weights" / "last.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(run_dir("two") / "weights" / "best.safetensors"));
  EXPECT_FALSE(fs::exists(dir_->path() / "runs" / "two2")) << "a second rank made a run folder of its own";
  size_t epoch_lines = 0;
  for (size_t at = 0; (at = r.out.find("epoch   2/2", at)) != std::string::npos; ++at) ++epoch_lines;
  EXPECT_EQ(epoch_lines, 1u) << "rank 0 alone prints: " << r.out;
}

// `--devices 0,1` in a plain process: the command starts itself again under mpirun, one rank per device (CPU ranks
// here, with --device cpu).
TEST_F(DistTrainCli, DevicesStartOneRankEach) {
  REQUIRE_MPIRUN();
  const CliRun r = one_cli(train_args("devices", "--epochs 1 --devices 0,1"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 4 (2 ranks of 2 over mpi)"), std::string::npos) << r.out;
  EXPECT_EQ(lines_of(run_dir("devices") / "results.csv"), 2u);
  const CliRun bad = one_cli(train_args("devices_bad", "--epochs 1 --devices 0,0"));
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("expected distinct GPU indices"), std::string::npos) << bad.out;
}

// A job of 2 ranks stopped (as Ctrl-C stops it) after 2 batches, resumed as a single process: rank 0's checkpoint
// carries the whole job (the pending gradients of both ranks included), and the run completes its epochs. With
// --sync-bn, which args.json keeps (a single process has nothing to synchronise).
TEST_F(DistTrainCli, StoppedJobResumesOnAnotherWorldSize) {
  REQUIRE_MPIRUN();
  const CliRun r = ranks_cli(2, train_args("resume", "--epochs 2 --close-mosaic 0 --stop-after 1 --sync-bn", 4, 8));
  ASSERT_EQ(r.code, 130) << r.out;
  EXPECT_NE(r.out.find("interrupted in epoch 1 after batch 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(2 ranks of 2 over mpi, SyncBatchNorm)"), std::string::npos) << r.out;
  EXPECT_NE(test::read_file(run_dir("resume") / "args.json").find("\"sync_bn\": true"), std::string::npos)
      << "--sync-bn is kept with the run's arguments";
  const CliRun resumed = one_cli(fmt::format("train --resume '{}'", run_dir("resume").string()));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(lines_of(run_dir("resume") / "results.csv"), 3u) << resumed.out;
}

TEST_F(DistTrainCli, BatchNotAMultipleOfTheRanksIsAnError) {
  REQUIRE_MPIRUN();
  const CliRun r = ranks_cli(2, train_args("odd", "--epochs 1", 3));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 3 is not a multiple of the 2 ranks"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(run_dir("odd"))) << "nothing is written before the error";
}

// torchrun's environment without an MPI launcher: the ranks meet over TCP (vision/dist/tcp_communicator.h).
TEST_F(DistTrainCli, TorchrunVariablesMeetOverTcp) {
  // `--devices` where mpirun is not wanted: child processes under torchrun's variables.
  const CliRun r = test::run_cli(fmt::format("VISION_LAUNCHER=spawn OMP_NUM_THREADS=1 '{}' {} 2>&1", VISION_CLI,
                                             train_args("spawned", "--epochs 1 --devices 0,1")));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 4 (2 ranks of 2 over tcp)"), std::string::npos) << r.out;
  EXPECT_EQ(lines_of(run_dir("spawned") / "results.csv"), 2u);
  // Without MASTER_ADDR / MASTER_PORT: said at once.
  const CliRun no_addr = test::run_cli(fmt::format("WORLD_SIZE=2 RANK=1 '{}' {} 2>&1", VISION_CLI,
                                                   train_args("torchrun", "--epochs 1")));
  EXPECT_NE(no_addr.code, 0) << no_addr.out;
  EXPECT_NE(no_addr.out.find("need MASTER_ADDR and MASTER_PORT"), std::string::npos) << no_addr.out;
  // Rank 0 whose other rank never comes: an error after the rendezvous timeout, nothing written.
  const auto start = std::chrono::steady_clock::now();
  const CliRun alone = test::run_cli(
      fmt::format("WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=0 VISION_RENDEZVOUS_TIMEOUT=2 '{}' {} 2>&1",
                  VISION_CLI, train_args("torchrun", "--epochs 1")));
  EXPECT_NE(alone.code, 0) << alone.out;
  EXPECT_NE(alone.out.find("MASTER_PORT='0'"), std::string::npos) << alone.out;
  const CliRun lonely = test::run_cli(
      fmt::format("WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT={} VISION_RENDEZVOUS_TIMEOUT=2 '{}' {} 2>&1",
                  20000 + ::getpid() % 20000, VISION_CLI, train_args("torchrun", "--epochs 1")));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(lonely.code, 0) << lonely.out;
  EXPECT_NE(lonely.out.find("0 of the 1 other ranks connected"), std::string::npos) << lonely.out;
  EXPECT_LT(seconds, 30.0);
  EXPECT_FALSE(fs::exists(run_dir("torchrun"))) << "nothing is written before the ranks meet";
}

// Starts `mpirun -np 2 vision train …` for many epochs, waits until rank 0 trains, sends `signal` to rank 1 and waits
// for the job. Returns its output, exit status and seconds
// from the signal to the end.
struct FaultRun {
  CliRun run;
  double seconds_after = 0;
};
// spawn: `vision train --devices 0,1` started without mpirun (its ranks meet over TCP) instead of mpirun.
FaultRun run_with_fault(const std::string& args, const char* signal, bool spawn = false) {
  // The ranks are found by their environment (a mark of this run, and Open MPI's rank variable), through /proc alone
  // (no procps); the job runs under timeout(1) so that nothing outlives a broken test.
  const std::string script = fmt::format(
      R"(export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export VISION_FAULT_MARK=fault-$$-$RANDOM
log=$(mktemp)
timeout -s KILL 150 {} '{}' {} > "$log" 2>&1 &
job=$!
for i in $(seq 600); do grep -q 'vision train: optimizer' "$log" && break; sleep 0.1; done
sleep 2
victim=""
for e in /proc/[0-9]*/environ; do
  env=$( {{ tr '\0' '\n' < $e; }} 2>/dev/null) || continue
  grep -qx "VISION_FAULT_MARK=$VISION_FAULT_MARK" <<< "$env" && grep -qx '{}' <<< "$env" &&
    victim=$(basename $(dirname $e))
done
[ -n "$victim" ] || echo "fault test: rank 1 not found"
start=$(date +%s%N)
[ -n "$victim" ] && kill -{} $victim
wait $job; code=$?
end=$(date +%s%N)
[ -n "$victim" ] && kill -KILL $victim 2>/dev/null
cat "$log"; rm -f "$log"
echo "fault test: seconds after the signal $(( (end - start) / 1000000 ))e-3"
exit $code)",
      spawn ? std::string("env VISION_LAUNCHER=spawn") : fmt::format("'{}' -np 2 --oversubscribe", mpirun()), VISION_CLI,
      spawn ? args + " --devices 0,1" : args, spawn ? "RANK=1" : "OMPI_COMM_WORLD_RANK=1", signal);
  FaultRun f;
  f.run = test::run_cli("bash -c '" + [&] {
    std::string quoted;
    for (char c : script) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted;
  }() + "'");
  const size_t at = f.run.out.find("seconds after the signal ");
  if (at != std::string::npos) f.seconds_after = std::atof(f.run.out.c_str() + at + 25);
  return f;
}

TEST_F(DistTrainCli, KilledRankEndsTheJob) {
  REQUIRE_MPIRUN();
  const FaultRun f = run_with_fault(train_args("killed", "--epochs 500 --dist-timeout 20"), "KILL");
  std::printf("  job ended %.1f s after rank 1 was killed, exit %d\n", f.seconds_after, f.run.code);
  EXPECT_NE(f.run.code, 0) << f.run.out;
  EXPECT_LT(f.seconds_after, 25.0) << f.run.out;
  EXPECT_EQ(f.run.out.find("rank 1 not found"), std::string::npos) << f.run.out;
  // mpirun's own report names the rank and the signal.
  EXPECT_NE(f.run.out.find("process rank 1"), std::string::npos) << f.run.out;
  EXPECT_NE(f.run.out.find("signal 9"), std::string::npos) << f.run.out;
}

// The same for ranks started by `--devices` without mpirun, meeting over TCP: rank 0's collective times out, it says so
// and ends; the launching process then ends the stopped rank.
TEST_F(DistTrainCli, HungSpawnedRankEndsTheJobAfterTheTimeout) {
  const FaultRun f = run_with_fault(train_args("hung_tcp", "--epochs 500 --dist-timeout 4"), "STOP", /*spawn=*/true);
  std::printf("  job ended %.1f s after rank 1 was stopped, exit %d\n", f.seconds_after, f.run.code);
  EXPECT_NE(f.run.code, 0) << f.run.out;
  EXPECT_EQ(f.run.out.find("rank 1 not found"), std::string::npos) << f.run.out;
  EXPECT_NE(f.run.out.find("rank 0 of 2: waiting for rank 1 did not complete within the collective timeout (4 s"),
            std::string::npos)
      << f.run.out;
  EXPECT_NE(f.run.out.find("vision train: rank 0 of 2 exited with status 1: ending the job"), std::string::npos)
      << f.run.out;
  EXPECT_GE(f.seconds_after, 3.5) << f.run.out;
  EXPECT_LT(f.seconds_after, 30.0) << f.run.out;
}

// A rank that hangs (stopped): the others' next collective times out after --dist-timeout, says so and ends the job.
TEST_F(DistTrainCli, HungRankEndsTheJobAfterTheTimeout) {
  REQUIRE_MPIRUN();
  const FaultRun f = run_with_fault(train_args("hung", "--epochs 500 --dist-timeout 4"), "STOP");
  std::printf("  job ended %.1f s after rank 1 was stopped, exit %d\n", f.seconds_after, f.run.code);
  EXPECT_NE(f.run.code, 0) << f.run.out;
  EXPECT_NE(f.run.out.find("rank 0 of 2:"), std::string::npos) << f.run.out;
  EXPECT_NE(f.run.out.find("did not complete within the collective timeout (4 s, --dist-timeout)"), std::string::npos)
      << f.run.out;
  EXPECT_GE(f.seconds_after, 3.5) << f.run.out;
  EXPECT_LT(f.seconds_after, 30.0) << f.run.out;
}

}  // namespace
}  // namespace vision
