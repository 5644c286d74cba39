// Detects objects in image files with vision::Detector and prints one line per detection (the public API only):
//
//   detect_images MODEL IMAGE... [--device auto|cpu|cuda] [--conf 0.25]
//
// MODEL is a safetensors file (a checkpoint or an exported model) or an ultralytics .pt checkpoint.
#include <vision/vision.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  vision::DetectorOptions options;
  std::vector<std::string> images;
  std::string model;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      options.device = argv[++i];
    } else if (a == "--conf" && i + 1 < argc) {
      options.conf = std::stof(argv[++i]);
    } else if (model.empty()) {
      model = a;
    } else {
      images.push_back(a);
    }
  }
  if (model.empty() || images.empty()) {
    std::fprintf(stderr, "usage: detect_images MODEL IMAGE... [--device auto|cpu|cuda] [--conf 0.25]\n");
    return 2;
  }
  try {
    vision::Detector detector(model, options);
    std::printf("vision %s: YOLO26%s, %lld classes, on %s\n", vision::kVersion, detector.scale().c_str(),
                static_cast<long long>(detector.nc()), detector.device().c_str());
    for (const std::string& path : images) {
      const vision::data::Image image = vision::data::read_image(path);
      for (const vision::data::Detection& d : detector.detect(image))
        std::printf("%s: %s %.3f [%.1f %.1f %.1f %.1f]\n", path.c_str(), detector.names()[d.cls].c_str(), d.score,
                    d.box[0], d.box[1], d.box[2], d.box[3]);
    }
  } catch (const vision::Error& e) {
    std::fprintf(stderr, "detect_images: %s\n", e.what());
    return 1;
  }
  return 0;
}
