#include "vision/graph/state.h"

#include <cstring>
#include <fmt/format.h>

#include "vision/core/safetensors.h"
#include "vision/graph/plan.h"

namespace vision::graph {

std::string state_key(const std::string& node_name, const std::string& local) {
  if (node_name.empty()) return local;
  return node_name + "." + local;
}

namespace {
// Converts a host tensor of a floating dtype to f32 (the store's dtype for parameters).
core::Tensor host_as(const core::Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  VISION_CHECK(core::is_floating(t.dtype()) && dtype == DType::f32, "cannot convert {} to {}",
               core::dtype_name(t.dtype()), core::dtype_name(dtype));
  return core::Tensor::from_vector(t.shape(), t.to_vector());
}
}  // namespace

StateStore::StateStore(const Graph& graph, std::shared_ptr<BackendContext> backend,
                       const std::vector<Shape>& input_shapes)
    : StateStore(graph, std::move(backend), graph.inputs(), input_shapes) {}

namespace {
// Calls fn(node, runtime op, input shapes, output shape, spec index, spec) for every parameter and buffer the graph's
// nodes declare (constants excluded), in node order, for the given shapes of some of its inputs; nodes that depend on
// another input must declare none.
template <typename F>
void for_each_state(const Graph& graph, const std::vector<int>& input_ids, const std::vector<Shape>& input_shapes,
                    F&& fn) {
  std::vector<bool> bound;
  const std::vector<Shape> shapes = bind_shapes(graph, input_ids, input_shapes, &bound);
  for (const Node& n : graph.nodes()) {
    if (!bound[static_cast<size_t>(n.outputs.front())]) continue;
    auto rt = n.op->lower(Backend::cpu, Mode::inference);
    std::vector<Shape> in;
    for (int id : n.inputs) in.push_back(shapes[static_cast<size_t>(id)]);
    const Shape& out = shapes[static_cast<size_t>(n.outputs.front())];
    const auto specs = rt->param_specs(in, out);
    for (size_t k = 0; k < specs.size(); ++k)
      if (specs[k].kind != StateKind::constant) fn(n, *rt, in, out, k, specs[k]);
  }
}
}  // namespace

std::vector<StateEntry> state_entries(const Graph& graph, const std::vector<int>& input_ids,
                                      const std::vector<Shape>& input_shapes) {
  std::vector<StateEntry> entries;
  auto add = [&](const Node& n, RuntimeOp&, const std::vector<Shape>&, const Shape&, size_t, const ParamSpec& spec) {
    entries.push_back(StateEntry{state_key(n.name, spec.name), spec.shape, spec.dtype, spec.kind, 0});
  };
  for_each_state(graph, input_ids, input_shapes, add);
  return entries;
}

StateStore::StateStore(const Graph& graph, std::shared_ptr<BackendContext> backend, const std::vector<int>& input_ids,
                       const std::vector<Shape>& input_shapes)
    : backend_(std::move(backend)) {
  struct Init {
    size_t entry;
    std::vector<std::byte> data;
  };
  std::vector<Init> inits;
  size_t param_bytes = 0, buffer_bytes = 0;
  auto add = [&](const Node& n, RuntimeOp& rt, const std::vector<Shape>& in, const Shape& out, size_t k,
                 const ParamSpec& spec) {
    const std::string key = state_key(n.name, spec.name);
    VISION_CHECK(!index_.count(key), "two ops declare the state '{}': give the nodes distinct names", key);
    VISION_CHECK(spec.kind == StateKind::buffer || spec.dtype == DType::f32,
                 "op '{}': trainable parameter '{}' must be f32 (master weights), not {}", n.name, key,
                 core::dtype_name(spec.dtype));
    StateEntry e{key, spec.shape, spec.dtype, spec.kind, 0};
    const size_t bytes = static_cast<size_t>(spec.shape.numel()) * core::dtype_size(spec.dtype);
    if (spec.kind == StateKind::parameter) {
      e.offset = param_bytes;
      param_bytes += bytes;  // parameters are packed: the flat buffer is one f32 vector
      n_params_ += spec.shape.numel();
    } else {
      e.offset = buffer_bytes;
      buffer_bytes += align_up(bytes, 64);
    }
    std::vector<std::byte> data = rt.param_init_data(k, in, out, name_seed(key));
    VISION_CHECK(data.size() == bytes, "op '{}' ({}): initial data of '{}' is {} bytes, its shape {} needs {}",
                 n.name, n.op->name(), key, data.size(), spec.shape.str(), bytes);
    index_[key] = entries_.size();
    entries_.push_back(std::move(e));
    inits.push_back({entries_.size() - 1, std::move(data)});
  };
  for_each_state(graph, input_ids, input_shapes, add);
  param_mem_ = backend_->allocate(std::max<size_t>(param_bytes, 4));
  grad_mem_ = backend_->allocate(std::max<size_t>(param_bytes, 4));
  buffer_region_bytes_ = std::max<size_t>(buffer_bytes, 64);
  buffer_mem_ = backend_->allocate(buffer_region_bytes_);
  backend_->fill_zero(buffer_mem_.get(), buffer_region_bytes_);  // the padding between buffers too
  backend_->fill_zero(grad_mem_.get(), std::max<size_t>(param_bytes, 4));
  flat_params_ = Tensor::view(param_mem_.get(), Shape{n_params_}, DType::f32, backend_->device());
  flat_grads_ = Tensor::view(grad_mem_.get(), Shape{n_params_}, DType::f32, backend_->device());
  for (auto& init : inits) {
    const Tensor t = tensor(entries_[init.entry].key);
    backend_->copy_to_device(t.raw(), init.data.data(), init.data.size());
  }
}

const StateEntry* StateStore::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor StateStore::tensor(const std::string& key) const {
  const StateEntry* e = find(key);
  VISION_CHECK(e != nullptr, "the model has no parameter or buffer named '{}'", key);
  auto* base = static_cast<std::byte*>(e->kind == StateKind::parameter ? param_mem_.get() : buffer_mem_.get());
  return Tensor::view(base + e->offset, e->shape, e->dtype, backend_->device());
}

Tensor StateStore::grad(const std::string& key) const {
  const StateEntry* e = find(key);
  VISION_CHECK(e != nullptr && e->kind == StateKind::parameter, "'{}' is not a trainable parameter", key);
  return Tensor::view(static_cast<std::byte*>(grad_mem_.get()) + e->offset, e->shape, e->dtype, backend_->device());
}

Tensor StateStore::compute_copy(const std::string& key, const Format& format) {
  const StateEntry* e = find(key);
  VISION_CHECK(e != nullptr, "the model has no parameter or buffer named '{}'", key);
  VISION_CHECK(core::is_floating(format.dtype) && core::is_floating(e->dtype),
               "state '{}' ({}) has no {} copy: only floating state is converted", key, core::dtype_name(e->dtype),
               format_name(format));
  auto k = std::tuple{key, format.dtype, e->shape.rank() == 4 ? format.layout : core::Layout::nchw};
  auto it = copies_.find(k);
  if (it != copies_.end()) return it->second.copy;
  ComputeCopy c;
  c.key = key;
  c.memory = backend_->allocate(static_cast<size_t>(e->shape.numel()) * core::dtype_size(format.dtype));
  c.copy = Tensor::view(c.memory.get(), e->shape, format.dtype, backend_->device(), std::get<2>(k));
  backend_->convert(c.copy, tensor(key));
  return copies_.emplace(std::move(k), std::move(c)).first->second.copy;
}

void StateStore::refresh_compute_copies() {
  if (copies_version_ == version_) return;
  for (auto& [k, c] : copies_) backend_->convert(c.copy, tensor(c.key));
  copies_version_ = version_;
}

void StateStore::convert_compute_copies() {
  for (auto& [k, c] : copies_) backend_->convert(c.copy, tensor(c.key));
  copies_version_ = version_;
}

void StateStore::set_from_host(const std::string& key, const Tensor& host) {
  const StateEntry* e = find(key);
  VISION_CHECK(e != nullptr, "the model has no parameter or buffer named '{}'", key);
  VISION_CHECK(host.shape() == e->shape, "'{}' has shape {} in the model, {} was given", key, e->shape.str(),
               host.shape().str());
  const Tensor src = host_as(host, e->dtype);
  const Tensor dst = tensor(key);
  backend_->copy_to_device(dst.raw(), src.raw(), dst.nbytes());
  mark_updated();
}

std::vector<std::pair<std::string, Tensor>> StateStore::to_host() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& e : entries_) out.emplace_back(e.key, backend_->download(tensor(e.key)));
  return out;
}

void StateStore::load_safetensors(const std::filesystem::path& path) { load(core::read_safetensors(path)); }

void StateStore::load(const core::SafetensorsFile& file, const std::function<bool(const std::string&)>& ignore) {
  const std::filesystem::path& path = file.path;
  std::vector<std::string> unexpected, missing, mismatched;
  for (const auto& [name, t] : file.tensors) {
    const StateEntry* e = find(name);
    if (!e) {
      if (!ignore || !ignore(name)) unexpected.push_back(name);
    } else if (t.shape() != e->shape && !(t.numel() == 1 && e->shape.numel() == 1)) {
      mismatched.push_back(fmt::format("{} (file {}, model {})", name, t.shape().str(), e->shape.str()));
    } else if (!(t.dtype() == e->dtype || (core::is_floating(t.dtype()) && e->dtype == DType::f32))) {
      mismatched.push_back(fmt::format("{} (file dtype {}, model {})", name, core::dtype_name(t.dtype()),
                                       core::dtype_name(e->dtype)));
    }
  }
  for (const auto& e : entries_)
    if (!file.find(e.key)) missing.push_back(e.key);
  // One error listing every problem (the first 20 of each kind).
  auto list = [](const std::vector<std::string>& v, std::string_view what) {
    if (v.empty()) return std::string();
    std::string s = fmt::format("\n  {} {}: ", v.size(), what);
    for (size_t i = 0; i < v.size() && i < 20; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 20) s += ", …";
    return s;
  };
  VISION_CHECK(mismatched.empty() && missing.empty() && unexpected.empty(),
               "{} does not fit the model (is it a checkpoint of another model, scale or number of classes?):{}{}{}",
               path.string(), list(mismatched, "tensors with the wrong shape or dtype"),
               list(missing, "missing tensors the model needs"), list(unexpected, "tensors the model does not have"));
  for (const auto& [name, t] : file.tensors)
    if (const StateEntry* e = find(name)) set_from_host(name, t.reshape(e->shape));
}

void StateStore::save_safetensors(const std::filesystem::path& path,
                                  const std::map<std::string, std::string>& metadata) const {
  core::write_safetensors(path, to_host(), metadata);
}

}  // namespace vision::graph
