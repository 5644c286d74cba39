// Training YOLO26 from C++ on tensors made in memory: a Yolo26Trainer over a batch of synthetic images (a bright
// square per object on a dark background) and their boxes, a few iterations, then the EMA weights saved as a
// checkpoint that `vision predict` and vision::Detector load.
//
//   ./build/examples/train_in_memory [cpu|cuda] [iterations]
#include <cstdio>
#include <random>
#include <string>

#include "vision/graph/backend.h"
#include "vision/models/yolo/trainer.h"

int main(int argc, char** argv) {
  namespace yolo = vision::models::yolo;
  using vision::core::Shape;
  using vision::core::Tensor;
  const std::string device = argc > 1 ? argv[1] : "cpu";
  const int iterations = argc > 2 ? std::stoi(argv[2]) : 10;
  try {
    auto backend = vision::graph::make_backend(vision::graph::parse_device_choice(device));

    // The model: YOLO26n with two classes, initial weights.
    yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::Scale::n, .nc = 2});
    info.names = {"red", "green"};
    constexpr int64_t batch = 4, size = 128;

    yolo::TrainerOptions options;
    options.epochs = 1;
    options.batch = batch;
    options.batches_per_epoch = iterations;
    options.imgsz = size;
    options.optimizer = "AdamW";
    options.lr0 = 0.002;
    options.warmup_epochs = 0;
    options.nbs = batch;  // one optimizer step per batch
    yolo::Yolo26Trainer trainer(backend, info, yolo::initial_weights(info), options);
    std::printf("training YOLO26n on %s: %s\n", device.c_str(), trainer.optimizer_description().c_str());

    // One batch: images [B, 3, H, W] in [0, 1]; targets [B, M, 5] (class, x1, y1, x2, y2 in pixels); count [B].
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    Tensor images = Tensor::zeros(Shape{batch, 3, size, size});
    Tensor targets = Tensor::zeros(Shape{batch, 2, 5});
    Tensor count = Tensor::zeros(Shape{batch}, vision::core::DType::i32);
    for (int64_t b = 0; b < batch; ++b) {
      count.data<int32_t>()[b] = 2;
      for (int k = 0; k < 2; ++k) {
        const float w = 20 + 40 * u(rng), h = 20 + 40 * u(rng), x = u(rng) * (size - w), y = u(rng) * (size - h);
        float* t = targets.data<float>() + (b * 2 + k) * 5;
        t[0] = static_cast<float>(k), t[1] = x, t[2] = y, t[3] = x + w, t[4] = y + h;
        for (int64_t r = static_cast<int64_t>(y); r < static_cast<int64_t>(y + h); ++r)
          for (int64_t c = static_cast<int64_t>(x); c < static_cast<int64_t>(x + w); ++c)
            images.data<float>()[((b * 3 + k) * size + r) * size + c] = 1.0f;
      }
    }

    for (int i = 0; i < iterations; ++i) {
      const yolo::IterationResult r = trainer.train_batch(images, targets, count);
      std::printf("iteration %2d  loss %8.4f  box %.4f  cls %.4f  l1 %.4f  grad norm %.3f\n", i, r.loss, r.items[0],
                  r.items[1], r.items[2], r.step.grad_norm);
    }
    trainer.end_epoch();
    trainer.save_checkpoint("train_in_memory.safetensors", {{"example", "train_in_memory"}}, 0.0);
    std::printf("saved train_in_memory.safetensors (the EMA weights under the plain names)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
