// Parameter groups from YOLO26n's real state (the training graph: both Detect heads, 366 trainable tensors): the
// counts per group under SGD/AdamW and under MuSGD (with the Detect class branch's lr × 3), specific assignments, and
// --freeze; and the glob matching the boost pattern uses.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/graph/graph.h"
#include "vision/graph/state.h"
#include "vision/models/yolo/optim_rules.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/train/param_groups.h"

using namespace vision;
using train::GroupKind;
using train::OptimizerKind;

namespace {

const std::vector<graph::StateEntry>& yolo26n_entries() {
  static const std::vector<graph::StateEntry> entries = [] {
    graph::Graph g;
    models::yolo::record_yolo26_training(g.input("images", core::Shape{1, 3, 32, 32}),
                                         {.scale = models::yolo::Scale::n, .nc = 80});
    return graph::state_entries(g, g.inputs(), {core::Shape{1, 3, 32, 32}});
  }();
  return entries;
}

struct Counts {
  std::map<std::string, size_t> tensors;
  std::map<std::string, int64_t> elements;
};

Counts counts(const train::GroupAssignment& a) {
  Counts c;
  for (const auto& g : a.groups) {
    c.tensors[g.name()] = g.tensors.size();
    for (size_t i : g.tensors) c.elements[g.name()] += a.params[i].shape.numel();
  }
  return c;
}

std::string group_name(const train::GroupAssignment& a, const std::string& key) {
  for (size_t i = 0; i < a.params.size(); ++i)
    if (a.params[i].key == key) return a.group_of[i] < 0 ? "frozen" : a.groups[static_cast<size_t>(a.group_of[i])].name();
  return "absent";
}

}  // namespace

TEST(ParamGroups, Yolo26nUnderSgdAndAdamW) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    const auto a = train::assign_param_groups(yolo26n_entries(), kind, models::yolo::yolo26_group_rules());
    ASSERT_EQ(a.params.size(), 366u);
    const Counts c = counts(a);
    // Every convolution weight (126) decays; the BatchNorm weights (114) and all biases (114 BatchNorm + 12 Detect
    // convolution biases) do not. No boost outside MuSGD.
    EXPECT_EQ(c.tensors, (std::map<std::string, size_t>{{"weight", 126}, {"bn", 114}, {"bias", 126}}));
    EXPECT_EQ(c.elements, (std::map<std::string, int64_t>{{"weight", 2552208}, {"bn", 9784}, {"bias", 10288}}));
    EXPECT_EQ(group_name(a, "model.0.conv.weight"), "weight");
    EXPECT_EQ(group_name(a, "model.0.bn.weight"), "bn");
    EXPECT_EQ(group_name(a, "model.0.bn.bias"), "bias");
    EXPECT_EQ(group_name(a, "model.23.cv2.0.2.bias"), "bias");
    EXPECT_EQ(group_name(a, "model.23.cv3.0.0.0.conv.weight"), "weight");
    EXPECT_EQ(group_name(a, "model.10.m.0.attn.qkv.bn.weight"), "bn");
    EXPECT_TRUE(a.frozen.empty());
    for (const auto& g : a.groups) EXPECT_EQ(g.decay, g.kind == GroupKind::weight) << g.name();
  }
}

TEST(ParamGroups, Yolo26nUnderMuSGDWithTheClassBranchBoosted) {
  const auto a = train::assign_param_groups(yolo26n_entries(), OptimizerKind::musgd, models::yolo::yolo26_group_rules());
  const Counts c = counts(a);
  // Rank ≥ 2 goes to Muon first; the Detect class branches (cv3 and one2one_cv3: 3 levels × 10 weights, 8 BatchNorm
  // weights, 10 biases) form the ×3 twins. No "weight" group is left.
  EXPECT_EQ(c.tensors, (std::map<std::string, size_t>{{"muon", 96},
                                                      {"muon.x3", 30},
                                                      {"bn", 90},
                                                      {"bn.x3", 24},
                                                      {"bias", 96},
                                                      {"bias.x3", 30}}));
  EXPECT_EQ(c.elements, (std::map<std::string, int64_t>{{"muon", 2391344},
                                                        {"muon.x3", 160864},
                                                        {"bn", 7448},
                                                        {"bn.x3", 2336},
                                                        {"bias", 7472},
                                                        {"bias.x3", 2816}}));
  EXPECT_EQ(group_name(a, "model.0.conv.weight"), "muon");
  EXPECT_EQ(group_name(a, "model.23.cv3.0.0.0.conv.weight"), "muon.x3");
  EXPECT_EQ(group_name(a, "model.23.one2one_cv3.2.2.weight"), "muon.x3");
  EXPECT_EQ(group_name(a, "model.23.one2one_cv3.0.1.1.bn.weight"), "bn.x3");
  EXPECT_EQ(group_name(a, "model.23.cv3.1.2.bias"), "bias.x3");
  EXPECT_EQ(group_name(a, "model.23.cv2.0.0.bn.weight"), "bn");  // the box branch is not boosted
  EXPECT_EQ(group_name(a, "model.23.one2one_cv2.2.2.weight"), "muon");
  EXPECT_EQ(group_name(a, "model.22.m.0.1.attn.pe.conv.weight"), "muon");
  for (const auto& g : a.groups) {
    EXPECT_EQ(g.lr_scale, g.boosted ? 3.0 : 1.0) << g.name();
    EXPECT_EQ(g.decay, g.kind == GroupKind::muon) << g.name();
  }
  // The listing order: bn, bias, muon kinds in the fixed order, each before its boosted twin.
  std::vector<std::string> names;
  for (const auto& g : a.groups) names.push_back(g.name());
  EXPECT_EQ(names, (std::vector<std::string>{"bn", "bn.x3", "bias", "bias.x3", "muon", "muon.x3"}));
}

TEST(ParamGroups, FreezeTakesTheFirstLayersOutOfEveryGroup) {
  const auto all = train::assign_param_groups(yolo26n_entries(), OptimizerKind::sgd, {});
  const auto a = train::assign_param_groups(yolo26n_entries(), OptimizerKind::sgd, models::yolo::yolo26_group_rules(10));
  size_t expected = 0;
  for (const auto& p : all.params) {
    const std::string& k = p.key;
    const auto dot = k.find('.', 6);
    const int layer = std::stoi(k.substr(6, dot - 6));  // "model.L."
    if (layer < 10) ++expected;
  }
  EXPECT_EQ(a.frozen.size(), expected);
  EXPECT_EQ(expected, 99u);  // yolo26n_state_dict.tsv: 99 parameters in model.0 … model.9
  EXPECT_EQ(group_name(a, "model.9.cv2.conv.weight"), "frozen");
  EXPECT_EQ(group_name(a, "model.10.cv1.conv.weight"), "weight");  // "model.1." does not freeze model.10
  EXPECT_EQ(group_name(a, "model.0.bn.bias"), "frozen");
  size_t grouped = 0;
  for (const auto& g : a.groups) grouped += g.tensors.size();
  EXPECT_EQ(grouped + a.frozen.size(), 366u);
}

TEST(ParamGroups, GlobMatching) {
  EXPECT_TRUE(train::glob_match("model.23.*cv3*", "model.23.cv3.0.0.0.conv.weight"));
  EXPECT_TRUE(train::glob_match("model.23.*cv3*", "model.23.one2one_cv3.2.2.bias"));
  EXPECT_FALSE(train::glob_match("model.23.*cv3*", "model.23.cv2.0.0.conv.weight"));
  EXPECT_FALSE(train::glob_match("model.23.*cv3*", "model.2.cv3.conv.weight"));
  EXPECT_FALSE(train::glob_match("model.23.*cv3*", "model.230.cv3.weight"));
  EXPECT_TRUE(train::glob_match("*", ""));
  EXPECT_TRUE(train::glob_match("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(train::glob_match("a*b*c", "aXbYbZ"));
  EXPECT_TRUE(train::glob_match("abc", "abc"));
  EXPECT_FALSE(train::glob_match("abc", "abcd"));
}
