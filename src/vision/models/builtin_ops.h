// The built-in ops — those of src/vision/ops and the graph ops of the YOLO26 kernels — each in a representative
// configuration, and the GPU kernels their CUDA RuntimeOps may launch (what `vision kernels ops` prints).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vision/graph/op.h"

namespace vision::models {

struct BuiltinOp {
  std::shared_ptr<const graph::Op> op;  // op->name() is the op's name: "ops.conv2d", "ops.flash_attention2"
  std::string config;                   // the configuration shown: "k=5 s=1 p=2, YOLO26's SPPF"; may be empty
  std::vector<graph::Mode> modes;       // the modes it lowers for (fusions are inference-only)
};

// Every built-in op, sorted by name; YOLO26's configuration where the op's kernels depend on one.
const std::vector<BuiltinOp>& builtin_ops();
// The built-in op of this name; throws vision::Error naming the known ones.
const BuiltinOp& builtin_op(std::string_view name);

// The kernels the op's CUDA RuntimeOps (lowered with graph::Backend::cuda for each of its modes; no GPU needed) may
// launch, each once, in the order the RuntimeOps list them. Empty for an op whose CUDA work is all cuDNN. Throws
// vision::Error in a build without CUDA.
std::vector<graph::KernelInfo> cuda_kernels(const BuiltinOp& op);

}  // namespace vision::models
