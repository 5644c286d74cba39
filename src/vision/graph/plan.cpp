#include "vision/graph/plan.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <fmt/format.h>

namespace vision::graph {

namespace {

double plan_ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t dot = s.find('.', start);
    if (dot == std::string::npos) {
      if (start < s.size()) parts.push_back(s.substr(start));
      break;
    }
    parts.push_back(s.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

std::string join_dots(const std::vector<std::string>& parts, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) {
    if (!s.empty()) s += '.';
    s += parts[i];
  }
  return s;
}

// Common dotted scope of two node names and the remainders ("conv.", "bn.") below it.
struct FusedNames {
  std::string scope, self_prefix, next_prefix;
};
FusedNames fused_names(const std::string& a, const std::string& b) {
  const auto pa = split_dots(a), pb = split_dots(b);
  size_t n = 0;
  while (n < pa.size() && n < pb.size() && pa[n] == pb[n]) ++n;
  auto rel = [&](const std::vector<std::string>& p) {
    const std::string r = join_dots(p, n, p.size());
    return r.empty() ? r : r + ".";
  };
  return {join_dots(pa, 0, n), rel(pa), rel(pb)};
}

std::string step_context(const PlanStep& s) { return fmt::format("step '{}' ({})", s.name, s.op->name()); }

}  // namespace


std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<int>& input_ids,
                               const std::vector<Shape>& input_shapes, std::vector<bool>* bound_out) {
  VISION_CHECK(input_shapes.size() == input_ids.size(), "the plan takes {} inputs, {} shapes were given",
               input_ids.size(), input_shapes.size());
  std::vector<Shape> shapes(graph.values().size());
  std::vector<bool> bound(graph.values().size(), false);
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    const Value& v = graph.value(input_ids[i]);
    VISION_CHECK(v.producer < 0, "value '{}' is not a graph input", v.name);
    VISION_CHECK(input_shapes[i].is_concrete(), "input '{}': shape {} is not concrete", v.name, input_shapes[i].str());
    VISION_CHECK(v.shape.compatible(input_shapes[i]), "input '{}' expects shape {}, got {}", v.name, v.shape.str(),
                 input_shapes[i].str());
    shapes[static_cast<size_t>(input_ids[i])] = input_shapes[i];
    bound[static_cast<size_t>(input_ids[i])] = true;
  }
  for (const Node& n : graph.nodes()) {
    std::vector<Shape> in;
    bool ready = true;
    for (int id : n.inputs) {
      ready = ready && bound[static_cast<size_t>(id)];
      in.push_back(shapes[static_cast<size_t>(id)]);
    }
    if (!ready) continue;  // depends on an input this plan does not take
    std::vector<Shape> out;
    try {
      out = n.op->infer_output_shapes(in);
    } catch (const Error& e) {
      fail("op '{}' ({}): {}", n.name, n.op->name(), e.what());
    }
    VISION_CHECK(out.size() == n.outputs.size(), "op '{}' ({}): {} output shapes for {} outputs", n.name,
                 n.op->name(), out.size(), n.outputs.size());
    for (size_t k = 0; k < out.size(); ++k) {
      const Value& v = graph.value(n.outputs[k]);
      VISION_CHECK(out[k].is_concrete() && v.shape.compatible(out[k]),
                   "op '{}' ({}): output {} has shape {}, which does not match the recorded {}", n.name, n.op->name(),
                   k, out[k].str(), v.shape.str());
      shapes[static_cast<size_t>(n.outputs[k])] = std::move(out[k]);
      bound[static_cast<size_t>(n.outputs[k])] = true;
    }
  }
  if (bound_out) *bound_out = std::move(bound);
  return shapes;
}

std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<Shape>& input_shapes) {
  std::vector<bool> bound;
  std::vector<Shape> shapes = bind_shapes(graph, graph.inputs(), input_shapes, &bound);
  for (size_t v = 0; v < bound.size(); ++v)
    VISION_CHECK(bound[v], "value '{}' has no shape", graph.values()[v].name);
  return shapes;
}

Plan::Plan(const Graph& graph, std::shared_ptr<BackendContext> backend, Mode mode,
           const std::vector<Shape>& input_shapes, StateStore& state, PlanOptions options)
    : backend_(std::move(backend)), state_(&state), mode_(mode), options_(options), input_shapes_(input_shapes) {
  const auto constructed = std::chrono::steady_clock::now();
  VISION_CHECK(core::is_floating(options_.compute_dtype), "a plan computes in f32, f16 or bf16, not {}",
               core::dtype_name(options_.compute_dtype));
  graph_inputs_ = graph.inputs(mode);
  graph_outputs_ = graph.outputs(mode);
  VISION_CHECK(!graph_outputs_.empty(), "the graph has no {} outputs: mark at least one with mark_output",
               mode == Mode::inference ? "inference" : "training");
  for (const auto& [id, use] : graph.marked_outputs())
    if (mode == Mode::inference ? use.inference : use.train) seeded_.push_back(mode == Mode::train && use.seed_gradient);
  for (const Value& v : graph.values()) {
    value_dtypes_.push_back(v.dtype);
    value_layouts_.push_back(v.producer < 0 && v.shape.rank() == 4 ? v.layout : core::Layout::nchw);
    differentiable_.push_back(v.differentiable);
    value_names_.push_back(v.name);
  }
  std::vector<bool> bound;
  shapes_ = bind_shapes(graph, graph_inputs_, input_shapes, &bound);
  build_steps(graph);
  assign_formats(graph);
  bind_state(state);
  mark_gradients(graph);
  place_views();
  layout_memory();
  build_times_.construct_ms = plan_ms_since(constructed);
}

std::vector<Shape> Plan::input_shapes_of(const PlanStep& s) const {
  std::vector<Shape> in;
  for (int id : s.inputs) in.push_back(shapes_[static_cast<size_t>(id)]);
  return in;
}

void Plan::build_steps(const Graph& graph) {
  // Keep the nodes the mode's outputs depend on, in recording (topological) order.
  const auto& nodes = graph.nodes();
  const std::vector<bool> needed = graph.needed_nodes(mode_);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!needed[i]) continue;
    PlanStep s;
    s.name = nodes[i].name;
    s.op = nodes[i].op;
    s.inputs = nodes[i].inputs;
    s.outputs = nodes[i].outputs;
    s.fused_from = {nodes[i].name};
    steps_.push_back(std::move(s));
  }

  // Fuse a one-output step into its only consumer when the op offers it: inference conv → bn → silu, training
  // bn → silu (PlanOptions::fuse_training).
  if (mode_ == Mode::inference || options_.fuse_training) {
    bool changed = true;
    while (changed) {
      changed = false;
      std::vector<int> uses(graph.values().size(), 0);
      for (auto& s : steps_)
        for (int id : s.inputs) ++uses[static_cast<size_t>(id)];
      for (int o : graph_outputs_) ++uses[static_cast<size_t>(o)];
      for (size_t i = 0; i < steps_.size() && !changed; ++i) {
        if (steps_[i].outputs.size() != 1) continue;
        const int out = steps_[i].outputs[0];
        if (uses[static_cast<size_t>(out)] != 1) continue;
        for (size_t j = i + 1; j < steps_.size(); ++j) {
          if (steps_[j].inputs != std::vector<int>{out} || steps_[j].outputs.size() != 1) {
            if (std::find(steps_[j].inputs.begin(), steps_[j].inputs.end(), out) != steps_[j].inputs.end()) break;
            continue;
          }
          const FusedNames names = fused_names(steps_[i].name, steps_[j].name);
          auto fused = steps_[i].op->fuse_with(*steps_[j].op, mode_, names.self_prefix, names.next_prefix);
          if (!fused) break;
          PlanStep s;
          s.name = names.scope;
          s.op = std::move(fused);
          s.inputs = steps_[i].inputs;
          s.outputs = steps_[j].outputs;
          s.fused_from = steps_[i].fused_from;
          s.fused_from.insert(s.fused_from.end(), steps_[j].fused_from.begin(), steps_[j].fused_from.end());
          steps_[j] = std::move(s);
          steps_.erase(steps_.begin() + static_cast<std::ptrdiff_t>(i));
          changed = true;
          break;
        }
      }
    }
  }

  for (auto& s : steps_) {
    s.runtime = s.op->lower(backend_->backend(), mode_);
    VISION_CHECK(s.runtime != nullptr, "{}: lower() returned no runtime op", step_context(s));
    VISION_CHECK(s.runtime->n_activation_inputs() == static_cast<int>(s.inputs.size()),
                 "{}: runtime op takes {} inputs, the graph gives {}", step_context(s),
                 s.runtime->n_activation_inputs(), s.inputs.size());
  }
}

namespace {

// The plan's cast and layout step: its output is its input in another dtype and/or memory order. Its backward
// converts the gradient back.
class ConvertRuntime final : public RuntimeOp {
 public:
  explicit ConvertRuntime(Format to) : to_(to) {}
  std::string name() const override { return "plan.convert"; }
  int n_activation_inputs() const override { return 1; }
  bool supports(const Format&) const override { return true; }
  bool has_backward() const override { return true; }
  void forward(ForwardCtx& ctx) override { ctx.backend->convert(ctx.output, ctx.inputs[0]); }
  void backward(BackwardCtx& ctx) override {
    if (ctx.grad_inputs[0].defined()) ctx.backend->convert(ctx.grad_inputs[0], ctx.grad_output);
  }

 private:
  Format to_;
};

class ConvertOp final : public Op {
 public:
  explicit ConvertOp(Format to) : to_(to) {}
  std::string name() const override { return "plan.convert"; }
  Shape infer_output_shape(const std::vector<Shape>& inputs) const override { return inputs.at(0); }
  DType infer_output_dtype(const std::vector<DType>&) const override { return to_.dtype; }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<ConvertRuntime>(to_); }

 private:
  Format to_;
};

}  // namespace

int Plan::converted_value(int value, const Format& format, std::vector<PlanStep>& steps) {
  const auto v = static_cast<size_t>(value);
  const bool rank4 = shapes_[v].rank() == 4;
  const Format to{format.dtype, rank4 ? format.layout : core::Layout::nchw};
  if (value_dtypes_[v] == to.dtype && value_layouts_[v] == to.layout) return value;
  VISION_CHECK(core::is_floating(value_dtypes_[v]) && core::is_floating(to.dtype),
               "value '{}' ({} {}) would need a conversion to {}, which only floating values have", value_names_[v],
               core::dtype_name(value_dtypes_[v]), core::layout_name(value_layouts_[v]), format_name(to));
  const auto key = std::tuple{value, to.dtype, to.layout};
  if (auto it = conversions_.find(key); it != conversions_.end()) return it->second;
  const int id = static_cast<int>(shapes_.size());
  shapes_.push_back(shapes_[v]);
  value_dtypes_.push_back(to.dtype);
  value_layouts_.push_back(to.layout);
  differentiable_.push_back(differentiable_[v]);
  value_names_.push_back(fmt::format("{}@{}", value_names_[v], rank4 ? format_name(to) : core::dtype_name(to.dtype)));
  PlanStep s;
  s.name = value_names_.back();
  s.op = std::make_shared<ConvertOp>(to);
  s.runtime = s.op->lower(backend_->backend(), mode_);
  s.runtime->set_format(to);
  s.format = to;
  s.inputs = {value};
  s.outputs = {id};
  steps.push_back(std::move(s));
  conversions_.emplace(key, id);
  return id;
}

void Plan::assign_formats(const Graph& graph) {
  const Format plan{options_.compute_dtype, options_.layout};
  std::vector<PlanStep> out;
  for (PlanStep& s : steps_) {
    bool rank4 = false;
    for (int id : s.inputs) rank4 = rank4 || shapes_[static_cast<size_t>(id)].rank() == 4;
    for (int id : s.outputs) rank4 = rank4 || shapes_[static_cast<size_t>(id)].rank() == 4;
    auto layout_of = [&](core::Layout l) { return rank4 ? l : core::Layout::nchw; };
    // The plan's format, then the fallbacks in f32 and/or NCHW. An op that only moves bytes keeps the format its
    // first input already has when that is one of them, so no conversion is added for it.
    std::vector<Format> candidates;
    for (DType dt : {plan.dtype, DType::f32})
      for (core::Layout l : {plan.layout, core::Layout::nchw}) {
        const Format f{dt, layout_of(l)};
        if (std::find(candidates.begin(), candidates.end(), f) == candidates.end()) candidates.push_back(f);
      }
    std::optional<Format> chosen;
    if (s.runtime->follows_input_format() && !s.inputs.empty()) {
      const auto first = static_cast<size_t>(s.inputs.front());
      const Format current{value_dtypes_[first], layout_of(value_layouts_[first])};
      if (std::find(candidates.begin(), candidates.end(), current) != candidates.end() && s.runtime->supports(current))
        chosen = current;
    }
    for (size_t i = 0; i < candidates.size() && !chosen; ++i)
      if (s.runtime->supports(candidates[i])) chosen = candidates[i];
    VISION_CHECK(chosen.has_value(), "{} computes in none of {}, {}", step_context(s), format_name(candidates.front()),
                 format_name(candidates.back()));
    s.format = *chosen;
    s.runtime->set_format(s.format);

    std::vector<DType> in_dtypes;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      int& id = s.inputs[i];
      const auto v = static_cast<size_t>(id);
      const DType floating = s.runtime->input_dtype(i).value_or(s.format.dtype);
      const Format want{core::is_floating(value_dtypes_[v]) ? floating : value_dtypes_[v], s.format.layout};
      if (s.runtime->reads_input(i) && (core::is_floating(value_dtypes_[v]) || shapes_[v].rank() == 4))
        id = converted_value(id, want, out);
      in_dtypes.push_back(value_dtypes_[static_cast<size_t>(id)]);
    }
    std::vector<DType> out_dtypes;
    try {
      out_dtypes = s.op->infer_output_dtypes(in_dtypes);
    } catch (const Error& e) {
      fail("{} in {}: {}", step_context(s), format_name(s.format), e.what());
    }
    VISION_CHECK(out_dtypes.size() == s.outputs.size(), "{}: {} output dtypes for {} outputs", step_context(s),
                 out_dtypes.size(), s.outputs.size());
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const auto o = static_cast<size_t>(s.outputs[k]);
      value_dtypes_[o] = out_dtypes[k];
      value_layouts_[o] = shapes_[o].rank() == 4 ? s.format.layout : core::Layout::nchw;
    }
    out.push_back(std::move(s));
  }
  // Outputs in their declared format: the recorded dtype and NCHW unless mark_output said otherwise.
  size_t i = 0;
  for (const auto& [id, use] : graph.marked_outputs()) {
    if (!(mode_ == Mode::inference ? use.inference : use.train)) continue;
    const Format declared = use.format.value_or(Format{graph.value(id).dtype, core::Layout::nchw});
    graph_outputs_[i] = converted_value(graph_outputs_[i], declared, out);
    ++i;
  }
  steps_ = std::move(out);
}

Format Plan::value_format(int value_id) const {
  const auto v = static_cast<size_t>(value_id);
  return {value_dtypes_.at(v), value_layouts_.at(v)};
}

size_t Plan::conversion_steps() const {
  return static_cast<size_t>(
      std::count_if(steps_.begin(), steps_.end(), [](const PlanStep& s) { return s.op->name() == "plan.convert"; }));
}

void Plan::bind_state(StateStore& state) {
  struct PendingConstant {
    PlanStep* step;
    size_t index;
    size_t offset, bytes;
    std::vector<std::byte> data;
  };
  std::vector<PendingConstant> constants;
  size_t constant_bytes = 0;
  struct PendingDerived {
    PlanStep* step;
    size_t index, offset;
  };
  std::vector<PendingDerived> derived;
  for (auto& s : steps_) {
    const std::vector<Shape> in = input_shapes_of(s);
    const Shape& out = shapes_[static_cast<size_t>(s.outputs.front())];
    s.specs = s.runtime->param_specs(in, out);
    if (s.runtime->caches_state()) has_derived_ = true;
    s.params.resize(s.specs.size());
    s.grad_params.resize(s.specs.size());
    s.param_copy.assign(s.specs.size(), false);
    for (size_t k = 0; k < s.specs.size(); ++k) {
      const ParamSpec& spec = s.specs[k];
      const std::string key = state_key(s.name, spec.name);
      if (spec.kind == StateKind::constant) {
        std::vector<std::byte> data = s.runtime->param_init_data(k, in, out, name_seed(key));
        const size_t want = static_cast<size_t>(spec.shape.numel()) * core::dtype_size(spec.dtype);
        VISION_CHECK(data.size() == want, "{}: constant '{}' of shape {} needs {} bytes, param_init_data gave {}",
                     step_context(s), spec.name, spec.shape.str(), want, data.size());
        constants.push_back({&s, k, constant_bytes, want, std::move(data)});
        constant_bytes += align_up(want, 256);
        continue;
      }
      const StateEntry* e = state.find(key);
      VISION_CHECK(e != nullptr, "{}: state '{}' is not in the model's state (was the model built for another graph?)",
                   step_context(s), key);
      VISION_CHECK(e->shape == spec.shape && e->dtype == spec.dtype,
                   "{}: state '{}' is {} {} in the model but the op wants {} {}", step_context(s), key,
                   core::dtype_name(e->dtype), e->shape.str(), core::dtype_name(spec.dtype), spec.shape.str());
      s.params[k] = state.tensor(key);
      if (spec.compute_format) {
        const Format f{spec.compute_format->dtype, spec.shape.rank() == 4 ? spec.compute_format->layout : core::Layout::nchw};
        if (f != Format{spec.dtype, core::Layout::nchw}) {
          s.params[k] = state.compute_copy(key, f);
          s.param_copy[k] = true;
        }
      }
      if (spec.kind == StateKind::parameter) s.grad_params[k] = state.grad(key);
    }
    s.derived_specs = s.runtime->derived_specs(in, out);
    for (size_t k = 0; k < s.derived_specs.size(); ++k) {
      derived.push_back({&s, k, constant_bytes});
      constant_bytes +=
          align_up(static_cast<size_t>(s.derived_specs[k].shape.numel()) * core::dtype_size(s.derived_specs[k].dtype), 256);
    }
  }
  if (!constant_bytes) return;
  constants_ = backend_->allocate(constant_bytes);
  auto* base = static_cast<std::byte*>(constants_.get());
  for (auto& c : constants) {
    const ParamSpec& spec = c.step->specs[c.index];
    backend_->copy_to_device(base + c.offset, c.data.data(), c.bytes);
    c.step->params[c.index] = Tensor::view(base + c.offset, spec.shape, spec.dtype, backend_->device());
  }
  for (auto& d : derived) {
    const TensorSpec& spec = d.step->derived_specs[d.index];
    d.step->derived.resize(d.step->derived_specs.size());
    d.step->derived[d.index] = Tensor::view(base + d.offset, spec.shape, spec.dtype, backend_->device());
    has_derived_ = true;
  }
}

void Plan::mark_gradients(const Graph&) {
  const size_t nv = shapes_.size();
  needs_grad_.assign(nv, false);
  if (mode_ != Mode::train) return;
  // A value can carry a gradient when it is differentiable and depends on a parameter.
  std::vector<bool> flows(nv, false);
  for (auto& s : steps_) {
    bool g = false;
    for (auto& spec : s.specs) g = g || spec.kind == StateKind::parameter;
    for (int id : s.inputs) g = g || flows[static_cast<size_t>(id)];
    for (int o : s.outputs) flows[static_cast<size_t>(o)] = g && differentiable_[static_cast<size_t>(o)];
  }
  // It gets one when a seeded output depends on it through differentiable values.
  std::vector<bool> reached(nv, false);
  for (size_t i = 0; i < graph_outputs_.size(); ++i)
    if (seeded_[i]) reached[static_cast<size_t>(graph_outputs_[i])] = flows[static_cast<size_t>(graph_outputs_[i])];
  for (size_t si = steps_.size(); si-- > 0;) {
    PlanStep& s = steps_[si];
    for (int o : s.outputs) s.backward = s.backward || reached[static_cast<size_t>(o)];
    if (!s.backward) continue;
    VISION_CHECK(s.runtime->has_backward(),
                 "cannot build a training plan: {} has no backward but the loss depends on it through a "
                 "differentiable value; detach its input or train only graphs whose ops all have one",
                 step_context(s));
    for (int id : s.inputs)
      if (flows[static_cast<size_t>(id)]) reached[static_cast<size_t>(id)] = true;
  }
  // Buffers: every value the reverse pass reaches, and every differentiable output of a step that runs
  // backward (one the loss does not reach gets zeros).
  for (size_t v = 0; v < nv; ++v) needs_grad_[v] = reached[v];
  for (auto& s : steps_)
    if (s.backward)
      for (int o : s.outputs) needs_grad_[static_cast<size_t>(o)] = needs_grad_[static_cast<size_t>(o)] || flows[static_cast<size_t>(o)];
}

void Plan::place_views() {
  const std::vector<Shape>& shapes = shapes_;
  alias_.assign(value_dtypes_.size(), Alias{});
  auto bytes_of_value = [&](int id) {
    return static_cast<size_t>(shapes[static_cast<size_t>(id)].numel()) * core::dtype_size(value_dtypes_[static_cast<size_t>(id)]);
  };
  auto element_bytes = [&](int id) { return core::dtype_size(value_dtypes_[static_cast<size_t>(id)]); };
  auto is_input = [&](int id) { return std::find(graph_inputs_.begin(), graph_inputs_.end(), id) != graph_inputs_.end(); };
  for (auto& s : steps_) {
    const std::vector<Shape> in = input_shapes_of(s);
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const auto view = s.op->output_view(k, in, s.format.layout);
      if (!view) continue;
      VISION_CHECK(view->input < s.inputs.size() &&
                       view->offset * element_bytes(s.outputs[k]) + bytes_of_value(s.outputs[k]) <=
                           bytes_of_value(s.inputs[view->input]),
                   "{}: output {} is declared a view outside input {}", step_context(s), k, view->input);
      alias_[static_cast<size_t>(s.outputs[k])] = {s.inputs[view->input], view->offset * element_bytes(s.outputs[k])};
    }
    // Inputs written in place into output 0: each must have memory of its own, be produced by a step of
    // this plan (not copied in as a graph input), and appear once among the inputs.
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const int x = s.inputs[i];
      if (alias_[static_cast<size_t>(x)].parent >= 0 || is_input(x)) continue;
      if (std::count(s.inputs.begin(), s.inputs.end(), x) != 1) continue;
      const auto offset = s.op->input_in_output(i, in, s.format.layout);
      if (!offset) continue;
      VISION_CHECK(*offset * element_bytes(x) + bytes_of_value(x) <= bytes_of_value(s.outputs[0]),
                   "{}: input {} is declared in place outside the output", step_context(s), i);
      alias_[static_cast<size_t>(x)] = {s.outputs[0], *offset * element_bytes(x)};
    }
  }
}

void Plan::layout_memory() {
  const std::vector<Shape>& shapes = shapes_;
  const int S = static_cast<int>(steps_.size());
  const int end = mode_ == Mode::train ? 2 * S : S;
  const size_t nv = value_dtypes_.size();
  auto value_bytes = [&](int id) {
    return static_cast<size_t>(shapes[static_cast<size_t>(id)].numel()) *
           core::dtype_size(value_dtypes_[static_cast<size_t>(id)]);
  };

  std::vector<int> producer(nv, -1), last_consumer(nv, -1), last_backward_consumer(nv, -1);
  std::vector<bool> present(nv, false);
  for (int id : graph_inputs_) present[static_cast<size_t>(id)] = true;
  for (int i = 0; i < S; ++i) {
    const PlanStep& s = steps_[static_cast<size_t>(i)];
    for (int o : s.outputs) {
      producer[static_cast<size_t>(o)] = i;
      present[static_cast<size_t>(o)] = true;
    }
    for (int id : s.inputs) {
      last_consumer[static_cast<size_t>(id)] = i;
      if (s.backward) last_backward_consumer[static_cast<size_t>(id)] = i;
    }
  }
  std::vector<bool> is_output(nv, false);
  for (int o : graph_outputs_) is_output[static_cast<size_t>(o)] = true;

  // Forward lifetime of each value, then of each memory root: the union over the values placed in it.
  std::vector<int> first(nv, 0), last(nv, -1);
  for (size_t id = 0; id < nv; ++id) {
    if (!present[id]) continue;
    first[id] = std::max(producer[id], 0);
    last[id] = mode_ == Mode::train || is_output[id] ? end : std::max(last_consumer[id], first[id]);
  }
  auto root_of = [&](int id) {
    size_t offset = 0;
    while (alias_[static_cast<size_t>(id)].parent >= 0) {
      offset += alias_[static_cast<size_t>(id)].offset;
      id = alias_[static_cast<size_t>(id)].parent;
    }
    return std::make_pair(id, offset);
  };
  for (size_t id = 0; id < nv; ++id) {
    if (!present[id] || alias_[id].parent < 0) continue;
    const int r = root_of(static_cast<int>(id)).first;
    first[static_cast<size_t>(r)] = std::min(first[static_cast<size_t>(r)], first[id]);
    last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], last[id]);
  }

  std::vector<ArenaRequest> req;
  enum Kind { kValue, kGrad, kSaved, kWorkspace, kScratch };
  struct Owner {
    Kind kind;
    int a, b;
  };
  std::vector<Owner> owners;
  for (size_t id = 0; id < nv; ++id) {
    if (!present[id] || alias_[id].parent >= 0) continue;
    req.push_back({value_bytes(static_cast<int>(id)), first[id], last[id]});
    owners.push_back({kValue, static_cast<int>(id), 0});
  }
  const PlanContext plan_ctx{backend_.get(), mode_, options_.deterministic, options_.tf32, collective()};
  size_t workspace = 0, scratch = 0;
  for (int i = 0; i < S; ++i) {
    PlanStep& s = steps_[static_cast<size_t>(i)];
    const std::vector<Shape> in = input_shapes_of(s);
    const Shape& out = shapes[static_cast<size_t>(s.outputs.front())];
    s.workspace = s.runtime->workspace_bytes(plan_ctx, in, out);
    workspace = std::max(workspace, s.workspace);
    if (mode_ != Mode::train) continue;
    s.saved_specs = s.runtime->saved_specs(in, out);
    for (size_t k = 0; k < s.saved_specs.size(); ++k) {
      req.push_back({static_cast<size_t>(s.saved_specs[k].shape.numel()) * core::dtype_size(s.saved_specs[k].dtype),
                     i, end});
      owners.push_back({kSaved, i, static_cast<int>(k)});
    }
    if (!s.backward) continue;
    size_t step_scratch = 0;
    for (int id : s.inputs)
      if (needs_grad_[static_cast<size_t>(id)]) step_scratch += align_up(value_bytes(id), 256);
    for (auto& spec : s.specs)
      if (spec.kind == StateKind::parameter)
        step_scratch += align_up(static_cast<size_t>(spec.shape.numel()) * core::dtype_size(spec.dtype), 256);
    scratch = std::max(scratch, step_scratch);
  }
  if (mode_ == Mode::train) {
    // Gradient of a value: from the backward step of its last consumer that runs backward (or the start of
    // the reverse pass for an output) to the backward step of its producer.
    auto btime = [&](int step) { return S + (S - 1 - step); };
    for (size_t id = 0; id < nv; ++id) {
      if (!needs_grad_[id]) continue;
      const int last_b = last_backward_consumer[id];
      const int from = is_output[id] ? S : last_b >= 0 ? btime(last_b) : btime(producer[id]);
      const int to = producer[id] < 0 ? end : btime(producer[id]);
      req.push_back({value_bytes(static_cast<int>(id)), from, to});
      owners.push_back({kGrad, static_cast<int>(id), 0});
    }
    if (scratch) {
      req.push_back({scratch, 0, end});
      owners.push_back({kScratch, 0, 0});
    }
  }
  if (workspace) {
    req.push_back({workspace, 0, end});
    owners.push_back({kWorkspace, 0, 0});
  }

  const ArenaLayout layout = plan_arena(req);
  arena_bytes_ = layout.total;
  try {
    arena_ = backend_->allocate(std::max<size_t>(arena_bytes_, 256));
  } catch (const Error& e) {
    // Out of memory is what a too large batch or image size ends in: say which knob turns it down.
    fail_as(e.kind(),
            "the plan's activations need {:.2f} GB of {} memory in one arena, which could not be allocated ({}); use a "
            "smaller batch or image size",
            static_cast<double>(arena_bytes_) / 1e9, core::device_name(backend_->device()), e.what());
  }
  auto* base = static_cast<std::byte*>(arena_.get());
  const core::Device dev = backend_->device();
  values_.assign(nv, Tensor());
  grads_.assign(nv, Tensor());
  std::vector<std::byte*> root_memory(nv, nullptr);
  for (size_t r = 0; r < req.size(); ++r) {
    std::byte* p = base + layout.offsets[r];
    const Owner& o = owners[r];
    switch (o.kind) {
      case kValue:
        root_memory[static_cast<size_t>(o.a)] = p;
        break;
      case kGrad:
        grads_[static_cast<size_t>(o.a)] =
            Tensor::view(p, shapes[static_cast<size_t>(o.a)], value_dtypes_[static_cast<size_t>(o.a)], dev,
                         value_layouts_[static_cast<size_t>(o.a)]);
        break;
      case kSaved: {
        PlanStep& s = steps_[static_cast<size_t>(o.a)];
        if (s.saved.size() < s.saved_specs.size()) s.saved.resize(s.saved_specs.size());
        const TensorSpec& ts = s.saved_specs[static_cast<size_t>(o.b)];
        s.saved[static_cast<size_t>(o.b)] = Tensor::view(p, ts.shape, ts.dtype, dev);
        break;
      }
      case kWorkspace:
        workspace_ = Tensor::view(p, Shape{static_cast<int64_t>(workspace)}, DType::u8, dev);
        break;
      case kScratch:
        grad_scratch_ = Tensor::view(p, Shape{static_cast<int64_t>(scratch)}, DType::u8, dev);
        break;
    }
  }
  for (size_t id = 0; id < nv; ++id) {
    if (!present[id]) continue;
    const auto [root, offset] = root_of(static_cast<int>(id));
    values_[id] = Tensor::view(root_memory[static_cast<size_t>(root)] + offset, shapes[id], value_dtypes_[id], dev,
                               value_layouts_[id]);
  }
}

void Plan::refresh_derived() {
  if (!has_derived_ || refreshed_version_ == state_->version()) return;
  for (PlanStep& s : steps_) {
    if (s.derived.empty() && !s.runtime->caches_state()) continue;
    ForwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.params = s.params;
    ctx.derived = s.derived;
    ctx.deterministic = options_.deterministic;
    ctx.tf32 = options_.tf32;
    ctx.collective = collective();
    try {
      s.runtime->refresh(ctx);
    } catch (const Error& e) {
      fail("{} refresh: {}", step_context(s), e.what());
    }
  }
  refreshed_version_ = state_->version();
}

void Plan::forward(const std::vector<Tensor>& inputs) {
  load_inputs(inputs);
  state_->refresh_compute_copies();
  refresh_derived();
  const bool replayable = mode_ == Mode::inference && graph_replay_ && backend_->supports_graph_capture();
  const auto started = std::chrono::steady_clock::now();
  if (!replayable) {
    run_steps();
  } else if (runs_ == 0) {
    run_steps();  // warm-up: kernels compiled and loaded, library algorithms chosen, before capture
  } else {
    if (!captured_) {
      captured_ = backend_->capture([this] { run_steps(); });
      build_times_.capture_ms = plan_ms_since(started);
    }
    backend_->replay(captured_.get());
  }
  if (runs_ == 0) build_times_.first_run_ms = plan_ms_since(started);
  // A training forward updates buffers (BatchNorm running statistics): what plans derive from them is stale.
  if (mode_ == Mode::train) state_->mark_updated();
  ++runs_;
  forward_done_ = true;
}

void Plan::train_step(const std::vector<Tensor>& inputs, bool accumulate, float seed,
                      const std::function<void(const std::vector<Tensor>&)>& after_forward,
                      const GradientReady& ready, const std::function<void()>& after_backward) {
  VISION_CHECK(mode_ == Mode::train, "train_step needs a plan built for training");
  const bool capturable = graph_replay_ && !has_derived_ && !backward_profile_ && train_capture_error_.empty() &&
                          backend_->supports_graph_capture();
  const size_t variant = (accumulate ? 1 : 0) + (ready ? 2 : 0) + (after_backward ? 4 : 0);
  auto eager = [&] {
    forward(inputs);
    if (after_forward) after_forward(outputs());
    backward({}, accumulate, seed, ready);
    if (after_backward) after_backward();
    ++eager_steps_[variant];
  };
  // Eager; the first call of each variant warms up what its capture needs (kernels compiled and loaded, library
  // algorithms chosen, lazy buffers made: none of that may happen while a stream is captured).
  if (!capturable || eager_steps_[variant] == 0) return eager();
  load_inputs(inputs);
  upload_seed(seed);
  std::shared_ptr<void>& captured = captured_steps_[variant];
  if (!captured) {
    try {
      captured = backend_->capture([&] {
        state_->convert_compute_copies();
        run_steps();
        if (after_forward) after_forward(outputs());
        backward_steps({}, accumulate, ready);
        if (after_backward) after_backward();
      });
    } catch (const Error& e) {
      // Nothing ran (a capture only records): the step runs eagerly, now and from now on.
      train_capture_error_ = e.what();
      // The aborted capture counted the compute copies converted, but a capture only records: convert them now.
      state_->convert_compute_copies();
      return eager();
    }
  }
  backend_->replay(captured.get());
  state_->mark_compute_copies_current();  // the replay converted them
  state_->mark_updated();  // the BatchNorm running statistics changed
  ++runs_;
  forward_done_ = true;
}

void Plan::load_inputs(const std::vector<Tensor>& inputs) {
  VISION_CHECK(inputs.size() == graph_inputs_.size(), "the plan takes {} inputs, {} were given",
               graph_inputs_.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& dst = values_[static_cast<size_t>(graph_inputs_[i])];
    const Tensor& src = inputs[i];
    const core::Layout layout = dst.layout();
    VISION_CHECK(src.defined() && src.shape() == dst.shape() && src.dtype() == dst.dtype() &&
                     (src.rank() != 4 || src.layout() == layout),
                 "input {} ('{}'): expected {} {}{}, got {}", i, value_names_[static_cast<size_t>(graph_inputs_[i])],
                 core::dtype_name(dst.dtype()), dst.shape().str(),
                 dst.rank() == 4 ? fmt::format(" {}", core::layout_name(layout)) : std::string(),
                 src.defined() ? src.str() : std::string("an undefined tensor"));
    if (src.device() == core::Device::cpu)
      backend_->copy_to_device(dst.raw(), src.raw(), src.nbytes());
    else
      backend_->copy_on_device(dst.raw(), src.raw(), src.nbytes());
  }
}

void Plan::run_steps() {
  for (PlanStep& s : steps_) run_step(s);
}

void Plan::run_step(PlanStep& s) {
  {
    ForwardCtx ctx;
    ctx.backend = backend_.get();
    for (int id : s.inputs) ctx.inputs.push_back(values_[static_cast<size_t>(id)]);
    for (int id : s.outputs) ctx.outputs.push_back(values_[static_cast<size_t>(id)]);
    ctx.output = ctx.outputs.front();
    ctx.params = s.params;
    ctx.saved = s.saved;
    ctx.derived = s.derived;
    if (s.workspace) ctx.workspace = workspace_;
    ctx.training = mode_ == Mode::train;
    ctx.deterministic = options_.deterministic;
    ctx.tf32 = options_.tf32;
    ctx.collective = collective();
    try {
      s.runtime->forward(ctx);
    } catch (const Error& e) {
      fail("{}: {}", step_context(s), e.what());
    }
  }
}

std::vector<Plan::StepTime> Plan::profile_forward(const std::vector<Tensor>& inputs, int repeats) {
  VISION_CHECK(repeats > 0, "profile_forward: repeats must be positive, got {}", repeats);
  state_->refresh_compute_copies();
  refresh_derived();
  std::vector<std::vector<double>> samples(steps_.size());
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms up (kernels loaded, algorithms chosen)
    load_inputs(inputs);  // every run: the arena may reuse an input's memory once it has been read
    std::vector<std::shared_ptr<void>> marks;
    marks.reserve(steps_.size() + 1);
    marks.push_back(backend_->mark());
    for (PlanStep& s : steps_) {
      run_step(s);
      marks.push_back(backend_->mark());
    }
    for (size_t i = 0; i < steps_.size() && r > 0; ++i)
      samples[i].push_back(backend_->elapsed_ms(marks[i].get(), marks[i + 1].get()));
  }
  if (mode_ == Mode::train) state_->mark_updated();
  forward_done_ = true;
  std::vector<StepTime> out;
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto& v = samples[i];
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    out.push_back({steps_[i].name, steps_[i].op->name(), steps_[i].format, v[v.size() / 2]});
  }
  return out;
}

std::string Plan::format_profile(const std::vector<StepTime>& times, size_t top) {
  double total = 0;
  std::map<std::string, std::pair<double, int>> per_op;
  for (const auto& t : times) {
    total += t.ms;
    auto& [ms, n] = per_op[t.op + " (" + format_name(t.format) + ")"];
    ms += t.ms;
    ++n;
  }
  std::vector<const StepTime*> sorted;
  for (const auto& t : times) sorted.push_back(&t);
  std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->ms > b->ms; });
  if (top && sorted.size() > top) sorted.resize(top);
  std::string s = fmt::format("{} steps, {:.3f} ms in all (eager, median per step)\n", times.size(), total);
  s += fmt::format("{:>9} {:>6}  {:<28} {:<10} {}\n", "ms", "share", "op", "format", "step");
  for (const auto* t : sorted)
    s += fmt::format("{:>9.4f} {:>5.1f}%  {:<28} {:<10} {}\n", t->ms, total > 0 ? 100 * t->ms / total : 0.0, t->op,
                     format_name(t->format), t->name);
  std::vector<std::pair<std::string, std::pair<double, int>>> ops(per_op.begin(), per_op.end());
  std::stable_sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  s += "per op:\n";
  for (const auto& [name, v] : ops)
    s += fmt::format("{:>9.4f} {:>5.1f}%  {} x{}\n", v.first, total > 0 ? 100 * v.first / total : 0.0, name, v.second);
  return s;
}

std::vector<Tensor> Plan::outputs() const {
  std::vector<Tensor> out;
  for (int o : graph_outputs_) out.push_back(values_[static_cast<size_t>(o)]);
  return out;
}

Tensor Plan::value_grad(int value_id) const { return grads_.at(static_cast<size_t>(value_id)); }

void Plan::backward(const std::vector<Tensor>& grad_outputs, bool accumulate, float seed,
                    const GradientReady& ready) {
  VISION_CHECK(mode_ == Mode::train, "backward needs a plan built for training (forward_train)");
  VISION_CHECK(forward_done_, "backward called before forward_train");
  VISION_CHECK(grad_outputs.empty() || grad_outputs.size() == graph_outputs_.size(),
               "backward: {} output gradients for {} outputs", grad_outputs.size(), graph_outputs_.size());
  if (grad_outputs.empty()) upload_seed(seed);
  backward_steps(grad_outputs, accumulate, ready);
}

const std::vector<std::vector<Tensor>>& Plan::gradients_final_after() {
  if (gradients_final_after_) return *gradients_final_after_;
  // A gradient is final after the last step that writes it in backward order: the first in the plan.
  std::set<const void*> seen;
  std::vector<std::vector<Tensor>> after(steps_.size());
  for (size_t si = 0; si < steps_.size(); ++si)
    for (const Tensor& g : steps_[si].grad_params)
      if (g.defined() && seen.insert(g.raw()).second) after[si].push_back(g);
  gradients_final_after_ = std::move(after);
  return *gradients_final_after_;
}

void Plan::upload_seed(float seed) {
  if (!seed_.defined()) {
    seed_memory_ = backend_->allocate(sizeof(float));
    seed_ = Tensor::view(seed_memory_.get(), Shape{1}, DType::f32, backend_->device());
  }
  backend_->copy_to_device(seed_.raw(), &seed, sizeof(float));
}

void Plan::backward_steps(const std::vector<Tensor>& grad_outputs, bool accumulate, const GradientReady& ready) {
  const std::vector<std::vector<Tensor>>* final_after = ready ? &gradients_final_after() : nullptr;
  auto passed = [&](size_t si) {  // the backward is past step si (run or skipped)
    if (final_after)
      for (const Tensor& g : (*final_after)[si]) ready(g);
  };
  std::vector<bool> written(values_.size(), false);
  std::vector<std::pair<size_t, std::shared_ptr<void>>> marks;  // (step, the mark after it): with a backward profile
  const std::shared_ptr<void> start = backward_profile_ ? backend_->mark() : nullptr;
  if (!accumulate) {
    // Parameters of steps the loss does not reach keep a zero gradient.
    for (auto& s : steps_)
      for (auto& g : s.grad_params)
        if (g.defined()) backend_->fill_zero(g.raw(), g.nbytes());
  }
  for (size_t i = 0; i < graph_outputs_.size(); ++i) {
    const int o = graph_outputs_[i];
    if (!seeded_[i] || !needs_grad_[static_cast<size_t>(o)]) continue;
    const Tensor& g = grads_[static_cast<size_t>(o)];
    if (!grad_outputs.empty()) {
      const Tensor& src = grad_outputs[i];
      VISION_CHECK(src.defined() && src.shape() == g.shape() && src.dtype() == g.dtype(),
                   "output gradient {} ('{}'): expected {}, got {}", i, value_names_[static_cast<size_t>(o)], g.str(),
                   src.defined() ? src.str() : std::string("an undefined tensor"));
      if (src.device() == core::Device::cpu)
        backend_->copy_to_device(g.raw(), src.raw(), g.nbytes());
      else
        backend_->copy_on_device(g.raw(), src.raw(), g.nbytes());
    } else {
      VISION_CHECK(g.numel() == 1, "backward without output gradients needs scalar seeded outputs; '{}' is {}",
                   value_names_[static_cast<size_t>(o)], g.shape().str());
      // From the seed on the backend (upload_seed): a copy on the device, which a captured step can record.
      if (g.dtype() == DType::f32)
        backend_->copy_on_device(g.raw(), seed_.raw(), sizeof(float));
      else
        backend_->convert(g, seed_.reshape(g.shape()));
    }
    written[static_cast<size_t>(o)] = true;
  }

  auto* scratch_base = grad_scratch_.defined() ? static_cast<std::byte*>(grad_scratch_.raw()) : nullptr;
  for (size_t si = steps_.size(); si-- > 0;) {
    PlanStep& s = steps_[si];
    bool reached = false;
    for (int o : s.outputs) reached = reached || written[static_cast<size_t>(o)];
    if (!s.backward || !reached) {
      passed(si);
      continue;
    }
    BackwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.deterministic = options_.deterministic;
    ctx.tf32 = options_.tf32;
    ctx.collective = collective();
    for (int id : s.inputs) ctx.inputs.push_back(values_[static_cast<size_t>(id)]);
    for (int o : s.outputs) {
      ctx.outputs.push_back(values_[static_cast<size_t>(o)]);
      const Tensor& g = grads_[static_cast<size_t>(o)];
      if (g.defined() && !written[static_cast<size_t>(o)]) {
        backend_->fill_zero(g.raw(), g.nbytes());  // an output the loss does not reach: zero, never stale
        written[static_cast<size_t>(o)] = true;
      }
      ctx.grad_outputs.push_back(g);
    }
    ctx.output = ctx.outputs.front();
    ctx.grad_output = ctx.grad_outputs.front();
    ctx.params = s.params;
    ctx.saved = s.saved;
    ctx.derived = s.derived;
    if (s.workspace) ctx.workspace = workspace_;
    size_t used = 0;
    auto take_scratch = [&](const Tensor& like) {
      Tensor t = Tensor::view(scratch_base + used, like.shape(), like.dtype(), backend_->device(), like.layout());
      used += align_up(like.nbytes(), 256);
      return t;
    };
    std::vector<std::pair<Tensor, Tensor>> adds;  // (destination, scratch) pairs to sum after the step
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const int id = s.inputs[i];
      const bool repeated = std::find(s.inputs.begin(), s.inputs.begin() + static_cast<std::ptrdiff_t>(i), id) !=
                            s.inputs.begin() + static_cast<std::ptrdiff_t>(i);
      if (!needs_grad_[static_cast<size_t>(id)]) {
        ctx.grad_inputs.emplace_back();
        continue;
      }
      const Tensor& g = grads_[static_cast<size_t>(id)];
      if (!written[static_cast<size_t>(id)] && !repeated) {
        ctx.grad_inputs.push_back(g);
        written[static_cast<size_t>(id)] = true;
      } else {
        Tensor t = take_scratch(g);
        ctx.grad_inputs.push_back(t);
        adds.emplace_back(g, t);
      }
    }
    std::vector<std::pair<Tensor, Tensor>> converts;  // (f32 master gradient, compute-format gradient)
    for (size_t k = 0; k < s.grad_params.size(); ++k) {
      const Tensor& g = s.grad_params[k];
      if (g.defined() && s.param_copy[k]) {
        // The op writes the gradient of its f16/bf16 copy; it is added into the (zeroed or accumulating) f32 one.
        Tensor t = take_scratch(s.params[k]);
        ctx.grad_params.push_back(t);
        converts.emplace_back(g, t);
        continue;
      }
      if (!g.defined() || !accumulate) {
        ctx.grad_params.push_back(g);
        continue;
      }
      Tensor t = take_scratch(g);
      ctx.grad_params.push_back(t);
      adds.emplace_back(g, t);
    }
    try {
      s.runtime->backward(ctx);
    } catch (const Error& e) {
      fail("{} backward: {}", step_context(s), e.what());
    }
    for (auto& [dst, src] : adds) backend_->add_into(dst, src);
    for (auto& [dst, src] : converts) backend_->convert(dst, src, /*accumulate=*/true);
    if (backward_profile_) marks.emplace_back(si, backend_->mark());
    passed(si);
  }
  if (ready) ready(Tensor());
  if (backward_profile_) {
    const void* from = start.get();
    for (const auto& [si, m] : marks) {
      const PlanStep& s = steps_[si];
      backward_profile_->push_back({s.name, s.op->name(), s.format, backend_->elapsed_ms(from, m.get())});
      from = m.get();
    }
  }
}

std::string Plan::describe() const {
  std::string out;
  for (const auto& s : steps_) {
    std::string shapes;
    for (int o : s.outputs) shapes += (shapes.empty() ? "" : ", ") + values_[static_cast<size_t>(o)].shape().str();
    out += fmt::format("{:<32} {:<22} {:<9} -> {}", s.name.empty() ? "(root)" : s.name, s.op->name(),
                       format_name(s.format), shapes);
    if (s.fused_from.size() > 1) {
      out += "  fused:";
      for (auto& f : s.fused_from) out += " " + f;
    }
    out += "\n";
  }
  for (size_t v = 0; v < alias_.size(); ++v)
    if (alias_[v].parent >= 0)
      out += fmt::format("  {} shares memory with {} at byte {}\n", value_names_[v],
                         value_names_[static_cast<size_t>(alias_[v].parent)], alias_[v].offset);
  return out;
}

}  // namespace vision::graph
