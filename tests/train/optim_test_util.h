// Helpers for the optimizer tests: the small model of tools/reference/make_optimizer_fixture.py (its parameter keys
// and shapes, BatchNorm layers declared by running_mean buffers) as flat parameter and gradient buffers on a backend,
// and the fixture file.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/graph/backend.h"
#include "vision/graph/state.h"
#include "vision/train/optimizer.h"

namespace vision::test::optim {

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(std::string(VISION_FIXTURE_DIR) + "/optimizers.safetensors");
  return f;
}
inline const core::Tensor& fx(const std::string& name) { return fixture().at(name); }
inline int fixture_steps() { return std::stoi(fixture().metadata.at("steps")); }

// The fixture model's parameters, in the order of make_optimizer_fixture.py's SHAPES.
inline const std::vector<std::pair<std::string, core::Shape>>& fixture_shapes() {
  static const std::vector<std::pair<std::string, core::Shape>> s = {
      {"model.0.conv.weight", {6, 3, 3, 3}},
      {"model.0.bn.weight", {6}},
      {"model.0.bn.bias", {6}},
      {"model.1.conv.weight", {20, 4, 1, 1}},
      {"model.1.bn.weight", {20}},
      {"model.1.bn.bias", {20}},
      {"model.2.fc.weight", {12, 3}},
      {"model.2.fc.bias", {12}},
      {"model.3.conv.weight", {6, 3, 3, 3}},
      {"model.4.conv.weight", {6, 4, 1, 1}},
      {"model.23.cv3.0.2.weight", {4, 6, 1, 1}},
      {"model.23.cv3.0.2.bias", {4}},
      {"model.23.one2one_cv3.0.2.weight", {4, 6, 1, 1}},
      {"model.23.one2one_cv3.0.2.bias", {4}},
  };
  return s;
}

// Flat parameter and gradient buffers of a list of parameters on a backend, with StateEntry records (byte offsets),
// plus BatchNorm buffer entries (running_mean) for the layers named in bn_layers (they mark the bn group).
class FlatModel {
 public:
  FlatModel(const std::vector<std::pair<std::string, core::Shape>>& shapes, std::shared_ptr<graph::BackendContext> b,
            const std::vector<std::string>& bn_layers = {"model.0.bn", "model.1.bn"})
      : backend(std::move(b)) {
    int64_t n = 0;
    for (const auto& [key, shape] : shapes) {
      entries.push_back({key, shape, core::DType::f32, graph::StateKind::parameter, static_cast<size_t>(n) * 4});
      index[key] = entries.size() - 1;
      n += shape.numel();
    }
    size_t buffer_offset = 0;
    for (const auto& layer : bn_layers) {
      entries.push_back({layer + ".running_mean", core::Shape{1}, core::DType::f32, graph::StateKind::buffer,
                         buffer_offset});
      buffer_offset += 64;
    }
    numel = n;
    param_mem = backend->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4);
    grad_mem = backend->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4);
    backend->fill_zero(param_mem.get(), static_cast<size_t>(n) * 4);
    backend->fill_zero(grad_mem.get(), static_cast<size_t>(n) * 4);
    params = core::Tensor::view(param_mem.get(), core::Shape{n}, core::DType::f32, backend->device());
    grads = core::Tensor::view(grad_mem.get(), core::Shape{n}, core::DType::f32, backend->device());
  }

  const graph::StateEntry& entry(const std::string& key) const { return entries.at(index.at(key)); }
  int64_t offset(const std::string& key) const { return static_cast<int64_t>(entry(key).offset / 4); }

  void set(const core::Tensor& flat, const std::string& key, const std::vector<float>& v) {
    ASSERT_EQ(static_cast<int64_t>(v.size()), entry(key).shape.numel()) << key;
    backend->copy_to_device(static_cast<float*>(flat.raw()) + offset(key), v.data(), v.size() * 4);
  }
  std::vector<float> get(const core::Tensor& flat, const std::string& key) const {
    std::vector<float> v(static_cast<size_t>(entry(key).shape.numel()));
    backend->copy_to_host(v.data(), static_cast<const float*>(flat.raw()) + offset(key), v.size() * 4);
    return v;
  }
  std::vector<float> all(const core::Tensor& flat) const {
    std::vector<float> v(static_cast<size_t>(numel));
    backend->copy_to_host(v.data(), flat.raw(), v.size() * 4);
    return v;
  }
  void set_all(const core::Tensor& flat, const std::vector<float>& v) {
    ASSERT_EQ(static_cast<int64_t>(v.size()), numel);
    backend->copy_to_device(flat.raw(), v.data(), v.size() * 4);
  }

  std::unique_ptr<train::Optimizer> optimizer(train::OptimizerOptions o) {
    return std::make_unique<train::Optimizer>(entries, params, grads, backend, std::move(o));
  }

  std::shared_ptr<graph::BackendContext> backend;
  std::vector<graph::StateEntry> entries;
  std::map<std::string, size_t> index;
  int64_t numel = 0;
  std::shared_ptr<void> param_mem, grad_mem;
  core::Tensor params, grads;
};

// The fixture model with its initial parameters.
inline std::unique_ptr<FlatModel> fixture_model(std::shared_ptr<graph::BackendContext> backend) {
  auto m = std::make_unique<FlatModel>(fixture_shapes(), std::move(backend));
  for (const auto& [key, shape] : fixture_shapes()) m->set(m->params, key, fx("init." + key).to_vector());
  return m;
}

// Options of the fixture's optimizer `kind` ("sgd", "adamw", "musgd"): no clipping (the references do not clip).
inline train::OptimizerOptions fixture_options(const std::string& kind) {
  train::OptimizerOptions o;
  o.kind = kind == "sgd" ? train::OptimizerKind::sgd
           : kind == "adamw" ? train::OptimizerKind::adamw
                             : train::OptimizerKind::musgd;
  o.max_grad_norm = 0;
  o.rules.boost_patterns = {"model.23.*cv3*"};
  return o;
}

// Sets the fixture's step-s hyperparameters on every group (lr, momentum per step; weight decay per group).
inline void set_fixture_hyper(train::Optimizer& opt, const std::string& kind, int s) {
  const auto lr = fx("hyper." + kind + ".lr").to_vector(), mom = fx("hyper." + kind + ".momentum").to_vector(),
             wd = fx("hyper." + kind + ".weight_decay").to_vector();
  const size_t g = opt.groups().size();
  ASSERT_EQ(wd.size(), g);
  for (size_t j = 0; j < g; ++j) {
    opt.set_group_lr(j, lr[static_cast<size_t>(s) * g + j]);
    opt.set_group_momentum(j, mom[static_cast<size_t>(s) * g + j]);
    opt.set_group_weight_decay(j, wd[j]);
  }
}

// Loads the fixture's step-s gradients into the model.
inline void set_fixture_grads(FlatModel& m, int s) {
  for (const auto& [key, shape] : fixture_shapes())
    m.set(m.grads, key, fx("grad." + std::to_string(s) + "." + key).to_vector());
}

}  // namespace vision::test::optim
