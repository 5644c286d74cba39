// Helpers of the Yolo26Trainer tests (CPU and CUDA): a tiny YOLO26n (64×64 inputs), fixed batches of bright squares
// with their boxes, and options that step every batch or accumulate two.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "vision/data/image_tensor.h"
#include "vision/models/yolo/trainer.h"

namespace vision::test::trainer_util {

namespace yolo = models::yolo;
using core::Shape;
using core::Tensor;

constexpr int64_t kSize = 64;

inline yolo::ModelInfo tiny_info(int64_t nc = 3) {
  yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::Scale::n, .nc = nc});
  info.imgsz = {kSize, kSize};
  return info;
}

// A fixed batch: images with a bright square per box on a noisy background, and the boxes as targets.
struct Batch {
  Tensor images, targets, count;
};
inline Batch make_batch(int64_t b, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch r{Tensor::zeros(Shape{b, 3, kSize, kSize}), Tensor::zeros(Shape{b, 4, 5}), Tensor::zeros(Shape{b}, core::DType::i32)};
  float* img = r.images.data<float>();
  for (int64_t i = 0; i < r.images.numel(); ++i) img[i] = 0.3f * u(g);
  for (int64_t i = 0; i < b; ++i) {
    const int n = static_cast<int>(i % 3) + 1;
    r.count.data<int32_t>()[i] = n;
    for (int k = 0; k < n; ++k) {
      const float w = 12 + 20 * u(g), h = 12 + 20 * u(g);
      const float x1 = u(g) * (kSize - w), y1 = u(g) * (kSize - h);
      const int cls = static_cast<int>(g() % 3);
      float* t = r.targets.data<float>() + (i * 4 + k) * 5;
      t[0] = static_cast<float>(cls), t[1] = x1, t[2] = y1, t[3] = x1 + w, t[4] = y1 + h;
      for (int64_t y = static_cast<int64_t>(y1); y < static_cast<int64_t>(y1 + h); ++y)
        for (int64_t x = static_cast<int64_t>(x1); x < static_cast<int64_t>(x1 + w); ++x)
          img[((i * 3 + cls) * kSize + y) * kSize + x] = 1.0f;
    }
  }
  return r;
}

inline yolo::TrainerOptions tiny_options() {
  yolo::TrainerOptions o;
  o.epochs = 3;
  o.batch = 2;
  o.batches_per_epoch = 3;
  o.imgsz = kSize;
  o.optimizer = "SGD";
  o.lr0 = 0.01;
  o.warmup_epochs = 0;  // no warmup: the steps use lr0 at once
  o.nbs = 4;            // two batches accumulated per step
  return o;
}

// The batch with u8 images [b, S, S, 3] (the loader's u8 batches) of random pixels, and `normalized` its images as
// f32 [b, 3, S, S] / 255 (data::normalize_u8_batch): the two forms of one batch.
inline Batch make_u8_batch(int64_t b, uint64_t seed, Tensor& normalized) {
  Batch r = make_batch(b, seed);
  std::mt19937_64 g(seed + 1000);
  r.images = Tensor::zeros(Shape{b, kSize, kSize, 3}, core::DType::u8);
  uint8_t* p = r.images.data<uint8_t>();
  for (int64_t i = 0; i < r.images.numel(); ++i) p[i] = static_cast<uint8_t>(g() % 256);
  normalized = data::normalize_u8_batch(r.images);
  return r;
}

// Runs `iterations` batches from the trainer's current position (three batches an epoch), returns the losses.
inline std::vector<float> run(yolo::Yolo26Trainer& t, int iterations, const std::vector<Batch>& batches) {
  std::vector<float> losses;
  for (int i = 0; i < iterations; ++i) {
    const int64_t ni = t.iteration();
    const Batch& b = batches[static_cast<size_t>(ni) % batches.size()];
    losses.push_back(t.train_batch(b.images, b.targets, b.count).loss);
    if (t.iteration() % 3 == 0) t.end_epoch();
  }
  return losses;
}

}  // namespace vision::test::trainer_util
