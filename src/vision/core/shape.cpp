#include "vision/core/shape.h"

#include <fmt/format.h>

#include "vision/core/error.h"

namespace vision::core {

int64_t Shape::dim(int i) const {
  const int r = static_cast<int>(rank());
  const int j = i < 0 ? r + i : i;
  VISION_CHECK(j >= 0 && j < r, "dimension {} out of range for shape {}", i, str());
  return dims_[static_cast<size_t>(j)];
}

bool Shape::is_concrete() const {
  for (int64_t d : dims_)
    if (d < 0) return false;
  return true;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    VISION_CHECK(d >= 0, "shape {} has a symbolic dimension: it has no element count until bound", str());
    VISION_CHECK(!__builtin_mul_overflow(n, d, &n), "shape {} has more elements than a 64-bit count holds", str());
  }
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::compatible(const Shape& o) const {
  if (rank() != o.rank()) return false;
  for (size_t i = 0; i < rank(); ++i)
    if (dims_[i] >= 0 && o.dims_[i] >= 0 && dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace vision::core
