// The YOLO26n gradient fixture of tools/reference/make_yolo26_grad_fixture.py (yolo26n_grads.safetensors: one
// training step of the independent PyTorch reference on 4 images of 160×160 with 0–20 boxes each) and the comparison
// of our training graph — record_yolo26_training + e2e_loss — against it: the loss and its terms, every parameter's
// gradient and every BatchNorm running statistic after the step, each within 2× the reference's own float32 error
// (plus the f32 rounding of the stored float64 result), gradients never worse than 1e-3 relative.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/yolo/yolo26_fixture.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/loss.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"

namespace vision::test::yolo26_grads {

namespace yolo = models::yolo;
using yolo26_fixture::kSpec;

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(yolo26_fixture::fixture_path("yolo26n_grads.safetensors"));
  return f;
}
inline std::vector<float> values(const std::string& name) { return fixture().at(name).to_vector(); }

// The logged outputs after total and components: each head's ungained terms.
inline const std::vector<std::string> kLossOutputs = {"loss.total",    "loss.components", "loss.o2m.box",
                                                      "loss.o2m.cls",  "loss.o2m.l1",     "loss.o2o.box",
                                                      "loss.o2o.cls",  "loss.o2o.l1"};

// The training graph: inputs images [?, 3, ?, ?], targets [?, M, 5], count [?] i32, weights [2]; outputs the total
// loss (seeded), the one-to-one components and each head's box, cls, l1 terms (kLossOutputs' order).
inline std::shared_ptr<graph::Graph> training_loss_graph(int64_t rows) {
  auto g = std::make_shared<graph::Graph>();
  constexpr int64_t any = core::Shape::kAny;
  const yolo::Yolo26Outputs out = yolo::record_yolo26_training(g->input("images", core::Shape{any, 3, any, any}), kSpec);
  yolo::LossTargets t;
  t.targets = g->input("targets", core::Shape{any, rows, 5});
  t.count = g->input("count", core::Shape{any}, core::DType::i32);
  t.levels = out.features;
  const yolo::E2ELossTensors loss = yolo::e2e_loss(*out.one2many, *out.one2one, t, g->input("weights", core::Shape{2}));
  for (const yolo::Yolo26LossTensors* head : {&loss.one_to_many, &loss.one_to_one})
    for (const graph::SymTensor& term : {head->box, head->cls, head->l1}) g->mark_output(term, graph::kTrainingLogged);
  return g;
}

// The fixture's inputs: images (u8 / 255 in f32), targets, count, weights.
inline std::vector<core::Tensor> fixture_inputs() {
  const core::Tensor& u8 = fixture().at("images");
  std::vector<float> v(static_cast<size_t>(u8.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(u8.data<uint8_t>()[i]) / 255.0f;
  return {core::Tensor::from_vector(u8.shape(), v), fixture().at("targets"), fixture().at("count"),
          fixture().at("weights")};
}

// What one step of ours gave, on the host.
struct StepResult {
  std::map<std::string, std::vector<float>> outputs;  // kLossOutputs
  std::map<std::string, std::vector<float>> grads;    // by parameter key
  std::map<std::string, std::vector<float>> buffers;  // BatchNorm running_mean / running_var by key
  size_t parameters = 0;                              // trainable tensors in the state
  double seconds = 0;                                 // the fixture step's forward_train + backward (and
                                                      // the loss outputs' download)
};

// One training step on the fixture batch with the fixture's weights loaded in Mode::train. Before it, a step on random
// images of the same shape leaves non-zero garbage in the gradients and the running statistics (the weights are then
// loaded again) and the flat gradient buffer is poisoned with NaN: backward (accumulate = false) must overwrite every
// gradient.
inline StepResult run_step(graph::Executor& ex) {
  std::vector<core::Tensor> in = fixture_inputs();
  std::vector<core::Shape> shapes;
  for (const auto& t : in) shapes.push_back(t.shape());
  graph::StateStore& state = ex.state(graph::Mode::train, shapes);
  std::vector<core::Tensor> garbage = in;
  garbage[0] = random_tensor(in[0].shape(), 0.0f, 1.0f);
  ex.forward_train(garbage);
  ex.backward();
  yolo::load_weights(state, kSpec, yolo26_fixture::weights());
  const core::Tensor flat = state.flat_grads();
  const std::vector<float> nan(static_cast<size_t>(flat.numel()), kPoison);
  ex.backend().copy_to_device(flat.raw(), nan.data(), flat.nbytes());

  StepResult r;
  ex.backend().synchronize();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<core::Tensor> out = ex.forward_train(in);
  EXPECT_EQ(out.size(), kLossOutputs.size());
  for (size_t i = 0; i < out.size() && i < kLossOutputs.size(); ++i)  // before backward reuses the arena
    r.outputs[kLossOutputs[i]] = ex.backend().download(out[i]).to_vector();
  ex.backward();
  ex.backend().synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const graph::StateEntry& e : state.entries()) {
    if (e.kind == graph::StateKind::parameter) {
      ++r.parameters;
      r.grads[e.key] = ex.backend().download(state.grad(e.key)).to_vector();
    } else if (e.key.ends_with("running_mean") || e.key.ends_with("running_var")) {
      r.buffers[e.key] = ex.backend().download(state.tensor(e.key)).to_vector();
    }
  }
  return r;
}

// Which float32 run of the reference bounds ours: its NCHW run, or the larger error of its NCHW and channels_last runs
// (both tests: the fixture cannot run PyTorch on CUDA, the GPU's natural peer, and the CPU engine's oneDNN kernels
// differ from machine to machine; the reference's two CPU runs bracket what another f32 implementation gets, and
// channels_last's gradient errors are ~3.5× NCHW's).
enum class Peer { nchw, larger_of_two };

// The reference's own f32 error of a fixture tensor: relative norm and max |·| (and the same for a BatchNorm
// statistic's change in the step).
struct PeerError {
  double rel, max_abs, delta_rel, delta_max_abs;
};
inline PeerError peer_error(const std::string& name, Peer peer) {
  const std::vector<float> e = values("err." + name);
  const PeerError nchw{e[0], e[1], e[2], e[3]};
  if (peer == Peer::nchw) return nchw;
  return {std::max(nchw.rel, double(e[4])), std::max(nchw.max_abs, double(e[5])),
          std::max(nchw.delta_rel, double(e[6])), std::max(nchw.delta_max_abs, double(e[7]))};
}

constexpr double kRounding = 0x1p-24;  // the f32 rounding of the stored float64 results, relative
constexpr double kGradCap = 1e-3;      // no gradient worse than this, relative
// The f32 rounding floor of a value that is one long reduction over the batch (the loss terms, the last layers' biases:
// sums of 1,600–170,000 terms): 4e-6 relative, about 64 f32 ulps. The reference's own error on such a value is a
// single draw that its summation order (pairwise) can make as small as 1e-8; ours (blocked, then sequential) lands at
// 2e-7–3e-6 there, while on the gradients as a whole it is as accurate as the reference (median 2e-5 against 2.5e-5).
constexpr double kReductionFloor = 4e-6;

// Per category: the compared tensors and the worst one, by error / bound.
struct Summary {
  explicit Summary(std::string name) : category(std::move(name)) {}
  std::string category;
  int compared = 0;
  double worst_ratio = -1, worst_rel = 0, worst_bound = 0;
  std::string worst;
  void add(const std::string& name, double rel, double bound) {
    ++compared;
    const double ratio = bound > 0 ? rel / bound : INFINITY;
    if (ratio > worst_ratio) worst_ratio = ratio, worst_rel = rel, worst_bound = bound, worst = name;
  }
  void print() const {
    std::printf("  %-28s %3d tensors; worst %s: %.3g (bound %.3g, %.0f%% of it)\n", category.c_str(), compared,
                worst.c_str(), worst_rel, worst_bound, 100 * worst_ratio);
  }
};

// Ours against the fixture tensor `name` within 2× the reference's own f32 error plus the rounding, in relative norm
// and max |·|; `cap` an absolute ceiling on the relative error. Returns the relative error.
// floor: the least relative bound (kReductionFloor for the loss and the gradients). The max |·| bound is 2× the
// reference's own max error plus the relative bound times max |ref| (an element's error on the tensor's scale: the
// reference's max error over a few elements is a noisy draw): one wrong element cannot hide in the norm unless it is
// below that.
inline double expect_close(const std::vector<float>& ours, const std::string& name, Peer which, Summary& s,
                           double floor = 0, double cap = INFINITY) {
  const std::vector<float> ref = values(name);
  const PeerError peer = peer_error(name, which);
  const double rel = rel_error(ours, to_double(ref)), max_err = max_abs_error(ours, to_double(ref));
  const double rel_bound = std::min(std::max(2 * peer.rel, floor) + kRounding, cap);
  const double max_bound = 2 * peer.max_abs + (rel_bound + kRounding) * max_abs(ref);
  EXPECT_LE(rel, rel_bound) << name << ": the reference's own f32 error is " << peer.rel;
  EXPECT_LE(max_err, max_bound) << name << ": the reference's own f32 max error is " << peer.max_abs;
  s.add(name, rel, rel_bound);
  if (std::getenv("VISION_GRADS_VERBOSE"))
    std::printf("  %-52s n %8zu rel %.3g (peer %.3g) max %.3g (peer %.3g, |ref| %.3g)\n", name.c_str(), ref.size(), rel,
                peer.rel, max_err, peer.max_abs, max_abs(ref));
  return rel;
}

// Everything of a step against the fixture; prints a summary per category.
inline void expect_matches_fixture(const StepResult& r, Peer which = Peer::nchw) {
  Summary losses{"loss and terms"}, grads{"gradients"}, noise{"gradients zero in exact math"},
      stats{"BatchNorm running stats"}, deltas{"BatchNorm stat changes"};
  for (const std::string& name : kLossOutputs) {
    ASSERT_TRUE(r.outputs.count(name)) << name;
    expect_close(r.outputs.at(name), name, which, losses, kReductionFloor);
  }
  // Every parameter has a reference gradient, and the references are far from trivial.
  int nontrivial = 0, fixture_grads = 0;
  for (const auto& [name, t] : fixture().tensors) fixture_grads += name.starts_with("grad.");
  EXPECT_EQ(static_cast<size_t>(fixture_grads), r.parameters) << "the fixture and the state hold other parameters";
  EXPECT_EQ(r.parameters, 366u);
  for (const auto& [key, ours] : r.grads) {
    const std::string name = "grad." + key;
    if (!fixture().find(name)) {
      ADD_FAILURE() << name << " is missing from the fixture";
      continue;
    }
    const PeerError peer = peer_error(name, which);
    if (peer.rel > 1) {
      // Zero in exact arithmetic (a BatchNorm bias whose output reaches the loss only through 1×1 convolutions and
      // max-pools into a training-mode BatchNorm, which removes any per-channel shift): the reference holds rounding
      // noise. Ours must be noise of the same size: max |·| within 2× the reference's own.
      const double m = max_abs(ours);
      EXPECT_LE(m, 2 * peer.max_abs) << name << " (zero in exact arithmetic)";
      noise.add(name, m, 2 * peer.max_abs);
      continue;
    }
    const std::vector<float> ref = values(name);
    nontrivial += max_abs(ref) > 0 && peer.rel < 1e-3;
    expect_close(ours, name, which, grads, kReductionFloor, kGradCap);
  }
  EXPECT_GE(nontrivial, 350) << "most reference gradients must be non-zero and well conditioned";
  // BatchNorm: the running statistics after the step and their change in it (new − old, which the old part's size
  // would hide), old being the weights file's value.
  int buffers = 0;
  for (const auto& [key, ours] : r.buffers) {
    const std::string name = "bn." + key;
    ++buffers;
    expect_close(ours, name, which, stats);
    const std::vector<float> ref = values(name), old = yolo26_fixture::weights().at(key).to_vector();
    std::vector<double> ref_delta(ref.size()), our_delta(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ref_delta[i] = static_cast<double>(ref[i]) - old[i];
      our_delta[i] = static_cast<double>(ours[i]) - old[i];
    }
    const PeerError peer = peer_error(name, which);
    double ref_norm = 0, delta_norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) ref_norm += double(ref[i]) * ref[i], delta_norm += ref_delta[i] * ref_delta[i];
    const double rounding = kRounding * std::sqrt(ref_norm / delta_norm);  // the stored value's rounding, in Δ
    const double rel = rel_error(our_delta, ref_delta), bound = 2 * peer.delta_rel + rounding;
    EXPECT_LE(rel, bound) << name << " change in the step: the reference's own f32 error is " << peer.delta_rel;
    EXPECT_GT(delta_norm, 0) << name;
    deltas.add(name, rel, bound);
  }
  int fixture_buffers = 0;
  for (const auto& [name, t] : fixture().tensors) fixture_buffers += name.starts_with("bn.");
  EXPECT_EQ(buffers, fixture_buffers);
  EXPECT_GT(buffers, 0);
  std::printf("YOLO26n training step (160×160, batch 4) against the float64 reference (bounds from its %s f32 "
              "error):\n", which == Peer::nchw ? "NCHW" : "NCHW or channels_last, the larger");
  for (const Summary* s : {&losses, &grads, &noise, &stats, &deltas}) s->print();
  std::printf("  forward_train + backward: %.2f s\n", r.seconds);
}

}  // namespace vision::test::yolo26_grads
