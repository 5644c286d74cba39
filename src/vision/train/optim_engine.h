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
  std::vector<int64_t> tensor_of_param;  // assignment param index → tensors index, −1 when frozen
};

// Flat state buffers (f32, one element per parameter element; unused where a tensor has no such state).
struct StatePointers {
  float* params = nullptr;
  const float* grads = nullptr;
  float* momentum = nullptr;       // SGD / MuSGD momentum buffer; AdamW exp_avg
  float* second = nullptr;         // AdamW exp_avg_sq; MuSGD Muon momentum buffer
};

// A step is stage() (the host's part: the step's group settings), then decide() and sgd() or adamw(), queued without
// waiting (the CUDA engine's on the backend's stream, capturable into a CUDA graph: a replay takes the settings staged
// last); the updates take their gradient factor from the decision and do nothing when it skips the step.
class Engine {
 public:
  virtual ~Engine() = default;
  // The group settings the next sgd()/adamw() — or replay of one that a graph captured — uses; as many groups every
  // step.
  virtual void stage(std::span<const OptimGroup> groups) = 0;
  // Σ g² over the non-frozen elements and the step's decision from it (optim_math::decide_step).
  virtual void decide(float max_grad_norm) = 0;
  virtual void sgd(bool musgd, int ns_steps) = 0;
  virtual void adamw() = 0;
  // Whether decide() and the updates may be captured into a CUDA graph and replayed (false on the CPU, and where
  // Newton–Schulz runs on cuBLAS: its grouped GEMM's replays were wrong, the per-shape one was never captured).
  virtual bool capturable() const = 0;
  // The last decision, read back (the CUDA engine waits for its stream).
  virtual OptimStatus status() = 0;
  // Where the last decision lives (device memory on CUDA): what the EMA's update reads to follow it.
  virtual const OptimStatus* status_pointer() const = 0;
};

#ifdef VISION_HAS_CUDA
// The engine on a CUDA backend: the tables uploaded once, every step's kernels on the backend's stream.
std::unique_ptr<Engine> make_cuda_engine(const OptimTables& tables, StatePointers pointers,
                                         graph::BackendContext& backend);
#endif

}  // namespace vision::train
