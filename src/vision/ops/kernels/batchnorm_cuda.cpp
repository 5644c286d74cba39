#include "vision/ops/kernels/batchnorm_cuda.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr const char* kBatchnormFile = "vision/ops/kernels/batchnorm.cuh";
constexpr int kThreads = 256;  // per block, every BatchNorm kernel

int wide_width(DType dtype) { return 16 / static_cast<int>(core::dtype_size(dtype)); }

// "batchnorm_stats" or "batchnorm_stats_nhwc" for an activation dtype (f32, f16, bf16) and access width.
cuda::KernelSpec activation_spec(const char* name, DType dtype, Layout layout, int vec, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  VISION_CHECK(vec == 1 || vec == wide_width(dtype), "{}: no {}-element access for {} (1 or {})", name, vec,
               core::dtype_name(dtype), wide_width(dtype));
  return {std::string(name) + (layout == Layout::nhwc ? "_nhwc" : ""), kBatchnormFile, dtype, {{"v", vec}}, params};
}

void register_batchnorm_kernels(cuda::KernelRegistry& r) {
  r.add<BatchNormFold>(DType::f32);
  r.add<IncrementCounter>();
  r.add<BatchNormStatsFinalize>();
  r.add<BatchNormBackwardFinalize>();
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (int vec : batchnorm_vector_widths(t)) {
        r.add<BatchNormStats>(t, layout, vec);
        for (bool silu : {false, true}) {
          r.add<BatchNormApply>(t, layout, vec, silu);
          r.add<BatchNormBackwardSums>(t, layout, vec, silu);
          r.add<BatchNormBackwardApply>(t, layout, vec, silu);
        }
      }
}
VISION_REGISTER_KERNELS(register_batchnorm_kernels);

void check_shape(const core::Shape& x, const char* what) {
  VISION_CHECK(x.rank() == 4 && x.is_concrete() && x.numel() > 0, "{}: needs a non-empty (N, C, H, W) input, got {}",
               what, x.str());
}

int64_t bn_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How an activation is cut into the kernels' grid (batchnorm.cuh): units × cols vectors of `vec` elements, blocks of
// tc columns × one split of the units.
struct Tiling {
  int vec = 1;
  int64_t channels = 0, count = 0;  // C, and the values per channel N·H·W
  int64_t units = 0, cols = 0, inner_v = 0;
  int tc_shift = 0;
  int64_t tiles = 0, units_per_split = 0, splits = 0;

  dim3 grid() const { return dim3(static_cast<uint32_t>(tiles), static_cast<uint32_t>(splits)); }
  // Floats of partial results in the workspace (2 per split and channel); the scales (C floats) follow.
  size_t partial_floats() const { return static_cast<size_t>(splits * channels * 2); }
};

// At most target_blocks blocks, each thread taking at least min_units units, but at least min_blocks blocks (down to 2
// units a thread) when that leaves too few (BatchNormGrid says why: the defaults were measured).
Tiling tiling(const core::Shape& x, Layout layout, int vec, int64_t target_blocks, int64_t min_units,
              int64_t min_blocks) {
  VISION_CHECK(target_blocks >= 1 && min_units >= 1 && min_blocks >= 0,
               "batchnorm2d: a grid needs ≥ 1 block and ≥ 1 unit a thread, got {} blocks, {} units, {} at least",
               target_blocks, min_units, min_blocks);
  Tiling t;
  t.vec = vec;
  t.channels = x[1];
  const int64_t inner = x[2] * x[3];
  t.count = x[0] * inner;
  VISION_CHECK(x.numel() / vec < (int64_t{1} << 31),
               "batchnorm2d: an input of {} elements is too large for the CUDA kernels (at most 2^31 accesses)",
               x.numel());
  if (layout == Layout::nhwc) {
    t.units = t.count, t.cols = t.channels / vec, t.inner_v = 1;
    while (t.tc_shift < 5 && (int64_t{2} << t.tc_shift) <= t.cols) ++t.tc_shift;
  } else {
    t.units = t.count / vec, t.cols = t.channels, t.inner_v = inner / vec;
  }
  t.tiles = bn_ceil_div(t.cols, int64_t{1} << t.tc_shift);
  const int64_t lanes = kThreads >> t.tc_shift;
  const int64_t wanted = std::max<int64_t>(1, bn_ceil_div(target_blocks, t.tiles));
  const int64_t by_units = std::max<int64_t>(1, t.units / (lanes * min_units));
  const int64_t floor = std::min(bn_ceil_div(min_blocks, t.tiles), std::max<int64_t>(1, t.units / (lanes * 2)));
  t.units_per_split = bn_ceil_div(t.units, std::min(wanted, std::max(by_units, floor)));
  t.splits = bn_ceil_div(t.units, t.units_per_split);  // no empty split
  VISION_CHECK(t.splits <= 65535, "batchnorm2d: {} splits of {} exceed the grid's 65535 (target {} blocks)", t.splits,
               x.str(), target_blocks);
  return t;
}

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// The widest access the shape and every activation pointer allow.
int pick_width(DType dtype, Layout layout, const core::Shape& x, std::initializer_list<const void*> ptrs) {
  const int wide = wide_width(dtype);
  const int64_t along = layout == Layout::nhwc ? x[1] : x[2] * x[3];
  return along % wide == 0 && aligned16(ptrs) ? wide : 1;
}
// The reduction passes' tiling and the element-wise passes' one, at the same access width.
Tiling reduce_tiling(const core::Shape& x, Layout layout, int vec, const BatchNormGrid& g) {
  return tiling(x, layout, vec, g.target_blocks, g.min_units_per_thread, g.min_blocks);
}
Tiling apply_tiling(const core::Shape& x, Layout layout, int vec, const BatchNormGrid& g) {
  return tiling(x, layout, vec, g.apply_target_blocks, g.apply_min_units_per_thread, 0);
}

int32_t i32(int64_t v) { return static_cast<int32_t>(v); }

// The workspace of a reduction tiling t: [partial results][the scales γ·invstd, C], and with several ranks
// (BatchNormRanks) then [every rank's partial results, gathered][the job's dγ, C][the job's dβ, C].
struct RankedWorkspace {
  float *partial, *scale, *gathered = nullptr, *job_dgamma = nullptr, *job_dbeta = nullptr;
  RankedWorkspace(void* workspace, const Tiling& t, int world) {
    partial = static_cast<float*>(workspace);
    scale = partial + t.partial_floats();
    if (world == 1) return;
    gathered = scale + t.channels;
    job_dgamma = gathered + t.partial_floats() * static_cast<size_t>(world);
    job_dbeta = job_dgamma + t.channels;
  }
  static size_t floats(const Tiling& t, int world) {
    const size_t c = static_cast<size_t>(t.channels);
    return world == 1 ? t.partial_floats() + c : t.partial_floats() * (1 + static_cast<size_t>(world)) + 3 * c;
  }
};

void check_ranks(const BatchNormRanks& ranks, const char* what) {
  VISION_CHECK(ranks.world >= 1 && (ranks.world == 1 || ranks.all_gather),
               "{}: SyncBatchNorm over {} ranks needs their all-gather", what, ranks.world);
}

}  // namespace

std::vector<int> batchnorm_vector_widths(DType dtype) { return {1, wide_width(dtype)}; }

BatchNormFold::BatchNormFold(DType t)
    : KernelDescriptor({"batchnorm_fold", kBatchnormFile, t, {},
                        "const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, {T}*, {T}*, int64_t, "
                        "int64_t, float"}) {}
IncrementCounter::IncrementCounter() : KernelDescriptor({"increment_counter", kBatchnormFile, DType::i64, {}, "{T}*"}) {}

BatchNormStats::BatchNormStats(DType t, Layout layout, int vec)
    : KernelDescriptor(activation_spec("batchnorm_stats", t, layout, vec,
                                       "const {T}*, float*, int32_t, int32_t, int32_t, int32_t, int32_t")) {}
BatchNormStatsFinalize::BatchNormStatsFinalize()
    : KernelDescriptor({"batchnorm_stats_finalize", kBatchnormFile, DType::f32, {},
                        "const {T}*, const {T}*, {T}*, {T}*, {T}*, {T}*, {T}*, int32_t, int32_t, int64_t, int32_t, "
                        "int32_t, float, float, int32_t"}) {}
BatchNormApply::BatchNormApply(DType t, Layout layout, int vec, bool silu)
    : KernelDescriptor(activation_spec(silu ? "batchnorm_apply_silu" : "batchnorm_apply", t, layout, vec,
                                       "const {T}*, {T}*, const float*, const float*, const float*, const float*, "
                                       "int32_t, int32_t, int32_t, int32_t, int32_t, float, int32_t")) {}
BatchNormBackwardSums::BatchNormBackwardSums(DType t, Layout layout, int vec, bool silu)
    : KernelDescriptor(activation_spec(silu ? "batchnorm_backward_sums_silu" : "batchnorm_backward_sums", t, layout,
                                       vec,
                                       "const {T}*, const {T}*, const float*, const float*, const float*, "
                                       "const float*, float*, int32_t, int32_t, int32_t, int32_t, int32_t")) {}
BatchNormBackwardFinalize::BatchNormBackwardFinalize()
    : KernelDescriptor({"batchnorm_backward_finalize", kBatchnormFile, DType::f32, {},
                        "const {T}*, const {T}*, {T}*, {T}*, int32_t, int32_t"}) {}
BatchNormBackwardApply::BatchNormBackwardApply(DType t, Layout layout, int vec, bool silu)
    : KernelDescriptor(activation_spec(silu ? "batchnorm_backward_apply_silu" : "batchnorm_backward_apply", t, layout,
                                       vec,
                                       "const {T}*, const {T}*, {T}*, const float*, const float*, const float*, "
                                       "const float*, const float*, const float*, int32_t, int32_t, int32_t, int32_t, "
                                       "int32_t, int64_t")) {}

void launch_batchnorm_fold(cudaStream_t stream, const float* w, const float* bias, const float* gamma,
                           const float* beta, const float* mean, const float* var, float* w_out, float* b_out,
                           int64_t out_channels, int64_t per_out, float eps) {
  const int64_t n = out_channels * per_out;
  if (n == 0) return;
  cuda::kernel_instance<BatchNormFold>(DType::f32)
      .launch_over(stream, n, 256, w, bias, gamma, beta, mean, var, w_out, b_out,
              out_channels, per_out, eps);
}

void launch_increment_counter(cudaStream_t stream, int64_t* counter) {
  cuda::kernel_instance<IncrementCounter>().launch(stream, dim3(1), dim3(32), 0, counter);
}

std::vector<const cuda::Kernel*> batchnorm_kernels(DType dtype, Layout layout, bool training, bool silu) {
  VISION_CHECK(training || !silu, "batchnorm2d: BatchNorm → SiLU is fused in training only");
  std::vector<const cuda::Kernel*> out;
  for (int vec : batchnorm_vector_widths(dtype)) {
    if (!training) {
      out.push_back(&cuda::kernel_instance<BatchNormApply>(dtype, layout, vec));
      continue;
    }
    out.push_back(&cuda::kernel_instance<BatchNormStats>(dtype, layout, vec));
    out.push_back(&cuda::kernel_instance<BatchNormApply>(dtype, layout, vec, silu));
    out.push_back(&cuda::kernel_instance<BatchNormBackwardSums>(dtype, layout, vec, silu));
    out.push_back(&cuda::kernel_instance<BatchNormBackwardApply>(dtype, layout, vec, silu));
  }
  if (training) {
    out.push_back(&cuda::kernel_instance<BatchNormStatsFinalize>());
    out.push_back(&cuda::kernel_instance<BatchNormBackwardFinalize>());
    out.push_back(&cuda::kernel_instance<IncrementCounter>());
  }
  return out;
}

size_t batchnorm_workspace_bytes(const core::Shape& x, Layout layout, const BatchNormGrid& grid, int world) {
  check_shape(x, "batchnorm2d workspace");
  VISION_CHECK(world >= 1, "batchnorm2d workspace: {} ranks", world);
  size_t floats = 0;
  for (int vec : {1, 4, 8}) {
    const int64_t along = layout == Layout::nhwc ? x[1] : x[2] * x[3];
    if (along % vec != 0) continue;
    floats = std::max(floats, RankedWorkspace::floats(reduce_tiling(x, layout, vec, grid), world));
  }
  return floats * sizeof(float);
}

void launch_batchnorm_forward_training(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                       const void* x_data, void* y, const float* gamma, const float* beta,
                                       float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                                       void* workspace, float momentum, float eps, bool silu,
                                       const BatchNormGrid& grid, const BatchNormRanks& ranks) {
  check_shape(x, "batchnorm2d forward");
  check_ranks(ranks, "batchnorm2d forward");
  const int vec = pick_width(dtype, layout, x, {x_data, y});
  const Tiling t = reduce_tiling(x, layout, vec, grid), a = apply_tiling(x, layout, vec, grid);
  VISION_CHECK(t.count * ranks.world > 1, "batchnorm2d in training needs more than one value per channel, got input {}",
               x.str());
  VISION_CHECK(workspace, "batchnorm2d forward (training): no workspace for the partial statistics");
  const RankedWorkspace ws(workspace, t, ranks.world);
  cuda::kernel_instance<BatchNormStats>(dtype, layout, t.vec)
      .launch(stream, t.grid(), dim3(kThreads), 0, x_data, ws.partial, i32(t.units), i32(t.cols), i32(t.inner_v),
              int32_t{t.tc_shift}, i32(t.units_per_split));
  const float* partial = ws.partial;
  if (ranks.world > 1) {
    ranks.all_gather(ws.partial, ws.gathered, t.partial_floats() * sizeof(float));
    partial = ws.gathered;
  }
  cuda::kernel_instance<BatchNormStatsFinalize>().launch(
      stream, dim3(static_cast<uint32_t>(bn_ceil_div(t.channels, kThreads / 32))), dim3(kThreads), 0, partial, gamma,
      ws.scale, save_mean, save_invstd, running_mean, running_var, i32(t.splits), i32(t.channels), t.count,
      i32(t.units), i32(t.units_per_split), momentum, eps, int32_t{ranks.world});
  float* scale = ws.scale;  // γ·invstd
  cuda::kernel_instance<BatchNormApply>(dtype, layout, a.vec, silu)
      .launch(stream, a.grid(), dim3(kThreads), 0, x_data, y, static_cast<const float*>(save_mean),
              static_cast<const float*>(scale), gamma, beta, i32(a.units), i32(a.cols), i32(a.inner_v),
              int32_t{a.tc_shift}, i32(a.units_per_split), eps, int32_t{0});
}

void launch_batchnorm_silu_from_saved(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                      const void* x_data, void* y, const float* gamma, const float* beta,
                                      const float* save_mean, const float* save_invstd) {
  check_shape(x, "batchnorm2d → silu forward");
  const Tiling t = apply_tiling(x, layout, pick_width(dtype, layout, x, {x_data, y}), BatchNormGrid{});
  cuda::kernel_instance<BatchNormApply>(dtype, layout, t.vec, true)
      .launch(stream, t.grid(), dim3(kThreads), 0, x_data, y, save_mean, save_invstd, gamma, beta, i32(t.units),
              i32(t.cols), i32(t.inner_v), int32_t{t.tc_shift}, i32(t.units_per_split), 0.0f, int32_t{2});
}

void launch_batchnorm_forward_inference(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                        const void* x_data, void* y, const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var, float eps) {
  check_shape(x, "batchnorm2d forward");
  const Tiling t = apply_tiling(x, layout, pick_width(dtype, layout, x, {x_data, y}), BatchNormGrid{});
  cuda::kernel_instance<BatchNormApply>(dtype, layout, t.vec)
      .launch(stream, t.grid(), dim3(kThreads), 0, x_data, y, running_mean, running_var, gamma, beta, i32(t.units),
              i32(t.cols), i32(t.inner_v), int32_t{t.tc_shift}, i32(t.units_per_split), eps, int32_t{1});
}

void launch_batchnorm_backward(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                               const void* x_data, const void* dy, void* dx, const float* gamma, const float* beta,
                               const float* save_mean, const float* save_invstd, float* dgamma, float* dbeta,
                               void* workspace, bool silu, const BatchNormGrid& grid, const BatchNormRanks& ranks) {
  check_shape(x, "batchnorm2d backward");
  check_ranks(ranks, "batchnorm2d backward");
  const int vec = pick_width(dtype, layout, x, {x_data, dy, dx});
  const Tiling t = reduce_tiling(x, layout, vec, grid), a = apply_tiling(x, layout, vec, grid);
  VISION_CHECK(workspace, "batchnorm2d backward: no workspace for the partial sums");
  VISION_CHECK(beta || !silu, "batchnorm2d → silu backward: β recomputes the SiLU's input, none was given");
  const RankedWorkspace ws(workspace, t, ranks.world);
  cuda::kernel_instance<BatchNormBackwardSums>(dtype, layout, t.vec, silu)
      .launch(stream, t.grid(), dim3(kThreads), 0, x_data, dy, save_mean, save_invstd, gamma, beta, ws.partial,
              i32(t.units), i32(t.cols), i32(t.inner_v), int32_t{t.tc_shift}, i32(t.units_per_split));
  const dim3 finalize_grid(static_cast<uint32_t>(bn_ceil_div(t.channels, kThreads / 32)));
  // This rank's dγ and dβ; with several ranks, the job's sums too (every rank's splits, gathered), which dx takes.
  cuda::kernel_instance<BatchNormBackwardFinalize>().launch(stream, finalize_grid, dim3(kThreads), 0,
                                                            static_cast<const float*>(ws.partial), save_invstd, dgamma,
                                                            dbeta, i32(t.splits), i32(t.channels));
  const float *job_dgamma = dgamma, *job_dbeta = dbeta;
  if (ranks.world > 1) {
    ranks.all_gather(ws.partial, ws.gathered, t.partial_floats() * sizeof(float));
    cuda::kernel_instance<BatchNormBackwardFinalize>().launch(
        stream, finalize_grid, dim3(kThreads), 0, static_cast<const float*>(ws.gathered), save_invstd, ws.job_dgamma,
        ws.job_dbeta, i32(t.splits * ranks.world), i32(t.channels));
    job_dgamma = ws.job_dgamma, job_dbeta = ws.job_dbeta;
  }
  cuda::kernel_instance<BatchNormBackwardApply>(dtype, layout, a.vec, silu)
      .launch(stream, a.grid(), dim3(kThreads), 0, x_data, dy, dx, save_mean, save_invstd, gamma, beta, job_dgamma,
              job_dbeta, i32(a.units), i32(a.cols), i32(a.inner_v), int32_t{a.tc_shift}, i32(a.units_per_split),
              a.count * ranks.world);
}

}  // namespace vision::ops::kernels
