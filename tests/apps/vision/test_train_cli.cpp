// `vision train` on the CPU, end to end through the CLI, on a tiny `vision synth` set (64 px): six epochs without
// augmentation lower the training loss, write results.csv, results.png and the last/best checkpoints (which `vision
// val` loads); a run stopped as Ctrl-C stops it and resumed gives the uninterrupted run's results.csv losses exactly;
// a corrupt image and a bad label line are reported, counted and skipped; bad arguments are clear errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"

namespace vision::test_train_cli_cpp {
namespace {

namespace fs = std::filesystem;
using test::CliRun;

CliRun cli(const std::string& args) { return test::run_cli(fmt::format("'{}' {} 2>&1", VISION_CLI, args)); }

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    const CliRun s = cli(fmt::format("synth --out '{}' --train 12 --val 4 --imgsz 64 --seed 3", data().string()));
    ASSERT_EQ(s.code, 0) << s.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path data() { return dir_->path() / "shapes"; }
  static fs::path yaml() { return data() / "data.yaml"; }
  // Training without augmentation: AdamW, no warmup, 6 images a batch, a step each batch (nbs 6).
  static CliRun train(const std::string& name, const std::string& extra) {
    return cli(fmt::format("train --data '{}' --scale n --imgsz 64 --batch 6 --nbs 6 --device cpu --optimizer AdamW --lr0 0.01 "
                           "--warmup-epochs 0 --mosaic 0 --fliplr 0 --scale-aug 0 --translate 0 --hsv-h 0 --hsv-s 0 "
                           "--hsv-v 0 --workers 2 --project '{}' --name {} {}",
                           yaml().string(), (dir_->path() / "runs").string(), name, extra));
  }
  static fs::path run_dir(const std::string& name) { return dir_->path() / "runs" / name; }
  static inline test::TempDir* dir_ = nullptr;
};

// The rows of results.csv, each split at commas (the header first).
std::vector<std::vector<std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    rows.emplace_back();
    for (std::string f; std::getline(ss, f, ',');) rows.back().push_back(f);
  }
  return rows;
}

TEST_F(TrainCli, EpochsLowerTheLossAndWriteTheRun) {
  const CliRun r = train("plain", "--epochs 6 --close-mosaic 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("AdamW(lr=0.01"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch   6/6"), std::string::npos) << r.out;
  const auto rows = read_csv(run_dir("plain") / "results.csv");
  ASSERT_EQ(rows.size(), 7u) << "a header and six epochs";
  EXPECT_EQ(rows[0][2], "train/box_loss");
  auto total = [&](size_t i) { return std::stod(rows[i][2]) + std::stod(rows[i][3]) + std::stod(rows[i][4]); };
  std::printf("  train loss (the one-to-one head's, logged) per epoch:");
  for (size_t i = 1; i < rows.size(); ++i) std::printf(" %.4f", total(i));
  std::printf("\n");
  EXPECT_LT(total(6), 0.92 * total(1)) << r.out;
  for (const char* f : {"weights/last.safetensors", "weights/best.safetensors", "results.png", "args.json"})
    EXPECT_TRUE(fs::is_regular_file(run_dir("plain") / f)) << f;
  const CliRun v = cli(fmt::format("val --model '{}' --data '{}' --device cpu",
                                   (run_dir("plain") / "weights/best.safetensors").string(), yaml().string()));
  ASSERT_EQ(v.code, 0) << v.out;
  EXPECT_NE(v.out.find("circle"), std::string::npos) << v.out;  // the dataset's names went into the checkpoint
  // A second run of the same name goes to NAME2.
  const CliRun again = train("plain", "--epochs 1 --no-val");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(fs::is_regular_file(run_dir("plain2") / "weights/last.safetensors"));
}

// With validation each epoch, so that the validation of the EMA runs beside the loader's workers (cpu-tsan runs this
// test for the threads of a whole training run).
TEST_F(TrainCli, ResumeContinuesTheInterruptedRun) {
  const CliRun whole = train("whole", "--epochs 3");
  ASSERT_EQ(whole.code, 0) << whole.out;
  // Stopped after three batches (inside the second epoch: two batches an epoch), then resumed.
  const CliRun first = train("parts", "--epochs 3 --stop-after 3");
  ASSERT_EQ(first.code, 130) << first.out;
  EXPECT_NE(first.out.find("interrupted in epoch 2 after batch 1"), std::string::npos) << first.out;
  const CliRun second = cli(fmt::format("train --resume '{}' --device cpu --workers 1", run_dir("parts").string()));
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_NE(second.out.find("resuming"), std::string::npos) << second.out;
  const auto a = read_csv(run_dir("whole") / "results.csv"), b = read_csv(run_dir("parts") / "results.csv");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(a[0], b[0]);
  ASSERT_GT(a[0].size(), 5u);
  EXPECT_EQ(a[0][5], "metrics/precision(B)") << "validation columns";
  for (size_t i = 1; i < a.size(); ++i)  // every column but the time: losses, validation metrics, fitness, lr
    for (size_t c = 2; c < a[0].size(); ++c) EXPECT_EQ(a[i][c], b[i][c]) << "epoch " << i << " column " << a[0][c];
  // Nothing left to resume.
  const CliRun done = cli(fmt::format("train --resume '{}' --device cpu", run_dir("parts").string()));
  EXPECT_EQ(done.code, 1) << done.out;
  EXPECT_NE(done.out.find("nothing to resume"), std::string::npos) << done.out;
}

TEST_F(TrainCli, CorruptImagesAndBadLabelsAreCountedAndSkipped) {
  test::TempDir dir;
  fs::copy(data(), dir.path() / "shapes", fs::copy_options::recursive);
  const fs::path root = dir.path() / "shapes";
  std::vector<fs::path> images;
  for (const auto& e : fs::recursive_directory_iterator(root / "images" / "train")) images.push_back(e.path());
  std::sort(images.begin(), images.end());
  ASSERT_GE(images.size(), 2u);
  { std::ofstream(images[0], std::ios::trunc | std::ios::binary) << "not an image"; }
  const fs::path label = root / "labels" / "train" / (images[1].stem().string() + ".txt");
  { std::ofstream(label, std::ios::app) << "0 0.5 0.5\n"; }
  const CliRun r = cli(fmt::format("train --data '{}' --scale n --imgsz 64 --batch 6 --device cpu --epochs 1 --no-val "
                                   "--workers 2 --project '{}' --name bad",
                                   (root / "data.yaml").string(), (dir.path() / "runs").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(label.string() + ":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(images[0].filename().string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 unreadable train image(s) replaced, 1 bad label line(s) skipped"), std::string::npos)
      << r.out;
}

TEST_F(TrainCli, ClearErrors) {
  CliRun r = cli("train --data /nonexistent/data.yaml --device cpu");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent/data.yaml"), std::string::npos) << r.out;
  r = cli(fmt::format("train --data '{}' --imgsz 100 --epochs 1 --device cpu --project '{}'", yaml().string(),
                      (dir_->path() / "runs").string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("100"), std::string::npos) << r.out;
  r = cli(fmt::format("train --data '{}' --optimizer Adam --device cpu", yaml().string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("Adam"), std::string::npos) << r.out;
  r = cli(fmt::format("train --data '{}' --weights /nonexistent/w.safetensors --device cpu --epochs 1 --project '{}'",
                      yaml().string(), (dir_->path() / "runs").string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("/nonexistent/w.safetensors"), std::string::npos) << r.out;
  r = cli(fmt::format("train --resume '{}' --device cpu", (dir_->path() / "no-such-run").string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no-such-run"), std::string::npos) << r.out;
  // TF32 is a mode of f32 training on CUDA: refused on the CPU, and with another dtype.
  for (const char* extra : {"--device cpu", "--device cpu --dtype bf16"}) {
    r = cli(fmt::format("train --data '{}' --tf32 {} --epochs 1 --project '{}'", yaml().string(), extra,
                        (dir_->path() / "runs").string()));
    EXPECT_EQ(r.code, 1) << extra << ": " << r.out;
    EXPECT_NE(r.out.find("--tf32 is a mode of f32 training on CUDA"), std::string::npos) << r.out;
  }
  // A size whose batches cannot exist: an error at once (it aborted with exit 134 on a loader thread).
  for (const char* size : {"65536", "8192"}) {
    r = cli(fmt::format("train --data '{}' --imgsz {} --batch 1024 --epochs 1 --device cpu --project '{}'",
                        yaml().string(), size, (dir_->path() / "runs").string()));
    EXPECT_EQ(r.code, 1) << size << ": " << r.out;
    EXPECT_TRUE(r.out.find("at most 8192") != std::string::npos || r.out.find("smaller batch or image size") != std::string::npos)
        << size << ": " << r.out;
  }
}

// A run killed while copying `best` left a truncated file before; now both checkpoints are written atomically and a
// new run removes the temporaries a killed one left.
TEST_F(TrainCli, StaleTemporariesAreRemovedAndBestIsWhole) {
  const fs::path weights = run_dir("stale") / "weights";
  fs::create_directories(weights);
  for (const char* name : {"last.safetensors.tmp.999999999", "best.safetensors.tmp.999999998"})
    test::write_file(weights / name, "partial");
  const CliRun r = train("stale", "--epochs 1 --exist-ok --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const fs::directory_entry& e : fs::directory_iterator(weights))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // best is a complete checkpoint (read back whole) equal to last after the one epoch.
  EXPECT_EQ(test::read_file(weights / "best.safetensors"), test::read_file(weights / "last.safetensors"));
}

}  // namespace
}  // namespace vision::test_train_cli_cpp
