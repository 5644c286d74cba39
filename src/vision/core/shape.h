// Shape — tensor dimensions; a dimension may be symbolic (unknown until a plan binds it, usually the batch).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace vision::core {

class Shape {
 public:
  static constexpr int64_t kAny = -1;  // a symbolic dimension

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_.at(i); }
  int64_t& operator[](size_t i) { return dims_.at(i); }
  // Dimension i counted from the end when negative (-1 = last).
  int64_t dim(int i) const;
  const std::vector<int64_t>& dims() const { return dims_; }

  bool is_concrete() const;
  // Number of elements; throws vision::Error when a dimension is symbolic.
  int64_t numel() const;
  std::string str() const;  // "[?, 3, 640, 640]"

  // True when every concrete dimension of *this equals the one of other (symbolic ones match anything).
  bool compatible(const Shape& other) const;

  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace vision::core
