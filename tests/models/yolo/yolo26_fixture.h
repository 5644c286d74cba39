// The YOLO26n fixtures of tools/reference/make_yolo26_fixture.py: random weights (a full checkpoint) and the
// independent PyTorch reference's outputs for u8 images (320×320 and 192×320 in yolo26n_outputs.safetensors;
// 640×640 in yolo26n_outputs_640.safetensors: image_640, eval640.*, e2e640.*, nms640.*); graphs of the model that
// output the heads' raw values; the comparisons (raw outputs within 2× the reference's own error, detections as sets
// with near-ties allowed).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"

namespace vision::test::yolo26_fixture {

namespace yolo = models::yolo;

inline std::string fixture_path(const std::string& name) { return std::string(VISION_FIXTURE_DIR) + "/" + name; }

inline const core::SafetensorsFile& weights() {
  static const core::SafetensorsFile f = core::read_safetensors(fixture_path("yolo26n_random.safetensors"));
  return f;
}
inline const core::SafetensorsFile& outputs() {
  static const core::SafetensorsFile f = core::read_safetensors(fixture_path("yolo26n_outputs.safetensors"));
  return f;
}
inline const core::SafetensorsFile& outputs_640() {
  static const core::SafetensorsFile f = core::read_safetensors(fixture_path("yolo26n_outputs_640.safetensors"));
  return f;
}
// Tensor `name` of the outputs files: the 320×320 one's, else the 640×640 one's (read on first use).
inline const core::Tensor& output(const std::string& name) {
  if (const core::Tensor* t = outputs().find(name)) return *t;
  return outputs_640().at(name);
}
inline float metadata_float(const std::string& key) { return std::stof(outputs().metadata.at(key)); }

// A u8 image [1, 3, H, W] of the fixture as the model's input: f32 in [0, 1], `copies` times along the batch.
inline core::Tensor image(const std::string& name, int64_t copies = 1) {
  const core::Tensor& u8 = output(name);
  const auto* p = u8.data<uint8_t>();
  std::vector<float> v;
  for (int64_t c = 0; c < copies; ++c)
    for (int64_t i = 0; i < u8.numel(); ++i) v.push_back(static_cast<float>(p[i]) / 255.0f);
  return core::Tensor::from_vector(core::Shape{copies, 3, u8.dim(2), u8.dim(3)}, v);
}

inline const yolo::Yolo26Spec kSpec{.scale = yolo::Scale::n, .nc = 80};

// The inference graph with both heads and the raw outputs: detections, count, one2one ltrb/logits, one2many
// ltrb/logits.
inline std::shared_ptr<graph::Graph> inference_graph(yolo::Yolo26Spec spec = kSpec, bool nms = false,
                                                     float conf = 0.0f) {
  yolo::InferenceOptions o;
  o.nms = nms;
  o.postprocess.conf = conf;
  o.raw_outputs = true;
  o.both_heads = spec.norm == yolo::ConvNorm::batchnorm;
  return yolo::yolo26_inference_graph(spec, o);
}

// The training forward with its raw outputs as (logged) training outputs: one2one ltrb/logits, one2many ltrb/logits.
inline std::shared_ptr<graph::Graph> training_graph(yolo::Yolo26Spec spec = kSpec) {
  auto g = std::make_shared<graph::Graph>();
  constexpr int64_t any = core::Shape::kAny;
  const yolo::Yolo26Outputs out = yolo::record_yolo26_training(g->input("images", core::Shape{any, 3, any, any}), spec);
  for (const auto& h : {out.one2one, out.one2many}) {
    g->mark_output(h->ltrb, graph::kTrainingLogged);
    g->mark_output(h->logits, graph::kTrainingLogged);
  }
  return g;
}

// Creates the executor's state and loads a weights file into it.
inline void load(graph::Executor& ex, const core::SafetensorsFile& file = weights(), yolo::Yolo26Spec spec = kSpec,
                 graph::Mode mode = graph::Mode::inference) {
  yolo::load_weights(ex.state(mode, {core::Shape{1, 3, 32, 32}}), spec, file);
}

// The reference's own error for one output: ‖f32 − f64‖ / ‖f64‖ and max |f32 − f64| (f32 = false: of its emulated f16
// inference instead).
struct PeerError {
  double rel = 0, max_abs = 0;
};
inline PeerError peer_error(const std::string& name, bool f32 = true) {
  const std::vector<float> e = output("err." + name).to_vector();
  return f32 ? PeerError{e[0], e[1]} : PeerError{e[2], e[3]};
}

// Our values of output `name` (image `image` of a batch) within 2× the reference's own error, in relative norm and in
// max |·|. The fixture holds the float64 result rounded to f32: its rounding (≤ 2⁻²⁴ relative per element) is added.
// Prints the measured errors and their bounds.
inline void expect_matches_reference(const std::vector<float>& ours, const std::string& name, bool f32 = true,
                                     int64_t image = 0) {
  const std::vector<float> ref = output(name).to_vector();
  ASSERT_GE(ours.size(), ref.size() * static_cast<size_t>(image + 1)) << name;
  const std::vector<float> mine(ours.begin() + static_cast<std::ptrdiff_t>(ref.size() * image),
                                ours.begin() + static_cast<std::ptrdiff_t>(ref.size() * (image + 1)));
  const PeerError peer = peer_error(name, f32);
  const double rounding = std::ldexp(1.0, -24);
  const double rel = rel_error(mine, to_double(ref)), max_err = max_abs_error(mine, to_double(ref));
  const double rel_bound = 2 * peer.rel + rounding, max_bound = 2 * peer.max_abs + rounding * max_abs(ref);
  std::printf("  %-24s %s image %lld: rel %.3g (bound %.3g), max %.3g (bound %.3g)\n", name.c_str(),
              f32 ? "f32" : "f16", static_cast<long long>(image), rel, rel_bound, max_err, max_bound);
  EXPECT_LE(rel, rel_bound) << name << " image " << image << ": the reference's own error is " << peer.rel;
  EXPECT_LE(max_err, max_bound) << name << " image " << image << ": the reference's own max error is " << peer.max_abs;
  // The comparison can fail: the outputs are far from zero and from each other.
  EXPECT_GT(max_abs(ref), 1.0) << name;
}

// The detections' tolerances from the reference's own f32 errors for the eval outputs of `eval` ("eval": 320×320,
// "eval640": 640×640): a score moves by at most a quarter of its logit's error (taken whole here), a box side by its
// LTRB error times the stride (32 at most).
inline double score_tolerance(const std::string& eval = "eval") {
  return 2 * peer_error(eval + ".one2one.logits").max_abs;
}
inline double box_tolerance(const std::string& eval = "eval") {
  return 2 * 32 * peer_error(eval + ".one2one.ltrb").max_abs;
}

// Detections [B, max_det, 6] and counts [B] (host tensors), image b of ours against image ref_b of the reference's, as
// sets with near-ties allowed: the same count; each reference row matched by a distinct row of ours of the same class,
// score within score_tol and box within box_tol; rows left unmatched on either side only at the selection's edge (a
// score within score_tol of the lowest kept reference score) and as many on both sides.
struct Detections {
  const core::Tensor& dets;
  const core::Tensor& count;
  int64_t image = 0;
};
inline void expect_same_detections(const Detections& ours, const Detections& ref, double score_tol, double box_tol,
                                   const std::string& what) {
  const int64_t b = ours.image, ref_b = ref.image;
  const int64_t n = ours.count.data<int32_t>()[b], ref_n = ref.count.data<int32_t>()[ref_b];
  ASSERT_EQ(n, ref_n) << what;
  ASSERT_GT(ref_n, 0) << what << ": the fixture has no detections to compare";
  const int64_t rows = ours.dets.dim(1), ref_rows = ref.dets.dim(1);
  const std::vector<float> d = ours.dets.to_vector(), r = ref.dets.to_vector();
  auto row = [](const std::vector<float>& v, int64_t stride, int64_t image, int64_t i) {
    return &v[static_cast<size_t>((image * stride + i) * 6)];
  };
  double lowest = INFINITY;
  for (int64_t i = 0; i < ref_n; ++i) lowest = std::min(lowest, static_cast<double>(row(r, ref_rows, ref_b, i)[4]));
  std::vector<bool> used(static_cast<size_t>(n), false);
  int64_t ref_unmatched = 0;
  for (int64_t i = 0; i < ref_n; ++i) {
    const float* want = row(r, ref_rows, ref_b, i);
    bool found = false;
    for (int64_t j = 0; j < n && !found; ++j) {
      const float* got = row(d, rows, b, j);
      if (used[static_cast<size_t>(j)] || got[5] != want[5] || std::abs(got[4] - want[4]) > score_tol) continue;
      bool same_box = true;
      for (int k = 0; k < 4; ++k) same_box = same_box && std::abs(got[k] - want[k]) <= box_tol;
      if (same_box) used[static_cast<size_t>(j)] = found = true;
    }
    if (!found) {
      ++ref_unmatched;
      EXPECT_LE(want[4], lowest + score_tol) << what << ": reference row " << i << " (score " << want[4] << ", class "
                                             << want[5] << ") has no match and is not at the selection's edge";
    }
  }
  int64_t unmatched = 0;
  for (int64_t j = 0; j < n; ++j)
    if (!used[static_cast<size_t>(j)]) {
      ++unmatched;
      EXPECT_LE(row(d, rows, b, j)[4], lowest + score_tol) << what << ": our row " << j << " matches no reference row";
    }
  EXPECT_EQ(unmatched, ref_unmatched) << what;
  EXPECT_LE(unmatched, n / 20) << what << ": too many near-ties";
  std::printf("  %s: %lld detections, %lld near-ties at the edge (score tolerance %.3g, box %.3g)\n", what.c_str(),
              static_cast<long long>(n), static_cast<long long>(unmatched), score_tol, box_tol);
}

}  // namespace vision::test::yolo26_fixture
