// vision train — the training run of vision/trainer.h from the command line: one option per TrainConfig field
// (generated from visit_train_config, so the CLI, args.json and the checkpoints cannot disagree), and Ctrl-C (or
// SIGTERM) as the run's stop request: the batch finishes, `last` is saved and the command exits 130; --resume continues
// the run from its `last` exactly where it stopped.
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <type_traits>

#include "commands.h"
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
  cmd->add_option("--resume", *resume, "continue a run: its folder or its last.safetensors (default: project/name)")
      ->expected(0, 1);
  cmd->callback([config, resume, cmd] {
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
