// Running commands (the `vision` CLI, whose path the build passes as VISION_CLI) from tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace vision::test {

// Runs a shell command; returns its standard output (add 2>&1 for standard error too) and sets *status to
// pclose()'s wait status (-1 when the command could not be started).
inline std::string run_command(const std::string& command, int* status) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    *status = -1;
    return {};
  }
  std::string out;
  char buffer[4096];
  for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, got);
  *status = ::pclose(pipe);
  return out;
}

// The exit code of a command from run_command's status (-1 when it did not exit normally).
inline int exit_code(int status) { return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// A command's exit code and standard output (with whatever redirections the command line itself holds).
struct CliRun {
  int code = -1;
  std::string out;
};
inline CliRun run_cli(const std::string& command) {
  int status = 0;
  CliRun r;
  r.out = run_command(command, &status);
  r.code = exit_code(status);
  return r;
}

}  // namespace vision::test
