// Kernel descriptors — one GPU kernel instantiation (a __global__ template in an embedded .cuh, an element type,
// compile-time constants): its id, the exact source NVRTC compiles, its declared argument tuple, and a launch that
// does not compile unless its arguments match that tuple. Also the registry of all descriptors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/cuda/kernel_cache.h"
#include "vision/cuda/nvrtc.h"

namespace vision::cuda {

// What makes one kernel instantiation; a kernel family's descriptor fills it in.
struct KernelSpec {
  std::string name;  // the __global__ template's name in `file`, and the stem of the id: "maxpool2d_forward"
  std::string file;  // the embedded .cuh that defines it: "vision/ops/kernels/maxpool.cuh"
  core::DType dtype = core::DType::f32;  // the template's first argument (the element type)
  // Further template arguments, in order, named for the id: {{"k", 5}, {"s", 1}, {"p", 2}} → "__k5_s1_p2".
  std::vector<std::pair<std::string, int64_t>> constants;
  // The kernel's parameter list, {T} standing for the element type: "const {T}*, {T}*, int64_t". It must agree with
  // the descriptor's Args (pointer for void pointer, const for const, same integer/float type); checked on
  // construction.
  std::string params;
  // The namespace `name` is declared in within `file`, when not the global one: "vision::ops::attention" makes the
  // name expression "vision::ops::attention::flash_attention2_forward<...>".
  std::string scope = {};
  // How many of the leading `constants` name the id; the others are template arguments derived from them (tile
  // sizes from a family's table), shown in the source's header but not in the id. All of them by default.
  size_t id_constants = kAllConstants;

  static constexpr size_t kAllConstants = static_cast<size_t>(-1);
};

// The CUDA C++ spelling of an element type in kernel source: float, __half, __nv_bfloat16, int32_t, int64_t, uint8_t.
std::string_view cuda_type_name(core::DType dtype);

// The untyped part of a descriptor: everything but the typed launch.
class Kernel {
 public:
  Kernel(KernelSpec spec, std::vector<std::string> arg_types);
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const std::string& name() const { return spec_.name; }
  // name + dtype + constants (the first spec().id_constants of them): "silu_forward__f16",
  // "maxpool2d_forward__f32__k5_s1_p2".
  const std::string& id() const { return id_; }
  core::DType dtype() const { return spec_.dtype; }
  const KernelSpec& spec() const { return spec_; }
  // The declared Args, spelled: {"const void*", "void*", "int64_t"}.
  const std::vector<std::string>& arg_types() const { return arg_types_; }
  // What NVRTC looks up: "maxpool2d_forward<float, 5, 1, 2>" (qualified by spec().scope when it has one).
  std::string name_expression() const;
  // The exact text NVRTC compiles: the .cuh (with the vision .cuh files it includes inlined) and the explicit
  // instantiation. Deterministic: no paths, no dates.
  const std::string& source() const;

  // Compiles for arch through the disk cache (default_kernel_cache_dir(), or dir when given).
  CompiledKernel compile(std::string_view arch, const std::filesystem::path& dir = {},
                         CacheOutcome* outcome = nullptr) const;
  // Compiles (through the cache) and loads the kernel for the current device, once per process and architecture,
  // and returns its handle. Launches call it; call it before capturing a stream, since loading a library is not a
  // capturable operation.
  cudaKernel_t prepare() const;

  // Dynamic shared memory a CTA may use without raising the kernel's limit.
  static constexpr size_t kDefaultMaxDynamicSharedBytes = 48 * 1024;
  // Lets launches on the current device use up to `bytes` of dynamic shared memory: prepares the kernel and raises
  // its cudaFuncAttributeMaxDynamicSharedMemorySize (once per kernel, device and size; nothing to do up to 48 KiB).
  // Launches call it when they ask for more than 48 KiB; call it (or launch once) before capturing a stream. Throws
  // vision::Error when the device offers less (cudaDevAttrMaxSharedMemoryPerBlockOptin: 163 KiB on sm_80, 227 KiB
  // on sm_90) or a CUDA call fails.
  void set_max_dynamic_shared_memory(size_t bytes) const;

 protected:
  // cudaLaunchKernel with one pointer per argument, each to a value of the declared type.
  void launch_with(cudaStream_t stream, dim3 grid, dim3 block, size_t shared_bytes, void** args) const;

 private:
  KernelSpec spec_;
  std::string id_;
  // What identifies the loaded instantiation: the id and the name expression (ids may leave out derived constants).
  std::string load_key_;
  std::vector<std::string> arg_types_;
  mutable std::once_flag source_once_;
  mutable std::string source_;
};

namespace detail {

template <typename...>
inline constexpr bool always_false = false;

// The parameter types a kernel may declare: device pointers as void pointers, and scalars of fixed width.
template <typename P>
inline constexpr bool is_param_type =
    std::is_same_v<P, const void*> || std::is_same_v<P, void*> || std::is_same_v<P, int64_t> ||
    std::is_same_v<P, int32_t> || std::is_same_v<P, uint32_t> || std::is_same_v<P, float>;

template <typename P>
constexpr std::string_view param_type_name() {
  if constexpr (std::is_same_v<P, const void*>) return "const void*";
  else if constexpr (std::is_same_v<P, void*>) return "void*";
  else if constexpr (std::is_same_v<P, int64_t>) return "int64_t";
  else if constexpr (std::is_same_v<P, int32_t>) return "int32_t";
  else if constexpr (std::is_same_v<P, uint32_t>) return "uint32_t";
  else return "float";
}

// Whether an argument of type A may fill a parameter declared P: the same type (no integer or float conversions),
// or, for a void pointer parameter, an object pointer of matching constness (T* → void* or const void*,
// const T* → const void*) or nullptr.
template <typename P, typename A>
constexpr bool arg_matches() {
  using D = std::decay_t<A>;
  if constexpr (std::is_same_v<P, D>) {
    return true;
  } else if constexpr (std::is_same_v<P, const void*> || std::is_same_v<P, void*>) {
    if constexpr (std::is_null_pointer_v<D>) return true;
    else if constexpr (std::is_pointer_v<D> && std::is_object_v<std::remove_pointer_t<D>>)
      return std::is_same_v<P, const void*> || !std::is_const_v<std::remove_pointer_t<D>>;
    else return false;
  } else {
    return false;
  }
}

// One check per argument, so that the compiler's "required from" line names the argument's index and both types.
template <size_t Index, typename Param, typename Arg>
constexpr bool check_launch_arg() {
  static_assert(arg_matches<Param, Arg>(),
                "vision::cuda::KernelDescriptor::launch: argument type does not match the kernel's declared Args "
                "tuple (the instantiation context names its Index, the declared Param and the given Arg; exact "
                "types only, except T* -> void*/const void* and const T* -> const void*)");
  return true;
}

template <typename ParamTuple, typename ArgTuple, size_t... I>
constexpr bool check_launch_args(std::index_sequence<I...>) {
  return (check_launch_arg<I, std::tuple_element_t<I, ParamTuple>, std::tuple_element_t<I, ArgTuple>>() && ...);
}

}  // namespace detail

// Blocks for a grid-stride loop over `items` with `threads` per block: enough to cover them, at most 65535 · 8
// (the loop does the rest), at least 1.
uint32_t grid_blocks(int64_t items, int threads);

// A kernel whose arguments are the declared Params. A family's descriptor derives from it:
//   struct SiluForward : KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*n*/> { ... };
template <typename... Params>
class KernelDescriptor : public Kernel {
  static_assert(sizeof...(Params) > 0, "a kernel takes at least one argument");
  static_assert((detail::is_param_type<Params> && ...),
                "kernel parameters are limited to const void*, void*, int64_t, int32_t, uint32_t and float");

 public:
  using Args = std::tuple<Params...>;

  explicit KernelDescriptor(KernelSpec spec)
      : Kernel(std::move(spec), {std::string(detail::param_type_name<Params>())...}) {}

  // Launches on stream; the arguments must match Args in count and type (see detail::arg_matches), or this does not
  // compile. Throws vision::Error when compiling, loading or launching fails.
  template <typename... A>
  void launch(cudaStream_t stream, dim3 grid, dim3 block, size_t shared_bytes, A&&... args) const {
    if constexpr (sizeof...(A) != sizeof...(Params)) {
      static_assert(detail::always_false<A...>,
                    "vision::cuda::KernelDescriptor::launch: wrong number of arguments for this kernel (they must "
                    "match its declared Args tuple)");
    } else if constexpr (!detail::check_launch_args<Args, std::tuple<A...>>(std::index_sequence_for<A...>{})) {
      // check_launch_args has already failed with a static_assert naming the argument.
    } else {
      Args values{static_cast<Params>(args)...};
      std::apply(
          [&](auto&... v) {
            void* pointers[] = {static_cast<void*>(&v)...};
            launch_with(stream, grid, block, shared_bytes, pointers);
          },
          values);
    }
  }

  // The launch of a grid-stride kernel over `items` (one thread each, the loop doing what the grid does not cover):
  // grid_blocks(items, threads) blocks of `threads`, no dynamic shared memory. Most element-wise and per-pixel
  // launchers are this one call.
  template <typename... A>
  void launch_over(cudaStream_t stream, int64_t items, int threads, A&&... args) const {
    launch(stream, dim3(grid_blocks(items, threads)), dim3(static_cast<unsigned>(threads)), 0, std::forward<A>(args)...);
  }
};

// All kernel descriptors, for `vision kernels list|source|ptx|build`. Families register from their descriptor .cpp
// with VISION_REGISTER_KERNELS(fn); the registration functions run on first use of the registry.
class KernelRegistry {
 public:
  using RegisterFn = void (*)(KernelRegistry&);
  static KernelRegistry& global();

  // Adds a kernel; throws vision::Error when its id is already registered.
  void add(std::unique_ptr<Kernel> kernel);
  template <typename D, typename... A>
  void add(A&&... a) {
    add(std::make_unique<D>(std::forward<A>(a)...));
  }

  // Every kernel, sorted by id.
  std::vector<const Kernel*> kernels();
  // The kernel with this id, or nullptr.
  const Kernel* find(std::string_view id);

  // Called by VISION_REGISTER_KERNELS at static initialisation.
  void defer(RegisterFn fn);

 private:
  void run_pending();  // mutex_ held
  std::recursive_mutex mutex_;
  std::vector<RegisterFn> pending_;
  std::map<std::string, std::unique_ptr<Kernel>, std::less<>> kernels_;
};

struct KernelRegistration {
  explicit KernelRegistration(KernelRegistry::RegisterFn fn) { KernelRegistry::global().defer(fn); }
};

// One descriptor per distinct constructor arguments, kept for the life of the process (for launch helpers whose
// kernel depends on run-time values: the dtype, a pooling window).
template <typename D, typename... A>
const D& kernel_instance(A... a) {
  static std::mutex mutex;
  static std::map<std::tuple<A...>, std::unique_ptr<D>> instances;
  std::lock_guard lock(mutex);
  std::unique_ptr<D>& d = instances[std::tuple<A...>(a...)];
  if (!d) d = std::make_unique<D>(a...);
  return *d;
}

}  // namespace vision::cuda

// In a kernel family's descriptor .cpp: VISION_REGISTER_KERNELS(register_my_kernels); with
// void register_my_kernels(vision::cuda::KernelRegistry&) adding each instantiation worth listing.
#define VISION_REGISTER_KERNELS(fn) \
  static const ::vision::cuda::KernelRegistration vision_kernel_registration_##fn { fn }
