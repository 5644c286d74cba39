#include "vision/models/yolo/blocks/modules.h"

#include <fmt/format.h>

#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/blocks/attention.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/shape_ops.h"

namespace vision::models::yolo::blocks {

namespace {

int64_t channels_of(const graph::SymTensor& x, std::string_view what) {
  VISION_CHECK(x.valid() && x.shape().rank() == 4, "{}: the input must be [B, C, H, W], got {}", what,
               x.valid() ? x.shape().str() : "nothing");
  return x.dim(1);
}

// int(c · e), as Python's int() of the product.
int64_t scaled(int64_t c, double e) { return static_cast<int64_t>(static_cast<double>(c) * e); }

}  // namespace

graph::SymTensor bottleneck(graph::SymTensor x, const BottleneckArgs& a, ConvNorm norm, const std::string& name) {
  const int64_t c1 = channels_of(x, "Bottleneck");
  auto _ = x.graph()->scope(name);
  auto y = conv(x, {.c2 = scaled(a.c2, a.e), .k = a.k}, norm, "cv1");
  y = conv(y, {.c2 = a.c2, .k = a.k}, norm, "cv2");
  return a.shortcut && c1 == a.c2 ? ops::add(x, y, "add") : y;
}

graph::SymTensor c3k(graph::SymTensor x, int64_t c2, int64_t n, bool shortcut, ConvNorm norm,
                     const std::string& name) {
  channels_of(x, "C3k");
  const int64_t c = scaled(c2, 0.5);
  auto _ = x.graph()->scope(name);
  auto y = conv(x, {.c2 = c}, norm, "cv1");
  {
    auto m = x.graph()->scope("m");
    for (int64_t i = 0; i < n; ++i)
      y = bottleneck(y, {.c2 = c, .shortcut = shortcut, .k = 3, .e = 1.0}, norm, std::to_string(i));
  }
  auto side = conv(x, {.c2 = c}, norm, "cv2");
  return conv(ops::concat({y, side}, "cat"), {.c2 = c2}, norm, "cv3");
}

graph::SymTensor c3k2(graph::SymTensor x, const C3k2Args& a, ConvNorm norm, const std::string& name) {
  channels_of(x, "C3k2");
  const int64_t c = scaled(a.c2, a.e);
  auto _ = x.graph()->scope(name);
  // ultralytics' cv1(x).chunk(2) followed by cat(chunks + m's outputs): the two chunks, in order, are cv1's output
  // itself, so the concat takes that whole and only the second chunk (m's input) is copied out.
  const graph::SymTensor cv1 = conv(x, {.c2 = 2 * c}, norm, "cv1");
  std::vector<graph::SymTensor> parts = {cv1};
  graph::SymTensor y = ops::channel_slice(cv1, c, c, "chunk");  // the second chunk: m's input
  {
    auto m = x.graph()->scope("m");
    for (int64_t i = 0; i < a.n; ++i) {
      const std::string index = std::to_string(i);
      if (a.attn) {
        auto block = x.graph()->scope(index);
        y = bottleneck(y, {.c2 = c, .shortcut = a.shortcut}, norm, "0");
        y = psa_block(y, std::max<int64_t>(c / 64, 1), norm, "1");
      } else if (a.c3k) {
        y = c3k(y, c, 2, a.shortcut, norm, index);
      } else {
        y = bottleneck(y, {.c2 = c, .shortcut = a.shortcut}, norm, index);
      }
      parts.push_back(y);
    }
  }
  return conv(ops::concat(parts, "cat"), {.c2 = a.c2}, norm, "cv2");
}

graph::SymTensor sppf(graph::SymTensor x, const SppfArgs& a, ConvNorm norm, const std::string& name) {
  const int64_t c1 = channels_of(x, "SPPF");
  VISION_CHECK(a.k % 2 == 1 && a.n >= 1, "SPPF: the pool size must be odd and n ≥ 1, got k {} n {}", a.k, a.n);
  auto _ = x.graph()->scope(name);
  std::vector<graph::SymTensor> maps = {conv(x, {.c2 = c1 / 2, .act = false}, norm, "cv1")};
  for (int64_t i = 0; i < a.n; ++i)
    maps.push_back(ops::maxpool2d(maps.back(), a.k, 1, a.k / 2, fmt::format("pool{}", i)));
  auto y = conv(ops::concat(maps, "cat"), {.c2 = a.c2}, norm, "cv2");
  return a.shortcut && c1 == a.c2 ? ops::add(y, x, "add") : y;
}

graph::SymTensor psa_block(graph::SymTensor x, int64_t heads, ConvNorm norm, const std::string& name) {
  const int64_t c = channels_of(x, "PSABlock");
  auto _ = x.graph()->scope(name);
  const AttentionConfig attn{.dim = c, .heads = heads, .form = kernels::attention::default_psa_form(), .norm = norm};
  x = ops::add(x, attention(x, attn, "attn"), "add_attn");
  graph::SymTensor y;
  {
    auto ffn = x.graph()->scope("ffn");
    y = conv(x, {.c2 = 2 * c}, norm, "0");
    y = conv(y, {.c2 = c, .act = false}, norm, "1");
  }
  return ops::add(x, y, "add_ffn");
}

graph::SymTensor c2psa(graph::SymTensor x, int64_t n, ConvNorm norm, const std::string& name) {
  const int64_t c1 = channels_of(x, "C2PSA");
  const int64_t c = c1 / 2;
  VISION_CHECK(c % 64 == 0, "C2PSA: {} channels do not give heads of 64 channels", c);
  auto _ = x.graph()->scope(name);
  auto halves = ops::split(conv(x, {.c2 = 2 * c}, norm, "cv1"), {c, c}, "chunk");
  graph::SymTensor b = halves[1];
  {
    auto m = x.graph()->scope("m");
    for (int64_t i = 0; i < n; ++i) b = psa_block(b, c / 64, norm, std::to_string(i));
  }
  return conv(ops::concat({halves[0], b}, "cat"), {.c2 = c1}, norm, "cv2");
}

}  // namespace vision::models::yolo::blocks
