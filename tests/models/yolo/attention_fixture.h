// The Attention block's PyTorch fixture (tools/reference/make_attention_fixture.py): a graph of the block with a
// training loss mean(y ∘ r), the fixture's parameters loaded by their ultralytics names, and the comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/blocks/attention.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/reduce.h"

namespace vision::test::attention_fixture {

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(std::string(VISION_FIXTURE_DIR) + "/attention_dim64_h2.safetensors");
  return f;
}
inline const core::Tensor& get(const std::string& name) {
  const core::Tensor* t = fixture().find(name);
  VISION_CHECK(t != nullptr, "the attention fixture has no tensor '{}'", name);
  return *t;
}

// The block's variants: a PSA form, as three ops (pack → attention → merge) or fused into one PsaAttentionOp step.
struct Variant {
  models::yolo::kernels::attention::PsaForm form;
  bool fused;
  std::string name() const {
    return std::string(form == models::yolo::kernels::attention::PsaForm::two_pass ? "two_pass" : "one_pass") +
           (fused ? "_fused" : "");
  }
};

// x [2, 64, 4, 5] → attention (dim 64, heads 2: key_dim 16) → y (inference output); training loss mean(y ∘ r).
inline std::shared_ptr<graph::Graph> attention_graph(Variant v) {
  auto g = std::make_shared<graph::Graph>();
  auto x = g->input("x", get("x").shape());
  auto r = g->input("r", get("r").shape());
  auto y = models::yolo::blocks::attention(x, {.dim = 64, .heads = 2, .form = v.form, .fused = v.fused}, "attn");
  g->mark_output(y, graph::kInferenceOutput);
  g->mark_output(ops::mean(ops::mul(y, r, "project"), "loss"), graph::kTrainingLoss);
  return g;
}

// Creates the executor's state and loads the fixture's parameters and BatchNorm statistics into it.
inline void load(graph::Executor& ex) {
  graph::StateStore& s = ex.state({get("x").shape(), get("r").shape()});
  size_t loaded = 0;
  for (const graph::StateEntry& e : s.entries())
    if (const core::Tensor* t = fixture().find(e.key)) {
      s.set_from_host(e.key, *t);
      ++loaded;
    }
  ASSERT_EQ(loaded, 15u) << "3 convolutions × (weight + 4 BatchNorm tensors)";
}

// The trainable parameters the fixture has gradients for.
inline std::vector<std::string> trained_keys() {
  std::vector<std::string> keys;
  for (const auto& [name, t] : fixture().tensors)
    if (name.starts_with("grad.attn.")) keys.push_back(name.substr(5));
  return keys;
}

// Every parameter's gradient against the fixture's within `bound` in relative norm. pe.bn.bias has none in exact
// arithmetic (a per-channel shift before proj's 1×1 convolution is removed by proj's batch-statistics BatchNorm): its
// gradient must be below bound times the gradient norm of pe.bn.weight instead.
inline void expect_gradients_match(const graph::StateStore& state, double bound) {
  const auto keys = trained_keys();
  EXPECT_EQ(keys.size(), 9u);
  auto host = [&](const std::string& key) { return state.backend().download(state.grad(key)).to_vector(); };
  auto norm = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  const double scale = norm(test::to_double(get("grad.attn.pe.bn.weight")));
  for (const std::string& key : keys) {
    const auto ref = test::to_double(get("grad." + key));
    if (key == "attn.pe.bn.bias") {
      EXPECT_LT(norm(ref), 1e-12 * scale) << "the fixture's " << key;
      EXPECT_LT(norm(test::to_double(host(key))), bound * scale) << key;
      continue;
    }
    EXPECT_LT(test::rel_error(host(key), ref), bound) << key;
  }
}

}  // namespace vision::test::attention_fixture
