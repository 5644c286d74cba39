// Task-aligned assigner on the CPU: hand-computed cases (two gts on a 32×32 input of 21 anchors: ties toward the lower
// anchor, an anchor claimed by two gts, topk2 = 1; three gts where an anchor two of them claim goes to the third, of
// higher overlap, which did not claim it — ultralytics' shared-anchor rule — and where topk2 then drops it), STAL
// widening of tiny boxes, images without boxes, a dense image of 1000 boxes, a batch of 4 images with 0–20 boxes on
// jittered predictions, and the crowded shared-anchor fixture (tools/reference/make_shared_anchor_fixture.py), against
// a float64 reference written from YOLO26.md's words (assigner_reference.h) and the PyTorch one (yolo26_loss.py).
// Outputs are poisoned before each run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "models/yolo/assigner_reference.h"
#include "models/yolo/shared_anchor_fixture.h"
#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/assigner.h"

using namespace vision;
using namespace vision::models::yolo::kernels;
using namespace vision::models::yolo::kernels::loss;
using core::DType;
using core::Shape;
using core::Tensor;
using vision::test::AssignerCase;
using vision::test::AssignerOutputs;
using vision::test::reference_assign;
using vision::test::ReferenceAssignment;

namespace {

AssignerOutputs run_cpu(const AssignerCase& c, const AssignerOptions& o) {
  const int64_t b = c.batch, n = c.n_anchors, nc = c.n_classes, m = c.n_max;
  Tensor logits = Tensor::from_vector(Shape{b, nc, n}, c.logits);
  Tensor boxes = Tensor::from_vector(Shape{b, 4, n}, c.boxes);
  Tensor anchors = Tensor::from_vector(Shape{3, n}, c.anchors);
  Tensor targets = Tensor::from_vector(Shape{b, m, 5}, c.targets);
  Tensor count = Tensor::zeros(Shape{b}, DType::i32);
  std::memcpy(count.raw(), c.count.data(), c.count.size() * sizeof(int32_t));
  Tensor tb = Tensor::zeros(Shape{b, 4, n}), ts = Tensor::zeros(Shape{b, nc, n});
  Tensor fg = Tensor::zeros(Shape{b, n}, DType::u8), idx = Tensor::zeros(Shape{b, n}, DType::i32);
  // Poison every output.
  std::fill_n(tb.data<float>(), tb.numel(), NAN);
  std::fill_n(ts.data<float>(), ts.numel(), NAN);
  std::memset(fg.raw(), 0x5a, fg.nbytes());
  std::fill_n(idx.data<int32_t>(), idx.numel(), 12345);
  task_aligned_assign_cpu(logits, boxes, anchors, targets, count, o, tb, ts, fg, idx);
  AssignerOutputs out;
  out.target_boxes.assign(tb.data<float>(), tb.data<float>() + tb.numel());
  out.target_scores.assign(ts.data<float>(), ts.data<float>() + ts.numel());
  out.fg_mask.assign(fg.data<uint8_t>(), fg.data<uint8_t>() + fg.numel());
  out.gt_index.assign(idx.data<int32_t>(), idx.data<int32_t>() + idx.numel());
  return out;
}

// A case on an H×W input with every anchor predicting `pred` (pixels) and logits 0.
AssignerCase blank_case(int64_t batch, int64_t h, int64_t w, int64_t nc, int64_t m) {
  AssignerCase c;
  c.batch = batch, c.n_classes = nc, c.n_max = m;
  c.anchors = detect_anchor_grid(h, w);
  c.n_anchors = static_cast<int64_t>(c.anchors.size() / 3);
  c.logits.assign(static_cast<size_t>(batch * nc * c.n_anchors), 0.0f);
  c.boxes.assign(static_cast<size_t>(batch * 4 * c.n_anchors), 0.0f);
  c.targets.assign(static_cast<size_t>(batch * m * 5), 0.0f);
  c.count.assign(static_cast<size_t>(batch), 0);
  return c;
}

// Anchor a of image b predicts the pixel box p (stored in grid units).
void predict(AssignerCase& c, int64_t b, int64_t a, std::array<float, 4> p) {
  const int64_t n = c.n_anchors;
  const float s = c.anchors[static_cast<size_t>(2 * n + a)];
  for (int q = 0; q < 4; ++q) c.boxes[static_cast<size_t>((b * 4 + q) * n + a)] = p[static_cast<size_t>(q)] / s;
}

void set_target(AssignerCase& c, int64_t b, int64_t g, float cls, std::array<float, 4> box) {
  float* row = c.targets.data() + (b * c.n_max + g) * 5;
  row[0] = cls;
  for (int q = 0; q < 4; ++q) row[1 + q] = box[static_cast<size_t>(q)];
}

std::set<int64_t> positives_of(const AssignerOutputs& out, int64_t b, int64_t n, int32_t g) {
  std::set<int64_t> s;
  for (int64_t a = 0; a < n; ++a)
    if (out.gt_index[static_cast<size_t>(b * n + a)] == g) s.insert(a);
  return s;
}

// Every output consistent with gt_index: fg = (idx ≥ 0); zeros on background; target boxes = gt / stride.
void expect_consistent(const AssignerCase& c, const AssignerOutputs& out) {
  const int64_t n = c.n_anchors, nc = c.n_classes;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      const int32_t g = out.gt_index[static_cast<size_t>(b * n + a)];
      ASSERT_TRUE(g >= -1 && g < c.count[static_cast<size_t>(b)]) << "anchor " << a << " gt " << g;
      EXPECT_EQ(out.fg_mask[static_cast<size_t>(b * n + a)], g >= 0 ? 1 : 0);
      const float s = c.anchors[static_cast<size_t>(2 * n + a)];
      for (int q = 0; q < 4; ++q) {
        const float want = g >= 0 ? c.targets[static_cast<size_t>((b * c.n_max + g) * 5 + 1 + q)] / s : 0.0f;
        EXPECT_EQ(out.target_boxes[static_cast<size_t>((b * 4 + q) * n + a)], want);
      }
      for (int64_t k = 0; k < nc; ++k) {
        const float v = out.target_scores[static_cast<size_t>((b * nc + k) * n + a)];
        const bool own = g >= 0 && k == static_cast<int64_t>(c.targets[static_cast<size_t>((b * c.n_max + g) * 5)]);
        if (!own)
          EXPECT_EQ(v, 0.0f) << "anchor " << a << " class " << k;
        else
          EXPECT_TRUE(v >= 0.0f && v <= 1.0f) << v;
      }
    }
}

// The twin against the float64 reference: gt_index, fg and boxes equal on every anchor not touched by a fragile gt
// (one with a decision within rounding of a tie, reported by the reference), scores within 2e-5. With exact = true
// (hand-made cases of small integer coordinates, whose ties and edges are exact in f32 too) every anchor is compared.
// Returns the number of positives compared.
int64_t expect_matches_reference(const AssignerCase& c, const AssignerOptions& o, const AssignerOutputs& out,
                                 bool exact = false) {
  ReferenceAssignment ref = reference_assign(c, o);
  if (exact) {
    std::fill(ref.fragile.begin(), ref.fragile.end(), 0);
    std::fill(ref.fragile_anchor.begin(), ref.fragile_anchor.end(), 0);
  }
  const int64_t n = c.n_anchors, nc = c.n_classes;
  int64_t compared = 0, fragile_gts = 0, gts = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    gts += c.count[static_cast<size_t>(b)];
    for (int32_t g = 0; g < c.count[static_cast<size_t>(b)]; ++g)
      fragile_gts += ref.fragile[static_cast<size_t>(b * c.n_max + g)];
  }
  EXPECT_LE(fragile_gts * 10, std::max<int64_t>(gts, 10)) << "too many near-tie gts for a meaningful comparison";
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      const auto i = static_cast<size_t>(b * n + a);
      const int32_t rg = ref.out.gt_index[i], tg = out.gt_index[i];
      auto fragile = [&](int32_t g) { return g >= 0 && ref.fragile[static_cast<size_t>(b * c.n_max + g)]; };
      if (fragile(rg) || fragile(tg) || ref.fragile_anchor[i]) continue;
      EXPECT_EQ(tg, rg) << "image " << b << " anchor " << a;
      if (tg != rg) continue;
      if (rg >= 0) ++compared;
      for (int q = 0; q < 4; ++q) {
        const size_t j = static_cast<size_t>((b * 4 + q) * n + a);
        EXPECT_NEAR(out.target_boxes[j], ref.out.target_boxes[j], 1e-5 * (1 + std::fabs(ref.out.target_boxes[j])));
      }
      for (int64_t k = 0; k < nc; ++k) {
        const size_t j = static_cast<size_t>((b * nc + k) * n + a);
        // t = align·max overlap / max align with align = σ^α·overlap^6: the f32 overlap's relative error comes out
        // ~13× larger in t (6× in each align, and the overlap ratio); one machine's f32 run was 4.7e-5 relative off
        // at t = 0.552 (2.6e-5 absolute).
        EXPECT_NEAR(out.target_scores[j], ref.out.target_scores[j], 2e-5 + 1e-4 * std::fabs(ref.out.target_scores[j]))
            << "image " << b << " anchor " << a;
      }
    }
  return compared;
}

}  // namespace

// Two gts on a 32×32 input (anchors: P3 0–15 at centres 4, 12, 20, 28 px; P4 16–19 at 8, 24; P5 20 at 16).
// gt0 (class 0) = (0, 0, 16, 16): candidates 0, 1, 4, 5, 16. gt1 (class 1) = (8, 8, 32, 32): candidates 5, 6, 7, 9, 10,
// 11, 13, 14, 15, 19, 20. Anchors 0, 1, 4, 16 predict gt0 exactly (equal align: a tie), 19 and 20 predict gt1, anchor 5
// predicts (4, 4, 20, 20) (CIoU 0.351 with gt0, 0.128 with gt1), the others a far box (CIoU < 0: align 0).
class AssignerHand : public ::testing::Test {
 protected:
  void SetUp() override {
    c = blank_case(1, 32, 32, 2, 3);
    ASSERT_EQ(c.n_anchors, 21);
    for (int64_t a = 0; a < 21; ++a) predict(c, 0, a, {100, 100, 110, 110});
    for (int64_t a : {0, 1, 4, 16}) predict(c, 0, a, {0, 0, 16, 16});
    for (int64_t a : {19, 20}) predict(c, 0, a, {8, 8, 32, 32});
    predict(c, 0, 5, {4, 4, 20, 20});
    set_target(c, 0, 0, 0, {0, 0, 16, 16});
    set_target(c, 0, 1, 1, {8, 8, 32, 32});
    set_target(c, 0, 2, 7, {1, 2, 3, 4});  // past the count: ignored (its class is out of range too)
    c.count = {2};
  }
  AssignerCase c;
};

TEST_F(AssignerHand, TopkFiveSharedAnchorGoesToHigherOverlap) {
  AssignerOptions o;
  o.topk = 5;
  const AssignerOutputs out = run_cpu(c, o);
  // gt0's top 5: 0, 1, 4, 16 (tied), 5. gt1's top 5: 19, 20, 5, then 0 and 1 (align 0, lowest indices: no candidates).
  // Anchor 5 is claimed by both and goes to gt0 (overlap 0.351 > 0.128).
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0, 1, 4, 5, 16}));
  EXPECT_EQ(positives_of(out, 0, 21, 1), (std::set<int64_t>{19, 20}));
  expect_consistent(c, out);
  // Soft targets: the tied exact predictions of a gt get align · max overlap / max align = max overlap ≈ 1; anchor 5
  // gets (0.351 / 1)^6 of it.
  const double ciou5 = vision::test::reference_ciou({0, 0, 16, 16}, {4, 4, 20, 20});
  const double self = vision::test::reference_ciou({0, 0, 16, 16}, {0, 0, 16, 16});
  EXPECT_NEAR(ciou5, 0.3512, 1e-3);
  for (int64_t a : {0, 1, 4, 16}) EXPECT_NEAR(out.target_scores[static_cast<size_t>(a)], self, 1e-6);
  EXPECT_NEAR(out.target_scores[5], std::pow(ciou5 / self, 6.0) * self, 1e-6);
  for (int64_t a : {19, 20}) EXPECT_NEAR(out.target_scores[static_cast<size_t>(21 + a)], 1.0, 1e-5);
  EXPECT_FLOAT_EQ(out.target_boxes[16], 0.0f);
  EXPECT_FLOAT_EQ(out.target_boxes[2 * 21 + 16], 1.0f);  // 16 / 16
  EXPECT_FLOAT_EQ(out.target_boxes[19], 0.5f);           // 8 / 16
  EXPECT_FLOAT_EQ(out.target_boxes[3 * 21 + 20], 1.0f);  // 32 / 32
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

TEST_F(AssignerHand, TopkThreeTiesBreakTowardLowerAnchor) {
  AssignerOptions o;
  o.topk = 3;
  const AssignerOutputs out = run_cpu(c, o);
  // gt0: 0, 1, 4, 16 tie: the lower anchors 0, 1, 4 win the three places. gt1: 19, 20, 5: anchor 5 is gt1's alone.
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0, 1, 4}));
  EXPECT_EQ(positives_of(out, 0, 21, 1), (std::set<int64_t>{5, 19, 20}));
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

TEST_F(AssignerHand, Topk2KeepsOneAnchorPerGt) {
  AssignerOptions o;
  o.topk = 5;
  o.topk2 = 1;
  const AssignerOutputs out = run_cpu(c, o);
  // gt0 wins 0, 1, 4, 16, 5; its top 1 is the lowest of the tied 0, 1, 4, 16. gt1 wins 19, 20 (tied): 19.
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0}));
  EXPECT_EQ(positives_of(out, 0, 21, 1), (std::set<int64_t>{19}));
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

TEST_F(AssignerHand, ZeroAlignGtClaimsOnlyLowIndexCandidates) {
  // Every anchor predicts the far box: every align is 0, so each gt's top 5 is anchors 0–4 by index, and only its
  // candidates among them are claims: gt0 gets 0, 1, 4 (score targets 0), gt1 none.
  for (int64_t a = 0; a < 21; ++a) predict(c, 0, a, {100, 100, 110, 110});
  AssignerOptions o;
  o.topk = 5;
  const AssignerOutputs out = run_cpu(c, o);
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0, 1, 4}));
  EXPECT_TRUE(positives_of(out, 0, 21, 1).empty());
  for (float v : out.target_scores) EXPECT_EQ(v, 0.0f);
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

// Shared anchors (YOLO26.md: exactly as ultralytics' select_highest_overlaps). The 21 anchors of a 32×32 input; gt0
// (class 0) = (0, 0, 16, 16) with anchors 0 and 1 predicting it exactly (align 0.707, overlap 1), gt1 (class 1) =
// (8, 8, 32, 32) and gt2 (class 2) = (6, 6, 30, 30). Anchor 5 (centre (12, 12)) predicts (4, 4, 20, 20): CIoU 0.351
// with gt0, 0.128 with gt1, 0.255 with gt2; every other anchor a far box (align 0). With topk 2, gt0 claims 0 and 1
// (anchor 5 ranks third), gt1 and gt2 claim anchor 5 (their only positive-align candidate; the zero-align anchor 0 of
// their top 2 is not their candidate). Anchor 5 is shared by gt1 and gt2 and goes to gt0, the argmax over all gts,
// which did not claim it (the claiming gts only would give it to gt2).
class SharedAnchor : public ::testing::Test {
 protected:
  void SetUp() override {
    c = blank_case(1, 32, 32, 3, 4);
    ASSERT_EQ(c.n_anchors, 21);
    for (int64_t a = 0; a < 21; ++a) predict(c, 0, a, {100, 100, 110, 110});
    for (int64_t a : {0, 1}) predict(c, 0, a, {0, 0, 16, 16});
    predict(c, 0, 5, {4, 4, 20, 20});
    set_target(c, 0, 0, 0, {0, 0, 16, 16});
    set_target(c, 0, 1, 1, {8, 8, 32, 32});
    set_target(c, 0, 2, 2, {6, 6, 30, 30});
    set_target(c, 0, 3, 9, {4, 4, 20, 20});  // past the count: ignored, though it would hold anchor 5 best
    c.count = {3};
  }
  AssignerCase c;
};

TEST_F(SharedAnchor, GoesToTheHighestOverlapOfAllGtsEvenOneThatDidNotClaimIt) {
  ASSERT_NEAR(vision::test::reference_ciou({0, 0, 16, 16}, {4, 4, 20, 20}), 0.351, 1e-3);
  ASSERT_NEAR(vision::test::reference_ciou({8, 8, 32, 32}, {4, 4, 20, 20}), 0.128, 1e-3);
  ASSERT_NEAR(vision::test::reference_ciou({6, 6, 30, 30}, {4, 4, 20, 20}), 0.255, 1e-3);
  AssignerOptions o;
  o.topk = 2;
  const AssignerOutputs out = run_cpu(c, o);
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0, 1, 5}));
  EXPECT_TRUE(positives_of(out, 0, 21, 1).empty());
  EXPECT_TRUE(positives_of(out, 0, 21, 2).empty());
  expect_consistent(c, out);
  // Anchor 5's target: gt0's normalisation, align(0, 5) · 1 / (align of the exact predictions ≈ 0.707).
  const double ciou5 = vision::test::reference_ciou({0, 0, 16, 16}, {4, 4, 20, 20});
  const double self = vision::test::reference_ciou({0, 0, 16, 16}, {0, 0, 16, 16});
  EXPECT_NEAR(out.target_scores[5], std::pow(ciou5 / self, 6.0) * self, 1e-6);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);

  // An anchor kept by one gt stays with it even when another gt overlaps it more: with topk 1, gt0 claims anchor 0
  // only; gt2 alone claims anchor 5 once gt1 no longer holds it (gt1 moved off it: (13, 13, 32, 32)).
  set_target(c, 0, 1, 1, {13, 13, 32, 32});
  o.topk = 1;
  const AssignerOutputs single = run_cpu(c, o);
  EXPECT_EQ(positives_of(single, 0, 21, 0), (std::set<int64_t>{0}));
  EXPECT_EQ(positives_of(single, 0, 21, 2), (std::set<int64_t>{5}));
  EXPECT_GT(expect_matches_reference(c, o, single, true), 0);
}

TEST_F(SharedAnchor, Topk2DropsItWhenItsNewOwnerRanksItBelowTopk2) {
  // topk 2, topk2 1: after the resolution gt0 holds 0, 1 and 5 and keeps its best, anchor 0 (tied with 1: the lower
  // index); anchor 5 becomes background, where the claiming gts only would have kept it as gt2's one positive.
  AssignerOptions o;
  o.topk = 2;
  o.topk2 = 1;
  const AssignerOutputs out = run_cpu(c, o);
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0}));
  EXPECT_TRUE(positives_of(out, 0, 21, 1).empty());
  EXPECT_TRUE(positives_of(out, 0, 21, 2).empty());
  EXPECT_EQ(out.gt_index[5], -1);
  EXPECT_EQ(out.fg_mask[5], 0);
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

TEST_F(SharedAnchor, AllZeroOverlapsGoToGtZeroAsUpstreamArgmaxDoes) {
  // Every prediction far (align and overlap 0 everywhere): each gt's top 5 is anchors 0–4 by index. gt1 = (2, 2, 30,
  // 14) holds anchors 0–7 and claims 0–4; gt2 = (2, 2, 14, 30) holds 0, 1, 4, 5, ... and claims 0, 1, 4. Those three
  // are kept by both with overlap 0 and go to gt0 = (20, 20, 30, 30), which holds none of them (upstream's argmax of an
  // all-zero column is row 0); gt1 keeps 2 and 3.
  for (int64_t a = 0; a < 21; ++a) predict(c, 0, a, {100, 100, 110, 110});
  set_target(c, 0, 0, 0, {20, 20, 30, 30});
  set_target(c, 0, 1, 1, {2, 2, 30, 14});
  set_target(c, 0, 2, 2, {2, 2, 14, 30});
  AssignerOptions o;
  o.topk = 5;
  const AssignerOutputs out = run_cpu(c, o);
  EXPECT_EQ(positives_of(out, 0, 21, 0), (std::set<int64_t>{0, 1, 4}));
  EXPECT_EQ(positives_of(out, 0, 21, 1), (std::set<int64_t>{2, 3}));
  EXPECT_TRUE(positives_of(out, 0, 21, 2).empty());
  for (float v : out.target_scores) EXPECT_EQ(v, 0.0f);
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, o, out, true), 0);
}

// The crowded fixture: the twin's assignment is the float64 PyTorch reference's on every anchor (the fixture has no
// decision within rounding of a tie), its soft targets within the f32 bound, and it differs from what the superseded
// rule (the claiming gts only) assigns in both heads — in the one-to-one head an anchor goes to background.
TEST(SharedAnchorFixture, CrowdedBatchMatchesTheFloat64ReferenceInBothHeads) {
  namespace sa = vision::test::shared_anchor;
  const AssignerCase c = sa::fixture_case();
  ASSERT_EQ(c.n_anchors, 336);
  for (int h = 0; h < 2; ++h) {
    SCOPED_TRACE(sa::kHeads[h]);
    const std::string head = sa::kHeads[h];
    const AssignerOptions o = sa::options(h);
    const AssignerOutputs out = run_cpu(c, o);
    expect_consistent(c, out);
    const std::vector<int32_t> want = sa::ints("assign." + head + ".gt_index");
    const std::vector<int32_t> old = sa::ints("claiming_only." + head + ".gt_index");
    EXPECT_EQ(out.gt_index, want);
    int64_t changed = 0, positives = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      changed += want[i] != old[i];
      positives += want[i] >= 0;
    }
    EXPECT_GT(changed, 0) << "the fixture no longer tells the two rules apart";
    EXPECT_GT(positives, h == 0 ? 400 : 70);
    int64_t differ_from_old = 0;
    for (size_t i = 0; i < want.size(); ++i) differ_from_old += out.gt_index[i] != old[i];
    EXPECT_EQ(differ_from_old, changed);
    const std::vector<float> scores = sa::fixture().at("assign." + head + ".target_scores").to_vector();
    ASSERT_EQ(scores.size(), out.target_scores.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
      EXPECT_NEAR(out.target_scores[i], scores[i], 2e-5 + 1e-4 * std::fabs(scores[i])) << "element " << i;
      num += std::pow(double(out.target_scores[i]) - scores[i], 2);
      den += std::pow(double(scores[i]), 2);
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5);
    // The C++ float64 reference agrees too (it calls no gt of this case fragile).
    EXPECT_GT(expect_matches_reference(c, o, out), positives / 2);
  }
}

TEST(Assigner, StalWidensTinyBoxes) {
  // A 64×64 input. A 4×4 px box (40, 40, 44, 44) contains no anchor centre (P3 centres 36, 44 lie outside or on the
  // edge); widened to 16 px about (42, 42) it spans (34, 50): P3 centres 36 and 44 (4 anchors), P4 centre 40, P5
  // centre 48. A 20×4 box (4, 20, 24, 24) is widened in height only: y in (14, 30) → P3 rows 20 and 28, x in (4, 24)
  // → P3 columns 12 and 20, P4 (x 8 or 24 is not strictly inside... 8 is) → centre (8, 24) in (4, 24) × (14, 30).
  AssignerCase c = blank_case(1, 64, 64, 3, 2);
  const int64_t n = c.n_anchors;  // 64 + 16 + 4
  ASSERT_EQ(n, 84);
  set_target(c, 0, 0, 2, {40, 40, 44, 44});
  set_target(c, 0, 1, 1, {4, 20, 24, 24});
  c.count = {2};
  for (int64_t a = 0; a < n; ++a) predict(c, 0, a, {200, 200, 210, 210});
  auto p3 = [](int64_t x, int64_t y) { return y * 8 + x; };       // centre (4 + 8x, 4 + 8y)
  auto p4 = [](int64_t x, int64_t y) { return 64 + y * 4 + x; };  // centre (8 + 16x, 8 + 16y)
  auto p5 = [](int64_t x, int64_t y) { return 80 + y * 2 + x; };  // centre (16 + 32x, 16 + 32y)
  const std::set<int64_t> want0 = {p3(4, 4), p3(5, 4), p3(4, 5), p3(5, 5), p4(2, 2), p5(1, 1)};
  const std::set<int64_t> want1 = {p3(1, 2), p3(2, 2), p3(1, 3), p3(2, 3), p4(0, 1)};
  for (int64_t a : want0) predict(c, 0, a, {40.5f, 40, 44, 44.5f});
  for (int64_t a : want1) predict(c, 0, a, {4, 20, 23, 24.5f});
  const AssignerOutputs out = run_cpu(c, AssignerOptions::one_to_many());
  EXPECT_EQ(positives_of(out, 0, n, 0), want0);
  EXPECT_EQ(positives_of(out, 0, n, 1), want1);
  expect_consistent(c, out);  // target boxes are the original (unwidened) boxes
  for (int64_t a : want0) EXPECT_GT(out.target_scores[static_cast<size_t>(2 * n + a)], 0.0f);
  expect_matches_reference(c, AssignerOptions::one_to_many(), out);
}

TEST(Assigner, ImagesWithoutBoxes) {
  // Image 0 has none (rows full of garbage past the count), image 1 one box, image 2 none; also M = 0.
  AssignerCase c = blank_case(3, 64, 64, 4, 4);
  std::mt19937 r(7);
  std::uniform_real_distribution<float> u(-3, 3);
  for (auto& x : c.logits) x = u(r);
  for (auto& x : c.boxes) x = u(r) + 4;
  for (int64_t g = 0; g < 4; ++g) {
    set_target(c, 0, g, 99.0f, {1, 1, 50, 50});
    set_target(c, 2, g, 1.0f, {1, 1, 50, 50});
  }
  set_target(c, 1, 0, 3.0f, {8, 8, 40, 40});
  for (int64_t a = 0; a < c.n_anchors; ++a) predict(c, 1, a, {9, 8, 40, 41});
  c.count = {0, 1, 0};
  const AssignerOutputs out = run_cpu(c, AssignerOptions::one_to_many());
  const int64_t n = c.n_anchors;
  for (int64_t b : {0, 2})
    for (int64_t a = 0; a < n; ++a) {
      EXPECT_EQ(out.gt_index[static_cast<size_t>(b * n + a)], -1);
      EXPECT_EQ(out.fg_mask[static_cast<size_t>(b * n + a)], 0);
    }
  EXPECT_EQ(positives_of(out, 1, n, 0).size(), 10u);
  expect_consistent(c, out);
  expect_matches_reference(c, AssignerOptions::one_to_many(), out);

  AssignerCase empty = blank_case(2, 32, 32, 3, 0);
  const AssignerOutputs none = run_cpu(empty, AssignerOptions::one_to_one());
  for (int32_t g : none.gt_index) EXPECT_EQ(g, -1);
  for (uint8_t f : none.fg_mask) EXPECT_EQ(f, 0);
  for (float v : none.target_scores) EXPECT_EQ(v, 0.0f);
  for (float v : none.target_boxes) EXPECT_EQ(v, 0.0f);
}

TEST(Assigner, RandomBatchMatchesReference) {
  for (const AssignerOptions& o : {AssignerOptions::one_to_many(), AssignerOptions::one_to_one()}) {
    const AssignerCase c = vision::test::random_assigner_case(4, 256, 256, 5, 20, 0, 20, vision::test::rng());
    const AssignerOutputs out = run_cpu(c, o);
    expect_consistent(c, out);
    const int64_t compared = expect_matches_reference(c, o, out);
    int64_t boxes = 0;
    for (int32_t k : c.count) boxes += k;
    if (boxes > 0) EXPECT_GT(compared, 0);
  }
}

TEST(Assigner, DenseImageOf1000Boxes) {
  // M = 1000 on a 640×640 input (8400 anchors): the claims are 1000 · topk, never 1000 × 8400.
  const AssignerCase c = vision::test::random_assigner_case(1, 640, 640, 80, 1000, 1000, 1000, vision::test::rng());
  const AssignerOutputs out = run_cpu(c, AssignerOptions::one_to_many());
  expect_consistent(c, out);
  EXPECT_GT(expect_matches_reference(c, AssignerOptions::one_to_many(), out), 500);
}

TEST(Assigner, RejectsBadInput) {
  AssignerCase c = blank_case(1, 32, 32, 2, 2);
  set_target(c, 0, 0, 5.0f, {0, 0, 16, 16});  // class 5 of 2
  c.count = {1};
  EXPECT_THROW(run_cpu(c, AssignerOptions::one_to_many()), Error);
  set_target(c, 0, 0, 1.0f, {0, 0, 16, 16});
  c.count = {3};  // more than M = 2
  EXPECT_THROW(run_cpu(c, AssignerOptions::one_to_many()), Error);
  AssignerOptions o;
  o.topk = 0;
  EXPECT_THROW(check_assigner_options(o), Error);
  o.topk = 5;
  o.topk2 = 6;
  EXPECT_THROW(check_assigner_options(o), Error);
  o.topk = kAssignerMaxTopk + 1;
  o.topk2 = 0;
  EXPECT_THROW(TaskAlignedAssignerOp{o}, Error);
}

TEST(AssignerGraph, CpuPlanGivesTheTwinsOutputsWithTheirDtypes) {
  // The op in a graph: logits, boxes, targets, count and the level maps (shapes only) → f32, f32, u8, i32 outputs that
  // carry no gradient; on a 64×96 input its per-plan anchor grid is detect_anchor_grid(64, 96).
  using namespace vision::graph;
  auto g = std::make_shared<Graph>();
  const int64_t nc = 3, m = 8;
  auto logits = g->input("logits", Shape{Shape::kAny, nc, Shape::kAny});
  auto boxes = g->input("boxes", Shape{Shape::kAny, 4, Shape::kAny});
  auto targets = g->input("targets", Shape{Shape::kAny, m, 5});
  auto count = g->input("count", Shape{Shape::kAny}, DType::i32);
  auto p3 = g->input("p3", Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny});
  auto p4 = g->input("p4", Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny});
  auto p5 = g->input("p5", Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny});
  const AssignerTensors t =
      task_aligned_assigner(logits, boxes, targets, count, p3, p4, p5, AssignerOptions::one_to_one());
  EXPECT_EQ(t.fg_mask.dtype(), DType::u8);
  EXPECT_EQ(t.gt_index.dtype(), DType::i32);
  EXPECT_EQ(t.target_scores.dtype(), DType::f32);
  EXPECT_FALSE(g->value(t.target_scores.id()).differentiable);
  for (SymTensor x : {t.target_boxes, t.target_scores, t.fg_mask, t.gt_index}) g->mark_output(x, kInferenceOutput);
  Executor ex(g, cpu_backend());
  const int64_t batch = 2, h = 64, w = 96;
  const AssignerCase c = vision::test::random_assigner_case(batch, h, w, nc, m, 1, m, vision::test::rng());
  const int64_t n = c.n_anchors;
  Tensor cnt = Tensor::zeros(Shape{batch}, DType::i32);
  std::memcpy(cnt.raw(), c.count.data(), c.count.size() * 4);
  const auto out =
      ex.forward({Tensor::from_vector(Shape{batch, nc, n}, c.logits), Tensor::from_vector(Shape{batch, 4, n}, c.boxes),
                  Tensor::from_vector(Shape{batch, m, 5}, c.targets), cnt,
                  vision::test::random_tensor(Shape{batch, 1, h / 8, w / 8}),
                  vision::test::random_tensor(Shape{batch, 1, h / 16, w / 16}),
                  vision::test::random_tensor(Shape{batch, 1, h / 32, w / 32})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[2].dtype(), DType::u8);
  EXPECT_EQ(out[3].dtype(), DType::i32);
  const AssignerOutputs twin = run_cpu(c, AssignerOptions::one_to_one());
  EXPECT_EQ(std::vector<int32_t>(out[3].data<int32_t>(), out[3].data<int32_t>() + batch * n), twin.gt_index);
  EXPECT_EQ(std::vector<uint8_t>(out[2].data<uint8_t>(), out[2].data<uint8_t>() + batch * n), twin.fg_mask);
  EXPECT_EQ(std::vector<float>(out[1].data<float>(), out[1].data<float>() + batch * nc * n), twin.target_scores);
  EXPECT_EQ(std::vector<float>(out[0].data<float>(), out[0].data<float>() + batch * 4 * n), twin.target_boxes);
}
