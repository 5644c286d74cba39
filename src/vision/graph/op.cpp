#include "vision/graph/op.h"

#include <cstring>
#include <random>

namespace vision::graph {

std::string_view backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

std::string format_name(const Format& f) {
  return std::string(core::dtype_name(f.dtype)) + " " + std::string(core::layout_name(f.layout));
}

std::vector<std::byte> RuntimeOp::param_init_data(size_t i, const std::vector<Shape>& inputs, const Shape& output,
                                                  uint64_t seed) const {
  fail("op '{}' declares state #{} but gives no initial data for it", name(), i);
}

void RuntimeOp::backward(BackwardCtx&) { fail("op '{}' has no backward", name()); }

Shape Op::infer_output_shape(const std::vector<Shape>&) const {
  fail("op '{}' has {} outputs: it must override infer_output_shapes", name(), n_outputs());
}

std::vector<std::byte> bytes_of(const std::vector<float>& values) {
  std::vector<std::byte> b(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

std::vector<std::byte> filled_bytes(const Shape& shape, float value) {
  return bytes_of(std::vector<float>(static_cast<size_t>(shape.numel()), value));
}

std::vector<float> uniform_init(const Shape& shape, float bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return v;
}

uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace vision::graph
