#include "vision/ops/attention/flash_attn2_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/graph/arena.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::ops::attention {
namespace {

using core::Shape;
using core::Tensor;

constexpr const char* kFa2File = "vision/ops/attention/flash_attn2.cuh";
constexpr const char* kFileSm90 = "vision/ops/attention/flash_attn2_sm90.cuh";
constexpr const char* kFa2Scope = "vision::ops::attention";

// The (d, d_v) pairs registered (and snapshot/compile-tested): YOLO26's PSA runs d_v = 2 · d.
constexpr std::pair<int, int> kHeadSizes[] = {{16, 16}, {32, 32}, {64, 64},  {128, 128},
                                              {16, 32}, {32, 64}, {64, 128}, {128, 256}};
constexpr int kValueSizes[] = {16, 32, 64, 128, 256};
constexpr DType kFa2Dtypes[] = {DType::f32, DType::f16, DType::bf16};

constexpr const char* kForwardParams = "const {T}*, const {T}*, const {T}*, {T}*, float*, int, int, float";
constexpr const char* kPreprocessParams = "const {T}*, const {T}*, float*, int";
constexpr const char* kDqParams =
    "const {T}*, const {T}*, const {T}*, const {T}*, const float*, const float*, {T}*, int, int, float";
constexpr const char* kDkvParams =
    "const {T}*, const {T}*, const {T}*, const {T}*, const float*, const float*, {T}*, {T}*, int, int, float";
constexpr const char* kDkvDqParams =
    "const {T}*, const {T}*, const {T}*, const {T}*, const float*, const float*, {T}*, {T}*, float*, int, int, float";
constexpr const char* kDqConvertParams = "const float*, {T}*, int";

const char* params_of(FlashAttention2Kernel kernel) {
  switch (kernel) {
    case FlashAttention2Kernel::forward:
    case FlashAttention2Kernel::forward_sm90: return kForwardParams;
    case FlashAttention2Kernel::backward_preprocess: return kPreprocessParams;
    case FlashAttention2Kernel::backward_dq: return kDqParams;
    case FlashAttention2Kernel::backward_dkv: return kDkvParams;
    case FlashAttention2Kernel::backward_dkv_dq:
    case FlashAttention2Kernel::backward_sm90: return kDkvDqParams;
    case FlashAttention2Kernel::backward_dq_convert: return kDqConvertParams;
  }
  fail("flash_attention2: unknown kernel");
}

void register_flash_attention2_kernels(cuda::KernelRegistry& r) {
  for (DType t : kFa2Dtypes) {
    for (const auto& [d, dv] : kHeadSizes) {
      r.add<FlashAttention2Forward>(t, d, dv);
      r.add<FlashAttention2BackwardDq>(t, d, dv);
      r.add<FlashAttention2BackwardDkv>(t, d, dv);
      if (flash_attention2_kernel_exists(FlashAttention2Kernel::backward_dkv_dq, t, d, dv))
        r.add<FlashAttention2BackwardDkvDq>(t, d, dv);
      if (flash_attention2_kernel_exists(FlashAttention2Kernel::forward_sm90, t, d, dv)) {
        r.add<FlashAttention2ForwardSm90>(t, d, dv);
        r.add<FlashAttention2BackwardSm90>(t, d, dv);
      }
    }
    for (int dv : kValueSizes) r.add<FlashAttention2BackwardPreprocess>(t, dv);
    if (t != DType::f32) r.add<FlashAttention2BackwardDqConvert>(t);
  }
}
VISION_REGISTER_KERNELS(register_flash_attention2_kernels);

void check_aligned(const void* p, size_t alignment, const char* what, const char* kernel) {
  VISION_CHECK(p != nullptr, "flash_attention2 {}: {} is null", kernel, what);
  VISION_CHECK(reinterpret_cast<uintptr_t>(p) % alignment == 0,
               "flash_attention2 {}: {} ({}) is not {}-byte aligned (the kernels read whole 16-byte chunks; pass "
               "cudaMalloc'd or arena memory)",
               kernel, what, p, alignment);
}

// The launch geometry of one kernel for a problem (validates the sizes).
FlashAttention2Launch geometry(const FlashAttention2Instance& in, DType dtype, int64_t bh, int64_t n_q, int64_t n_k) {
  return flash_attention2_launch(in.kernel, dtype, AttentionSizes{bh, n_q, n_k, in.d, in.d_v}, in.tiles);
}

dim3 grid_of(const FlashAttention2Launch& l) { return dim3(l.grid[0], l.grid[1], l.grid[2]); }

using Named = std::pair<const void*, const char*>;
void check_aligned16(std::initializer_list<Named> pointers, const char* kernel) {
  for (const auto& [p, what] : pointers) check_aligned(p, 16, what, kernel);
}

}  // namespace

FlashAttention2Instance flash_attention2_instance(FlashAttention2Kernel kernel, DType dtype, int d, int d_v) {
  FlashAttention2Instance in;
  in.kernel = kernel;
  in.d = d;
  in.d_v = d_v;
  in.tiles = flash_attention2_tiles(kernel, dtype, d, d_v);
  in.smem_bytes = flash_attention2_smem_bytes(kernel, dtype, d, d_v, in.tiles);
  return in;
}

cuda::KernelSpec flash_attention2_spec(const FlashAttention2Instance& in, DType dtype) {
  cuda::KernelSpec spec;
  spec.name = fmt::format("flash_attention2_{}", flash_attention2_kernel_label(in.kernel));
  const bool sm90 =
      in.kernel == FlashAttention2Kernel::forward_sm90 || in.kernel == FlashAttention2Kernel::backward_sm90;
  spec.file = sm90 ? kFileSm90 : kFa2File;
  spec.dtype = dtype;
  spec.scope = kFa2Scope;
  spec.params = params_of(in.kernel);
  if (in.kernel == FlashAttention2Kernel::backward_preprocess) {
    spec.constants = {{"dv", in.d_v}, {"w", in.tiles.warps}};
    spec.id_constants = 1;
  } else if (in.kernel == FlashAttention2Kernel::backward_dq_convert) {
    spec.constants = {{"w", in.tiles.warps}};
    spec.id_constants = 0;
  } else if (in.kernel == FlashAttention2Kernel::backward_sm90) {
    spec.constants = {{"d", in.d}, {"dv", in.d_v}, {"wg", in.tiles.warps / 4}};
    spec.id_constants = 2;
  } else if (in.kernel == FlashAttention2Kernel::forward_sm90) {
    spec.constants = {{"d", in.d}, {"dv", in.d_v}, {"bn", in.tiles.block_n}, {"wg", in.tiles.warps / 4}};
    spec.id_constants = 2;
  } else {
    spec.constants = {{"d", in.d}, {"dv", in.d_v}, {"bm", in.tiles.block_m}, {"bn", in.tiles.block_n},
                      {"w", in.tiles.warps}};
    spec.id_constants = 2;
  }
  return spec;
}

FlashAttention2Forward::FlashAttention2Forward(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::forward, t, d, dv) {}

// The preprocessing kernel has no d; 16 stands in for it where the tile table asks.
FlashAttention2BackwardPreprocess::FlashAttention2BackwardPreprocess(DType t, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_preprocess, t, 16, dv) {}

FlashAttention2BackwardDq::FlashAttention2BackwardDq(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_dq, t, d, dv) {}

FlashAttention2BackwardDkv::FlashAttention2BackwardDkv(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_dkv, t, d, dv) {}

FlashAttention2BackwardDkvDq::FlashAttention2BackwardDkvDq(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_dkv_dq, t, d, dv) {}

// The conversion kernel has no head sizes; 16 stands in for them where the tile table asks.
FlashAttention2BackwardDqConvert::FlashAttention2BackwardDqConvert(DType t)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_dq_convert, t, 16, 16) {}

FlashAttention2BackwardSm90::FlashAttention2BackwardSm90(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::backward_sm90, t, d, dv) {}

FlashAttention2ForwardSm90::FlashAttention2ForwardSm90(DType t, int d, int dv)
    : FlashAttention2Descriptor(FlashAttention2Kernel::forward_sm90, t, d, dv) {}

std::vector<const cuda::Kernel*> flash_attention2_kernels(DType dtype, int d, int d_v, graph::Mode mode) {
  auto exists = [&](FlashAttention2Kernel k) { return flash_attention2_kernel_exists(k, dtype, d, d_v); };
  std::vector<const cuda::Kernel*> out{&cuda::kernel_instance<FlashAttention2Forward>(dtype, d, d_v)};
  if (exists(FlashAttention2Kernel::forward_sm90))
    out.push_back(&cuda::kernel_instance<FlashAttention2ForwardSm90>(dtype, d, d_v));
  if (mode != graph::Mode::train) return out;
  out.push_back(&cuda::kernel_instance<FlashAttention2BackwardPreprocess>(dtype, d_v));
  out.push_back(&cuda::kernel_instance<FlashAttention2BackwardDq>(dtype, d, d_v));
  out.push_back(&cuda::kernel_instance<FlashAttention2BackwardDkv>(dtype, d, d_v));
  // The fused pass of launch_flash_attention2_backward when it is given dq_accum (not bit-for-bit reproducible).
  if (exists(FlashAttention2Kernel::backward_dkv_dq))
    out.push_back(&cuda::kernel_instance<FlashAttention2BackwardDkvDq>(dtype, d, d_v));
  if (exists(FlashAttention2Kernel::backward_sm90))
    out.push_back(&cuda::kernel_instance<FlashAttention2BackwardSm90>(dtype, d, d_v));
  if (exists(FlashAttention2Kernel::backward_dq_convert))
    out.push_back(&cuda::kernel_instance<FlashAttention2BackwardDqConvert>(dtype));
  return out;
}

bool flash_attention2_sm90_usable(DType dtype, int d, int d_v) {
  if (!flash_attention2_kernel_exists(FlashAttention2Kernel::forward_sm90, dtype, d, d_v)) return false;
  static const bool sm90a = [] {
    try {
      return cuda::current_arch() == "sm_90a";
    } catch (const Error&) {
      return false;
    }
  }();
  return sm90a;
}

// ---------------------------------------------------------------------------------------------------------------
// Launch helpers

namespace {

// Whether a launch takes the wgmma kernels: forced by path (an error where they cannot run: `kernel` names the
// kernel in the message), or chosen automatically where they can (and `preferred` holds).
bool takes_sm90(FlashAttention2Path path, DType dtype, int d, int d_v, const char* kernel, bool preferred = true) {
  if (path == FlashAttention2Path::mma_sync) return false;
  const bool usable = flash_attention2_sm90_usable(dtype, d, d_v);
  if (path == FlashAttention2Path::automatic) return usable && preferred;
  VISION_CHECK(usable,
               "flash_attention2 {}: needs an sm_90a GPU, f16/bf16 and d_v in {{16, 32, 64, 128}} (got {}, d_v = {})",
               kernel, core::dtype_name(dtype), d_v);
  return true;
}

}  // namespace

void launch_flash_attention2_forward(cudaStream_t stream, DType dtype, int d, int d_v, const void* q, const void* k,
                                     const void* v, void* o, float* lse, int64_t batch_heads, int64_t n_q,
                                     int64_t n_k, float scale, FlashAttention2Path path) {
  // The wgmma kernel keeps its running max on the raw scores, which needs scale > 0 (every real softmax scale).
  if (takes_sm90(path, dtype, d, d_v, "forward_sm90", /*preferred=*/scale > 0)) {
    VISION_CHECK(scale > 0, "flash_attention2 forward_sm90: the softmax scale must be positive (got {})", scale);
    const auto& kernel = cuda::kernel_instance<FlashAttention2ForwardSm90>(dtype, d, d_v);
    const FlashAttention2Launch l = geometry(kernel.instance, dtype, batch_heads, n_q, n_k);
    check_aligned16({{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}}, "forward_sm90");
    if (lse) check_aligned(lse, 4, "lse", "forward_sm90");
    kernel.launch(stream, grid_of(l), dim3(l.threads), l.smem_bytes, q, k, v, o, lse, static_cast<int32_t>(n_q),
                  static_cast<int32_t>(n_k), scale);
    return;
  }
  const auto& kernel = cuda::kernel_instance<FlashAttention2Forward>(dtype, d, d_v);
  const FlashAttention2Launch l = geometry(kernel.instance, dtype, batch_heads, n_q, n_k);
  check_aligned16({{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}}, "forward");
  if (lse) check_aligned(lse, 4, "lse", "forward");
  kernel.launch(stream, grid_of(l), dim3(l.threads), l.smem_bytes, q, k, v, o, lse, static_cast<int32_t>(n_q),
                static_cast<int32_t>(n_k), scale);
}

void launch_flash_attention2_backward_preprocess(cudaStream_t stream, DType dtype, int d_v, const void* o,
                                                 const void* grad_o, float* delta, int64_t rows) {
  const auto& kernel = cuda::kernel_instance<FlashAttention2BackwardPreprocess>(dtype, d_v);
  VISION_CHECK(rows >= 1 && rows <= std::numeric_limits<int32_t>::max(),
               "flash_attention2 backward_preprocess: {} rows (BH · n_q) is out of range (1 .. 2^31 - 1)", rows);
  check_aligned(o, 16, "o", "backward_preprocess");
  check_aligned(grad_o, 16, "grad_o", "backward_preprocess");
  check_aligned(delta, 4, "delta", "backward_preprocess");
  const int block = kernel.instance.tiles.block_m;  // rows per CTA, one per warp
  const auto blocks = static_cast<unsigned>((rows + block - 1) / block);
  kernel.launch(stream, dim3(blocks), dim3(static_cast<unsigned>(kernel.instance.tiles.warps) * 32u), 0, o, grad_o,
                delta, static_cast<int32_t>(rows));
}

void launch_flash_attention2_backward_dq(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                         const void* k, const void* v, const void* grad_o, const float* lse,
                                         const float* delta, void* grad_q, int64_t batch_heads, int64_t n_q,
                                         int64_t n_k, float scale) {
  const auto& kernel = cuda::kernel_instance<FlashAttention2BackwardDq>(dtype, d, d_v);
  const FlashAttention2Launch l = geometry(kernel.instance, dtype, batch_heads, n_q, n_k);
  check_aligned16({{q, "q"}, {k, "k"}, {v, "v"}, {grad_o, "grad_o"}, {grad_q, "grad_q"}}, "backward_dq");
  check_aligned(lse, 4, "lse", "backward_dq");
  check_aligned(delta, 4, "delta", "backward_dq");
  kernel.launch(stream, grid_of(l), dim3(l.threads), l.smem_bytes, q, k, v, grad_o, lse, delta, grad_q,
                static_cast<int32_t>(n_q), static_cast<int32_t>(n_k), scale);
}

void launch_flash_attention2_backward_dkv(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                          const void* k, const void* v, const void* grad_o, const float* lse,
                                          const float* delta, void* grad_k, void* grad_v, int64_t batch_heads,
                                          int64_t n_q, int64_t n_k, float scale) {
  const auto& kernel = cuda::kernel_instance<FlashAttention2BackwardDkv>(dtype, d, d_v);
  const FlashAttention2Launch l = geometry(kernel.instance, dtype, batch_heads, n_q, n_k);
  check_aligned16({{q, "q"}, {k, "k"}, {v, "v"}, {grad_o, "grad_o"}, {grad_k, "grad_k"}, {grad_v, "grad_v"}},
                  "backward_dkv");
  check_aligned(lse, 4, "lse", "backward_dkv");
  check_aligned(delta, 4, "delta", "backward_dkv");
  kernel.launch(stream, grid_of(l), dim3(l.threads), l.smem_bytes, q, k, v, grad_o, lse, delta, grad_k, grad_v,
                static_cast<int32_t>(n_q), static_cast<int32_t>(n_k), scale);
}

void launch_flash_attention2_backward_dkv_dq(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                             const void* k, const void* v, const void* grad_o, const float* lse,
                                             const float* delta, void* grad_k, void* grad_v, float* dq_accum,
                                             void* grad_q, int64_t batch_heads, int64_t n_q, int64_t n_k, float scale,
                                             FlashAttention2Path path) {
  VISION_CHECK(flash_attention2_kernel_exists(FlashAttention2Kernel::backward_dkv_dq, dtype, d, d_v),
               "flash_attention2 backward_dkv_dq: {} is not supported (f16 or bf16)", core::dtype_name(dtype));
  const bool sm90 = takes_sm90(path, dtype, d, d_v, "backward_sm90");
  const auto& convert = cuda::kernel_instance<FlashAttention2BackwardDqConvert>(dtype);
  const FlashAttention2Launch lc =
      flash_attention2_launch(FlashAttention2Kernel::backward_dq_convert, dtype,
                              AttentionSizes{batch_heads, n_q, n_k, d, d_v}, convert.instance.tiles);
  check_aligned16({{q, "q"}, {k, "k"}, {v, "v"}, {grad_o, "grad_o"}, {grad_k, "grad_k"}, {grad_v, "grad_v"},
                   {dq_accum, "dq_accum"}, {grad_q, "grad_q"}},
                  "backward_dkv_dq");
  check_aligned(lse, 4, "lse", "backward_dkv_dq");
  check_aligned(delta, 4, "delta", "backward_dkv_dq");
  const size_t accum_bytes = static_cast<size_t>(batch_heads * n_q * d) * sizeof(float);
  VISION_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, accum_bytes, stream));
  auto launch = [&](const auto& kernel) {
    const FlashAttention2Launch l = geometry(kernel.instance, dtype, batch_heads, n_q, n_k);
    kernel.launch(stream, grid_of(l), dim3(l.threads), l.smem_bytes, q, k, v, grad_o, lse, delta, grad_k, grad_v,
                  dq_accum, static_cast<int32_t>(n_q), static_cast<int32_t>(n_k), scale);
  };
  if (sm90)
    launch(cuda::kernel_instance<FlashAttention2BackwardSm90>(dtype, d, d_v));
  else
    launch(cuda::kernel_instance<FlashAttention2BackwardDkvDq>(dtype, d, d_v));
  convert.launch(stream, grid_of(lc), dim3(lc.threads), 0, static_cast<const float*>(dq_accum), grad_q,
                 static_cast<int32_t>(batch_heads * n_q * d));
}

void launch_flash_attention2_backward(cudaStream_t stream, DType dtype, int d, int d_v, const void* q, const void* k,
                                      const void* v, const void* o, const void* grad_o, const float* lse,
                                      float* delta, float* dq_accum, void* grad_q, void* grad_k, void* grad_v,
                                      int64_t batch_heads, int64_t n_q, int64_t n_k, float scale,
                                      FlashAttention2Path path) {
  VISION_CHECK((grad_k == nullptr) == (grad_v == nullptr),
               "flash_attention2 backward: the dK/dV kernel writes both gradients; pass both grad_k and grad_v (or "
               "scratch for the one not needed), or neither");
  // Validate every size before the first launch, so that a bad problem launches nothing.
  (void)geometry(flash_attention2_instance(FlashAttention2Kernel::backward_dkv, dtype, d, d_v), dtype, batch_heads,
                 n_q, n_k);
  VISION_CHECK(batch_heads <= std::numeric_limits<int32_t>::max() / n_q,
               "flash_attention2 backward: BH · n_q = {} · {} is out of range", batch_heads, n_q);
  launch_flash_attention2_backward_preprocess(stream, dtype, d_v, o, grad_o, delta, batch_heads * n_q);
  if (grad_q && grad_k && dq_accum && dtype != DType::f32) {
    launch_flash_attention2_backward_dkv_dq(stream, dtype, d, d_v, q, k, v, grad_o, lse, delta, grad_k, grad_v,
                                            dq_accum, grad_q, batch_heads, n_q, n_k, scale, path);
    return;
  }
  if (grad_q)
    launch_flash_attention2_backward_dq(stream, dtype, d, d_v, q, k, v, grad_o, lse, delta, grad_q, batch_heads, n_q,
                                        n_k, scale);
  if (grad_k)
    launch_flash_attention2_backward_dkv(stream, dtype, d, d_v, q, k, v, grad_o, lse, delta, grad_k, grad_v,
                                         batch_heads, n_q, n_k, scale);
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOp

namespace {

class FlashAttention2CudaRuntime final : public graph::RuntimeOp {
 public:
  FlashAttention2CudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, float scale, graph::Mode mode)
      : twin_(std::move(twin)), scale_(scale), mode_(mode) {}

  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->saved_specs(in, out);  // lse [BH, n_q], f32
  }
  // Training: delta [BH, n_q] (f32), then room for dK or dV when an input needs no gradient (4-byte elements, the
  // widest the kernels take), then, unless the plan is deterministic, the f32 dQ accumulator of the fused
  // backward (taken for f16/bf16). Called when a plan is built: sizes the kernels do not take fail here, early.
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape&) const override {
    const AttentionSizes s = attention_sizes(in.at(0), in.at(1), in.at(2));
    check_flash_attention2_gpu_sizes(DType::f32, s.d_qk, s.d_v);
    if (mode_ != graph::Mode::train) return 0;
    return delta_bytes(s) + scratch_bytes(s) + (plan.deterministic ? 0 : dq_accum_bytes(s));
  }

  void forward(graph::ForwardCtx& ctx) override {
    const Tensor &q = ctx.inputs.at(0), &k = ctx.inputs.at(1), &v = ctx.inputs.at(2);
    const AttentionSizes s = checked(q, k, v);
    remember(q.dtype(), s);
    float* lse = nullptr;
    if (!ctx.saved.empty() && ctx.saved[0].defined()) {
      check_tensor(ctx.saved[0], "lse", Shape{s.batch_heads, s.n_q}, DType::f32);
      lse = static_cast<float*>(ctx.saved[0].raw());
    }
    check_tensor(ctx.output, "o", Shape{s.batch_heads, s.n_q, s.d_v}, q.dtype());
    launch_flash_attention2_forward(graph::stream_of(ctx.backend), q.dtype(), static_cast<int>(s.d_qk), static_cast<int>(s.d_v),
                                    q.raw(), k.raw(), v.raw(), ctx.output.raw(), lse, s.batch_heads, s.n_q, s.n_k,
                                    scale_);
  }

  // f32, f16 and bf16 (the tensors' dtype picks the kernels); its activations are rank 3, so the plan asks with NCHW.
  bool supports(const graph::Format& f) const override {
    return core::is_floating(f.dtype) && f.layout == core::Layout::nchw;
  }
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(!ctx.saved.empty() && ctx.saved[0].defined(),
                 "flash_attention2 backward needs the lse saved by a training forward");
    const Tensor &q = ctx.inputs.at(0), &k = ctx.inputs.at(1), &v = ctx.inputs.at(2);
    const AttentionSizes s = checked(q, k, v);
    const DType dtype = q.dtype();
    check_tensor(ctx.saved[0], "lse", Shape{s.batch_heads, s.n_q}, DType::f32);
    check_tensor(ctx.output, "o", Shape{s.batch_heads, s.n_q, s.d_v}, dtype);
    check_tensor(ctx.grad_output, "grad_o", Shape{s.batch_heads, s.n_q, s.d_v}, dtype);
    const Tensor &gq = ctx.grad_inputs.at(0), &gk = ctx.grad_inputs.at(1), &gv = ctx.grad_inputs.at(2);
    if (gq.defined()) check_tensor(gq, "grad_q", q.shape(), dtype);
    if (gk.defined()) check_tensor(gk, "grad_k", k.shape(), dtype);
    if (gv.defined()) check_tensor(gv, "grad_v", v.shape(), dtype);
    if (!gq.defined() && !gk.defined() && !gv.defined()) return;

    VISION_CHECK(ctx.workspace.defined() && ctx.workspace.nbytes() >= delta_bytes(s) + scratch_bytes(s),
                 "flash_attention2 backward: the workspace ({} bytes) is smaller than delta and dK/dV scratch need "
                 "({} bytes)",
                 ctx.workspace.defined() ? ctx.workspace.nbytes() : 0, delta_bytes(s) + scratch_bytes(s));
    auto* ws = static_cast<std::byte*>(ctx.workspace.raw());
    float* delta = reinterpret_cast<float*>(ws);
    void* scratch = ws + delta_bytes(s);  // a dK or dV nobody reads
    // The fused backward adds dQ with f32 atomics: faster, not bit-reproducible. Deterministic plans (and f32,
    // which it does not take) run the separate dQ and dK/dV kernels.
    const bool fused = !ctx.deterministic && dtype != DType::f32 &&
                       ctx.workspace.nbytes() >= delta_bytes(s) + scratch_bytes(s) + dq_accum_bytes(s);
    float* dq_accum = fused ? reinterpret_cast<float*>(ws + delta_bytes(s) + scratch_bytes(s)) : nullptr;
    void* grad_k = gk.defined() ? gk.raw() : (gv.defined() ? scratch : nullptr);
    void* grad_v = gv.defined() ? gv.raw() : (gk.defined() ? scratch : nullptr);
    launch_flash_attention2_backward(graph::stream_of(ctx.backend), dtype, static_cast<int>(s.d_qk), static_cast<int>(s.d_v),
                                     q.raw(), k.raw(), v.raw(), ctx.output.raw(), ctx.grad_output.raw(),
                                     static_cast<const float*>(ctx.saved[0].raw()), delta, dq_accum,
                                     gq.defined() ? gq.raw() : nullptr, grad_k, grad_v, s.batch_heads, s.n_q, s.n_k,
                                     scale_);
  }

  // flash_attention2_kernels() of the last forward's dtype and head sizes, or before the first forward (when they are
  // not known yet) of every registered dtype and (d, d_v).
  std::vector<graph::KernelInfo> kernels() const override {
    std::vector<std::tuple<DType, int, int>> problems;
    {
      std::lock_guard lock(mutex_);
      if (last_) problems.push_back(*last_);
    }
    if (problems.empty())
      for (DType t : kFa2Dtypes)
        for (const auto& [d, dv] : kHeadSizes) problems.emplace_back(t, d, dv);
    std::vector<graph::KernelInfo> out;
    std::set<std::string, std::less<>> seen;  // preprocessing and dQ conversion are shared between head sizes
    for (const auto& [dtype, d, dv] : problems)
      for (const cuda::Kernel* k : flash_attention2_kernels(dtype, d, dv, mode_))
        if (seen.insert(k->id()).second) out.push_back(graph::kernel_info(*k));
    return out;
  }

 private:
  static size_t delta_bytes(const AttentionSizes& s) {
    return graph::align_up(static_cast<size_t>(s.batch_heads * s.n_q) * 4, 256);
  }
  static size_t scratch_bytes(const AttentionSizes& s) {
    return graph::align_up(static_cast<size_t>(s.batch_heads * s.n_k * std::max(s.d_qk, s.d_v)) * 4, 256);
  }
  // The fused backward's dQ accumulator: BH · n_q · d f32.
  static size_t dq_accum_bytes(const AttentionSizes& s) {
    return graph::align_up(static_cast<size_t>(s.batch_heads * s.n_q * s.d_qk) * 4, 256);
  }

  static void check_tensor(const Tensor& t, const char* what, const Shape& shape, DType dtype) {
    VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.shape() == shape && t.dtype() == dtype,
                 "flash_attention2 (CUDA): {} must be a {} {} tensor on the GPU, got {}", what,
                 core::dtype_name(dtype), shape.str(), t.defined() ? t.str() : std::string("an undefined tensor"));
  }
  static AttentionSizes checked(const Tensor& q, const Tensor& k, const Tensor& v) {
    const AttentionSizes s = attention_sizes(q.shape(), k.shape(), v.shape());
    check_tensor(q, "q", q.shape(), q.dtype());
    check_tensor(k, "k", k.shape(), q.dtype());
    check_tensor(v, "v", v.shape(), q.dtype());
    check_flash_attention2_gpu_sizes(q.dtype(), s.d_qk, s.d_v);
    return s;
  }
  void remember(DType dtype, const AttentionSizes& s) {
    std::lock_guard lock(mutex_);
    last_ = std::tuple{dtype, static_cast<int>(s.d_qk), static_cast<int>(s.d_v)};
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  float scale_;
  graph::Mode mode_;
  mutable std::mutex mutex_;
  std::optional<std::tuple<DType, int, int>> last_;
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_flash_attention2_cuda(std::unique_ptr<graph::RuntimeOp> twin, float scale,
                                                             graph::Mode mode) {
  VISION_CHECK(twin != nullptr, "make_flash_attention2_cuda: no CPU RuntimeOp to share state specs with");
  return std::make_unique<FlashAttention2CudaRuntime>(std::move(twin), scale, mode);
}

}  // namespace vision::ops::attention
