// vision — the command-line client of the vision-cpp engine.
#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"vision — YOLO26 inference and training engine"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
