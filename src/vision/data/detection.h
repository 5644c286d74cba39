// Detection — one object found in an image: its box in the image's own pixels, its score and its class; GroundTruth —
// one labelled object in the same pixels (eval/metrics.h matches the one against the other).
#pragma once

#include <array>
#include <cstdint>

namespace vision::data {

struct Detection {
  std::array<float, 4> box = {};  // x1, y1, x2, y2 in the original image's pixels
  float score = 0.0f;             // σ(logit), in (conf, 1]
  int64_t cls = 0;                // class index in [0, nc)
  bool operator==(const Detection&) const = default;
};

struct GroundTruth {
  std::array<float, 4> box = {};  // x1, y1, x2, y2, the same pixels as the detections'
  int64_t cls = 0;
};

}  // namespace vision::data
