// Shared by the Detector input tests (CPU and CUDA): the first bundled sample image, and an image copied into a
// caller-owned buffer of any row stride and channel order (the bytes past each row poisoned).
#pragma once

#include <algorithm>
#include <filesystem>
#include <vector>

#include "vision/data/image.h"

namespace vision::test {

inline data::Image first_sample_image() {
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(VISION_SOURCE_DIR) / "assets" / "samples" / "images"))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return data::read_image(files.at(0));
}

inline std::vector<uint8_t> image_buffer(const data::Image& image, int64_t stride, data::ChannelOrder order) {
  std::vector<uint8_t> buffer(static_cast<size_t>(stride * image.height), 0xA5);
  for (int64_t y = 0; y < image.height; ++y)
    for (int64_t x = 0; x < image.width; ++x)
      for (int64_t c = 0; c < 3; ++c)
        buffer[static_cast<size_t>(y * stride + x * 3 + (order == data::ChannelOrder::bgr ? 2 - c : c))] =
            image.at(x, y)[c];
  return buffer;
}

}  // namespace vision::test
