#include "vision/models/yolo/int8.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "vision/core/error.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/model.h"
#include "vision/models/yolo/model_info.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/ops/conv2d.h"

namespace vision::models::yolo {

bool int8_keeps_float(const std::string& node) {
  for (blocks::DetectHead head : {blocks::DetectHead::one_to_one, blocks::DetectHead::one_to_many})
    if (blocks::is_detect_head_key(node + ".weight", head) &&
        node.find("." + blocks::detect_head_prefixes(head)[0]) != std::string::npos)
      return true;
  return false;
}

void apply_int8(graph::Graph& g, const std::map<std::string, float>& absmax) {
  std::set<std::string> found;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    const auto* conv = dynamic_cast<const ops::Conv2dOp*>(n.op.get());
    const auto it = absmax.find(n.name);
    if (conv == nullptr || it == absmax.end()) continue;
    VISION_CHECK(it->second > 0 && std::isfinite(it->second), "int8: convolution {} has the calibration {}", n.name,
                 it->second);
    ops::Conv2dAttrs a = conv->attrs();
    a.int8_absmax = it->second;
    g.replace_op(i, std::make_shared<ops::Conv2dOp>(a));
    found.insert(n.name);
  }
  for (const auto& [name, v] : absmax)
    VISION_CHECK(found.count(name), "int8: the calibration names {}, which is no convolution of the model", name);
}

std::map<std::string, float> calibrate_int8(const core::SafetensorsFile& weights,
                                            const std::vector<core::Tensor>& batches, double percentile) {
  VISION_CHECK(percentile > 0.5 && percentile <= 1.0, "int8 calibration: percentile {} is not in (0.5, 1]", percentile);
  const ModelInfo info = read_model_info(weights);
  VISION_CHECK(info.fused(), "int8 calibration takes an exported model (format \"fused\")");
  VISION_CHECK(!batches.empty(), "int8 calibration needs at least one batch of images");
  for (const auto& [name, t] : weights.tensors)
    VISION_CHECK(t.dtype() == core::DType::f32, "int8 calibration takes f32 weights; {} is {}", name,
                 core::dtype_name(t.dtype()));
  InferenceOptions options;
  options.input_format = {core::DType::f32, batches.front().layout()};
  auto g = yolo26_inference_graph(info.spec, options);
  const size_t first = g->outputs(graph::Mode::inference).size();
  const int images = g->inputs().front();
  // Each convolution's input: the images themselves (measured from the batches), or a value made an output.
  std::vector<std::string> names;
  std::vector<int> source;  // output index, or -1 for the images
  std::map<int, int> output_of;
  for (const graph::Node& n : g->nodes()) {
    if (dynamic_cast<const ops::Conv2dOp*>(n.op.get()) == nullptr || int8_keeps_float(n.name)) continue;
    const int v = n.inputs.at(0);
    names.push_back(n.name);
    if (v == images) {
      source.push_back(-1);
      continue;
    }
    if (!output_of.count(v)) {
      output_of[v] = static_cast<int>(first + output_of.size());
      g->mark_output(graph::SymTensor(g.get(), v), graph::kInferenceOutput);
    }
    source.push_back(output_of[v]);
  }
  graph::Executor ex(g, graph::cpu_backend(), default_plan_options(graph::Backend::cpu));
  load_weights(ex.state(graph::Mode::inference, {batches.front().shape()}), info.spec, weights);
  std::vector<float> absmax(names.size(), 0.0f);
  auto largest = [](const core::Tensor& t) {
    const float* p = t.data<float>();
    float m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(p[i]));
    return m;
  };
  auto input_of = [&](size_t k, const core::Tensor& batch, const std::vector<core::Tensor>& out) -> const core::Tensor& {
    return source[k] < 0 ? batch : out.at(static_cast<size_t>(source[k]));
  };
  for (const core::Tensor& batch : batches) {
    const std::vector<core::Tensor> out = ex.forward({batch});
    for (size_t k = 0; k < names.size(); ++k) absmax[k] = std::max(absmax[k], largest(input_of(k, batch, out)));
  }
  // Below 1: a second pass counts |x| in 4096 bins up to the largest, and the range ends where `percentile` of the
  // values lie below (the rarest outliers saturate instead of coarsening every other value's step).
  if (percentile < 1.0) {
    constexpr int kBins = 4096;
    std::vector<std::vector<int64_t>> hist(names.size(), std::vector<int64_t>(kBins, 0));
    for (const core::Tensor& batch : batches) {
      const std::vector<core::Tensor> out = ex.forward({batch});
      for (size_t k = 0; k < names.size(); ++k) {
        if (absmax[k] <= 0) continue;
        const core::Tensor& t = input_of(k, batch, out);
        const float* p = t.data<float>();
        const float to_bin = kBins / absmax[k];
        for (int64_t i = 0; i < t.numel(); ++i)
          ++hist[k][static_cast<size_t>(std::min(kBins - 1, static_cast<int>(std::abs(p[i]) * to_bin)))];
      }
    }
    for (size_t k = 0; k < names.size(); ++k) {
      int64_t total = 0, seen = 0;
      for (int64_t c : hist[k]) total += c;
      for (int b = 0; b < kBins && total > 0; ++b) {
        seen += hist[k][static_cast<size_t>(b)];
        if (static_cast<double>(seen) >= percentile * static_cast<double>(total)) {
          absmax[k] = absmax[k] * static_cast<float>(b + 1) / kBins;
          break;
        }
      }
    }
  }
  std::map<std::string, float> result;
  for (size_t k = 0; k < names.size(); ++k) result[names[k]] = absmax[k] > 0 ? absmax[k] : 1.0f;
  return result;
}

}  // namespace vision::models::yolo
