// Helpers for the PSA data-movement tests: running a (multi-output) op's RuntimeOp on a backend with poisoned outputs
// and gradients, and the float64 index references of pack, extract and merge written from the layout definitions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/kernels/attention/psa.h"

namespace vision::test::psa {

using core::Shape;
using core::Tensor;
using models::yolo::kernels::attention::PsaConfig;
using models::yolo::kernels::attention::PsaForm;

using test::rounded_to;
using test::to_f32_nchw;
using test::to_format;

// A tensor of the backend filled with NaN, in format f.
inline Tensor poisoned(graph::BackendContext& b, const Shape& shape, const graph::Format& f = {}) {
  Tensor host = Tensor::zeros(shape);
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  return b.upload(to_format(host, f));
}

// Runs op forward (and backward for grad_outputs, when given) on backend b in format f into poisoned tensors; inputs
// and gradients are given, and outputs and input gradients returned, as f32 NCHW host tensors.
struct OpRun {
  std::vector<Tensor> outputs, grad_inputs;
};
inline OpRun run_op(const graph::Op& op, const std::vector<Tensor>& inputs, graph::BackendContext& b,
                    const std::vector<Tensor>& grad_outputs = {}, const graph::Format& format = {}) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const std::vector<Shape> out_shapes = op.infer_output_shapes(shapes);
  auto rt = op.lower(b.backend(), grad_outputs.empty() ? graph::Mode::inference : graph::Mode::train);
  if (!rt->supports(format)) throw Error(std::string(op.name()) + " does not run in " + graph::format_name(format));
  rt->set_format(format);
  graph::ForwardCtx f;
  f.backend = &b;
  for (const Tensor& t : inputs) f.inputs.push_back(b.upload(to_format(t, format)));
  for (const Shape& s : out_shapes) f.outputs.push_back(poisoned(b, s, format));
  f.output = f.outputs.at(0);
  rt->forward(f);
  OpRun r;
  for (const Tensor& t : f.outputs) r.outputs.push_back(to_f32_nchw(b.download(t)));
  if (grad_outputs.empty()) return r;
  graph::BackwardCtx g;
  g.backend = &b;
  g.inputs = f.inputs;
  g.outputs = f.outputs;
  g.output = f.output;
  for (const Tensor& t : grad_outputs) g.grad_outputs.push_back(b.upload(to_format(t, format)));
  g.grad_output = g.grad_outputs.at(0);
  for (const Tensor& t : inputs) g.grad_inputs.push_back(poisoned(b, t.shape(), format));
  rt->backward(g);
  for (const Tensor& t : g.grad_inputs) r.grad_inputs.push_back(to_f32_nchw(b.download(t)));
  return r;
}

// float64 references from the layout definitions (YOLO26.md): qkv [B, 4·kd·heads, N] per head [Q | K | V].
// Pack: the outputs Q, K, V_lo, V_hi (two_pass) or Q, K, V (one_pass) as [B·heads, N, w] vectors.
inline std::vector<std::vector<double>> pack_reference(const std::vector<double>& qkv, const PsaConfig& c, int64_t batch,
                                                       int64_t n) {
  const int64_t kd = c.key_dim, h4 = 4 * kd, ch = h4 * c.heads;
  // (first channel in the head, width) of each output
  std::vector<std::pair<int64_t, int64_t>> parts{{0, kd}, {kd, kd}};
  if (c.form == PsaForm::two_pass) parts.insert(parts.end(), {{2 * kd, kd}, {3 * kd, kd}});
  else parts.push_back({2 * kd, 2 * kd});
  std::vector<std::vector<double>> out;
  for (auto [first, w] : parts) {
    std::vector<double> o(static_cast<size_t>(batch * c.heads * n * w));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t p = 0; p < n; ++p)
          for (int64_t d = 0; d < w; ++d)
            o[static_cast<size_t>(((b * c.heads + h) * n + p) * w + d)] =
                qkv[static_cast<size_t>((b * ch + h * h4 + first + d) * n + p)];
    out.push_back(std::move(o));
  }
  return out;
}
// Extract: [B, 2·kd·heads, N], channel h·2·kd + d = qkv channel h·4·kd + 2·kd + d.
inline std::vector<double> extract_reference(const std::vector<double>& qkv, const PsaConfig& c, int64_t batch,
                                             int64_t n) {
  const int64_t kd = c.key_dim;
  std::vector<double> o(static_cast<size_t>(batch * 2 * kd * c.heads * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t d = 0; d < 2 * kd; ++d)
        for (int64_t p = 0; p < n; ++p)
          o[static_cast<size_t>((b * 2 * kd * c.heads + h * 2 * kd + d) * n + p)] =
              qkv[static_cast<size_t>((b * 4 * kd * c.heads + h * 4 * kd + 2 * kd + d) * n + p)];
  return o;
}
// Merge: image channel h·2·kd + d from part d / w, row element (b·heads + h, p, d % w).
inline std::vector<double> merge_reference(const std::vector<std::vector<double>>& parts, const PsaConfig& c,
                                           int64_t batch, int64_t n) {
  const int64_t kd = c.key_dim, w = c.form == PsaForm::two_pass ? kd : 2 * kd;
  std::vector<double> o(static_cast<size_t>(batch * 2 * kd * c.heads * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t d = 0; d < 2 * kd; ++d)
        for (int64_t p = 0; p < n; ++p)
          o[static_cast<size_t>((b * 2 * kd * c.heads + h * 2 * kd + d) * n + p)] =
              parts[static_cast<size_t>(d / w)][static_cast<size_t>(((b * c.heads + h) * n + p) * w + d % w)];
  return o;
}

// max |a − b| (NaN counts as infinite).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
  }
  return m;
}

}  // namespace vision::test::psa
