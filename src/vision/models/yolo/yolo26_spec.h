// What a YOLO26 is, without the graph: its scales, its spec (scale, classes, BatchNorm folded or not), the input sizes
// it takes, and the state key names of its Detect heads. The metadata of a weights file (model_info.h) is read against
// these alone, so that the parsing links without the graph (tests/fuzz).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vision::models::yolo {

namespace blocks {

// How a Conv block stores its normalisation: a BatchNorm after a bias-free convolution (a checkpoint, trainable), or
// folded into the convolution's weight and a bias (an exported model: keys "<name>.conv.weight", "<name>.conv.bias").
enum class ConvNorm : uint8_t { batchnorm, folded };

enum class DetectHead : uint8_t { one_to_many, one_to_one };

// The state key prefixes of a head's branches below the Detect layer ("cv2.", "cv3." or "one2one_cv2.",
// "one2one_cv3.").
std::array<std::string, 2> detect_head_prefixes(DetectHead head);
// Whether a state key belongs to a head's branches ("model.23.cv3.1.0.0.conv.weight" to the one-to-many head).
bool is_detect_head_key(std::string_view key, DetectHead head);
// The state key of the bias of the last convolution of a head's box (0) or class (1) branch at a level
// ("model.23.one2one_cv3.0.2.bias": the one-to-one class convolution of P3, whose outputs are the classes).
std::string detect_head_bias_key(DetectHead head, int branch, size_t level);

}  // namespace blocks

using blocks::ConvNorm;

enum class Scale : uint8_t { n, s, m, l, x };

struct ScaleInfo {
  Scale scale;
  std::string_view name;  // "n"
  double depth;           // repeats multiple
  double width;           // channels multiple
  int64_t max_channels;
  int64_t parameters;     // trainable parameters at nc = 80, both heads, BatchNorm unfused (ultralytics' count)
};
const ScaleInfo& scale_info(Scale scale);
std::string_view scale_name(Scale scale);
// "n", "s", "m", "l" or "x" (also "yolo26n", …); throws vision::Error naming the scales otherwise.
Scale parse_scale(std::string_view name);

// What a YOLO26 is: its scale, its number of classes and how its convolutions store BatchNorm.
struct Yolo26Spec {
  Scale scale = Scale::n;
  int64_t nc = 80;
  ConvNorm norm = ConvNorm::batchnorm;  // folded: an exported model (conv weight + bias, no BatchNorm)

  // make_divisible(min(c, max_channels) · width, 8): a layer's channels at this scale.
  int64_t channels(int64_t c) const;
  // max(round(n · depth), 1) for n > 1, else n: a layer's repeats at this scale.
  int64_t repeats(int64_t n) const;
  // Throws vision::Error unless nc ≥ 1.
  void validate() const;
};

// The strides of the Detect levels P3, P4, P5, and the multiple every input side must be.
inline constexpr std::array<int64_t, 3> kStrides = {8, 16, 32};
inline constexpr int64_t kSizeMultiple = 32;
// The largest input side: a plan's activations grow with its area (YOLO26n at 8192² needs tens of GB), and no
// detection model is trained or run above it.
inline constexpr int64_t kMaxImageSize = 8192;
// The most classes a model may have (the largest detection label sets have a few thousand).
inline constexpr int64_t kMaxClasses = 65536;
// Throws vision::Error naming the size unless height and width are positive multiples of 32 up to kMaxImageSize.
void check_image_size(int64_t height, int64_t width);

}  // namespace vision::models::yolo
