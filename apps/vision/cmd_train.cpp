// vision train — the training run of vision/trainer.h from the command line: one option per TrainConfig field
// (generated from visit_train_config, so the CLI, args.json and the checkpoints cannot disagree), and Ctrl-C (or
// SIGTERM) as the run's stop request: the batch finishes, `last` is saved and the command exits 130; --resume continues
// the run from its `last` exactly where it stopped.
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/dist/communicator.h"
#include "vision/trainer.h"

namespace vision::cli {
namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_signals{0};
extern "C" void on_train_signal(int sig) {
  if (g_signals.fetch_add(1) > 0) {  // a second Ctrl-C: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_stop_requested = true;
}

std::string option_name(const char* field) {
  std::string s = field;
  for (char& c : s)
    if (c == '_') c = '-';
  return "--" + s;
}

// The ranks' command line: this process's arguments without --devices.
std::vector<std::string> rank_arguments() {
  std::vector<std::string> args;
  const std::vector<std::string>& self = command_line();
  for (size_t i = 1; i < self.size(); ++i) {
    if (self[i] == "--devices") {
      ++i;  // and its value
      continue;
    }
    if (self[i].starts_with("--devices=")) continue;
    args.push_back(self[i]);
  }
  return args;
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  VISION_CHECK(!ec, "--devices: cannot find this program's path (/proc/self/exe): {}", ec.message());
  return exe.string();
}

// A free TCP port of this machine for the ranks' rendezvous (asked of the kernel, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  VISION_CHECK(fd >= 0, "--devices: socket failed: {}", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0;
  ::close(fd);
  VISION_CHECK(ok, "--devices: no free TCP port for the ranks' rendezvous: {}", std::strerror(errno));
  return ntohs(a.sin_port);
}

// Without mpirun: the ranks as child processes under torchrun's environment contract (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), meeting over TCP on this machine. A rank that fails ends the others (SIGTERM, then
// SIGKILL after 10 s); the exit status is rank 0's, or 1 when a rank failed.
[[noreturn]] void spawn_ranks(size_t n) {
  const std::string exe = self_executable(), port = std::to_string(free_port()), world = std::to_string(n);
  std::vector<std::string> args = rank_arguments();
  args.insert(args.begin(), exe);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (size_t r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    VISION_CHECK(pid >= 0, "--devices: fork failed: {}", std::strerror(errno));
    if (pid == 0) {
      const std::string rank = std::to_string(r);
      ::setenv("RANK", rank.c_str(), 1), ::setenv("LOCAL_RANK", rank.c_str(), 1);
      ::setenv("WORLD_SIZE", world.c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1), ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "vision train: starting rank %zu (%s) failed: %s\n", r, exe.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    children.push_back(pid);
  }
  // Ctrl-C reaches the ranks from the terminal; this process waits for them.
  std::signal(SIGINT, SIG_IGN);
  int status0 = 0;
  bool failed = false;
  size_t running = n;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (failed && std::chrono::steady_clock::now() > deadline) {
        for (const pid_t c : children)
          if (c > 0) ::kill(c, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = std::find(children.begin(), children.end(), pid);
    if (it == children.end()) continue;
    const size_t r = static_cast<size_t>(it - children.begin());
    *it = -1, --running;
    const bool ok = WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 130);
    if (r == 0) status0 = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (!ok && !failed) {
      failed = true;
      std::fprintf(stderr, "vision train: rank %zu of %zu %s %d: ending the job\n", r, n,
                   WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      for (const pid_t c : children)
        if (c > 0) ::kill(c, SIGTERM), ::kill(c, SIGCONT);  // a stopped rank too
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
  }
  std::exit(failed ? 1 : status0);
}

// `--devices 0,1,2,3` in a process that no launcher started: this command again as one rank per listed device (a GPU
// each, VISION_DEVICES telling each rank which; with --device cpu, that many CPU ranks), through mpirun when it is on
// PATH (and this build has MPI), else as child processes meeting over TCP (spawn_ranks). Does not return.
[[noreturn]] void launch_ranks(const std::string& devices) {
  std::vector<std::string> list;
  std::set<std::string> unique;
  std::stringstream ss(devices);
  for (std::string d; std::getline(ss, d, ',');) {
    VISION_CHECK(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos && unique.insert(d).second,
                 "--devices {}: expected distinct GPU indices separated by commas, e.g. 0,1,2,3", devices);
    list.push_back(d);
  }
  VISION_CHECK(!list.empty(), "--devices: no device listed");
  ::setenv("VISION_DEVICES", devices.c_str(), 1);
  std::string mpirun;
  const char* launcher = std::getenv("VISION_LAUNCHER");  // "spawn": child processes even where mpirun is present
  if (const char* path = std::getenv("PATH"); path && dist::has_mpi() && !(launcher && std::string(launcher) == "spawn")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':') && mpirun.empty();)
      if (!dir.empty() && ::access((std::filesystem::path(dir) / "mpirun").c_str(), X_OK) == 0)
        mpirun = (std::filesystem::path(dir) / "mpirun").string();
  }
  if (mpirun.empty()) spawn_ranks(list.size());
  if (::geteuid() == 0) {  // Open MPI refuses root unless told
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  std::vector<std::string> args = {mpirun, "-np", std::to_string(list.size()), "--bind-to", "none", self_executable()};
  for (std::string& a : rank_arguments()) args.push_back(std::move(a));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(mpirun.c_str(), argv.data());
  fail("--devices: starting {} failed: {}", mpirun, std::strerror(errno));
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  auto resume = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("train", "Train a YOLO26 on a YOLO-format dataset");
  visit_train_config(*config, [&](auto& value, const TrainField& f) {
    using T = std::remove_reference_t<decltype(value)>;
    const std::string name = option_name(f.name);
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      // A field that is on by default is turned off by --no-NAME (--no-val); --verbose and --progress become --quiet.
      if (std::string_view(f.name) == "verbose") return;
      if (std::string_view(f.name) == "progress") {
        opt = cmd->add_flag("!--quiet", value, "no progress bar");
      } else {
        opt = value ? cmd->add_flag("!--no-" + name.substr(2), value, fmt::format("turn off: {}", f.help))
                    : cmd->add_flag(name, value, f.help);
      }
    } else {
      opt = cmd->add_option(name, value, f.help)->capture_default_str();
      if constexpr (std::is_same_v<T, std::string>) {
        std::vector<std::string> allowed = train_field_choices(f);
        std::erase(allowed, std::string());  // "" (the default's "decide for me") is not typed on a command line
        if (!allowed.empty()) opt->check(CLI::IsMember(allowed));
      } else if (std::isinf(f.max)) {
        if (f.min == 0) opt->check(CLI::NonNegativeNumber);
        else if (f.min == 1) opt->check(CLI::PositiveNumber);
        else opt->check(CLI::Range(f.min, f.max));
      } else if constexpr (std::is_integral_v<T>) {
        opt->check(CLI::Range(static_cast<int64_t>(f.min), static_cast<int64_t>(f.max)));
      } else {
        opt->check(CLI::Range(f.min, f.max));
      }
    }
    if (f.hidden) opt->group("");
  });
  auto devices = std::make_shared<std::string>();
  cmd->add_option("--devices", *devices,
                  "train on these GPUs, one process (rank) each, started through mpirun when it is present, else as "
                  "processes meeting over TCP (e.g. 0,1,2,3; with --device cpu: that many CPU ranks); --batch is split "
                  "across them");
  cmd->add_option("--resume", *resume, "continue a run: its folder or its last.safetensors (default: project/name)")
      ->expected(0, 1);
  cmd->callback([config, resume, devices, cmd] {
    if (!devices->empty()) {
      if (dist::detect_launch().launcher.empty()) launch_ranks(*devices);
      ::setenv("VISION_DEVICES", devices->c_str(), 1);  // a rank already: the list says which GPU is whose
    }
    TrainConfig c = *config;
    if (cmd->count("--resume") > 0) c.resume = *resume;
    g_stop_requested = false, g_signals = 0;
    // Ctrl-C and SIGTERM are the run's stop request while it runs, also when it ends in an error.
    struct StopOnSignals {
      StopOnSignals() { std::signal(SIGINT, on_train_signal), std::signal(SIGTERM, on_train_signal); }
      ~StopOnSignals() { std::signal(SIGINT, SIG_DFL), std::signal(SIGTERM, SIG_DFL); }
    } signals;
    TrainCallbacks callbacks;
    callbacks.stop = &g_stop_requested;
    if (run_training(c, callbacks).interrupted) throw CLI::RuntimeError(130);
  });
}

}  // namespace vision::cli
