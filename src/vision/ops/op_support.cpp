#include "vision/ops/op_support.h"

namespace vision::ops {

using core::Shape;

void expect_inputs(const std::vector<Shape>& inputs, size_t count, int rank, std::string_view what) {
  VISION_CHECK(inputs.size() == count, "{} takes {} input(s), got {}", what, count, inputs.size());
  if (rank < 0) return;
  for (size_t i = 0; i < inputs.size(); ++i)
    VISION_CHECK(inputs[i].rank() == static_cast<size_t>(rank), "{} needs rank-{} input(s){}, input {} is {}", what,
                 rank, rank == 4 ? " (N, C, H, W)" : "", i, inputs[i].str());
}

int64_t merge_dim(int64_t a, int64_t b, std::string_view what) {
  if (a == Shape::kAny) return b;
  if (b == Shape::kAny) return a;
  VISION_CHECK(a == b, "{}: {} vs {}", what, a, b);
  return a;
}

Shape merge_shapes(const Shape& a, const Shape& b, std::string_view what) {
  VISION_CHECK(a.compatible(b), "{}: shapes {} and {} differ", what, a.str(), b.str());
  Shape out = a;
  for (size_t i = 0; i < a.rank(); ++i) out[i] = merge_dim(a[i], b[i], what);
  return out;
}

int64_t sum_dims(const std::vector<int64_t>& dims) {
  int64_t s = 0;
  for (int64_t d : dims) {
    if (d == Shape::kAny) return Shape::kAny;
    s += d;
  }
  return s;
}

void no_backend(const graph::Op& op, graph::Backend backend) {
  fail("op '{}' has no {} implementation yet: run this model on the CPU backend (--device cpu)", op.name(),
       graph::backend_name(backend));
}

}  // namespace vision::ops
