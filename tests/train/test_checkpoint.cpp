// Training checkpoints (train/checkpoint.h): a bit-exact round trip of every group and field, clear errors for
// truncated, corrupt and non-checkpoint files and for a model of another nc, a checkpoint loaded by Yolo26Model and
// Detector as a full weights file (the EMA's values), and a writer killed with SIGKILL mid-write leaving the
// previous checkpoint intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/detector.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/model.h"
#include "vision/models/yolo/weights.h"
#include "vision/train/checkpoint.h"

using namespace vision;
using namespace vision::test;
using core::DType;
using core::Shape;
using core::Tensor;
using train::NamedTensors;

namespace {

Tensor seeded_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector(shape, v);
}

Tensor i64_scalar(int64_t value) {
  Tensor t = Tensor::zeros(Shape{}, DType::i64);
  t.data<int64_t>()[0] = value;
  return t;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

const Tensor* find(const NamedTensors& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return &t;
  return nullptr;
}

// Every tensor of `expected` is in `actual`, bit for bit, and nothing else is.
void expect_same(const NamedTensors& expected, const NamedTensors& actual, const std::string& group) {
  EXPECT_EQ(expected.size(), actual.size()) << group;
  for (const auto& [name, t] : expected) {
    const Tensor* got = find(actual, name);
    ASSERT_NE(got, nullptr) << group << ": " << name;
    EXPECT_TRUE(bit_equal(t, *got)) << group << ": " << name;
  }
}

struct Sample {
  NamedTensors model, ema, optimizer;
  std::map<std::string, std::string> metadata{{"scale", "n"}, {"nc", "2"}, {"note", "hello"}};
  train::TrainingState state;
};

Sample sample() {
  Sample s;
  s.model = {{"model.0.conv.weight", seeded_tensor(Shape{4, 3, 3, 3}, 1)},
             {"model.0.bn.running_mean", seeded_tensor(Shape{4}, 2)},
             {"model.0.bn.num_batches_tracked", i64_scalar(1234)}};
  s.ema = {{"model.0.conv.weight", seeded_tensor(Shape{4, 3, 3, 3}, 3)},
           {"model.0.bn.running_mean", seeded_tensor(Shape{4}, 4)}};
  s.optimizer = {{"step", i64_scalar(77)},
                 {"optimizer.model.0.conv.weight.momentum_buffer", seeded_tensor(Shape{4, 3, 3, 3}, 5)}};
  s.state.epoch = 12;
  s.state.iteration = 3456;
  s.state.step = 77;
  s.state.skipped_steps = 2;
  s.state.ema_updates = 77;
  s.state.best_fitness = 0.12345678901234567;
  s.state.loss_scale = 65536.0f;
  s.state.optimizer = "MuSGD";
  s.state.args = {{"epochs", 100}, {"lr0", 0.01}, {"data", "coco8.yaml"}, {"imgsz", {640, 480}}, {"amp", true}};
  s.state.rng = {0, 1, 0xFFFFFFFFFFFFFFFFull, 0x8000000000000000ull, 42};
  s.state.extra = {{"e2e_updates", 11}};
  return s;
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  Sample s = sample();
  train::write_checkpoint(path, s.model, s.metadata, s.ema, s.optimizer, s.state);
  const train::Checkpoint c = train::read_checkpoint(path);

  EXPECT_EQ(c.path, path);
  expect_same(s.model, c.model, "model");
  expect_same(s.ema, c.ema, "ema");
  NamedTensors optimizer = s.optimizer;
  optimizer[0].first = "optimizer.step";  // the prefix was added
  expect_same(optimizer, c.optimizer, "optimizer");
  EXPECT_EQ(c.metadata, s.metadata);

  EXPECT_EQ(c.state.epoch, 12);
  EXPECT_EQ(c.state.iteration, 3456);
  EXPECT_EQ(c.state.step, 77);
  EXPECT_EQ(c.state.skipped_steps, 2);
  EXPECT_EQ(c.state.ema_updates, 77);
  EXPECT_EQ(c.state.best_fitness, s.state.best_fitness);  // exact
  EXPECT_EQ(c.state.loss_scale, 65536.0f);
  EXPECT_EQ(c.state.optimizer, "MuSGD");
  EXPECT_EQ(c.state.args, s.state.args);
  EXPECT_EQ(c.state.rng, s.state.rng);
  EXPECT_EQ(c.state.extra, s.state.extra);

  // The file's plain names hold the EMA's values (inference weights), "train." the live model's.
  const core::SafetensorsFile raw = core::read_safetensors(path);
  EXPECT_TRUE(bit_equal(raw.at("model.0.conv.weight"), s.ema[0].second));
  EXPECT_TRUE(bit_equal(raw.at("train.model.0.conv.weight"), s.model[0].second));
  EXPECT_EQ(raw.find("train.model.0.bn.num_batches_tracked"), nullptr);  // not averaged: stored once
  EXPECT_TRUE(bit_equal(c.weights(true).at("model.0.conv.weight"), s.ema[0].second));
  EXPECT_TRUE(bit_equal(c.weights(false).at("model.0.conv.weight"), s.model[0].second));
}

TEST(Checkpoint, RoundTripWithoutEmaAndNonFiniteValues) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  Sample s = sample();
  s.state.best_fitness = -std::numeric_limits<double>::infinity();
  s.state.loss_scale = std::numeric_limits<float>::quiet_NaN();
  train::write_checkpoint(path, s.model, s.metadata, {}, {}, s.state);
  const train::Checkpoint c = train::read_checkpoint(path);
  expect_same(s.model, c.model, "model");
  EXPECT_FALSE(c.has_ema());
  EXPECT_TRUE(c.optimizer.empty());
  EXPECT_EQ(c.state.best_fitness, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(c.state.loss_scale));
  for (const auto& [name, t] : core::read_safetensors(path).tensors) EXPECT_FALSE(name.starts_with("train.")) << name;
}

TEST(Checkpoint, RejectsBadInput) {
  TempDir dir;
  Sample s = sample();
  const auto path = dir.path() / "c.safetensors";
  s.ema.emplace_back("model.9.missing", seeded_tensor(Shape{2}, 9));
  EXPECT_NE(error_of([&] { train::write_checkpoint(path, s.model, s.metadata, s.ema, {}, s.state); })
                .find("'model.9.missing' is not one of the model's"),
            std::string::npos);
  s = sample();
  s.ema[1].second = seeded_tensor(Shape{5}, 9);
  EXPECT_NE(error_of([&] { train::write_checkpoint(path, s.model, s.metadata, s.ema, {}, s.state); })
                .find("model.0.bn.running_mean"),
            std::string::npos);
  s = sample();
  s.metadata["training"] = "{}";
  EXPECT_NE(error_of([&] { train::write_checkpoint(path, s.model, s.metadata, {}, {}, s.state); }).find("'training'"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Checkpoint, TruncatedCorruptAndForeignFilesAreClearErrors) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  Sample s = sample();
  train::write_checkpoint(path, s.model, s.metadata, s.ema, s.optimizer, s.state);
  const std::string bytes = read_file(path);

  const auto truncated = dir.path() / "truncated.safetensors";
  write_file(truncated, bytes.substr(0, bytes.size() - 100));
  std::string e = error_of([&] { train::read_checkpoint(truncated); });
  EXPECT_NE(e.find(truncated.string()), std::string::npos) << e;

  const auto cut_header = dir.path() / "cut_header.safetensors";
  write_file(cut_header, bytes.substr(0, 40));
  e = error_of([&] { train::read_checkpoint(cut_header); });
  EXPECT_NE(e.find(cut_header.string()), std::string::npos) << e;

  const auto corrupt = dir.path() / "corrupt.safetensors";
  std::string bad = bytes;
  for (size_t i = 8; i < 40; ++i) bad[i] = '#';
  write_file(corrupt, bad);
  e = error_of([&] { train::read_checkpoint(corrupt); });
  EXPECT_NE(e.find(corrupt.string()), std::string::npos) << e;

  // A checkpoint whose training JSON is damaged (the header stays valid safetensors).
  const auto damaged = dir.path() / "damaged.safetensors";
  {
    core::SafetensorsFile f = core::read_safetensors(path);
    f.metadata["training"] = "{\"epoch\": 1}";
    core::write_safetensors(damaged, f.tensors, f.metadata);
  }
  e = error_of([&] { train::read_checkpoint(damaged); });
  EXPECT_NE(e.find(damaged.string()), std::string::npos) << e;
  EXPECT_NE(e.find("training.iteration"), std::string::npos) << e;

  // A weights file is no checkpoint.
  const auto weights = dir.path() / "yolo26n.safetensors";
  models::yolo::Yolo26Spec spec{.nc = 2};
  models::yolo::write_initial_weights(weights, models::yolo::default_model_info(spec));
  e = error_of([&] { train::read_checkpoint(weights); });
  EXPECT_NE(e.find(weights.string()), std::string::npos) << e;
  EXPECT_NE(e.find("not a training checkpoint"), std::string::npos) << e;

  const auto missing = dir.path() / "missing.safetensors";
  e = error_of([&] { train::read_checkpoint(missing); });
  EXPECT_NE(e.find(missing.string()), std::string::npos) << e;
}

// A YOLO26n checkpoint (nc 2): Yolo26Model and Detector load it as weights; a model of another nc refuses it.
TEST(Checkpoint, YoloCheckpointLoadsForInferenceAndChecksTheModel) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  const models::yolo::Yolo26Spec spec{.scale = models::yolo::Scale::n, .nc = 2};
  const models::yolo::ModelInfo info = models::yolo::default_model_info(spec);
  const core::SafetensorsFile init = models::yolo::initial_weights(info);
  NamedTensors model = init.tensors, ema, optimizer{{"optimizer.step", i64_scalar(3)}};
  uint32_t seed = 100;
  for (const auto& [name, t] : init.tensors)
    if (t.dtype() == DType::f32) ema.emplace_back(name, seeded_tensor(t.shape(), seed++));
  train::TrainingState state;
  state.step = 3;
  state.optimizer = "SGD";
  train::write_checkpoint(path, model, models::yolo::weights_metadata(info), ema, optimizer, state);

  auto yolo = models::yolo::Yolo26Model::load(path, graph::cpu_backend(), {});
  const std::vector<Tensor> out = yolo.forward(Tensor::zeros(Shape{1, 3, 64, 64}));
  EXPECT_FALSE(out.empty());
  Detector detector(path, {.device = "cpu", .imgsz = std::array<int64_t, 2>{64, 64}});
  (void)detector;

  const train::Checkpoint c = train::read_checkpoint(path);
  EXPECT_NO_THROW(models::yolo::check_checkpoint_model(c, spec));
  // Resume: the live model into a training state.
  graph::Graph g;
  models::yolo::record_yolo26_training(g.input("images", Shape{1, 3, 32, 32}), spec);
  graph::StateStore store(g, graph::cpu_backend(), {Shape{1, 3, 32, 32}});
  models::yolo::load_checkpoint_model(store, spec, c);
  EXPECT_TRUE(bit_equal(store.to_host()[0].second, *find(model, store.to_host()[0].first)));

  const models::yolo::Yolo26Spec other{.scale = models::yolo::Scale::n, .nc = 5};
  const std::string e = error_of([&] { models::yolo::check_checkpoint_model(c, other); });
  EXPECT_NE(e.find(path.string()), std::string::npos) << e;
  EXPECT_NE(e.find("YOLO26n with 2 classes"), std::string::npos) << e;
  EXPECT_NE(e.find("YOLO26n with 5 classes"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { models::yolo::load_checkpoint_model(store, other, c); }).find("5 classes"), std::string::npos);
}

// A writer killed with SIGKILL at random moments while writing ~24 MB checkpoints leaves a complete checkpoint at
// the path (one of the versions written, never older than one seen before), and later writes still succeed and clean
// up the killed writers' temporary files.
TEST(Checkpoint, SigkillWhileWritingLeavesThePreviousCheckpoint) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  const int64_t n = 6 * 1024 * 1024;  // 24 MB
  Tensor big = Tensor::zeros(Shape{n});
  float* p = big.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000) * 0.5f;
  Tensor tag = Tensor::zeros(Shape{1});
  NamedTensors model{{"model.big", big}, {"model.tag", tag}};
  const std::map<std::string, std::string> metadata{{"nc", "1"}};
  train::TrainingState state;
  train::write_checkpoint(path, model, metadata, {}, {}, state);  // version 0

  auto temporaries = [&] {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
      if (entry.path().filename().string().starts_with("last.safetensors.tmp.")) ++count;
    return count;
  };

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delay_ms(5, 60);
  int64_t last_seen = 0, killed_mid_write = 0;
  const int rounds = 15;
  for (int round = 0; round < rounds; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Versions round·1e6 + 1, + 2, …: each one's tag and step agree.
      for (int64_t v = (round + 1) * 1000000 + 1;; ++v) {
        try {
          tag.data<float>()[0] = static_cast<float>(v % 1000000);
          train::TrainingState s;
          s.step = v;
          train::write_checkpoint(path, model, metadata, {}, {}, s);
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer failed on its own: " << status;
    if (temporaries() > 0) ++killed_mid_write;

    const train::Checkpoint c = train::read_checkpoint(path);  // complete and valid
    ASSERT_GE(c.state.step, last_seen);
    const Tensor* got_tag = find(c.model, "model.tag");
    const Tensor* got_big = find(c.model, "model.big");
    ASSERT_TRUE(got_tag && got_big);
    EXPECT_EQ(static_cast<int64_t>(got_tag->data<float>()[0]), c.state.step % 1000000);
    EXPECT_TRUE(bit_equal(*got_big, big));
    last_seen = c.state.step;
  }
  RecordProperty("killed_mid_write", static_cast<int>(killed_mid_write));
  std::printf("killed while a temporary existed: %lld of %d rounds; last version %lld\n",
              static_cast<long long>(killed_mid_write), rounds, static_cast<long long>(last_seen));

  // A later write succeeds and removes the killed writers' temporaries.
  state.step = 42;
  train::write_checkpoint(path, model, metadata, {}, {}, state);
  EXPECT_EQ(temporaries(), 0);
  EXPECT_EQ(train::read_checkpoint(path).state.step, 42);
}

// A checkpoint whose 'training' metadata or tensors were damaged or forged (issue #33): each is an error naming the
// file and what is wrong, never a silent resume.
TEST(CheckpointHostile, ForgedStateAndNonFiniteWeightsAreErrors) {
  TempDir dir;
  const auto path = dir.path() / "last.safetensors";
  const Sample s = sample();
  auto with_state = [&](const std::function<void(nlohmann::json&)>& edit) {
    train::write_checkpoint(path, s.model, s.metadata, s.ema, s.optimizer, s.state);
    core::SafetensorsFile f = core::read_safetensors(path);
    nlohmann::json state = nlohmann::json::parse(f.metadata.at("training"));
    edit(state);
    f.metadata["training"] = state.dump();
    core::write_safetensors(path, f.tensors, f.metadata);
    return error_of([&] { train::read_checkpoint(path); });
  };
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["epoch"] = -5; }, "'training.epoch' is -5"},
      {[](nlohmann::json& j) { j["iteration"] = int64_t{1} << 62; }, "'training.iteration' is 4611686018427387904"},
      {[](nlohmann::json& j) { j["step"] = "many"; }, "'training.step' must be an integer"},
      {[](nlohmann::json& j) { j["best_fitness"] = "nan"; }, "'training.best_fitness' is NaN"},
      {[](nlohmann::json& j) { j["args"] = 7; }, "'training.args' must be an object"},
      {[](nlohmann::json& j) { j["extra"] = nlohmann::json::array(); }, "'training.extra' must be an object"},
      {[](nlohmann::json& j) { j["rng"] = {-1}; }, "'training.rng'"},
      {[](nlohmann::json& j) { j.erase("epoch"); }, "'training.epoch' is missing"}};
  for (const auto& [edit, want] : cases) {
    const std::string e = with_state(edit);
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << want << ": " << e;
  }
  // Metadata nested deeper than any checkpoint's is refused before it is built.
  train::write_checkpoint(path, s.model, s.metadata, s.ema, s.optimizer, s.state);
  core::SafetensorsFile f = core::read_safetensors(path);
  f.metadata["training"] = std::string(100000, '[') + std::string(100000, ']');
  core::write_safetensors(path, f.tensors, f.metadata);
  EXPECT_NE(error_of([&] { train::read_checkpoint(path); }).find("nests JSON deeper"), std::string::npos);
  // A NaN or an infinity in the model, the EMA or the optimizer state.
  for (const char* group : {"model", "ema", "optimizer"}) {
    Sample bad = sample();
    NamedTensors& tensors = std::string(group) == "model" ? bad.model : std::string(group) == "ema" ? bad.ema
                                                                                                    : bad.optimizer;
    for (auto& [name, t] : tensors)
      if (t.dtype() == DType::f32) {
        t.data<float>()[1] = std::string(group) == "ema" ? INFINITY : NAN;
        break;
      }
    train::write_checkpoint(path, bad.model, bad.metadata, bad.ema, bad.optimizer, bad.state);
    const std::string e = error_of([&] { train::read_checkpoint(path); });
    EXPECT_NE(e.find("non-finite value"), std::string::npos) << group << ": " << e;
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
  }
}
