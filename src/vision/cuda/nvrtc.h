// NVRTC compilation — kernel source to PTX and, for a real architecture (sm_XX), a cubin, with deterministic options.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vision::cuda {

// What NVRTC produced for one kernel and one architecture.
struct CompiledKernel {
  std::string arch;          // "sm_90a"
  std::string lowered_name;  // the kernel's mangled symbol, from nvrtcGetLoweredName
  std::string ptx;
  std::string cubin;  // machine code; empty for a virtual architecture (compute_XX)
  std::string log;    // NVRTC's log (warnings); usually empty
};

// What to compile: one program holding one kernel.
struct CompileRequest {
  std::string_view program_name;     // "silu_forward__f16.cu" (appears in diagnostics)
  std::string_view source;           // self-contained apart from the embedded toolkit headers
  std::string_view name_expression;  // the __global__ function to look up: "silu_forward<__half>"
  std::string_view arch;             // "sm_90a", "sm_80", "compute_90", ...
};

// Throws vision::Error unless arch is "sm_XY[a|f]" or "compute_XY[a|f]" (two or three digits).
void check_arch(std::string_view arch);
// True for a real architecture (sm_XX), whose compile also yields a cubin.
bool is_real_arch(std::string_view arch);

// The exact NVRTC options used for arch, in order (part of the cache key).
std::vector<std::string> compile_options(std::string_view arch);
// NVRTC's version, "13.0" (part of the cache key).
std::string nvrtc_version();

// Compiles without any cache. Every NVRTC status is checked; a failed compile throws vision::Error carrying the
// program name, the options and NVRTC's log.
CompiledKernel compile(const CompileRequest& request);

// What NVRTC produced for one program holding several kernels: one PTX and cubin, and each name expression's lowered
// name in the order given.
struct CompiledProgram {
  std::string arch;
  std::vector<std::string> lowered_names;
  std::string ptx;
  std::string cubin;  // empty for a virtual architecture
  std::string log;
};
// Compiles one program and looks up every name expression in it (compile() is this with one), without any cache:
// several instantiations of one kernel source pay for the toolkit headers' parse once.
CompiledProgram compile_program(std::string_view program_name, std::string_view source,
                                std::span<const std::string> name_expressions, std::string_view arch);

}  // namespace vision::cuda
