// Foundation 4a on the CPU: several outputs, integer values, stop-gradient, outputs per mode, views and in-place
// concat, shape ops on any axis, scalar inputs, per-version refresh of derived state, deterministic backward.
#include <gtest/gtest.h>

#include "graph/capability_cases.h"
#include "graph/test_ops.h"

namespace vision::test {
namespace {

using graph::cpu_backend;

TEST(GraphCapabilities, SplitAndConcatForwardBackwardMatchFiniteDifferences) {
  for (auto [batch, axis] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}, {3, 0}, {2, -2}})
    check_split_concat(cpu_backend(), batch, axis);
}

TEST(GraphCapabilities, ConcatAndSplitOnEveryAxis) { check_concat_split_every_axis(cpu_backend()); }
TEST(GraphCapabilities, ReshapeFlattenPermuteForwardAndBackward) { check_reshape_permute(cpu_backend()); }
TEST(GraphCapabilities, ScalarInputChangesWithoutANewPlan) { check_scalar_input(cpu_backend()); }
TEST(GraphCapabilities, DetachStopsTheGradient) { check_detach(cpu_backend()); }
TEST(GraphCapabilities, DeterministicBackwardIsBitIdentical) { check_deterministic_backward(cpu_backend()); }
TEST(GraphCapabilities, BatchNormSiluFusesInTrainingPlans) { check_batchnorm_silu_fusion(cpu_backend(), {}, 1e-5); }

// A split along an outer axis returns views, and the inputs of a concat along an outer axis are produced in
// place: no bytes are copied, and the values are still right.
TEST(GraphCapabilities, SplitViewsAndConcatInPlaceShareMemory) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 4, 3, 3});
  auto parts = ops::split(x, {1, 3}, 1, "split");                 // outer = 1: views of x
  auto a = ops::silu(parts[0], "a");
  auto b = ops::sigmoid(parts[1], "b");
  auto cat = ops::concat({b, a}, 1, "cat");                       // outer = 1: b and a written in place
  auto batched = g->input("y", Shape{2, 4, 3, 3});
  auto bparts = ops::split(batched, {1, 3}, 1, "bsplit");         // outer = 2: copies
  g->mark_output(cat);
  g->mark_output(bparts[1]);
  Executor ex(g, cpu_backend());
  const Tensor xt = random_tensor(Shape{1, 4, 3, 3}), yt = random_tensor(Shape{2, 4, 3, 3});
  const auto out = ex.forward({xt, yt});
  graph::Plan& plan = ex.plan(Mode::inference, {xt.shape(), yt.shape()});
  auto ptr = [&](SymTensor t) { return static_cast<const std::byte*>(plan.value(t.id()).raw()); };
  EXPECT_EQ(ptr(parts[0]), ptr(x));
  EXPECT_EQ(ptr(parts[1]), ptr(x) + 9 * sizeof(float));
  EXPECT_EQ(ptr(b), ptr(cat));
  EXPECT_EQ(ptr(a), ptr(cat) + 27 * sizeof(float));
  EXPECT_NE(ptr(bparts[1]), ptr(batched) + 9 * sizeof(float));
  EXPECT_NE(plan.describe().find("shares memory"), std::string::npos) << plan.describe();
  const auto xv = xt.to_vector();
  std::vector<double> ref;
  for (size_t i = 9; i < 36; ++i) ref.push_back(1.0 / (1.0 + std::exp(-double(xv[i]))));
  for (size_t i = 0; i < 9; ++i) ref.push_back(xv[i] / (1.0 + std::exp(-double(xv[i]))));
  EXPECT_LT(rel_error(out[0].to_vector(), ref), 1e-6);
  const auto yv = yt.to_vector();
  std::vector<float> yref;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 9; i < 36; ++i) yref.push_back(yv[size_t(n * 36 + i)]);
  EXPECT_EQ(out[1].to_vector(), yref);
}

// An op with a float and an integer output (a top-1): the integer output has no gradient and needs none; the
// float output's gradient reaches the right elements.
TEST(GraphCapabilities, MultiOutputOpWithIntegerIndices) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{3, 5});
  auto s = g->apply(std::make_shared<ScaleOp>(), {ops::reshape(x, {3, 5, 1, 1}, "x4")}, "scale");
  auto top = g->apply_multi(std::make_shared<MaxWithIndexOp>(), {ops::reshape(s, {3, 5}, "s2")}, "top");
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[1].dtype(), DType::i32);
  EXPECT_FALSE(g->value(top[1].id()).differentiable);
  EXPECT_THROW(g->apply(std::make_shared<MaxWithIndexOp>(), {ops::reshape(s, {3, 5}, "again")}, "one"), Error);
  g->mark_output(ops::sum_squares(top[0], "loss"));
  g->mark_output(top[1], graph::kTrainingLogged);
  Executor ex(g, cpu_backend());
  Tensor xt = Tensor::from_vector(Shape{3, 5}, std::vector<float>{0.1f, 0.9f, 0.3f, 0.2f, 0.0f,   //
                                                                  0.5f, 0.4f, 0.3f, 0.2f, 0.8f,   //
                                                                  1.0f, 0.2f, 0.3f, 1.5f, 0.1f});
  ex.state({xt.shape()});
  ex.state().set_from_host("scale.weight", Tensor::from_vector(Shape{5}, std::vector<float>{1, 1, 1, 1, 1}));
  const auto out = ex.forward_train({xt});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(out[1].data<int32_t>(), out[1].data<int32_t>() + 3), (std::vector<int32_t>{1, 4, 3}));
  ex.backward();
  // loss = ½Σ max² → d/dw[c] = Σ_rows (max · x) over rows whose max is in column c.
  const auto gw = ex.state().grad("scale.weight").to_vector();
  EXPECT_EQ(gw, (std::vector<float>{0, 0.9f * 0.9f, 0, 1.5f * 1.5f, 0.8f * 0.8f}));
}

// One graph, two kinds of plan: the inference plan yields the head's output and takes no target; the training
// plan yields the loss from the target and does not contain the inference-only op (which has no backward).
TEST(GraphCapabilities, OutputsPerModeGiveAnInferenceAndATrainingPlan) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, 2, 3, 3});
  auto target = g->input("target", Shape{Shape::kAny, 2, 3, 3});
  auto feat = g->apply(std::make_shared<ScaleOp>(), {x}, "backbone");
  auto detections = g->apply(std::make_shared<OffsetOp>(), {feat}, "decode");  // no backward
  auto diff = g->apply(std::make_shared<AddOp>(), {feat, target}, "diff");
  g->mark_output(detections, graph::kInferenceOutput);
  g->mark_output(g->apply(std::make_shared<SquareSumOp>(), {diff}, "loss"), graph::kTrainingLoss);
  EXPECT_EQ(g->inputs(Mode::inference), std::vector<int>{x.id()});
  EXPECT_EQ(g->inputs(Mode::train), (std::vector<int>{x.id(), target.id()}));
  Executor ex(g, cpu_backend());
  const Tensor xt = random_tensor(Shape{2, 2, 3, 3}), tt = random_tensor(Shape{2, 2, 3, 3});
  const auto det = ex.forward({xt});
  ASSERT_EQ(det.size(), 1u);
  EXPECT_EQ(det[0].shape(), xt.shape());
  const auto loss = ex.forward_train({xt, tt});
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].numel(), 1);
  EXPECT_NO_THROW(ex.backward());
  for (const auto& s : ex.last_train_plan()->steps()) EXPECT_NE(s.name, "decode");
  EXPECT_THROW(ex.forward({xt, tt}), Error);  // the inference plan takes one input
}

// State derived per plan (folded BatchNorm) is refreshed once per state version, not on every run.
TEST(GraphCapabilities, DerivedStateRefreshesOncePerVersion) {
  int refreshes = 0;
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 3, 2, 2});
  g->mark_output(g->apply(std::make_shared<DoubledScaleOp>(&refreshes), {x}, "s"));
  Executor ex(g, cpu_backend());
  const Tensor xt = random_tensor(Shape{1, 3, 2, 2});
  for (int i = 0; i < 3; ++i) ex.forward({xt});
  EXPECT_EQ(refreshes, 1);
  ex.state().set_from_host("s.weight", Tensor::from_vector(Shape{3}, std::vector<float>{1, 2, 3}));
  const auto y = ex.forward({xt})[0].to_vector();
  EXPECT_EQ(refreshes, 2);
  const auto xv = xt.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.0f * float(i / 4 + 1) * xv[i]);
  ex.forward({xt});
  EXPECT_EQ(refreshes, 2);
  ex.state().flat_params().data<float>()[0] = 5.0f;  // a direct write (an optimizer step) …
  ex.state().mark_updated();                        // … announced
  EXPECT_FLOAT_EQ(ex.forward({xt})[0].to_vector()[0], 10.0f * xv[0]);
  EXPECT_EQ(refreshes, 3);
}

// A multi-output op whose second output the loss does not reach still gets a zero gradient for it, never the
// stale contents of a reused buffer.
TEST(GraphCapabilities, UnreachedOutputsOfABackwardStepGetZeroGradients) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 3, 2, 2});
  auto s = g->apply(std::make_shared<ScaleOp>(), {x}, "scale");
  auto parts = ops::split(s, {1, 2}, 1, "split");
  g->mark_output(ops::sum_squares(parts[0], "loss"));
  g->mark_output(ops::sum_squares(parts[1], "other"), graph::kTrainingLogged);
  Executor ex(g, cpu_backend());
  const Tensor xt = random_tensor(Shape{1, 3, 2, 2});
  ex.forward_train({xt});
  ex.backward();
  const Tensor g1 = ex.last_train_plan()->value_grad(parts[1].id());
  ASSERT_TRUE(g1.defined());
  for (float v : g1.to_vector()) EXPECT_EQ(v, 0.0f);
  const auto gw = ex.state().grad("scale.weight").to_vector();
  EXPECT_NE(gw[0], 0.0f);
  EXPECT_EQ(gw[1], 0.0f);
  EXPECT_EQ(gw[2], 0.0f);
}

// A tensor in another memory order than its input declares is rejected, not misread.
TEST(GraphCapabilities, AnInputOfTheWrongLayoutIsRejected) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("image", Shape{1, 3, 4, 4});
  g->mark_output(ops::silu(x, "act"));
  Executor ex(g, cpu_backend());
  const Tensor nchw = random_tensor(Shape{1, 3, 4, 4});
  const Tensor nhwc = core::to_layout(nchw, core::Layout::nhwc);
  EXPECT_NO_THROW(ex.forward({nchw}));
  try {
    ex.forward({nhwc});
    ADD_FAILURE() << "an NHWC tensor was accepted for an NCHW input";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'image'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nchw"), std::string::npos) << e.what();
  }
}

TEST(GraphCapabilities, ShapeOpErrorsNameTheProblem) {
  Graph g;
  auto x = g.input("x", Shape{2, 6, 4});
  EXPECT_THROW(ops::concat({x, g.input("bad_rank", Shape{2, 6})}, 0), Error);
  EXPECT_THROW(ops::concat({x, x}, 3), Error);
  EXPECT_THROW(ops::split(x, {2, 3}, 1), Error);
  EXPECT_THROW(ops::reshape(x, {5, -1}), Error);
  EXPECT_THROW(ops::reshape(x, {-1, -1}), Error);
  EXPECT_THROW(ops::permute(x, {0, 0, 1}), Error);
  EXPECT_THROW(ops::flatten(x, 2, 1), Error);
  EXPECT_EQ(ops::reshape(x, {0, -1}).shape(), (Shape{2, 24}));
  EXPECT_EQ(ops::flatten(x, 0, 1).shape(), (Shape{12, 4}));
  EXPECT_EQ(ops::permute(x, {2, 0, 1}).shape(), (Shape{4, 2, 6}));
  auto sym = g.input("sym", Shape{Shape::kAny, 6, 4});
  (void)sym;
}

}  // namespace
}  // namespace vision::test
