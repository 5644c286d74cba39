// A training run from C++ (the public API only): vision::run_training on a YOLO-format dataset, with a callback that
// prints each epoch and stops once mAP50-95 reaches a target.
//
//   train_shapes DATA_YAML [epochs] [imgsz] [device]      (e.g. a `vision synth` set)
#include <vision/vision.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_shapes DATA_YAML [epochs] [imgsz] [device]\n");
    return 2;
  }
  vision::TrainConfig config;
  config.data = argv[1];
  config.epochs = argc > 2 ? std::stoll(argv[2]) : 10;
  config.imgsz = argc > 3 ? std::stoll(argv[3]) : 320;
  config.device = argc > 4 ? argv[4] : "auto";
  config.batch = 8, config.workers = 2, config.project = "runs/examples", config.name = "train_shapes";
  config.verbose = false, config.progress = false;
  vision::TrainCallbacks callbacks;
  callbacks.on_epoch = [](const vision::EpochReport& e) {
    std::printf("epoch %lld/%lld: loss %.4f, mAP50 %.3f, mAP50-95 %.3f%s\n", static_cast<long long>(e.epoch),
                static_cast<long long>(e.epochs), e.box + e.cls + e.l1, e.metrics.map50, e.metrics.map,
                e.best ? " (best)" : "");
    return e.metrics.map < 0.9;  // false: stop after this epoch
  };
  try {
    const vision::TrainResult r = vision::run_training(config, callbacks);
    std::printf("%s\n", r.message.c_str());
  } catch (const vision::Error& e) {
    std::fprintf(stderr, "train_shapes: %s\n", e.what());
    return 1;
  }
  return 0;
}
