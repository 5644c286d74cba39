// The foundation's end-to-end checks: the small network's fused inference against float64, and every parameter
// gradient against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "models/small_net_reference.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/demo/small_net.h"

using namespace vision;
using namespace vision::graph;

namespace {

double loss_of(Executor& ex, const Tensor& x, const Tensor& r) {
  return test::to_host(ex, ex.forward_train({x, r})[0])[0];
}

}  // namespace

TEST(SmallNet, RecordsTheFoundationNetworkAndFusesForInference) {
  auto g = models::demo::small_net({.in_channels = 3, .width = 4});
  Executor ex(g, cpu_backend());
  auto x = test::random_tensor(Shape{2, 3, 8, 8});
  test::randomize_batchnorm_state(ex.state({x.shape()}));  // real statistics for the fold to get wrong
  const auto y = ex.forward({x})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 4, 8, 8}));
  const Plan& p = ex.plan(Mode::inference, {x.shape()});
  EXPECT_EQ(p.steps().size(), 6u);
  EXPECT_EQ(p.steps()[0].op->name(), "ops.conv2d_bn_silu");
  EXPECT_EQ(p.steps()[2].op->name(), "ops.conv2d_bn_silu");
  // The fused inference result equals the unfused network, computed in float64 with BatchNorm on its running
  // statistics: as a norm, and element by element within the f32 error bound of each output.
  const test::SmallNetReference ref = test::small_net_reference(ex.state(), x);
  EXPECT_LT(test::rel_error(y.to_vector(), ref.y), 1e-5);
  EXPECT_TRUE(test::within_bounds(y.to_vector(), ref.y, ref.bound));
  EXPECT_NE(ex.state().find("net.0.bn.running_var"), nullptr);
  EXPECT_EQ(ex.state().find("net.0.bn.num_batches_tracked")->kind, StateKind::buffer);
  EXPECT_EQ(ex.state().parameter_count(), 4 * 3 * 9 + 8 + 4 * 4 * 9 + 8 + 8 * 4 + 4);
}

TEST(SmallNet, EveryParameterGradientMatchesFiniteDifferences) {
  auto g = models::demo::small_net(
      {.in_channels = 3, .width = 4, .loss = models::demo::SmallNetConfig::Loss::projection});
  Executor ex(g, cpu_backend());
  auto x = test::random_tensor(Shape{2, 3, 8, 8});
  auto r = test::random_tensor(Shape{2, 4, 8, 8});
  test::randomize_batchnorm_state(ex.state({x.shape(), r.shape()}));  // γ, β not at 1, 0
  ex.forward_train({x, r});
  ex.backward();
  const std::vector<float> grad = ex.state().flat_grads().to_vector();
  Tensor params = ex.state().flat_params();
  double gmax = 0;
  for (float v : grad) gmax = std::max(gmax, double(std::abs(v)));
  ASSERT_GT(gmax, 0);
  // Parameters upstream of the maxpool (net.0.*) can sit next to a kink: two pooled values nearly tied, crossed within
  // [p − h, p + h]. A central difference then averages two slopes, but the analytic gradient is the slope on the side
  // the point is on, which the one-sided difference on that side measures (the tie is crossed on the other side
  // only). So a mismatch upstream is accepted only where the gradient matches one of the two one-sided differences;
  // every other parameter must match the central difference.
  int64_t upstream_end = 0;
  for (const auto& e : ex.state().entries())
    if (e.kind == StateKind::parameter && e.key.rfind("net.0.", 0) == 0)
      upstream_end = std::max<int64_t>(upstream_end, static_cast<int64_t>(e.offset / 4) + e.shape.numel());
  ASSERT_EQ(upstream_end, 4 * 3 * 9 + 2 * 4);  // conv weight, then bn weight and bias
  const double l0 = loss_of(ex, x, r);
  auto matches = [&](double fd, double g) { return std::abs(fd - g) <= 2e-2 * std::abs(fd) + 2e-3 * gmax; };
  int kinks = 0;
  for (int64_t i = 0; i < params.numel(); ++i) {
    float* p = params.data<float>() + i;
    const float saved = *p, h = 1e-4f;
    *p = saved + h;
    const double up = loss_of(ex, x, r);
    *p = saved - h;
    const double down = loss_of(ex, x, r);
    *p = saved;
    const double g = grad[static_cast<size_t>(i)];
    if (matches((up - down) / (2.0 * double(h)), g)) continue;
    const double right = (up - l0) / double(h), left = (l0 - down) / double(h);
    if (i < upstream_end && (matches(right, g) || matches(left, g))) {
      ++kinks;
      continue;
    }
    ADD_FAILURE() << "parameter " << i << ": analytic " << g << " vs finite differences " << (up - down) / (2.0 * h)
                  << " (one-sided " << left << ", " << right << ")";
  }
  // A kink moves every parameter of the one channel feeding the tied window: more would be suspicious.
  EXPECT_LE(kinks, 3 * 9 + 2) << "parameters accepted as next to a maxpool kink";
}

TEST(SmallNet, InputsOfTheWrongShapeAreClearErrors) {
  Executor ex(models::demo::small_net({}), cpu_backend());
  EXPECT_THROW(ex.forward({test::random_tensor(Shape{1, 4, 8, 8})}), Error);  // 4 channels, expects 3
  EXPECT_THROW(ex.forward({test::random_tensor(Shape{1, 3, 7, 8})}), Error);  // odd height: concat mismatch
}
