// vision — the command-line client of the vision-cpp engine (a thin client of the public C++ API).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/version.h"

namespace vision::cli {
namespace {
std::vector<std::string>& the_command_line() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace
void set_command_line(int argc, char** argv) { the_command_line().assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return the_command_line(); }
}  // namespace vision::cli

int main(int argc, char** argv) {
  vision::cli::set_command_line(argc, argv);
  CLI::App app{"vision — YOLO26 object detection engine (inference and training, CPU and CUDA)"};
  app.require_subcommand(1);
#ifdef VISION_HAS_CUDA
  app.set_version_flag("--version", std::string("vision ") + vision::kVersion + " (CUDA build)");
#else
  app.set_version_flag("--version", std::string("vision ") + vision::kVersion + " (CPU-only build)");
#endif
  vision::cli::add_demo_command(app);
  vision::cli::add_synth_command(app);
  vision::cli::add_init_command(app);
  vision::cli::add_predict_command(app);
  vision::cli::add_train_command(app);
  vision::cli::add_val_command(app);
  vision::cli::add_export_command(app);
  vision::cli::add_track_command(app);
  vision::cli::add_bench_command(app);
#ifdef VISION_HAS_CUDA
  vision::cli::add_kernels_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  } catch (const vision::Error& e) {
    std::fprintf(stderr, "vision: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vision: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
