// Embedded kernel text — every .cuh under src/vision and the CUDA toolkit headers the kernels include, built into the
// library by cmake/EmbedKernels.cmake so that a binary compiles its kernels with no source tree or toolkit present.
#pragma once

#include <span>
#include <string_view>

namespace vision::cuda {

struct EmbeddedFile {
  std::string_view name;  // "vision/ops/kernels/elementwise.cuh", or a toolkit header's name ("cuda_fp16.h")
  std::string_view text;
};

// The text of the .cuh at relpath (spelled as it is included: "vision/ops/kernels/elementwise.cuh"); empty if unknown.
std::string_view embedded_kernel_source(std::string_view relpath);
// The text of an embedded toolkit header ("cuda_fp16.h", "cuda_bf16.hpp", ...); empty if unknown.
std::string_view embedded_toolkit_header(std::string_view name);

// All embedded files, sorted by name.
std::span<const EmbeddedFile> embedded_kernel_sources();
std::span<const EmbeddedFile> embedded_toolkit_headers();

}  // namespace vision::cuda
