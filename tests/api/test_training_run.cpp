// vision::run_training (vision/trainer.h) called as a library, on the CPU and a tiny generated dataset: the per-batch
// callback sees the running losses and can stop the run (which saves `last`, and a resume finishes it); the per-epoch
// callback sees the validation and can end the run; TrainConfig's JSON round-trips every field and refuses a wrong
// type; validation names the offending field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/data/synth/shapes.h"
#include "vision/trainer.h"

namespace vision {
namespace {

namespace fs = std::filesystem;

class TrainingRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    data::synth::write_dataset({.out = dir_->path() / "shapes", .train = 8, .val = 4, .imgsz = 64, .seed = 5});
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // Two batches an epoch of four 64-px images, no augmentation, AdamW with a step each batch.
  static TrainConfig config(const std::string& name) {
    TrainConfig c;
    c.data = (dir_->path() / "shapes" / "data.yaml").string();
    c.imgsz = 64, c.batch = 4, c.nbs = 4, c.epochs = 3, c.device = "cpu", c.optimizer = "AdamW", c.lr0 = 0.01;
    c.warmup_epochs = 0, c.mosaic = 0, c.fliplr = 0, c.scale_aug = 0, c.translate = 0;
    c.hsv_h = 0, c.hsv_s = 0, c.hsv_v = 0, c.workers = 2, c.close_mosaic = 0;
    c.project = (dir_->path() / "runs").string(), c.name = name, c.verbose = false, c.progress = false;
    return c;
  }
  static inline test::TempDir* dir_ = nullptr;
};

TEST_F(TrainingRun, CallbacksReportAndStopAndAResumeFinishes) {
  std::vector<BatchReport> batches;
  TrainCallbacks cb;
  cb.on_batch = [&](const BatchReport& b) {
    batches.push_back(b);
    return batches.size() < 3;  // stop inside the second epoch
  };
  const TrainResult stopped = run_training(config("cb"), cb);
  EXPECT_TRUE(stopped.interrupted);
  EXPECT_EQ(stopped.epochs_done, 1);
  EXPECT_TRUE(fs::is_regular_file(stopped.last));
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].epoch, 1);
  EXPECT_EQ(batches[0].batches, 2);
  EXPECT_EQ(batches[2].epoch, 2);
  EXPECT_EQ(batches[2].batch, 1);
  for (const BatchReport& b : batches) {
    EXPECT_TRUE(std::isfinite(b.box) && b.box > 0) << b.box;
    EXPECT_TRUE(std::isfinite(b.cls) && b.cls > 0) << b.cls;
  }
  EXPECT_NE(stopped.message.find("interrupted in epoch 2 after batch 1"), std::string::npos) << stopped.message;

  std::vector<EpochReport> epochs;
  TrainCallbacks cb2;
  cb2.on_epoch = [&](const EpochReport& e) {
    epochs.push_back(e);
    return true;
  };
  TrainConfig resume = config("ignored");
  resume.resume = stopped.run_dir.string();
  resume.epochs = 999;  // a resumed run takes its arguments from the checkpoint
  const TrainResult done = run_training(resume, cb2);
  EXPECT_FALSE(done.interrupted);
  EXPECT_EQ(done.run_dir, stopped.run_dir);
  EXPECT_EQ(done.epochs_done, 3);
  ASSERT_EQ(epochs.size(), 2u);  // epochs 2 and 3
  EXPECT_EQ(epochs[0].epoch, 2);
  EXPECT_EQ(epochs[1].epochs, 3);
  for (const EpochReport& e : epochs) {
    EXPECT_EQ(e.metrics.fitness, e.fitness);
    EXPECT_GT(e.lr, 0);
  }
  ASSERT_TRUE(done.best_metrics.has_value());
  EXPECT_GE(done.best_epoch, 1);
  EXPECT_TRUE(fs::is_regular_file(done.best));
  for (const char* f : {"results.csv", "results.png", "PR_curve.png", "val_pred.jpg", "args.json"})
    EXPECT_TRUE(fs::is_regular_file(done.run_dir / f)) << f;
}

TEST_F(TrainingRun, AnEpochCallbackEndsTheRun) {
  TrainCallbacks cb;
  int64_t seen = 0;
  cb.on_epoch = [&](const EpochReport& e) {
    seen = e.epoch;
    return false;
  };
  TrainConfig c = config("early");
  c.val = false;
  const TrainResult r = run_training(c, cb);
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(r.stopped_early);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.epochs_done, 1);
  EXPECT_EQ(test::read_file(r.best), test::read_file(r.last));  // without validation best is the last epoch
}

TEST_F(TrainingRun, StopFlagStopsAfterTheBatch) {
  std::atomic<bool> stop{true};
  TrainCallbacks cb;
  cb.stop = &stop;
  const TrainResult r = run_training(config("flag"), cb);
  EXPECT_TRUE(r.interrupted);
  EXPECT_NE(r.message.find("interrupted in epoch 1 after batch 1"), std::string::npos) << r.message;
}

TEST(TrainConfigJson, RoundTripsEveryFieldAndRefusesWrongTypes) {
  TrainConfig a;
  a.data = "d.yaml", a.scale = "s", a.epochs = 7, a.lr0 = 0.02, a.cos_lr = true, a.seed = 9, a.val = false;
  a.device = "cpu", a.workers = 3, a.name = "x";
  TrainConfig b;
  read_train_config_json(b, train_config_json(a, /*all=*/true));
  EXPECT_EQ(train_config_json(b, true), train_config_json(a, true));
  // args.json holds only what a checkpoint keeps: not the device, the workers or the run's name.
  const std::string kept = train_config_json(a);
  EXPECT_NE(kept.find("\"lr0\""), std::string::npos);
  EXPECT_EQ(kept.find("\"workers\""), std::string::npos);
  EXPECT_EQ(kept.find("\"device\""), std::string::npos);
  TrainConfig c;
  EXPECT_NE(test::error_of([&] { read_train_config_json(c, R"({"epochs": "ten"})"); }).find("'epochs'"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { read_train_config_json(c, "[1]"); }).find("object"), std::string::npos);
  EXPECT_NE(test::error_of([&] { read_train_config_json(c, R"({"epoch": 3})", false, false); }).find("'epoch'"),
            std::string::npos);
  read_train_config_json(c, R"({"workers": 5, "epochs": 4})", /*kept_only=*/true);
  EXPECT_EQ(c.epochs, 4);
  EXPECT_EQ(c.workers, TrainConfig{}.workers);  // not a kept field
}

TEST(TrainConfigValidation, NamesTheField) {
  auto error = [](auto set) {
    TrainConfig c;
    c.data = "d.yaml";
    set(c);
    return test::error_of([&] { validate_train_config(c); });
  };
  EXPECT_EQ(error([](TrainConfig&) {}), "(no error)");
  EXPECT_NE(error([](TrainConfig& c) { c.optimizer = "Adam"; }).find("optimizer 'Adam'"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.mosaic = 1.5; }).find("mosaic 1.5"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.lr0 = NAN; }).find("lr0"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.imgsz = 100; }).find("imgsz 100"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.batch = 0; }).find("batch 0"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.data.clear(); }).find("data"), std::string::npos);
  EXPECT_NE(error([](TrainConfig& c) { c.dtype = "f64"; }).find("dtype 'f64'"), std::string::npos);
}

}  // namespace
}  // namespace vision
