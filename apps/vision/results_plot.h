// results.png of `vision train`: one small line chart per column of results.csv (the losses, P, R, mAP50, mAP50-95,
// fitness and lr against the epoch), drawn into an 8-bit image with the default font for the titles, and written as
// PNG. Without a font the charts are drawn without titles.
#pragma once

#include <filesystem>

namespace vision::cli {

// Reads results.csv (a header line, then numbers) and writes the chart image; a CSV with no rows writes nothing.
// Throws vision::Error when the file cannot be read or the image cannot be written.
void write_results_plot(const std::filesystem::path& csv, const std::filesystem::path& png);

}  // namespace vision::cli
