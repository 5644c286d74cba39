// YOLO26's E2ELoss on the CPU backend: against the PyTorch fixture (assignments as sets; the loss, its components
// and the gradients with respect to both heads' outputs within 2× the reference's own float32 error), a deterministic
// plan run twice, finite differences on a tiny case with the assignment held fixed, the (o2m, o2o) weights input,
// batches without boxes, errors for bad inputs; and the loss-sum ops and ops::in_f32 on their own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "graph/grad_probe.h"
#include "models/yolo/loss_test_util.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/loss/loss_sum.h"
#include "vision/models/yolo/loss.h"
#include "vision/ops/f32_op.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::loss;
using namespace vision::models::yolo;
using namespace vision::models::yolo::kernels::loss;
using graph::Executor;
using graph::Graph;
using graph::SymTensor;

namespace {

float host_scalar(const Executor& ex, const Tensor& t) { return ex.backend().download(t).to_vector().at(0); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Against the PyTorch fixture

class E2ELossFixture : public ::testing::Test {
 protected:
  // A random batch of the fixture's shape runs first in the same plan, so stale memory cannot pass for a result.
  LossResult run(graph::PlanOptions options = {}) {
    const LossInputs in = fixture_inputs();
    const LossGraph g = e2e_loss_graph(in.classes(), in.rows(), in.image_h, in.image_w);
    Executor ex(g.graph, graph::cpu_backend(), options);
    const LossInputs fresh = random_inputs(in.batch(), in.image_h, in.image_w, in.classes(), in.rows(), 0, 20);
    const LossResult first = run_loss(ex, g, fresh);
    EXPECT_TRUE(std::isfinite(first.total));
    const LossResult r = run_loss(ex, g, in);
    EXPECT_EQ(ex.cached_plans(), 1u);
    return r;
  }
};

TEST_F(E2ELossFixture, AssignmentsEqualTheReferenceAsSets) {
  const LossResult r = run();
  expect_assignments_match_fixture(r);
}

TEST_F(E2ELossFixture, LossComponentsAndGradientsMatchFloat64WithinTheReferencesOwnError) {
  const LossResult r = run();
  expect_matches_fixture(r, /*gradient_floor=*/0);
  // The logged components are the one-to-one head's gained terms.
  const LossGains g;
  EXPECT_FLOAT_EQ(r.components[0], g.box * r.terms[1][0]);
  EXPECT_FLOAT_EQ(r.components[1], g.cls * r.terms[1][1]);
  EXPECT_FLOAT_EQ(r.components[2], g.l1 * r.terms[1][2]);
}

// ---------------------------------------------------------------------------------------------------------------
// Determinism, weights, edge cases

TEST(E2ELoss, DeterministicPlanRunTwiceIsBitIdentical) {
  const LossResult r = expect_deterministic(graph::cpu_backend(), random_inputs(3, 128, 160, 5, 16, 0, 12));
  EXPECT_GT(r.total, 0.0f);
}

TEST(E2ELoss, WeightsAreAnInputThatScalesEachHead) {
  LossInputs in = random_inputs(2, 96, 128, 4, 16, 1, 10);
  const LossGraph g = e2e_loss_graph(4, 16, 96, 128);
  Executor ex(g.graph, graph::cpu_backend());
  auto with = [&](float o2m, float o2o) {
    in.weights = Tensor::from_vector(Shape{2}, std::vector<float>{o2m, o2o});
    return run_loss(ex, g, in);
  };
  const LossResult m = with(1.0f, 0.0f), o = with(0.0f, 1.0f), mix = with(0.8f, 0.2f);
  EXPECT_EQ(ex.cached_plans(), 1u);  // a new weight is a new input, not a new plan
  // Each head alone: the other head gets exactly zero gradient, and the total is the head's B·Σ gains·terms.
  const LossGains gains;
  for (size_t h = 0; h < 2; ++h) {
    const LossResult& alone = h == 0 ? m : o;
    const LossResult& other = h == 0 ? o : m;
    const auto& t = alone.terms[h];
    EXPECT_NEAR(alone.total, 2.0 * (gains.box * t[0] + gains.cls * t[1] + gains.l1 * t[2]), 1e-6 * alone.total);
    for (float v : other.grad_ltrb[h]) ASSERT_EQ(v, 0.0f);
    for (float v : other.grad_logits[h]) ASSERT_EQ(v, 0.0f);
    EXPECT_GT(max_abs(alone.grad_ltrb[h]), 0.0);
    EXPECT_GT(max_abs(alone.grad_logits[h]), 0.0);
  }
  // A mix: the weighted sum of the two, and each head's gradients scaled by its weight.
  EXPECT_NEAR(mix.total, 0.8 * m.total + 0.2 * o.total, 1e-6 * mix.total);
  for (size_t h = 0; h < 2; ++h) {
    const double w = h == 0 ? 0.8 : 0.2;
    const LossResult& alone = h == 0 ? m : o;
    std::vector<double> want(alone.grad_ltrb[h].begin(), alone.grad_ltrb[h].end());
    for (double& v : want) v *= w;
    EXPECT_LT(rel_error(mix.grad_ltrb[h], want), 1e-6) << kHeads[h];
    want.assign(alone.grad_logits[h].begin(), alone.grad_logits[h].end());
    for (double& v : want) v *= w;
    EXPECT_LT(rel_error(mix.grad_logits[h], want), 1e-6) << kHeads[h];
    EXPECT_EQ(mix.terms[h], alone.terms[h]);  // the weights do not reach the terms
  }
  // The logged components are the one-to-one head's whatever the weights.
  EXPECT_EQ(mix.components, m.components);
}

TEST(E2ELoss, BatchWithoutBoxesHasOnlyTheClassificationTerm) {
  LossInputs in = random_inputs(2, 64, 64, 3, 16, 0, 0);
  const LossGraph g = e2e_loss_graph(3, 16, 64, 64);
  Executor ex(g.graph, graph::cpu_backend());
  const LossResult r = run_loss(ex, g, in);
  for (size_t h = 0; h < 2; ++h) {
    for (int32_t i : r.gt_index[h]) ASSERT_EQ(i, -1);
    EXPECT_EQ(r.terms[h][0], 0.0f);
    EXPECT_EQ(r.terms[h][2], 0.0f);
    for (float v : r.grad_ltrb[h]) ASSERT_EQ(v, 0.0f);
    // N = max(0, 1) = 1: cls = Σ softplus(x), and its gradient σ(x) times B·0.5·weight.
    const auto x = in.logits[h].to_vector();
    double sum = 0;
    for (float v : x) sum += std::log1p(std::exp(-std::abs(double(v)))) + std::max(double(v), 0.0);
    EXPECT_NEAR(r.terms[h][1], sum, 1e-6 * sum);
    const double w = in.weights.to_vector()[h];
    for (size_t i = 0; i < x.size(); i += 37)
      EXPECT_NEAR(r.grad_logits[h][i], 2 * 0.5 * w / (1 + std::exp(-double(x[i]))), 1e-6);
  }
}

TEST(E2ELoss, TargetRowsComeInBuckets) {
  EXPECT_EQ(loss_target_rows(0), 16);
  EXPECT_EQ(loss_target_rows(16), 16);
  EXPECT_EQ(loss_target_rows(17), 32);
  EXPECT_EQ(loss_target_rows(500), 512);
  EXPECT_EQ(loss_target_rows(1000), 1024);
  EXPECT_EQ(loss_target_rows(1024), 1024);
  EXPECT_NE(error_of([] { loss_target_rows(1025); }).find("an image has 1025 boxes; the loss takes 0 to 1024"),
            std::string::npos);
  EXPECT_NE(error_of([] { loss_target_rows(-1); }).find("-1 boxes"), std::string::npos);
}

TEST(E2ELoss, BadInputsAreErrorsNamingTheProblem) {
  auto graph_with = [](Shape targets, DType count_dtype, Shape weights, int64_t o2o_anchors) {
    Graph g;
    const int64_t n = kernels::detect_anchor_count(64, 64);
    HeadOutputs o2m{g.input("a", Shape{2, 4, n}), g.input("b", Shape{2, 3, n})};
    HeadOutputs o2o{g.input("c", Shape{2, 4, o2o_anchors}), g.input("d", Shape{2, 3, o2o_anchors})};
    LossTargets t{g.input("t", std::move(targets)), g.input("n", Shape{2}, count_dtype),
                  {g.input("p3", Shape{2, 1, 8, 8}), g.input("p4", Shape{2, 1, 4, 4}), g.input("p5", Shape{2, 1, 2, 2})}};
    return error_of([&] { e2e_loss(o2m, o2o, t, g.input("w", std::move(weights))); });
  };
  const int64_t n = kernels::detect_anchor_count(64, 64);
  EXPECT_EQ(graph_with(Shape{2, 8, 5}, DType::i32, Shape{2}, n), "(no error)");
  EXPECT_NE(graph_with(Shape{2, 8, 4}, DType::i32, Shape{2}, n).find("targets must be an f32 [B, M, 5]"),
            std::string::npos);
  EXPECT_NE(graph_with(Shape{2, 8, 5}, DType::f32, Shape{2}, n).find("box count must be an i32 [B]"),
            std::string::npos);
  EXPECT_NE(graph_with(Shape{2, 8, 5}, DType::i32, Shape{3}, n).find("weights must be an f32 [2]"), std::string::npos);
  EXPECT_NE(graph_with(Shape{2, 8, 5}, DType::i32, Shape{2}, n + 1).find("the two heads' outputs must have one shape"),
            std::string::npos);
  // A head whose anchors do not match the levels: the decode names the mismatch.
  {
    Graph g;
    HeadOutputs h{g.input("a", Shape{2, 4, 10}), g.input("b", Shape{2, 3, 10})};
    LossTargets t{g.input("t", Shape{2, 8, 5}), g.input("n", Shape{2}, DType::i32),
                  {g.input("p3", Shape{2, 1, 8, 8}), g.input("p4", Shape{2, 1, 4, 4}), g.input("p5", Shape{2, 1, 2, 2})}};
    const std::string msg = error_of([&] { e2e_loss(h, h, t, g.input("w", Shape{2})); });
    EXPECT_NE(msg.find("has 10 anchors, but a 64×64 input has 84"), std::string::npos) << msg;
  }
  // At run time: a count beyond the target rows, and a class out of range.
  LossInputs in = random_inputs(2, 64, 64, 3, 8, 1, 4);
  const LossGraph g = e2e_loss_graph(3, 8, 64, 64);
  Executor ex(g.graph, graph::cpu_backend());
  in.count = int_tensor({1, 9});  // row 0 of each image is a box (min_boxes 1)
  std::string msg = error_of([&] { ex.forward_train(in.list()); });
  EXPECT_NE(msg.find("image 1 has a box count of 9, outside [0, 8]"), std::string::npos) << msg;
  in.count = int_tensor({1, 1});
  in.targets.data<float>()[0] = 3.0f;
  msg = error_of([&] { ex.forward_train(in.list()); });
  EXPECT_NE(msg.find("has class 3; classes are integers in [0, 3)"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// Finite differences, the assignment held fixed (the assigner has no gradient: its soft targets count as constants)
// and CIoU's alpha differentiated too (the loss treats it as a constant, which the fixture test checks against
// PyTorch; finite differences see its derivative).

TEST(E2ELoss, GradientsMatchFiniteDifferencesWithTheAssignmentHeldFixed) {
  constexpr int64_t kB = 2, kNc = 3, kM = 8, kH = 64, kW = 96;
  for (const AssignerOptions& options : {AssignerOptions::one_to_many(), AssignerOptions::one_to_one()}) {
    SCOPED_TRACE(options.topk2 ? "one-to-one" : "one-to-many");
    const LossInputs in = random_inputs(kB, kH, kW, kNc, kM, 2, 6);
    const int64_t n = in.ltrb[0].dim(2);
    auto g = std::make_shared<Graph>();
    SymTensor ltrb = g->input("ltrb", Shape{kB, 4, n}), logits = g->input("logits", Shape{kB, kNc, n});
    SymTensor fixed_ltrb = g->input("fixed_ltrb", Shape{kB, 4, n});
    SymTensor fixed_logits = g->input("fixed_logits", Shape{kB, kNc, n});
    LossTargets t{g->input("targets", Shape{kB, kM, 5}), g->input("count", Shape{kB}, DType::i32),
                  {g->input("p3", Shape{kB, 1, kH / 8, kW / 8}), g->input("p4", Shape{kB, 1, kH / 16, kW / 16}),
                   g->input("p5", Shape{kB, 1, kH / 32, kW / 32})}};
    const HeadOutputs head{grad_probe(ltrb, "ltrb_probe"), grad_probe(logits, "logits_probe")};
    const auto assignment =
        assign_targets(fixed_logits, decode_boxes(fixed_ltrb, t, "fixed_decode"), t, options, "assigner");
    const Yolo26LossTensors terms =
        yolo26_loss_terms(head, decode_boxes(head.ltrb, t), assignment, t, {}, {.full_alpha_derivative = true});
    g->mark_output(terms.loss, graph::kTrainingLoss);
    Executor ex(g, graph::cpu_backend());

    // Logits shifted down so the classification term (a sum over every anchor and class) does not swamp the f32
    // resolution of the loss.
    Tensor x_logits = in.logits[0].clone();
    for (int64_t i = 0; i < x_logits.numel(); ++i) x_logits.data<float>()[i] -= 4.0f;
    Tensor x_ltrb = in.ltrb[0].clone();
    const Tensor fixed_ltrb_value = x_ltrb.clone(), fixed_logits_value = x_logits.clone();
    std::vector<Tensor> levels = {random_tensor(Shape{kB, 1, kH / 8, kW / 8}),
                                  random_tensor(Shape{kB, 1, kH / 16, kW / 16}),
                                  random_tensor(Shape{kB, 1, kH / 32, kW / 32})};
    auto loss_at = [&](const Tensor& l, const Tensor& c) {
      return double(host_scalar(ex, ex.forward_train({l, c, fixed_ltrb_value, fixed_logits_value, in.targets, in.count,
                                                      levels[0], levels[1], levels[2]})[0]));
    };
    const double loss = loss_at(x_ltrb, x_logits);
    ex.backward();
    const graph::Plan& plan = *ex.last_train_plan();
    const auto g_ltrb = ex.backend().download(plan.value_grad(head.ltrb.id())).to_vector();
    const auto g_logits = ex.backend().download(plan.value_grad(head.logits.id())).to_vector();
    const auto gt = ints(ex.backend().download(plan.value(assignment.gt_index.id())));
    const auto pred = ex.backend().download(plan.value(terms.boxes.id())).to_vector();
    const auto target = ex.backend().download(plan.value(assignment.target_boxes.id())).to_vector();

    // Central differences; the f32 loss is resolved to about 2^-24·|loss| per evaluation.
    auto fd = [&](Tensor& x, int64_t i, double h) {
      float* v = x.data<float>() + i;
      const float keep = *v;
      *v = static_cast<float>(keep + h);
      const double up = loss_at(x_ltrb, x_logits);
      const double hi = *v;
      *v = static_cast<float>(keep - h);
      const double down = loss_at(x_ltrb, x_logits);
      const double lo = *v;
      *v = keep;
      return (up - down) / (hi - lo);
    };
    auto tolerance = [&](double analytic, double h) { return 1e-2 * std::abs(analytic) + 8 * kF32Epsilon * loss / h; };
    int positives = 0, checked = 0;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t a = 0; a < n; ++a) {
        if (gt[static_cast<size_t>(b * n + a)] < 0) continue;
        ++positives;
        // Away from the kinks of |Δ| and of CIoU's min/max: every coordinate at least 2 steps from the target's.
        const double h = 1e-3;
        bool smooth = true;
        for (int64_t c = 0; c < 4; ++c) {
          const auto i = static_cast<size_t>((b * 4 + c) * n + a);
          smooth = smooth && std::abs(pred[i] - target[i]) > 2 * h;
        }
        if (!smooth) continue;
        for (int64_t c = 0; c < 4; ++c) {
          const int64_t i = (b * 4 + c) * n + a;
          const double analytic = g_ltrb[static_cast<size_t>(i)];
          EXPECT_NEAR(fd(x_ltrb, i, h), analytic, tolerance(analytic, h)) << "ltrb image " << b << " anchor " << a;
          ++checked;
        }
      }
    EXPECT_GT(positives, 0);
    EXPECT_GE(checked, 8);
    // Logits (smooth everywhere): a sample over every class, positives and background alike.
    for (int64_t i = 0; i < x_logits.numel(); i += 7) {
      const double analytic = g_logits[static_cast<size_t>(i)];
      EXPECT_NEAR(fd(x_logits, i, 0.05), analytic, tolerance(analytic, 0.05)) << "logit " << i;
    }
    // Background anchors get no box gradient.
    for (int64_t i = 0; i < x_ltrb.numel(); ++i)
      if (gt[static_cast<size_t>((i / (4 * n)) * n + i % n)] < 0) ASSERT_EQ(g_ltrb[static_cast<size_t>(i)], 0.0f);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The loss-sum ops

TEST(LossSumOps, TargetScoreSumAndNormalizedSum) {
  const Tensor scores = random_tensor(Shape{3, 5, 40}, 0.0f, 1.0f);
  TargetScoreSumOp sum_op;
  OpHarness hs(sum_op, {scores});
  const auto w = hs.forward().to_vector();
  const auto s = scores.to_vector();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t a = 0; a < 40; ++a) {
      double want = 0;
      for (int64_t c = 0; c < 5; ++c) want += s[static_cast<size_t>((b * 5 + c) * 40 + a)];
      ASSERT_NEAR(w[static_cast<size_t>(b * 40 + a)], want, 1e-6);
    }
  EXPECT_FALSE(hs.runtime().has_backward());

  NormalizedSumOp norm_op;
  for (float scale : {1.0f, 1e-3f}) {  // Σ w = 60 (N = Σ w), then 0.06 (N clamps to 1)
    const Tensor x = random_tensor(Shape{3, 40}), wt = random_tensor(Shape{3, 40}, 0.0f, scale);
    OpHarness h(norm_op, {x, wt}, graph::Mode::train);
    double sx = 0, sw = 0;
    for (float v : x.to_vector()) sx += v;
    for (float v : wt.to_vector()) sw += v;
    const double n = std::max(sw, 1.0);
    EXPECT_NEAR(h.forward(true).data<float>()[0], sx / n, 1e-6 * std::abs(sx / n) + 1e-7);
    const auto grads = h.backward(Tensor::from_vector(Shape{}, std::vector<float>{2.5f}));
    for (float v : grads.inputs[0].to_vector()) ASSERT_NEAR(v, 2.5 / n, 1e-6 * (2.5 / n));
    for (float v : grads.inputs[1].to_vector()) ASSERT_EQ(v, 0.0f);
  }
  EXPECT_NE(error_of([&] { norm_op.infer_output_shape({Shape{3, 40}, Shape{3, 41}}); }).find("x and w"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sum_op.infer_output_dtype({DType::bf16}); }).find("must be f32"), std::string::npos);
}

TEST(LossSumOps, DetectionLossAndE2ELossSumValuesAndGradients) {
  // box, cls, l1 of two heads (probed) → detection_loss per head → e2e_loss_sum; the items of both heads logged.
  auto g = std::make_shared<Graph>();
  SymTensor count = g->input("count", Shape{Shape::kAny}, DType::i32), weights = g->input("w", Shape{2});
  std::vector<SymTensor> terms;
  std::vector<DetectionLossTensors> heads;
  const LossGains gains{.box = 2.0f, .cls = 0.25f, .l1 = 3.0f};
  for (int i = 0; i < 6; ++i) terms.push_back(grad_probe(g->input("t" + std::to_string(i), Shape{}), "p" + std::to_string(i)));
  for (int h = 0; h < 2; ++h) {
    heads.push_back(detection_loss(terms[3 * h], terms[3 * h + 1], terms[3 * h + 2], count, gains,
                                   "head" + std::to_string(h)));
  }
  const SymTensor total = e2e_loss_sum(heads[0].loss, heads[1].loss, weights);
  g->mark_output(total, graph::kTrainingLoss);
  g->mark_output(heads[0].items, graph::kTrainingLogged);
  g->mark_output(heads[1].items, graph::kTrainingLogged);
  Executor ex(g, graph::cpu_backend());
  const auto t = random_values(6, 0.1f, 3.0f);
  const std::vector<float> w = {0.65f, 0.35f};
  std::vector<Tensor> in = {int_tensor({4, 4, 4}), Tensor::from_vector(Shape{2}, w)};
  for (float v : t) in.push_back(Tensor::from_vector(Shape{}, std::vector<float>{v}));
  const auto out = ex.forward_train(in);
  ex.backward();
  const double B = 3;
  const double g3[3] = {gains.box, gains.cls, gains.l1};
  double loss[2] = {0, 0};
  for (int h = 0; h < 2; ++h) {
    const auto items = ex.backend().download(out[1 + h]).to_vector();
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(items[k], g3[k] * t[3 * h + k], 1e-6 * items[k]);
      loss[h] += B * g3[k] * t[3 * h + k];
      // d total / d term = w_h · B · gain
      const float grad = ex.backend().download(ex.last_train_plan()->value_grad(terms[3 * h + k].id())).to_vector()[0];
      EXPECT_NEAR(grad, w[h] * B * g3[k], 1e-6 * grad) << "head " << h << " term " << k;
    }
  }
  EXPECT_NEAR(host_scalar(ex, out[0]), w[0] * loss[0] + w[1] * loss[1], 1e-6 * (loss[0] + loss[1]));
  // Shapes and dtypes named in errors.
  DetectionLossOp d;
  EXPECT_NE(error_of([&] { d.infer_output_shapes({Shape{1}, Shape{}, Shape{}, Shape{4}}); }).find("the box term must be "
                                                                                                   "a scalar"),
            std::string::npos);
  E2ELossSumOp e;
  EXPECT_NE(error_of([&] { e.infer_output_shape({Shape{}, Shape{}, Shape{3}}); }).find("[2] tensor (o2m, o2o)"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// ops::in_f32

namespace {

// Copies x to y in whatever format the plan gives it (any dtype and layout): the step's format is observable.
class AnyFormatCopyRuntime final : public graph::RuntimeOp {
 public:
  std::string name() const override { return "test.any_format_copy"; }
  int n_activation_inputs() const override { return 1; }
  bool supports(const graph::Format&) const override { return true; }
  void forward(graph::ForwardCtx& ctx) override { ctx.backend->convert(ctx.output, ctx.inputs[0]); }
};
class AnyFormatCopyOp final : public graph::Op {
 public:
  std::string name() const override { return "test.any_format_copy"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend, graph::Mode) const override {
    return std::make_unique<AnyFormatCopyRuntime>();
  }
};

}  // namespace

TEST(F32Op, RunsAStepInF32InALowPrecisionPlan) {
  for (bool pinned : {false, true}) {
    auto g = std::make_shared<Graph>();
    auto x = g->input("x", Shape{2, 3, 4, 5});
    std::shared_ptr<const graph::Op> op = std::make_shared<AnyFormatCopyOp>();
    if (pinned) op = ops::in_f32(op);
    g->mark_output(g->apply(op, {x}, "copy"));
    Executor ex(g, graph::cpu_backend(), {.compute_dtype = DType::bf16, .layout = core::Layout::nhwc});
    const Tensor xt = random_tensor(Shape{2, 3, 4, 5});
    const auto y = ex.backend().download(ex.forward({xt})[0]).to_vector();
    const graph::Plan& plan = ex.plan(graph::Mode::inference, {xt.shape()});
    graph::Format step;
    for (const graph::PlanStep& s : plan.steps())
      if (s.name == "copy") step = s.format;
    if (pinned) {
      EXPECT_EQ(step, graph::Format{}) << graph::format_name(step);
      EXPECT_TRUE(bitwise_equal(y, xt.to_vector()));  // no bf16 rounding on the way
    } else {
      EXPECT_EQ(step, (graph::Format{DType::bf16, core::Layout::nhwc})) << graph::format_name(step);
    }
  }
  EXPECT_EQ(ops::in_f32(std::make_shared<AnyFormatCopyOp>())->name(), "test.any_format_copy");
}
