// The optimizers on the CPU (the CPU twins): SGD (Nesterov + weight decay) and AdamW against PyTorch 1.13 and against
// float64 computed here, MuSGD and its bf16 Newton–Schulz against a float64 implementation of YOLO26.md's formula with
// the bf16 rounding emulated (tools/reference/make_optimizer_fixture.py), several groups with per-step lr and
// momentum; gradient clipping, the non-finite skip, frozen tensors, the state round trip, the gradient norm's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/optim_test_util.h"
#include "vision/train/optim_kernels.h"
#include "vision/train/optimizer.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::optim;
using core::Shape;
using core::Tensor;
using train::OptimizerKind;

namespace {

constexpr double kU32 = 0x1p-24;  // f32 unit roundoff

std::string join(const std::vector<train::ParamGroup>& groups) {
  std::string s;
  for (const auto& g : groups) s += (s.empty() ? "" : ",") + g.name();
  return s;
}

std::string key_of(const std::string& key, int s) { return std::to_string(s) + "." + key; }

// Group index of each fixture key under an optimizer.
std::map<std::string, size_t> group_index(const train::Optimizer& opt) {
  std::map<std::string, size_t> out;
  const auto& a = opt.assignment();
  for (size_t i = 0; i < a.params.size(); ++i) out[a.params[i].key] = static_cast<size_t>(a.group_of[i]);
  return out;
}

// Runs the fixture's steps with optimizer `kind` on the CPU; calls check(step, model) after each.
template <typename Check>
void run_fixture(const std::string& kind, FlatModel& m, train::Optimizer& opt, Check check) {
  for (int s = 0; s < fixture_steps(); ++s) {
    set_fixture_hyper(opt, kind, s);
    set_fixture_grads(m, s);
    const train::StepResult r = opt.step();
    ASSERT_TRUE(r.applied);
    EXPECT_EQ(r.clip_coef, 1.0f);
    check(s);
  }
}

}  // namespace

TEST(OptimizerGroups, FixtureModelGroupsFollowTheRules) {
  auto m = fixture_model(graph::cpu_backend());
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto opt = m->optimizer(fixture_options(kind));
    EXPECT_EQ(join(opt->groups()), fixture().metadata.at("groups." + kind)) << kind;
  }
  auto opt = m->optimizer(fixture_options("musgd"));
  const auto g = group_index(*opt);
  const auto name = [&](const std::string& key) { return opt->groups()[g.at(key)].name(); };
  EXPECT_EQ(name("model.2.fc.weight"), "muon");  // rank 2 goes to Muon before the bias rule
  EXPECT_EQ(name("model.0.bn.weight"), "bn");
  EXPECT_EQ(name("model.2.fc.bias"), "bias");
  EXPECT_EQ(name("model.23.one2one_cv3.0.2.weight"), "muon.x3");
  EXPECT_EQ(name("model.23.cv3.0.2.bias"), "bias.x3");
  EXPECT_DOUBLE_EQ(opt->group_settings(g.at("model.23.cv3.0.2.bias")).lr, 3 * 0.01);
  EXPECT_DOUBLE_EQ(opt->group_settings(g.at("model.2.fc.bias")).weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(opt->group_settings(g.at("model.2.fc.weight")).weight_decay, 5e-4);
}

// SGD against torch.optim.SGD(nesterov=True) in f32 and against float64 here. Per step the parameter takes ≤ 4
// roundings that reach it at full weight (the decay and momentum terms enter scaled by lr ≤ 0.15), of values
// |p| ≤ 1.2, so 4 steps stay within 4·4·u·1.2 ≈ 1.1e-6 (u = 2^-24) of float64, and of PyTorch (f32, another order).
// A wrong rule (no Nesterov term, decay or momentum missed) moves parameters by lr·|g| ≈ 1e-2.
TEST(Optimizer, SgdNesterovWithWeightDecayMatchesPyTorchAndFloat64) {
  auto m = fixture_model(graph::cpu_backend());
  auto opt = m->optimizer(fixture_options("sgd"));
  const auto gi = group_index(*opt);
  const auto lr = fx("hyper.sgd.lr").to_vector(), mom = fx("hyper.sgd.momentum").to_vector(),
             wd = fx("hyper.sgd.weight_decay").to_vector();
  const size_t G = opt->groups().size();
  std::map<std::string, std::vector<double>> p, buf;
  for (const auto& [key, shape] : fixture_shapes()) {
    p[key] = to_double(fx("init." + key));
    buf[key].assign(p[key].size(), 0.0);
  }
  double worst_torch = 0, worst_f64 = 0;
  run_fixture("sgd", *m, *opt, [&](int s) {
    for (const auto& [key, shape] : fixture_shapes()) {
      const size_t j = gi.at(key);
      const double l = lr[s * G + j], mu = mom[s * G + j], w = wd[j];
      const auto g = to_double(fx("grad." + key_of(key, s)));
      for (size_t i = 0; i < g.size(); ++i) {
        const double gp = g[i] + w * p[key][i];
        buf[key][i] = mu * buf[key][i] + gp;
        p[key][i] -= l * (gp + mu * buf[key][i]);
      }
      const auto ours = m->get(m->params, key);
      worst_f64 = std::max(worst_f64, max_abs_error(ours, p[key]));
      worst_torch = std::max(worst_torch, max_abs_error(ours, fx("sgd." + key_of(key, s)).to_vector()));
    }
  });
  EXPECT_LT(worst_f64, 4 * 4 * kU32 * 1.2) << "max |ours − float64|";
  EXPECT_LT(worst_torch, 4 * 4 * kU32 * 1.2) << "max |ours − PyTorch|";
  for (const auto& [key, shape] : fixture_shapes()) {
    const auto b = opt->state_tensor("optimizer." + key + ".momentum_buffer").to_vector();
    EXPECT_LT(max_abs_error(b, buf[key]), 1e-5) << key;
    EXPECT_LT(max_abs_error(b, fx("sgd.state." + key + ".momentum_buffer").to_vector()), 1e-5) << key;
  }
  EXPECT_EQ(opt->steps(), fixture_steps());
}

// AdamW against torch.optim.AdamW in f32 and float64 here. The update lr·m̂/(sqrt(v̂) + eps) is ≤ lr·O(1) per step and
// its relative f32 error a few u (≤ 8 roundings in the chain), so 4 steps stay within 4·(8·u·lr_max + 2u·|p|).
TEST(Optimizer, AdamWMatchesPyTorchAndFloat64) {
  auto m = fixture_model(graph::cpu_backend());
  auto opt = m->optimizer(fixture_options("adamw"));
  const auto gi = group_index(*opt);
  const auto lr = fx("hyper.adamw.lr").to_vector(), b1s = fx("hyper.adamw.momentum").to_vector(),
             wd = fx("hyper.adamw.weight_decay").to_vector();
  const size_t G = opt->groups().size();
  std::map<std::string, std::vector<double>> p, m1, m2;
  for (const auto& [key, shape] : fixture_shapes()) {
    p[key] = to_double(fx("init." + key));
    m1[key].assign(p[key].size(), 0.0);
    m2[key].assign(p[key].size(), 0.0);
  }
  double worst_torch = 0, worst_f64 = 0;
  run_fixture("adamw", *m, *opt, [&](int s) {
    const double t = s + 1, b2 = 0.999, eps = 1e-8;
    for (const auto& [key, shape] : fixture_shapes()) {
      const size_t j = gi.at(key);
      const double l = lr[s * G + j], b1 = b1s[s * G + j], w = wd[j];
      const auto g = to_double(fx("grad." + key_of(key, s)));
      for (size_t i = 0; i < g.size(); ++i) {
        p[key][i] *= 1 - l * w;
        m1[key][i] = b1 * m1[key][i] + (1 - b1) * g[i];
        m2[key][i] = b2 * m2[key][i] + (1 - b2) * g[i] * g[i];
        const double mh = m1[key][i] / (1 - std::pow(b1, t)), vh = m2[key][i] / (1 - std::pow(b2, t));
        p[key][i] -= l * mh / (std::sqrt(vh) + eps);
      }
      const auto ours = m->get(m->params, key);
      worst_f64 = std::max(worst_f64, max_abs_error(ours, p[key]));
      worst_torch = std::max(worst_torch, max_abs_error(ours, fx("adamw." + key_of(key, s)).to_vector()));
    }
  });
  const double bound = 4 * (8 * kU32 * 0.06 + 2 * kU32 * 1.0);
  EXPECT_LT(worst_f64, bound) << "max |ours − float64|";
  EXPECT_LT(worst_torch, bound) << "max |ours − PyTorch|";
  for (const auto& [key, shape] : fixture_shapes()) {
    EXPECT_LT(max_abs_error(opt->state_tensor("optimizer." + key + ".exp_avg").to_vector(),
                            fx("adamw.state." + key + ".exp_avg").to_vector()),
              1e-6)
        << key;
    EXPECT_LT(max_abs_error(opt->state_tensor("optimizer." + key + ".exp_avg_sq").to_vector(),
                            fx("adamw.state." + key + ".exp_avg_sq").to_vector()),
              1e-7)
        << key;
  }
}

// MuSGD against the float64 formula with vision-cpp's bf16 rounding emulated. The reference and the twin round the same
// values to bf16; they differ where the f32 and float64 values before a rounding fall on two sides of a bf16 rounding
// boundary (rare at these sizes: ≤ 48 terms per dot product), so the twin must be far closer to the emulation than
// the emulation is to the exact float64 iteration (the bf16 effect): ≤ 1/10 of it, over the whole trajectory. The
// non-Muon groups take no bf16 path: float64-tight (f32 roundings only).
TEST(Optimizer, MuSGDMatchesTheFloat64FormulaWithBf16RoundingEmulated) {
  auto m = fixture_model(graph::cpu_backend());
  auto opt = m->optimizer(fixture_options("musgd"));
  double num = 0, bf16_effect = 0, worst_plain = 0;
  run_fixture("musgd", *m, *opt, [&](int s) {
    for (const auto& [key, shape] : fixture_shapes()) {
      const auto ours = to_double(m->get(m->params, key));
      const auto emu = to_double(fx("musgd." + key_of(key, s)));
      const auto exact = to_double(fx("musgd_exact." + key_of(key, s)));
      if (shape.rank() >= 2) {
        for (size_t i = 0; i < ours.size(); ++i) {
          num += (ours[i] - emu[i]) * (ours[i] - emu[i]);
          bf16_effect += (emu[i] - exact[i]) * (emu[i] - exact[i]);
        }
      } else {
        worst_plain = std::max(worst_plain, max_abs_error(ours, emu));
        EXPECT_EQ(emu, exact) << key << ": the non-Muon path has no bf16 rounding";
      }
    }
  });
  ASSERT_GT(bf16_effect, 0);
  const double ratio = std::sqrt(num / bf16_effect);
  EXPECT_LT(ratio, 0.1) << "‖ours − emulated‖ / ‖emulated − exact‖ over the Muon tensors";
  EXPECT_LT(worst_plain, 4 * 4 * kU32 * 1.2);
  // The buffers: the Muon momentum takes no bf16 path; the SGD momentum depends on p through the decay only.
  for (const auto& [key, shape] : fixture_shapes()) {
    const auto b2 = opt->state_tensor("optimizer." + key + ".momentum_buffer").to_vector();
    EXPECT_LT(max_abs_error(b2, fx("musgd.state." + key + ".momentum_buffer").to_vector()), 1e-4) << key;
    if (shape.rank() < 2) continue;
    const auto b1 = opt->state_tensor("optimizer." + key + ".muon_momentum_buffer").to_vector();
    EXPECT_LT(max_abs_error(b1, fx("musgd.state." + key + ".muon_momentum_buffer").to_vector()), 1e-6) << key;
  }
}

// Newton–Schulz alone (normalisation + 5 iterations, bf16) against the fixture: the same argument as above, per matrix
// (4×6 … 32×32), plus at most one bf16 step (2^-8 relative to the largest |X|) on any element.
TEST(NewtonSchulz, Bf16IterationMatchesTheEmulatedFloat64Reference) {
  const int count = std::stoi(fixture().metadata.at("ns.count"));
  for (int i = 0; i < count; ++i) {
    const Tensor& u = fx("ns.input." + std::to_string(i));
    const int64_t r = u.dim(0), c = u.dim(1);
    std::vector<uint16_t> x(static_cast<size_t>(r * c));
    const auto uv = u.to_vector();
    for (size_t k = 0; k < x.size(); ++k) x[k] = train::to_bf16(uv[k]);
    const train::OptimTensor t{0, r * c, 0, 0, r, c, 0, 1.0f, 0.0f};
    const int64_t which = 0;
    train::muon_normalize_cpu(x.data(), {&t, 1}, {&which, 1});
    train::newton_schulz_cpu(x.data(), 1, r, c, 5);
    std::vector<double> ours(x.size());
    for (size_t k = 0; k < x.size(); ++k) ours[k] = train::from_bf16(x[k]);
    const auto emu = to_double(fx("ns.bf16." + std::to_string(i))), exact = to_double(fx("ns.exact." + std::to_string(i)));
    const double effect = rel_error(emu, exact), err = rel_error(ours, emu);
      EXPECT_GT(effect, 1e-3) << "the bf16 rounding must show";
    EXPECT_LT(err, 0.1 * effect) << r << "×" << c;
    EXPECT_LE(max_abs_error(ours, emu), 0x1p-8 * max_abs(emu)) << r << "×" << c;
    // The result is near-orthogonal: X·Xᵀ ≈ I within the quintic's band (singular values in about [0.7, 1.2]).
    for (int64_t a = 0; a < r; ++a) {
      double d = 0;
      for (int64_t k = 0; k < c; ++k) d += ours[static_cast<size_t>(a * c + k)] * ours[static_cast<size_t>(a * c + k)];
      EXPECT_GT(d, 0.4) << r << "×" << c << " row " << a;
      EXPECT_LT(d, 1.5) << r << "×" << c << " row " << a;
    }
  }
}

// The gradient norm's reduction: the partials-then-finalize order of the GPU, equal to float64 within the f32 sums'
// error (n·u relative for n terms of one sign), and deterministic.
TEST(Optimizer, GradientSumOfSquaresFollowsTheBlockOrder) {
  std::vector<train::OptimTensor> tensors = {{0, 10000, 0, -1, 10000, 1, 0, 1.0f, 0.0f},
                                             {10000, 5, 0, -1, 5, 1, 0, 1.0f, 0.0f},
                                             {10005, 9000, 0, -1, 9000, 1, 0, 1.0f, 0.0f}};
  std::vector<train::OptimChunk> chunks;
  for (size_t t = 0; t < tensors.size(); ++t)
    for (int64_t s = 0; s < tensors[t].numel; s += train::kOptimChunk)
      chunks.push_back({static_cast<int64_t>(t), s, std::min<int64_t>(train::kOptimChunk, tensors[t].numel - s)});
  const auto g = random_values(19005);
  const float a = train::grad_sumsq_cpu(g.data(), tensors, chunks);
  std::vector<float> partials(chunks.size());
  train::grad_sumsq_partials_cpu(g.data(), tensors, chunks, partials.data());
  // Chunk 0 by hand: thread t sums elements t, t + 256, …; then the tree.
  float lanes[train::kOptimThreads];
  for (int t = 0; t < train::kOptimThreads; ++t) {
    float acc = 0;
    for (int64_t j = t; j < train::kOptimChunk; j += train::kOptimThreads) acc += g[static_cast<size_t>(j)] * g[static_cast<size_t>(j)];
    lanes[t] = acc;
  }
  for (int w = train::kOptimThreads / 2; w > 0; w >>= 1)
    for (int t = 0; t < w; ++t) lanes[t] += lanes[t + w];
  EXPECT_EQ(partials[0], lanes[0]);
  EXPECT_EQ(train::grad_sumsq_finalize_cpu(partials.data(), static_cast<int64_t>(partials.size())), a);
  double ref = 0;
  for (float v : g) ref += static_cast<double>(v) * v;
  EXPECT_LT(std::abs(a - ref) / ref, 64 * kU32);
}

// Clipping: a step with max_grad_norm 10 on gradients of norm ≈ 20 equals, bit for bit, an unclipped step on the
// gradients times coef = 10 / (norm + 1e-6) (as torch.nn.utils.clip_grad_norm_); the norm is the float64 one within
// the reduction's error; below the threshold the coefficient is exactly 1.
TEST(Optimizer, ClipsTheGlobalGradientNormAtMaxGradNorm) {
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto a = fixture_model(graph::cpu_backend()), b = fixture_model(graph::cpu_backend());
    auto oa_opts = fixture_options(kind);
    oa_opts.max_grad_norm = 10.0;
    auto oa = a->optimizer(oa_opts), ob = b->optimizer(fixture_options(kind));
    std::vector<float> g = random_values(static_cast<size_t>(a->numel));
    double n2 = 0;
    for (float v : g) n2 += static_cast<double>(v) * v;
    for (float& v : g) v = static_cast<float>(v * 20.0 / std::sqrt(n2));
    n2 = 0;
    for (float v : g) n2 += static_cast<double>(v) * v;
    a->set_all(a->grads, g);
    const train::StepResult r = oa->step();
    ASSERT_TRUE(r.applied);
    EXPECT_NEAR(r.grad_norm, std::sqrt(n2), 1e-5 * std::sqrt(n2)) << kind;
    EXPECT_EQ(r.clip_coef, 10.0f / (r.grad_norm + 1e-6f)) << kind;
    EXPECT_LT(r.clip_coef, 0.51f);
    for (float& v : g) v *= r.clip_coef;
    b->set_all(b->grads, g);
    const train::StepResult rb = ob->step();
    EXPECT_EQ(rb.clip_coef, 1.0f);
    EXPECT_EQ(a->all(a->params), b->all(b->params)) << kind;
    // Below the threshold: no scaling.
    a->set_all(a->grads, random_values(static_cast<size_t>(a->numel), -0.01f, 0.01f));
    EXPECT_EQ(oa->step().clip_coef, 1.0f) << kind;
  }
}

// A non-finite gradient (NaN, +Inf, or a sum of squares that overflows f32) skips the step: parameters and state stay
// bit for bit, the step count does not move, the skip is counted; the next finite step applies.
TEST(Optimizer, SkipsAndCountsStepsWithNonFiniteGradients) {
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto m = fixture_model(graph::cpu_backend());
    auto opt = m->optimizer(fixture_options(kind));
    set_fixture_grads(*m, 0);
    ASSERT_TRUE(opt->step().applied);
    const auto params = m->all(m->params);
    const auto state = opt->state_dict();
    int skipped = 0;
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 3e19f}) {
      std::vector<float> g = random_values(static_cast<size_t>(m->numel));
      g[17] = bad;
      m->set_all(m->grads, g);
      const train::StepResult r = opt->step();
      EXPECT_FALSE(r.applied) << kind << " " << bad;
      EXPECT_FALSE(std::isfinite(r.grad_norm));
      ++skipped;
      EXPECT_EQ(opt->skipped_steps(), skipped);
      EXPECT_EQ(opt->steps(), 1);
      EXPECT_EQ(m->all(m->params), params) << kind;
      const auto now = opt->state_dict();
      ASSERT_EQ(now.size(), state.size());
      for (size_t i = 1; i < now.size(); ++i) EXPECT_EQ(now[i].second.to_vector(), state[i].second.to_vector());
    }
    set_fixture_grads(*m, 1);
    EXPECT_TRUE(opt->step().applied);
    EXPECT_EQ(opt->steps(), 2);
    EXPECT_NE(m->all(m->params), params);
  }
}

// A queued step (queue_step) decides on the backend and is read back by finish_step: the same result, parameters and
// counts as step(), for an applied and a skipped (NaN) step; a second queue before finishing, or a finish without a
// queue, is refused.
TEST(Optimizer, QueuedStepEqualsStep) {
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto a = fixture_model(graph::cpu_backend()), b = fixture_model(graph::cpu_backend());
    auto oa = a->optimizer(fixture_options(kind)), ob = b->optimizer(fixture_options(kind));
    for (int i = 0; i < 3; ++i) {
      std::vector<float> g = random_values(static_cast<size_t>(a->numel));
      if (i == 1) g[5] = std::numeric_limits<float>::quiet_NaN();
      a->set_all(a->grads, g);
      b->set_all(b->grads, g);
      oa->queue_step();
      EXPECT_THROW(oa->queue_step(), Error);
      EXPECT_EQ(oa->step_status()->applied, i == 1 ? 0 : 1);
      const train::StepResult ra = oa->finish_step(), rb = ob->step();
      EXPECT_EQ(ra.applied, rb.applied) << kind << " " << i;
      EXPECT_EQ(ra.clip_coef, rb.clip_coef);
      if (rb.applied) EXPECT_EQ(ra.grad_norm, rb.grad_norm);
      EXPECT_EQ(a->all(a->params), b->all(b->params)) << kind << " " << i;
    }
    EXPECT_EQ(oa->steps(), 2);
    EXPECT_EQ(oa->skipped_steps(), 1);
    EXPECT_THROW(oa->finish_step(), Error);
  }
}

// --freeze: the first N layers' tensors get no update, no state, and their gradients leave the norm.
TEST(Optimizer, FrozenLayersGetNoUpdatesAndLeaveTheNorm) {
  EXPECT_EQ(train::freeze_prefixes(3), (std::vector<std::string>{"model.0.", "model.1.", "model.2."}));
  EXPECT_TRUE(train::freeze_prefixes(0).empty());
  EXPECT_TRUE(train::is_frozen("model.1.bn.bias", train::freeze_prefixes(2)));
  EXPECT_FALSE(train::is_frozen("model.10.bn.bias", train::freeze_prefixes(2)));  // "model.1." is not a prefix of it
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto m = fixture_model(graph::cpu_backend());
    auto o = fixture_options(kind);
    o.rules.frozen_prefixes = train::freeze_prefixes(2);
    auto opt = m->optimizer(o);
    EXPECT_EQ(opt->assignment().frozen.size(), 6u);
    const auto before = m->all(m->params);
    std::vector<float> g = random_values(static_cast<size_t>(m->numel));
    double n2 = 0;
    for (const auto& [key, shape] : fixture_shapes())
      for (int64_t i = 0; i < shape.numel(); ++i) {
        float& v = g[static_cast<size_t>(m->offset(key) + i)];
        if (key.starts_with("model.0.") || key.starts_with("model.1.")) v = 1e3f;  // would dominate the norm
        else n2 += static_cast<double>(v) * v;
      }
    m->set_all(m->grads, g);
    const train::StepResult r = opt->step();
    EXPECT_NEAR(r.grad_norm, std::sqrt(n2), 1e-5 * std::sqrt(n2)) << kind;
    for (const auto& [key, shape] : fixture_shapes()) {
      const bool frozen = key.starts_with("model.0.") || key.starts_with("model.1.");
      const auto now = m->get(m->params, key);
      const std::vector<float> old(before.begin() + m->offset(key), before.begin() + m->offset(key) + shape.numel());
      if (frozen) EXPECT_EQ(now, old) << kind << " " << key;
      else EXPECT_NE(now, old) << kind << " " << key;
      const auto names = opt->state_names();
      EXPECT_EQ(std::find(names.begin(), names.end(), "optimizer." + key + ".momentum_buffer") != names.end(),
                !frozen && kind != "adamw")
          << key;
    }
  }
}

// The state as named tensors: an optimizer restored from another's state_dict continues bit for bit; a state that
// does not fit is refused with the tensor named.
TEST(Optimizer, StateDictRoundTripContinuesExactly) {
  for (std::string kind : {"sgd", "adamw", "musgd"}) {
    auto a = fixture_model(graph::cpu_backend());
    auto oa = a->optimizer(fixture_options(kind));
    for (int s = 0; s < 2; ++s) {
      set_fixture_hyper(*oa, kind, s);
      set_fixture_grads(*a, s);
      oa->step();
    }
    const auto state = oa->state_dict();
    EXPECT_EQ(state.size(), oa->state_names().size());
    EXPECT_EQ(state[0].first, "optimizer.step");
    EXPECT_EQ(*state[0].second.data<int64_t>(), 2);
    auto b = fixture_model(graph::cpu_backend());
    b->set_all(b->params, a->all(a->params));
    auto ob = b->optimizer(fixture_options(kind));
    ob->load_state_dict(state);
    EXPECT_EQ(ob->steps(), 2);
    for (int s = 2; s < 4; ++s) {
      for (auto* o : {oa.get(), ob.get()}) set_fixture_hyper(*o, kind, s);
      set_fixture_grads(*a, s);
      set_fixture_grads(*b, s);
      oa->step();
      ob->step();
    }
    EXPECT_EQ(a->all(a->params), b->all(b->params)) << kind;

    auto missing = state;
    missing.erase(missing.begin() + 1);
    const std::string msg = error_of([&] { ob->load_state_dict(missing); });
    EXPECT_NE(msg.find(state[1].first), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
    auto wrong = state;
    wrong[1].second = Tensor::zeros(Shape{3});
    EXPECT_NE(error_of([&] { ob->load_state_dict(wrong); }).find(state[1].first), std::string::npos);
    auto extra = state;
    extra.emplace_back("optimizer.model.9.weight.exp_avg", Tensor::zeros(Shape{1}));
    extra.emplace_back("model.0.conv.weight", Tensor::zeros(Shape{1}));  // not optimizer state: ignored
    EXPECT_NE(error_of([&] { ob->load_state_dict(extra); }).find("optimizer.model.9.weight.exp_avg (unknown)"),
              std::string::npos);
  }
}

// Names of the state per optimizer (what a checkpoint holds).
TEST(Optimizer, StateNamesPerOptimizer) {
  auto m = fixture_model(graph::cpu_backend());
  const auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  const auto sgd = m->optimizer(fixture_options("sgd"))->state_names();
  EXPECT_EQ(sgd.size(), 1 + fixture_shapes().size());
  EXPECT_TRUE(has(sgd, "optimizer.model.0.bn.bias.momentum_buffer"));
  const auto adamw = m->optimizer(fixture_options("adamw"))->state_names();
  EXPECT_EQ(adamw.size(), 1 + 2 * fixture_shapes().size());
  EXPECT_TRUE(has(adamw, "optimizer.model.2.fc.weight.exp_avg_sq"));
  const auto musgd = m->optimizer(fixture_options("musgd"))->state_names();
  EXPECT_EQ(musgd.size(), 1 + fixture_shapes().size() + 7);  // 7 Muon tensors
  EXPECT_TRUE(has(musgd, "optimizer.model.1.conv.weight.muon_momentum_buffer"));
  EXPECT_FALSE(has(musgd, "optimizer.model.1.bn.weight.muon_momentum_buffer"));
  EXPECT_EQ(m->optimizer(fixture_options("sgd"))->state_tensor("optimizer.model.1.conv.weight.momentum_buffer").shape(),
            Shape({20, 4, 1, 1}));
}

TEST(Optimizer, AutoChoiceFollowsTheIterationCount) {
  // COCO (118,287 images), batch 16, nbs 64, 100 epochs: ceil(118287/64)·100 = 184,900 iterations → MuSGD.
  auto c = train::choose_auto_optimizer(118287, 16, 64, 100, 80);
  EXPECT_EQ(c.kind, OptimizerKind::musgd);
  EXPECT_EQ(c.iterations, 184900);
  EXPECT_DOUBLE_EQ(c.lr, 0.01);
  EXPECT_DOUBLE_EQ(c.momentum, 0.9);
  EXPECT_DOUBLE_EQ(c.warmup_bias_lr, 0.0);
  // 10,000 iterations exactly is not above 10,000: AdamW, lr = round(0.002·5/84, 6) = 0.000119.
  c = train::choose_auto_optimizer(6400, 16, 64, 100, 80);
  EXPECT_EQ(c.iterations, 10000);
  EXPECT_EQ(c.kind, OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(c.lr, 0.000119);
  EXPECT_DOUBLE_EQ(c.momentum, 0.9);
  EXPECT_DOUBLE_EQ(c.warmup_bias_lr, 0.0);
  c = train::choose_auto_optimizer(6401, 16, 64, 100, 80);
  EXPECT_EQ(c.iterations, 10100);
  EXPECT_EQ(c.kind, OptimizerKind::musgd);
  // A batch above nbs divides by the batch: ceil(1000/128)·10 = 80; nc 1: 0.002·5/5 = 0.002.
  c = train::choose_auto_optimizer(1000, 128, 64, 10, 1);
  EXPECT_EQ(c.iterations, 80);
  EXPECT_DOUBLE_EQ(c.lr, 0.002);
  EXPECT_DOUBLE_EQ(train::choose_auto_optimizer(10, 16, 64, 1, 20).lr, 0.000417);  // 0.01/24 = 0.00041666…
  EXPECT_EQ(train::parse_optimizer("musgd"), OptimizerKind::musgd);
  EXPECT_EQ(train::parse_optimizer("AdamW"), OptimizerKind::adamw);
  EXPECT_NE(error_of([] { train::parse_optimizer("Adam"); }).find("SGD, AdamW, MuSGD"), std::string::npos);
}
