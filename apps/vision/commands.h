// The CLI's subcommands: each lives in its own cmd_<name>.cpp and registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace vision::cli {

void add_demo_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_val_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_track_command(CLI::App& app);
void add_bench_command(CLI::App& app);
#ifdef VISION_HAS_CUDA
void add_kernels_command(CLI::App& app);
#endif

// The process's command line as main() received it (`vision train --devices` restarts it under mpirun).
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

// A name per video source for its outputs (<stem>.mp4, labels): a file's stem, "camera_<device>" for a camera,
// "stream" when a URL has none; a stem taken twice gets _2, _3, ….
std::vector<std::string> source_stems(const std::vector<std::string>& sources);

// `--hwaccel none|cuda` (data::VideoReaderOptions::hwaccel) on a command that reads video.
void add_hwaccel_option(CLI::App* cmd, std::string& hwaccel);

}  // namespace vision::cli
