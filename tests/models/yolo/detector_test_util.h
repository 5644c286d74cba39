// Helpers for the vision::Detector tests: fixture images as data::Image, detections as the tensors the fixture
// comparisons take.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "models/yolo/yolo26_fixture.h"
#include "vision/data/detection.h"
#include "vision/data/image.h"

namespace vision::test::yolo26_fixture {

// The fixture's u8 image [1, 3, H, W] as an RGB image.
inline data::Image fixture_image(const std::string& name) {
  const core::Tensor& t = output(name);
  const int64_t h = t.dim(2), w = t.dim(3);
  data::Image im(w, h, 3);
  const auto* p = t.data<uint8_t>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) im.at(x, y)[c] = p[(c * h + y) * w + x];
  return im;
}

// An image `factor` times larger, each pixel repeated factor × factor times.
inline data::Image upscale_nearest(const data::Image& im, int64_t factor) {
  data::Image out(im.width * factor, im.height * factor, im.channels);
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x)
      for (int64_t c = 0; c < im.channels; ++c) out.at(x, y)[c] = im.at(x / factor, y / factor)[c];
  return out;
}

// Detections found as [1, rows, 6] (boxes scaled by `scale`) and count [1], for expect_same_detections.
struct FoundTensors {
  core::Tensor dets, count;
};
inline FoundTensors as_tensors(const std::vector<data::Detection>& found, double scale = 1.0) {
  std::vector<float> v;
  for (const data::Detection& d : found) {
    for (float b : d.box) v.push_back(static_cast<float>(b * scale));
    v.push_back(d.score);
    v.push_back(static_cast<float>(d.cls));
  }
  const auto rows = static_cast<int64_t>(found.size());
  FoundTensors t{core::Tensor::zeros(core::Shape{1, std::max<int64_t>(rows, 1), 6}),
                     core::Tensor::zeros(core::Shape{1}, core::DType::i32)};
  std::copy(v.begin(), v.end(), t.dets.data<float>());
  t.count.data<int32_t>()[0] = static_cast<int32_t>(rows);
  return t;
}

// The reference's end-to-end detections with boxes clipped to the width × height input (the detector clips boxes to
// the image, as ultralytics' predict does; the fixture holds the raw decode).
inline core::Tensor clipped_reference_detections(float width = 320.0f, float height = 320.0f) {
  core::Tensor d = output("e2e.detections").clone();
  float* p = d.data<float>();
  for (int64_t r = 0; r < d.numel() / 6; ++r) {
    for (int k = 0; k < 4; ++k) p[r * 6 + k] = std::clamp(p[r * 6 + k], 0.0f, k % 2 == 0 ? width : height);
  }
  return d;
}

}  // namespace vision::test::yolo26_fixture
