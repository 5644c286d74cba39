// `vision kernels list|ops|source|ptx|build` — what the engine's GPU kernels are, which op launches which, and
// compiling them ahead of time. Errors propagate to main(), which prints them as `vision: error: …`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/cuda/kernel_cache.h"
#include "vision/models/builtin_ops.h"

namespace vision::cli {
namespace {

const cuda::Kernel& find_kernel(const std::string& id) {
  auto& registry = cuda::KernelRegistry::global();
  if (const cuda::Kernel* k = registry.find(id)) return *k;
  std::vector<std::string> near;
  for (const cuda::Kernel* k : registry.kernels())
    if (k->id().find(id) != std::string::npos) near.push_back(k->id());
  std::string hint;
  if (!near.empty()) {
    if (near.size() > 12) near.resize(12), near.push_back("...");
    hint = " Did you mean: " + fmt::format("{}", fmt::join(near, ", ")) + "?";
  }
  fail("unknown kernel '{}'; run `vision kernels list` to see every kernel id.{}", id, hint);
}

// Every registered kernel, or with op_name those the op's CUDA RuntimeOps may launch; sorted by id.
std::vector<const cuda::Kernel*> kernels_of(const std::string& op_name) {
  auto& registry = cuda::KernelRegistry::global();
  if (op_name.empty()) return registry.kernels();
  std::vector<const cuda::Kernel*> out;
  for (const graph::KernelInfo& info : models::cuda_kernels(models::builtin_op(op_name))) {
    const cuda::Kernel* k = registry.find(info.id);
    VISION_CHECK(k != nullptr, "op {} lists kernel '{}', which is not registered (a bug: register it in its family's "
                 "descriptor .cpp)", op_name, info.id);
    out.push_back(k);
  }
  std::sort(out.begin(), out.end(), [](const cuda::Kernel* a, const cuda::Kernel* b) { return a->id() < b->id(); });
  return out;
}

// `vision kernels ops`: each built-in op (with its configuration) and the kernel ids it may launch, indented below.
void print_ops() {
  for (const models::BuiltinOp& b : models::builtin_ops()) {
    const std::vector<graph::KernelInfo> kernels = models::cuda_kernels(b);
    std::string header = b.op->name();
    if (!b.config.empty()) header += "  (" + b.config + ")";
    std::printf("%s\n", header.c_str());
    if (kernels.empty()) std::printf("  (cuDNN only: no NVRTC kernels)\n");
    for (const graph::KernelInfo& k : kernels) std::printf("  %s\n", k.id.c_str());
  }
}

// The architecture to compile for: the one given, else the present GPU's.
std::string arch_or_current(const std::string& arch) {
  if (!arch.empty()) {
    cuda::check_arch(arch);
    return arch;
  }
  VISION_CHECK(cuda::gpu_available(),
               "no usable GPU to take the architecture from ({}); pass --arch, e.g. --arch sm_90a",
               cuda::gpu_unavailable_reason());
  return cuda::current_arch();
}

void build_all(std::vector<std::string> archs, int jobs) {
  if (archs.empty()) archs.push_back(arch_or_current(""));
  for (const auto& a : archs) cuda::check_arch(a);
  const std::vector<const cuda::Kernel*> kernels = cuda::KernelRegistry::global().kernels();
  struct Task {
    const cuda::Kernel* kernel;
    std::string arch;
  };
  std::vector<Task> tasks;
  for (const auto& a : archs)
    for (const cuda::Kernel* k : kernels) tasks.push_back({k, a});

  std::atomic<size_t> next{0};
  std::atomic<int> hits{0}, built{0};
  std::mutex mutex;
  std::vector<std::string> errors;
  auto worker = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      try {
        cuda::CacheOutcome outcome{};
        tasks[i].kernel->compile(tasks[i].arch, {}, &outcome);
        (outcome == cuda::CacheOutcome::hit ? hits : built)++;
      } catch (const Error& e) {
        std::lock_guard lock(mutex);
        errors.push_back(fmt::format("{} for {}: {}", tasks[i].kernel->id(), tasks[i].arch, e.what()));
      }
    }
  };
  const int n_threads = std::clamp<int>(jobs, 1, static_cast<int>(std::max<size_t>(tasks.size(), 1)));
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  std::printf("%zu kernels for %s in %s: %d compiled, %d already cached\n", kernels.size(),
              fmt::format("{}", fmt::join(archs, ", ")).c_str(), cuda::default_kernel_cache_dir().c_str(), built.load(),
              hits.load());
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    fail("{} of {} compiles failed:\n{}", errors.size(), tasks.size(), fmt::join(errors, "\n"));
  }
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  CLI::App* kernels = app.add_subcommand("kernels",
                                         "Show the engine's GPU kernels (ids, source, PTX) and compile "
                                         "them into the kernel cache ahead of time");
  kernels->require_subcommand(1);

  auto long_list = std::make_shared<bool>(false);
  auto op_name = std::make_shared<std::string>();
  CLI::App* list = kernels->add_subcommand("list", "Print every kernel id, one per line");
  list->add_flag("-l,--long", *long_list, "also print each kernel's argument types and source file");
  list->add_option("--op", *op_name,
                   "only the kernels this op's CUDA RuntimeOp may launch (an op name from `vision kernels ops`)");
  list->callback([long_list, op_name] {
    for (const cuda::Kernel* k : kernels_of(*op_name)) {
      if (*long_list)
        std::printf("%s\t(%s)\t%s\n", k->id().c_str(), fmt::format("{}", fmt::join(k->arg_types(), ", ")).c_str(),
                    k->spec().file.c_str());
      else
        std::printf("%s\n", k->id().c_str());
    }
  });

  CLI::App* ops = kernels->add_subcommand(
      "ops", "Print each built-in op (in a representative configuration) with the kernel ids its CUDA RuntimeOp may "
             "launch");
  ops->callback(print_ops);

  auto name = std::make_shared<std::string>();
  auto names = std::make_shared<std::vector<std::string>>();
  CLI::App* source =
      kernels->add_subcommand("source", "Print the exact source NVRTC compiles for a kernel (several: one after the other)");
  source->add_option("NAME", *names, "kernel ids, as printed by `vision kernels list`")->required();
  source->callback([names] {
    std::vector<const cuda::Kernel*> found;  // every name checked before anything is printed
    for (const std::string& n : *names) found.push_back(&find_kernel(n));
    for (const cuda::Kernel* k : found) std::fputs(k->source().c_str(), stdout);
  });

  auto ptx_arch = std::make_shared<std::string>();
  CLI::App* ptx = kernels->add_subcommand("ptx", "Compile a kernel (through the cache) and print its PTX");
  ptx->add_option("NAME", *name, "kernel id, as printed by `vision kernels list`")->required();
  ptx->add_option("--arch", *ptx_arch, "GPU architecture: sm_80, sm_90, sm_90a, ... (default: the present GPU's)");
  ptx->callback([name, ptx_arch] {
    const cuda::Kernel& k = find_kernel(*name);
    std::fputs(k.compile(arch_or_current(*ptx_arch)).ptx.c_str(), stdout);
  });

  auto archs = std::make_shared<std::vector<std::string>>();
  auto jobs = std::make_shared<int>(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  CLI::App* build = kernels->add_subcommand(
      "build",
      "Compile every kernel into the kernel cache ($VISION_CACHE_DIR, else $XDG_CACHE_HOME/vision-cpp/kernels, "
      "else ~/.cache/vision-cpp/kernels)");
  build->add_option("--arch", *archs, "GPU architecture(s) to compile for (repeatable; default: the present GPU's)");
  build->add_option("-j,--jobs", *jobs, "parallel compiles (default: one per core)");
  build->callback([archs, jobs] { build_all(*archs, *jobs); });
}

}  // namespace vision::cli
