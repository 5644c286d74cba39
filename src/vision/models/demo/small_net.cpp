#include "vision/models/demo/small_net.h"

#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

namespace vision::models::demo {

namespace {
// Conv(c1, c2, k) → BatchNorm → SiLU, as ultralytics' Conv block.
graph::SymTensor conv_block(graph::SymTensor x, int64_t c2, int64_t k, const std::string& name) {
  auto _ = x.graph()->scope(name);
  ops::Conv2dAttrs a;
  a.in_channels = x.dim(1);
  a.out_channels = c2;
  a.kernel = k;
  x = ops::conv2d(x, a, "conv");
  x = ops::batchnorm2d(x, 1e-3f, 0.03f, "bn");
  return ops::silu(x, "act");
}
}  // namespace

std::shared_ptr<graph::Graph> small_net(const SmallNetConfig& cfg) {
  auto g = std::make_shared<graph::Graph>();
  auto x = g->input("images", core::Shape{core::Shape::kAny, cfg.in_channels, core::Shape::kAny, core::Shape::kAny});
  graph::SymTensor r;
  if (cfg.loss == SmallNetConfig::Loss::projection)
    r = g->input("projection", core::Shape{core::Shape::kAny, cfg.width, core::Shape::kAny, core::Shape::kAny});
  auto _ = g->scope("net");
  auto a = conv_block(x, cfg.width, 3, "0");
  auto p = ops::maxpool2d(a, 2, 2, 0, "1");
  auto b = conv_block(p, cfg.width, 3, "2");
  auto u = ops::upsample_nearest(b, 2, "3");
  auto c = ops::concat({a, u}, "4");
  ops::Conv2dAttrs head;
  head.in_channels = 2 * cfg.width;
  head.out_channels = cfg.width;
  head.bias = true;
  auto y = ops::conv2d(c, head, "5");
  switch (cfg.loss) {
    case SmallNetConfig::Loss::none: g->mark_output(y); break;
    case SmallNetConfig::Loss::sum_squares: g->mark_output(ops::sum_squares(y, "loss")); break;
    case SmallNetConfig::Loss::projection: g->mark_output(ops::mean(ops::mul(y, r, "project"), "loss")); break;
  }
  return g;
}

}  // namespace vision::models::demo
