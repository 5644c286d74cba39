// YOLO26's building blocks above Conv (YOLO26.md, Modules): Bottleneck, C3k, C3k2 (its attention variant included),
// SPPF in its YOLO26 form, PSABlock and C2PSA. Each records under scope `name` with ultralytics' attribute names, so
// the state keys are the state_dict's ("model.6.m.0.m.1.cv2.bn.weight", "model.22.m.0.1.ffn.0.conv.weight", …).
#pragma once

#include <cstdint>
#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/blocks/conv.h"

namespace vision::models::yolo::blocks {

// Bottleneck(c1, c2, shortcut, k, e): cv1 = Conv(c1, c2·e, k), cv2 = Conv(c2·e, c2, k); + x when shortcut and
// c1 == c2.
struct BottleneckArgs {
  int64_t c2 = 0;
  bool shortcut = true;
  int64_t k = 3;
  double e = 0.5;
};
graph::SymTensor bottleneck(graph::SymTensor x, const BottleneckArgs& a, ConvNorm norm, const std::string& name);

// C3k(c1, c2, n): c = c2 / 2; cv3(cat(m(cv1(x)), cv2(x))), cv1 and cv2 = Conv(c1, c, 1), cv3 = Conv(2c, c2, 1),
// m = n Bottlenecks(c, c, shortcut, k = 3, e = 1).
graph::SymTensor c3k(graph::SymTensor x, int64_t c2, int64_t n, bool shortcut, ConvNorm norm, const std::string& name);

// C3k2(c1, c2, n, c3k, e, attn, shortcut), a C2f: c = c2·e; cv1 = Conv(c1, 2c, 1), split in two halves, each of the
// n blocks takes the previous output, cv2 = Conv((2 + n)·c, c2, 1) of all of them concatenated. A block is
// [Bottleneck(c, c), PSABlock(c, heads max(c / 64, 1))] when attn, else C3k(c, c, 2) when c3k, else Bottleneck(c, c).
struct C3k2Args {
  int64_t c2 = 0;
  int64_t n = 1;
  bool c3k = false;
  double e = 0.5;
  bool attn = false;
  bool shortcut = true;
};
graph::SymTensor c3k2(graph::SymTensor x, const C3k2Args& a, ConvNorm norm, const std::string& name);

// SPPF, YOLO26's form: cv1 = Conv(c1, c1 / 2, 1) without SiLU, n chained MaxPool(k, stride 1, pad k / 2), cv2 =
// Conv((n + 1)·c1 / 2, c2, 1) of cv1's output and the n pooled maps; + x when shortcut and c1 == c2.
struct SppfArgs {
  int64_t c2 = 0;
  int64_t k = 5;
  int64_t n = 3;
  bool shortcut = false;
};
graph::SymTensor sppf(graph::SymTensor x, const SppfArgs& a, ConvNorm norm, const std::string& name);

// PSABlock(c, attn_ratio 0.5, heads, shortcut): x + attn(x), then + ffn(·), ffn = Conv(c, 2c, 1) → Conv(2c, c, 1)
// without SiLU. attn is the Attention block (attention.h).
graph::SymTensor psa_block(graph::SymTensor x, int64_t heads, ConvNorm norm, const std::string& name);

// C2PSA(c1, c1, n): c = c1 / 2; cv1 = Conv(c1, 2c, 1) → halves (a, b), b through n PSABlocks (heads c / 64),
// cv2 = Conv(2c, c1, 1) of cat(a, b).
graph::SymTensor c2psa(graph::SymTensor x, int64_t n, ConvNorm norm, const std::string& name);

}  // namespace vision::models::yolo::blocks
