#include "vision/graph/plan.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace vision::graph {

namespace {

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

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::string step_context(const PlanStep& s) { return fmt::format("step '{}' ({})", s.name, s.op->name()); }

}  // namespace

std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<Shape>& input_shapes) {
  VISION_CHECK(input_shapes.size() == graph.inputs().size(), "the graph has {} inputs, {} shapes were given",
               graph.inputs().size(), input_shapes.size());
  std::vector<Shape> shapes(graph.values().size());
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    const Value& v = graph.value(graph.inputs()[i]);
    VISION_CHECK(input_shapes[i].is_concrete(), "input '{}': shape {} is not concrete", v.name, input_shapes[i].str());
    VISION_CHECK(v.shape.compatible(input_shapes[i]), "input '{}' expects shape {}, got {}", v.name, v.shape.str(),
                 input_shapes[i].str());
    shapes[static_cast<size_t>(graph.inputs()[i])] = input_shapes[i];
  }
  for (const Node& n : graph.nodes()) {
    std::vector<Shape> in;
    for (int id : n.inputs) in.push_back(shapes[static_cast<size_t>(id)]);
    Shape out;
    try {
      out = n.op->infer_output_shape(in);
    } catch (const Error& e) {
      fail("op '{}' ({}): {}", n.name, n.op->name(), e.what());
    }
    VISION_CHECK(out.is_concrete() && graph.value(n.output).shape.compatible(out),
                 "op '{}' ({}): output shape {} does not match the recorded {}", n.name, n.op->name(), out.str(),
                 graph.value(n.output).shape.str());
    shapes[static_cast<size_t>(n.output)] = std::move(out);
  }
  return shapes;
}

Plan::Plan(const Graph& graph, std::shared_ptr<BackendContext> backend, Mode mode,
           const std::vector<Shape>& input_shapes, StateStore& state)
    : backend_(std::move(backend)), mode_(mode), input_shapes_(input_shapes) {
  VISION_CHECK(!graph.outputs().empty(), "the graph has no outputs: mark at least one with mark_output");
  graph_inputs_ = graph.inputs();
  graph_outputs_ = graph.outputs();
  for (const Value& v : graph.values()) value_dtypes_.push_back(v.dtype);
  const std::vector<Shape> shapes = bind_shapes(graph, input_shapes);
  build_steps(graph, shapes);
  bind_state(state, shapes);
  layout_memory(graph, shapes);
}

void Plan::build_steps(const Graph& graph, const std::vector<Shape>& shapes) {
  // Keep the nodes the outputs depend on, in recording (topological) order.
  const auto& nodes = graph.nodes();
  std::vector<bool> needed_value(graph.values().size(), false);
  for (int o : graph_outputs_) needed_value[static_cast<size_t>(o)] = true;
  std::vector<bool> needed_node(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    if (!needed_value[static_cast<size_t>(nodes[i].output)]) continue;
    needed_node[i] = true;
    for (int id : nodes[i].inputs) needed_value[static_cast<size_t>(id)] = true;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!needed_node[i]) continue;
    PlanStep s;
    s.name = nodes[i].name;
    s.op = nodes[i].op;
    s.inputs = nodes[i].inputs;
    s.output = nodes[i].output;
    s.fused_from = {nodes[i].name};
    steps_.push_back(std::move(s));
  }

  // Inference: fuse a step into its only consumer when the op offers it (conv → bn → silu).
  if (mode_ == Mode::inference) {
    bool changed = true;
    while (changed) {
      changed = false;
      std::vector<int> uses(graph.values().size(), 0);
      for (auto& s : steps_)
        for (int id : s.inputs) ++uses[static_cast<size_t>(id)];
      for (int o : graph_outputs_) ++uses[static_cast<size_t>(o)];
      for (size_t i = 0; i < steps_.size() && !changed; ++i) {
        const int out = steps_[i].output;
        if (uses[static_cast<size_t>(out)] != 1) continue;
        for (size_t j = i + 1; j < steps_.size(); ++j) {
          if (steps_[j].inputs != std::vector<int>{out}) {
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
          s.output = steps_[j].output;
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
    if (mode_ == Mode::train)
      VISION_CHECK(s.runtime->has_backward(),
                   "cannot build a training plan: {} has no backward; train only graphs whose ops all have one",
                   step_context(s));
  }
  (void)shapes;
}

void Plan::bind_state(StateStore& state, const std::vector<Shape>& shapes) {
  struct PendingConstant {
    PlanStep* step;
    size_t index;
    size_t offset, bytes;
    std::vector<std::byte> data;
  };
  std::vector<PendingConstant> constants;
  size_t constant_bytes = 0;
  for (auto& s : steps_) {
    std::vector<Shape> in;
    for (int id : s.inputs) in.push_back(shapes[static_cast<size_t>(id)]);
    const Shape& out = shapes[static_cast<size_t>(s.output)];
    s.specs = s.runtime->param_specs(in, out);
    s.params.resize(s.specs.size());
    s.grad_params.resize(s.specs.size());
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
      if (spec.kind == StateKind::parameter) s.grad_params[k] = state.grad(key);
    }
  }
  if (constant_bytes) {
    constants_ = backend_->allocate(constant_bytes);
    auto* base = static_cast<std::byte*>(constants_.get());
    for (auto& c : constants) {
      const ParamSpec& spec = c.step->specs[c.index];
      backend_->copy_to_device(base + c.offset, c.data.data(), c.bytes);
      c.step->params[c.index] = Tensor::view(base + c.offset, spec.shape, spec.dtype, backend_->device());
    }
  }
}

void Plan::layout_memory(const Graph& graph, const std::vector<Shape>& shapes) {
  const int S = static_cast<int>(steps_.size());
  const int end = mode_ == Mode::train ? 2 * S : S;
  const size_t nv = graph.values().size();
  auto value_bytes = [&](int id) {
    return static_cast<size_t>(shapes[static_cast<size_t>(id)].numel()) *
           core::dtype_size(value_dtypes_[static_cast<size_t>(id)]);
  };

  std::vector<int> producer(nv, -1), last_consumer(nv, -1);
  for (int i = 0; i < S; ++i) {
    producer[static_cast<size_t>(steps_[static_cast<size_t>(i)].output)] = i;
    for (int id : steps_[static_cast<size_t>(i)].inputs) last_consumer[static_cast<size_t>(id)] = i;
  }
  std::vector<int> last_use = last_consumer;  // extended below for outputs and inputs
  for (int o : graph_outputs_) last_use[static_cast<size_t>(o)] = end;
  for (int id : graph_inputs_) last_use[static_cast<size_t>(id)] = std::max(last_use[static_cast<size_t>(id)], 0);

  needs_grad_.assign(nv, false);
  if (mode_ == Mode::train)
    for (auto& s : steps_) {
      bool g = false;
      for (auto& spec : s.specs) g |= spec.kind == StateKind::parameter;
      for (int id : s.inputs) g |= needs_grad_[static_cast<size_t>(id)];
      needs_grad_[static_cast<size_t>(s.output)] = g;
    }

  std::vector<ArenaRequest> req;
  enum Kind { kValue, kGrad, kSaved, kWorkspace, kScratch };
  struct Owner {
    Kind kind;
    int a, b;
  };
  std::vector<Owner> owners;
  for (size_t id = 0; id < nv; ++id) {
    if (last_use[id] < 0) continue;  // not needed by this plan
    const int first = producer[id] < 0 ? 0 : producer[id];
    const int last = mode_ == Mode::train ? end : last_use[id];
    req.push_back({value_bytes(static_cast<int>(id)), first, last});
    owners.push_back({kValue, static_cast<int>(id), 0});
  }
  size_t workspace = 0, scratch = 0;
  for (int i = 0; i < S; ++i) {
    PlanStep& s = steps_[static_cast<size_t>(i)];
    std::vector<Shape> in;
    for (int id : s.inputs) in.push_back(shapes[static_cast<size_t>(id)]);
    const Shape& out = shapes[static_cast<size_t>(s.output)];
    s.workspace = s.runtime->workspace_bytes(in, out);
    workspace = std::max(workspace, s.workspace);
    if (mode_ != Mode::train) continue;
    s.saved_specs = s.runtime->saved_specs(in, out);
    for (size_t k = 0; k < s.saved_specs.size(); ++k) {
      req.push_back({static_cast<size_t>(s.saved_specs[k].shape.numel()) * core::dtype_size(s.saved_specs[k].dtype),
                     i, end});
      owners.push_back({kSaved, i, static_cast<int>(k)});
    }
    size_t step_scratch = 0;
    for (int id : s.inputs)
      if (needs_grad_[static_cast<size_t>(id)]) step_scratch += align_up(value_bytes(id), 256);
    for (auto& spec : s.specs)
      if (spec.kind == StateKind::parameter)
        step_scratch += align_up(static_cast<size_t>(spec.shape.numel()) * core::dtype_size(spec.dtype), 256);
    scratch = std::max(scratch, step_scratch);
  }
  if (mode_ == Mode::train) {
    // Gradient of a value: from the backward step of its last consumer to the backward step of its producer.
    auto btime = [&](int step) { return S + (S - 1 - step); };
    for (size_t id = 0; id < nv; ++id) {
      if (!needs_grad_[id] || last_use[id] < 0) continue;
      const bool is_output =
          std::find(graph_outputs_.begin(), graph_outputs_.end(), static_cast<int>(id)) != graph_outputs_.end();
      const int first = is_output || last_consumer[id] < 0 ? S : btime(last_consumer[id]);
      const int last = producer[id] < 0 ? end : btime(producer[id]);
      req.push_back({value_bytes(static_cast<int>(id)), first, last});
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
  arena_ = backend_->allocate(std::max<size_t>(arena_bytes_, 256));
  auto* base = static_cast<std::byte*>(arena_.get());
  const core::Device dev = backend_->device();
  values_.assign(nv, Tensor());
  grads_.assign(nv, Tensor());
  for (size_t r = 0; r < req.size(); ++r) {
    std::byte* p = base + layout.offsets[r];
    const Owner& o = owners[r];
    switch (o.kind) {
      case kValue:
        values_[static_cast<size_t>(o.a)] =
            Tensor::view(p, shapes[static_cast<size_t>(o.a)], value_dtypes_[static_cast<size_t>(o.a)], dev);
        break;
      case kGrad:
        grads_[static_cast<size_t>(o.a)] =
            Tensor::view(p, shapes[static_cast<size_t>(o.a)], value_dtypes_[static_cast<size_t>(o.a)], dev);
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
}

void Plan::forward(const std::vector<Tensor>& inputs) {
  VISION_CHECK(inputs.size() == graph_inputs_.size(), "the plan takes {} inputs, {} were given",
               graph_inputs_.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& dst = values_[static_cast<size_t>(graph_inputs_[i])];
    const Tensor& src = inputs[i];
    VISION_CHECK(src.defined() && src.shape() == dst.shape() && src.dtype() == dst.dtype(),
                 "input {}: expected {} {}, got {}", i, core::dtype_name(dst.dtype()), dst.shape().str(),
                 src.defined() ? src.str() : std::string("an undefined tensor"));
    if (src.device() == core::Device::cpu)
      backend_->copy_to_device(dst.raw(), src.raw(), src.nbytes());
    else
      backend_->copy_on_device(dst.raw(), src.raw(), src.nbytes());
  }
  const bool replayable = mode_ == Mode::inference && graph_replay_ && backend_->supports_graph_capture();
  if (!replayable) {
    run_steps();
  } else if (runs_ == 0) {
    run_steps();  // warm-up: kernels compiled and loaded, library algorithms chosen, before capture
  } else {
    if (!captured_) captured_ = backend_->capture([this] { run_steps(); });
    backend_->replay(captured_.get());
  }
  ++runs_;
  forward_done_ = true;
}

void Plan::run_steps() {
  for (PlanStep& s : steps_) {
    ForwardCtx ctx;
    ctx.backend = backend_.get();
    for (int id : s.inputs) ctx.inputs.push_back(values_[static_cast<size_t>(id)]);
    ctx.output = values_[static_cast<size_t>(s.output)];
    ctx.params = s.params;
    ctx.saved = s.saved;
    if (s.workspace) ctx.workspace = workspace_;
    ctx.training = mode_ == Mode::train;
    try {
      s.runtime->forward(ctx);
    } catch (const Error& e) {
      fail("{}: {}", step_context(s), e.what());
    }
  }
}

std::vector<Tensor> Plan::outputs() const {
  std::vector<Tensor> out;
  for (int o : graph_outputs_) out.push_back(values_[static_cast<size_t>(o)]);
  return out;
}

Tensor Plan::value_grad(int value_id) const { return grads_.at(static_cast<size_t>(value_id)); }

void Plan::backward(const std::vector<Tensor>& grad_outputs, bool accumulate) {
  VISION_CHECK(mode_ == Mode::train, "backward needs a plan built for training (forward_train)");
  VISION_CHECK(forward_done_, "backward called before forward_train");
  VISION_CHECK(grad_outputs.empty() || grad_outputs.size() == graph_outputs_.size(),
               "backward: {} output gradients for {} outputs", grad_outputs.size(), graph_outputs_.size());
  std::vector<bool> written(values_.size(), false);
  if (!accumulate) {
    // Parameters of steps the loss does not reach keep a zero gradient.
    for (auto& s : steps_)
      for (auto& g : s.grad_params)
        if (g.defined()) backend_->fill_zero(g.raw(), g.nbytes());
  }
  for (size_t i = 0; i < graph_outputs_.size(); ++i) {
    const int o = graph_outputs_[i];
    if (!needs_grad_[static_cast<size_t>(o)]) continue;
    const Tensor& g = grads_[static_cast<size_t>(o)];
    if (!grad_outputs.empty()) {
      const Tensor& src = grad_outputs[i];
      VISION_CHECK(src.shape() == g.shape() && src.dtype() == g.dtype(), "output gradient {}: expected {}, got {}", i,
                   g.str(), src.str());
      if (src.device() == core::Device::cpu)
        backend_->copy_to_device(g.raw(), src.raw(), g.nbytes());
      else
        backend_->copy_on_device(g.raw(), src.raw(), g.nbytes());
    } else {
      VISION_CHECK(g.numel() == 1, "backward without output gradients needs scalar outputs; output {} is {}", i,
                   g.shape().str());
      Tensor one = Tensor::zeros(g.shape(), g.dtype());
      one.fill(1.0f);
      backend_->copy_to_device(g.raw(), one.raw(), one.nbytes());
    }
    written[static_cast<size_t>(o)] = true;
  }

  auto* scratch_base = grad_scratch_.defined() ? static_cast<std::byte*>(grad_scratch_.raw()) : nullptr;
  for (size_t si = steps_.size(); si-- > 0;) {
    PlanStep& s = steps_[si];
    if (!written[static_cast<size_t>(s.output)]) continue;
    BackwardCtx ctx;
    ctx.backend = backend_.get();
    for (int id : s.inputs) ctx.inputs.push_back(values_[static_cast<size_t>(id)]);
    ctx.output = values_[static_cast<size_t>(s.output)];
    ctx.grad_output = grads_[static_cast<size_t>(s.output)];
    ctx.params = s.params;
    ctx.saved = s.saved;
    if (s.workspace) ctx.workspace = workspace_;
    size_t used = 0;
    auto take_scratch = [&](const Tensor& like) {
      Tensor t = Tensor::view(scratch_base + used, like.shape(), like.dtype(), backend_->device());
      used += align_up(like.nbytes(), 256);
      return t;
    };
    std::vector<std::pair<Tensor, Tensor>> adds;  // (destination, scratch) pairs to sum after the step
    for (int id : s.inputs) {
      if (!needs_grad_[static_cast<size_t>(id)]) {
        ctx.grad_inputs.emplace_back();
        continue;
      }
      const Tensor& g = grads_[static_cast<size_t>(id)];
      if (!written[static_cast<size_t>(id)]) {
        ctx.grad_inputs.push_back(g);
        written[static_cast<size_t>(id)] = true;
      } else {
        Tensor t = take_scratch(g);
        ctx.grad_inputs.push_back(t);
        adds.emplace_back(g, t);
      }
    }
    for (auto& g : s.grad_params) {
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
  }
}

std::string Plan::describe() const {
  std::string out;
  for (const auto& s : steps_) {
    out += fmt::format("{:<32} {:<22} -> {}", s.name.empty() ? "(root)" : s.name, s.op->name(),
                       values_[static_cast<size_t>(s.output)].shape().str());
    if (s.fused_from.size() > 1) {
      out += "  fused:";
      for (auto& f : s.fused_from) out += " " + f;
    }
    out += "\n";
  }
  return out;
}

}  // namespace vision::graph
