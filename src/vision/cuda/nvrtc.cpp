#include "vision/cuda/nvrtc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "vision/cuda/check.h"
#include "vision/cuda/embedded.h"
#include "vision/cuda/kernel_cache.h"

namespace vision::cuda {
namespace {

bool digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string program_log(nvrtcProgram p) {
  size_t size = 0;
  VISION_NVRTC_CHECK(nvrtcGetProgramLogSize(p, &size));
  std::string log(size, '\0');
  if (size > 0) VISION_NVRTC_CHECK(nvrtcGetProgramLog(p, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

void check_arch(std::string_view arch) {
  std::string_view rest = arch;
  if (rest.starts_with("sm_")) rest.remove_prefix(3);
  else if (rest.starts_with("compute_")) rest.remove_prefix(8);
  else rest = {};
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) rest.remove_suffix(1);
  VISION_CHECK(digits(rest) && rest.size() >= 2 && rest.size() <= 3,
               "invalid GPU architecture '{}': expected sm_XY (a real GPU: sm_80, sm_90, sm_90a, ...) or compute_XY "
               "(PTX only)",
               arch);
}

bool is_real_arch(std::string_view arch) { return arch.starts_with("sm_"); }

std::vector<std::string> compile_options(std::string_view arch) {
  check_arch(arch);
  return {fmt::format("--gpu-architecture={}", arch), "--std=c++17"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  VISION_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return fmt::format("{}.{}", major, minor);
}

CompiledProgram compile_program(std::string_view program_name, std::string_view source_text,
                                std::span<const std::string> name_expressions, std::string_view arch) {
  const std::vector<std::string> options = compile_options(arch);
  const std::string name(program_name);
  VISION_CHECK(!name_expressions.empty(), "NVRTC program {}: no kernel to look up", name);

  // The toolkit headers the kernels include, handed over by name (NVRTC 13 has none built in).
  std::vector<const char*> header_texts, header_names;
  std::vector<std::string> header_storage;  // NUL-terminated copies
  for (const EmbeddedFile& h : embedded_toolkit_headers()) {
    header_storage.emplace_back(h.text);
    header_storage.emplace_back(h.name);
  }
  for (size_t i = 0; i < header_storage.size(); i += 2) {
    header_texts.push_back(header_storage[i].c_str());
    header_names.push_back(header_storage[i + 1].c_str());
  }

  const std::string source(source_text);
  nvrtcProgram raw = nullptr;
  VISION_NVRTC_CHECK(nvrtcCreateProgram(&raw, source.c_str(), name.c_str(), static_cast<int>(header_texts.size()),
                                        header_texts.data(), header_names.data()));
  Program program(raw);
  for (const std::string& expr : name_expressions) VISION_NVRTC_CHECK(nvrtcAddNameExpression(raw, expr.c_str()));

  std::vector<const char*> option_ptrs;
  for (const auto& o : options) option_ptrs.push_back(o.c_str());
  const nvrtcResult status = nvrtcCompileProgram(raw, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  CompiledProgram out;
  out.arch = std::string(arch);
  out.log = program_log(raw);
  if (status != NVRTC_SUCCESS)
    fail("NVRTC could not compile {} for {} ({}; options: {}):\n{}", name, arch, nvrtcGetErrorString(status),
         fmt::join(options, " "), out.log);

  for (const std::string& expr : name_expressions) {
    const char* lowered = nullptr;
    VISION_NVRTC_CHECK(nvrtcGetLoweredName(raw, expr.c_str(), &lowered));
    VISION_CHECK(lowered != nullptr, "NVRTC returned no lowered name for {} in {}", expr, name);
    out.lowered_names.emplace_back(lowered);
  }

  size_t size = 0;
  VISION_NVRTC_CHECK(nvrtcGetPTXSize(raw, &size));
  out.ptx.resize(size);
  VISION_NVRTC_CHECK(nvrtcGetPTX(raw, out.ptx.data()));
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();

  if (is_real_arch(arch)) {
    VISION_NVRTC_CHECK(nvrtcGetCUBINSize(raw, &size));
    out.cubin.resize(size);
    VISION_NVRTC_CHECK(nvrtcGetCUBIN(raw, out.cubin.data()));
  }
  return out;
}

CompiledKernel compile(const CompileRequest& request) {
  const std::string expr(request.name_expression);
  CompiledProgram p = compile_program(request.program_name, request.source, std::span<const std::string>(&expr, 1),
                                      request.arch);
  CompiledKernel out;
  out.arch = std::move(p.arch);
  out.lowered_name = std::move(p.lowered_names.front());
  out.ptx = std::move(p.ptx);
  out.cubin = std::move(p.cubin);
  out.log = std::move(p.log);
  return out;
}

// The cache (kernel_cache.cpp) is host code, built without CUDA too; the compilation through it needs NVRTC.
CompiledKernel compile_cached(const CompileRequest& request, const std::filesystem::path& dir, CacheOutcome* outcome) {
  const KernelCache cache(dir.empty() ? default_kernel_cache_dir() : dir);
  const std::vector<std::string> options = compile_options(request.arch);
  const std::string key =
      kernel_cache_key(request.source, options, request.arch, nvrtc_version(), request.name_expression);
  auto build = [&] { return serialize(compile(request)); };
  const std::string payload = cache.get_or_build(key, build, outcome);
  std::optional<CompiledKernel> k = deserialize(payload);
  if (!k) {
    // Intact on disk (checksum) but not a kernel: an entry written by something else. Rebuild without the cache.
    if (outcome) *outcome = CacheOutcome::rebuilt_corrupt;
    k = compile(request);
    cache.store(key, serialize(*k));
  }
  return *std::move(k);
}

}  // namespace vision::cuda
