// Channel shape ops on f32 tensors of rank >= 2 (dim 1 = channels): concat, channel_slice, and split built on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/f32_op.h"

namespace vision::ops {

// Concatenation of n_inputs inputs along dim 1; the other dimensions must agree.
class ConcatOp final : public F32Op {
 public:
  explicit ConcatOp(int n_inputs);
  int n_inputs() const { return n_inputs_; }
  std::string name() const override { return "ops.concat"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  int n_inputs_;
};

// Channels [begin, begin + count) of the input.
class ChannelSliceOp final : public F32Op {
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

graph::SymTensor concat(const std::vector<graph::SymTensor>& xs, const std::string& name = "");
graph::SymTensor channel_slice(graph::SymTensor x, int64_t begin, int64_t count, const std::string& name = "");
// Consecutive channel slices of the given sizes (which must add up to the channel count), one per size;
// slice i is named "<name>.<i>" (or left unnamed when name is empty).
std::vector<graph::SymTensor> split(graph::SymTensor x, const std::vector<int64_t>& sizes, const std::string& name = "");

}  // namespace vision::ops
