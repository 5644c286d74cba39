// oneDNN on the CPU: the process-wide engine, a per-thread stream, and helpers wrapping host tensors as dnnl::memory.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string_view>
#include <unordered_map>

#include "vision/core/error.h"
#include "vision/core/tensor.h"

namespace vision::cpu {

// The CPU engine, created on first use and shared by every op.
dnnl::engine& dnnl_engine();
// The calling thread's stream on dnnl_engine() (oneDNN's CPU runtime is OpenMP: execution is synchronous).
dnnl::stream& dnnl_stream();

// A plain (dense, row-major) f32 memory descriptor of the given dims.
dnnl::memory::desc f32_desc(const dnnl::memory::dims& dims);
// dims of a tensor's shape, as oneDNN wants them.
dnnl::memory::dims dims_of(const core::Shape& shape);
// The host tensor t as oneDNN memory of descriptor md (no copy). t must be an f32 host tensor of md's size.
dnnl::memory as_memory(const dnnl::memory::desc& md, const core::Tensor& t);
// Host memory (no copy) of md's size at ptr.
dnnl::memory as_memory(const dnnl::memory::desc& md, void* ptr);

// Returns f(), with a dnnl::error turned into a vision::Error naming `what` (primitive creation).
template <typename F>
decltype(auto) dnnl_guard(std::string_view what, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    fail("oneDNN cannot create {}: {} (status {})", what, e.what(), static_cast<int>(e.status));
  }
}

// Runs a primitive on this thread's stream and waits; oneDNN errors become vision::Error naming `what`.
void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, std::string_view what);

}  // namespace vision::cpu
