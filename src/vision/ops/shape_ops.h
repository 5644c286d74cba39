// Shape ops: concat and split along any axis, channel slice, reshape / flatten, permute, and detach
// (stop-gradient). Concat and split take any dtype; where memory allows they copy nothing: a reshape, a
// detach and a split along an outer axis (every dim before it is 1) are views of their input, and the
// inputs of a concat along an outer axis are produced in place inside its output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// Concatenation of n_inputs inputs along `axis` (negative counts from the end); the other dims must agree.
class ConcatOp final : public graph::Op {
 public:
  explicit ConcatOp(int n_inputs, int64_t axis = 1);
  int n_inputs() const { return n_inputs_; }
  int64_t axis() const { return axis_; }
  std::string name() const override { return "ops.concat"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
  std::optional<size_t> input_in_output(size_t input, const std::vector<core::Shape>& inputs,
                                        core::Layout layout) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  int n_inputs_;
  int64_t axis_;
};

// The input cut along `axis` into parts of the given sizes (which add up to that dim): one output per part.
class SplitOp final : public graph::Op {
 public:
  SplitOp(std::vector<int64_t> sizes, int64_t axis = 1);
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t axis() const { return axis_; }
  std::string name() const override { return "ops.split"; }
  size_t n_outputs() const override { return sizes_.size(); }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::optional<graph::OutputView> output_view(size_t output, const std::vector<core::Shape>& inputs,
                                               core::Layout layout) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  std::vector<int64_t> sizes_;
  int64_t axis_;
};

// Channels [begin, begin + count) of the input.
class ChannelSliceOp final : public FloatOp {
 public:
  ChannelSliceOp(int64_t begin, int64_t count);
  int64_t begin() const { return begin_; }
  int64_t count() const { return count_; }
  std::string name() const override { return "ops.channel_slice"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  int64_t begin_, count_;
};

// The same elements in another shape. dims: 0 keeps the input's dim at that position, -1 (at most one) is
// inferred from the element count; a symbolic input dim stays symbolic. Flatten(start, end) merges the dims
// start..end (inclusive; negative counts from the end) into one.
class ReshapeOp final : public graph::Op {
 public:
  static ReshapeOp flatten(int64_t start, int64_t end);
  explicit ReshapeOp(std::vector<int64_t> dims);
  // A flatten (start_dim(), end_dim()) or a reshape to dims().
  bool is_flatten() const { return flatten_; }
  int64_t start_dim() const { return start_; }
  int64_t end_dim() const { return end_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::string name() const override { return flatten_ ? "ops.flatten" : "ops.reshape"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::optional<graph::OutputView> output_view(size_t output, const std::vector<core::Shape>& inputs,
                                               core::Layout layout) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  ReshapeOp() = default;
  std::vector<int64_t> dims_;
  bool flatten_ = false;
  int64_t start_ = 0, end_ = 0;
};

// Dims reordered: output dim i is input dim perm[i] (a copy).
class PermuteOp final : public graph::Op {
 public:
  explicit PermuteOp(std::vector<int64_t> perm);
  const std::vector<int64_t>& perm() const { return perm_; }
  std::string name() const override { return "ops.permute"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  std::vector<int64_t> perm_;
};

// Stop-gradient: the input's values (a view), through which no gradient flows back.
class DetachOp final : public graph::Op {
 public:
  std::string name() const override { return "ops.detach"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  bool stops_gradient() const override { return true; }
  std::optional<graph::OutputView> output_view(size_t output, const std::vector<core::Shape>& inputs,
                                               core::Layout layout) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

graph::SymTensor concat(const std::vector<graph::SymTensor>& xs, const std::string& name = "");
graph::SymTensor concat(const std::vector<graph::SymTensor>& xs, int64_t axis, const std::string& name = "");
graph::SymTensor channel_slice(graph::SymTensor x, int64_t begin, int64_t count, const std::string& name = "");
// One node with an output per part (sizes add up to the dim): along channels, or along `axis`.
std::vector<graph::SymTensor> split(graph::SymTensor x, const std::vector<int64_t>& sizes, const std::string& name = "");
std::vector<graph::SymTensor> split(graph::SymTensor x, const std::vector<int64_t>& sizes, int64_t axis,
                                    const std::string& name = "");
graph::SymTensor reshape(graph::SymTensor x, const std::vector<int64_t>& dims, const std::string& name = "");
graph::SymTensor flatten(graph::SymTensor x, int64_t start = 1, int64_t end = -1, const std::string& name = "");
graph::SymTensor permute(graph::SymTensor x, const std::vector<int64_t>& perm, const std::string& name = "");
graph::SymTensor detach(graph::SymTensor x, const std::string& name = "");

}  // namespace vision::ops
