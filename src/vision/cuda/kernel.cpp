#include "vision/cuda/kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/cuda/embedded.h"

namespace vision::cuda {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_params(std::string_view list) {
  std::vector<std::string_view> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    out.push_back(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

// Whether a kernel parameter spelled `param` (element type substituted) may receive a host argument of `arg` type.
bool param_accepts(std::string_view param, std::string_view arg) {
  if (param.ends_with("*")) {
    const bool is_const = param.starts_with("const ");
    return arg == (is_const ? "const void*" : "void*");
  }
  if (arg == "int32_t") return param == "int32_t" || param == "int";
  if (arg == "uint32_t") return param == "uint32_t" || param == "unsigned";
  return param == arg;  // int64_t, float
}

std::string params_for(const KernelSpec& spec) {
  return fmt::format(fmt::runtime(spec.params), fmt::arg("T", cuda_type_name(spec.dtype)));
}

// Appends `text` to out, replacing each `#include "vision/....cuh"` by that embedded file (once per file) and dropping
// `#pragma once` lines, so that the result needs no vision header at compile time.
void expand(std::string_view file, std::string_view text, std::set<std::string, std::less<>>& seen, std::string& out) {
  out += fmt::format("// ---- {} ----\n", file);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const std::string_view t = trim(line);
    if (t == "#pragma once") continue;
    if (t.starts_with("#include \"vision/") && t.ends_with(".cuh\"")) {
      const std::string_view inc = t.substr(10, t.size() - 11);
      const std::string_view inc_text = embedded_kernel_source(inc);
      VISION_CHECK(!inc_text.empty(), "{} includes {}, which is not an embedded kernel file", file, inc);
      if (seen.insert(std::string(inc)).second) expand(inc, inc_text, seen, out);
      out += fmt::format("// ---- {} (continued) ----\n", file);
      continue;
    }
    out.append(line);
    out.push_back('\n');
  }
}

// Loaded kernels, shared by all descriptor objects of one instantiation: (id and name expression, arch) → handle.
// Libraries stay loaded for the life of the process (unloading at exit would race the CUDA runtime's own teardown).
// Also the dynamic shared memory limit set for each (instantiation, device).
struct Loaded {
  std::mutex mutex;
  std::map<std::pair<std::string, std::string>, cudaKernel_t> kernels;
  std::map<std::pair<std::string, int>, size_t> max_dynamic_shared;
};

Loaded& loaded() {
  static Loaded* l = new Loaded;  // never destroyed, see above
  return *l;
}

// The architecture of each device, looked up once.
std::string device_arch() {
  static std::mutex mutex;
  static std::map<int, std::string> arch_of;
  int device = 0;
  VISION_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  auto it = arch_of.find(device);
  if (it == arch_of.end()) it = arch_of.emplace(device, current_arch()).first;
  return it->second;
}

}  // namespace

std::string_view cuda_type_name(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32: return "float";
    case core::DType::f16: return "__half";
    case core::DType::bf16: return "__nv_bfloat16";
    case core::DType::i32: return "int32_t";
    case core::DType::i64: return "int64_t";
    case core::DType::u8: return "uint8_t";
    case core::DType::boolean: return "bool";
  }
  return "?";
}

Kernel::Kernel(KernelSpec spec, std::vector<std::string> arg_types)
    : spec_(std::move(spec)), arg_types_(std::move(arg_types)) {
  id_ = fmt::format("{}__{}", spec_.name, core::dtype_name(spec_.dtype));
  for (size_t i = 0; i < std::min(spec_.constants.size(), spec_.id_constants); ++i)
    id_ += fmt::format("{}{}{}", i == 0 ? "__" : "_", spec_.constants[i].first, spec_.constants[i].second);

  load_key_ = id_ + " " + name_expression();

  const std::string params = params_for(spec_);
  const std::vector<std::string_view> list = split_params(params);
  VISION_CHECK(list.size() == arg_types_.size(),
               "kernel {}: its parameters ({}) and its Args ({} types) differ in count", id_, params,
               arg_types_.size());
  for (size_t i = 0; i < list.size(); ++i)
    VISION_CHECK(param_accepts(list[i], arg_types_[i]), "kernel {}: parameter {} is '{}' but Args declares '{}'", id_,
                 i, list[i], arg_types_[i]);
}

std::string Kernel::name_expression() const {
  std::string expr = spec_.scope.empty() ? std::string() : spec_.scope + "::";
  expr += fmt::format("{}<{}", spec_.name, cuda_type_name(spec_.dtype));
  for (const auto& [label, value] : spec_.constants) expr += fmt::format(", {}", value);
  return expr + ">";
}

const std::string& Kernel::source() const {
  std::call_once(source_once_, [&] {
    const std::string_view text = embedded_kernel_source(spec_.file);
    VISION_CHECK(!text.empty(), "kernel {}: {} is not an embedded kernel file", id_, spec_.file);
    std::string constants;
    for (const auto& [label, value] : spec_.constants) constants += fmt::format(", {} = {}", label, value);
    std::string out = fmt::format(
        "// {}: kernel {} from {}, element type {}{}.\n"
        "// Generated by vision-cpp: the exact text NVRTC compiles (see `vision kernels source {}`).\n",
        id_, spec_.name, spec_.file, cuda_type_name(spec_.dtype), constants, id_);
    std::set<std::string, std::less<>> seen{spec_.file};
    expand(spec_.file, text, seen, out);
    out += fmt::format("// ---- instantiation ----\ntemplate __global__ void {}({});\n", name_expression(),
                       params_for(spec_));
    source_ = std::move(out);
  });
  return source_;
}

CompiledKernel Kernel::compile(std::string_view arch, const std::filesystem::path& dir, CacheOutcome* outcome) const {
  const std::string program = id_ + ".cu", expr = name_expression();
  return compile_cached({program, source(), expr, arch}, dir, outcome);
}

cudaKernel_t Kernel::prepare() const {
  const std::string arch = device_arch();
  Loaded& l = loaded();
  std::lock_guard lock(l.mutex);
  const auto key = std::make_pair(load_key_, arch);
  if (auto it = l.kernels.find(key); it != l.kernels.end()) return it->second;

  const CompiledKernel compiled = compile(arch);
  // A cubin when there is one (no JIT at load time); the PTX, NUL-terminated, otherwise.
  const std::string ptx = compiled.ptx;
  const void* image =
      compiled.cubin.empty() ? static_cast<const void*>(ptx.c_str()) : static_cast<const void*>(compiled.cubin.data());
  cudaLibrary_t library = nullptr;
  VISION_CUDA_CHECK(cudaLibraryLoadData(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  try {
    VISION_CUDA_CHECK(cudaLibraryGetKernel(&kernel, library, compiled.lowered_name.c_str()));
  } catch (...) {
    (void)cudaLibraryUnload(library);
    throw;
  }
  l.kernels.emplace(key, kernel);
  return kernel;
}

void Kernel::set_max_dynamic_shared_memory(size_t bytes) const {
  if (bytes <= kDefaultMaxDynamicSharedBytes) return;
  const cudaKernel_t kernel = prepare();
  int device = 0;
  VISION_CUDA_CHECK(cudaGetDevice(&device));
  Loaded& l = loaded();
  std::lock_guard lock(l.mutex);
  size_t& current = l.max_dynamic_shared[std::make_pair(load_key_, device)];
  if (bytes <= current) return;
  int optin = 0;
  VISION_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  VISION_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)));
  VISION_CHECK(bytes + attributes.sharedSizeBytes <= static_cast<size_t>(optin),
               "kernel {} needs {} bytes of dynamic shared memory (+ {} static) per CTA, but device {} offers at most "
               "{}: use a smaller instantiation (head size, tiles) on this GPU",
               id_, bytes, attributes.sharedSizeBytes, device, optin);
  // A cudaKernel_t passed as the function pointer is taken as the kernel itself (CUDA runtime API, "cudaKernel_t"
  // note of cudaFuncSetAttribute); the attribute applies to the current device.
  const cudaError_t status = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (status != cudaSuccess)
    fail("{}", cuda_error_message(status, fmt::format("cudaFuncSetAttribute({}, "
                                                      "cudaFuncAttributeMaxDynamicSharedMemorySize, {})",
                                                      id_, bytes)));
  current = bytes;
}

void Kernel::launch_with(cudaStream_t stream, dim3 grid, dim3 block, size_t shared_bytes, void** args) const {
  if (shared_bytes > kDefaultMaxDynamicSharedBytes) set_max_dynamic_shared_memory(shared_bytes);
  const cudaKernel_t kernel = prepare();
  const cudaError_t status =
      cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, shared_bytes, stream);
  if (status != cudaSuccess)
    fail("{}",
         cuda_error_message(status, fmt::format("cudaLaunchKernel({}, grid ({}, {}, {}), block ({}, {}, {}), "
                                                "{} shared bytes)",
                                                id_, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes)));
}

uint32_t grid_blocks(int64_t items, int threads) {
  constexpr int64_t kMaxBlocks = 65535 * 8;
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<uint32_t>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* r = new KernelRegistry;  // never destroyed: descriptors may be used during static teardown
  return *r;
}

void KernelRegistry::defer(RegisterFn fn) {
  std::lock_guard lock(mutex_);
  pending_.push_back(fn);
}

void KernelRegistry::run_pending() {
  while (!pending_.empty()) {
    const RegisterFn fn = pending_.back();
    pending_.pop_back();
    fn(*this);
  }
}

void KernelRegistry::add(std::unique_ptr<Kernel> kernel) {
  std::lock_guard lock(mutex_);
  VISION_CHECK(kernel != nullptr, "KernelRegistry::add: null kernel");
  const std::string id = kernel->id();
  VISION_CHECK(kernels_.emplace(id, std::move(kernel)).second, "kernel id {} is registered twice", id);
}

std::vector<const Kernel*> KernelRegistry::kernels() {
  std::lock_guard lock(mutex_);
  run_pending();
  std::vector<const Kernel*> out;
  for (const auto& [id, k] : kernels_) out.push_back(k.get());
  return out;
}

const Kernel* KernelRegistry::find(std::string_view id) {
  std::lock_guard lock(mutex_);
  run_pending();
  const auto it = kernels_.find(id);
  return it == kernels_.end() ? nullptr : it->second.get();
}

}  // namespace vision::cuda
