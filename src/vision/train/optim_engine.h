// The optimizer's engines (train/optimizer.cpp): the tables of optim_layout.cuh for one parameter-group assignment,
// the flat state buffers, and the interface the CPU engine (optimizer.cpp) and the CUDA engine (optim_engine_cuda.cpp,
// the one source of the optimizer that reaches the CUDA backend's stream and cuBLAS handle) implement. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vision/graph/backend.h"
#include "vision/train/optim_kernels.h"

namespace vision::train {

// The tables of optim_layout.cuh for one assignment.
struct OptimTables {
  std::vector<OptimTensor> tensors;      // the non-frozen parameters
  std::vector<OptimChunk> chunks;        // all of them
  std::vector<OptimChunk> muon_chunks;   // the Muon tensors'
  std::vector<int64_t> muon_tensors;     // indices into tensors
  struct NsBatch {
    int64_t m = 0, n = 0, count = 0, ns_offset = 0;  // count matrices of m × n (m ≤ n) from ns_offset on
  };
  std::vector<NsBatch> ns_batches;
  int64_t ns_elements = 0;
  int64_t max_square = 0;  // the largest count · m · m
  std::vector<int64_t> tensor_of_param;  // assignment param index → tensors index, −1 when frozen
};

// Flat state buffers (f32, one element per parameter element; unused where a tensor has no such state).
struct StatePointers {
  float* params = nullptr;
  const float* grads = nullptr;
  float* momentum = nullptr;       // SGD / MuSGD momentum buffer; AdamW exp_avg
  float* second = nullptr;         // AdamW exp_avg_sq; MuSGD Muon momentum buffer
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual float grad_sumsq() = 0;
  virtual void sgd(std::span<const OptimGroup> groups, float coef, bool musgd, int ns_steps) = 0;
  virtual void adamw(std::span<const OptimGroup> groups, float coef) = 0;
};

#ifdef VISION_HAS_CUDA
// The engine on a CUDA backend: the tables uploaded once, every step's kernels on the backend's stream.
std::unique_ptr<Engine> make_cuda_engine(const OptimTables& tables, StatePointers pointers,
                                         graph::BackendContext& backend);
#endif

}  // namespace vision::train
