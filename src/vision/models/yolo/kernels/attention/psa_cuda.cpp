#include "vision/models/yolo/kernels/attention/psa_cuda.h"

#include <string>

#include "vision/core/error.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/ops/attention/flash_attn2_cuda.h"

namespace vision::models::yolo::kernels::attention {

// FlashAttention-2 (its op, kernels and launch shapes) is a built-in op: vision/ops/attention.
using namespace ::vision::ops::attention;
namespace {

constexpr int kThreads = 256;
constexpr const char* kPsaFile = "vision/models/yolo/kernels/attention/psa.cuh";
constexpr const char* kPsaScope = "vision::models::yolo::kernels::attention";
constexpr const char* kRowsParams = "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t";
constexpr const char* kExtractParams = "const {T}*, {T}*, int64_t, int64_t, int64_t";

// A compile-time power of two the kernels take: 1..128.
int checked_pow2(int64_t v, std::string_view what) {
  VISION_CHECK(v >= 1 && v <= 128 && (v & (v - 1)) == 0,
               "psa kernels: {} must be a power of two up to 128 (a template constant), got {}", what, v);
  return static_cast<int>(v);
}

cuda::KernelSpec psa_spec(const char* name, core::DType dtype, const char* constant, int value, core::Layout layout,
                          const char* params) {
  VISION_CHECK(core::is_floating(dtype), "psa: no CUDA kernel for {} tensors (f32, f16 and bf16 only)",
               core::dtype_name(dtype));
  cuda::KernelSpec s;
  s.name = name;
  s.file = kPsaFile;
  s.dtype = dtype;
  s.constants = {{constant, checked_pow2(value, constant)}, {"nhwc", layout == core::Layout::nhwc ? 1 : 0}};
  s.params = params;
  s.scope = kPsaScope;
  return s;
}

// The FlashAttention-2 wgmma forward instance the direct PSA attention shares its tiles and shared memory with.
FlashAttention2Instance direct_instance(core::DType dtype, int key_dim) {
  return flash_attention2_instance(FlashAttention2Kernel::forward_sm90, dtype, key_dim, 2 * key_dim);
}

bool direct_exists(core::DType dtype, int64_t key_dim) {
  return (key_dim == 16 || key_dim == 32 || key_dim == 64) &&
         flash_attention2_kernel_exists(FlashAttention2Kernel::forward_sm90, dtype, static_cast<int>(key_dim),
                                        static_cast<int>(2 * key_dim));
}

cuda::KernelSpec direct_spec(core::DType dtype, int key_dim) {
  VISION_CHECK(direct_exists(dtype, key_dim), "psa_attention_forward_sm90: no kernel for {} with key_dim {} (f16 or "
               "bf16, key_dim 16, 32 or 64)", core::dtype_name(dtype), key_dim);
  const FlashAttention2Instance in = direct_instance(dtype, key_dim);
  cuda::KernelSpec s;
  s.name = "psa_attention_forward_sm90";
  s.file = "vision/ops/attention/flash_attn2_sm90.cuh";  // the wgmma forward's file, whose namespace it shares
  s.dtype = dtype;
  s.constants = {{"kd", key_dim}, {"bn", in.tiles.block_n}, {"wg", in.tiles.warps / 4}};
  s.id_constants = 1;
  s.params = "const {T}*, {T}*, int, int, float";
  s.scope = "vision::ops::attention";
  return s;
}

void register_psa_kernels(cuda::KernelRegistry& r) {
  for (core::DType t : {core::DType::f16, core::DType::bf16})
    for (int kd : {16, 32, 64})
      if (direct_exists(t, kd)) r.add<PsaAttentionForwardSm90>(t, kd);
  for (core::DType t : {core::DType::f32, core::DType::f16, core::DType::bf16})
    for (core::Layout l : {core::Layout::nchw, core::Layout::nhwc}) {
      for (int w : {16, 32, 64}) {
        r.add<PsaChannelsToRows>(t, w, l);
        r.add<PsaRowsToChannels>(t, w, l);
      }
      for (int kd : {16, 32}) {
        r.add<PsaExtractVForward>(t, kd, l);
        r.add<PsaExtractVBackward>(t, kd, l);
      }
    }
}
VISION_REGISTER_KERNELS(register_psa_kernels);

template <typename D>
void launch_rows(cudaStream_t stream, core::DType dtype, const void* src, void* dst, const PsaRowsBlock& k) {
  const int64_t total = k.rows_numel();
  if (total == 0) return;
  cuda::kernel_instance<D>(dtype, checked_pow2(k.width, "the row width"), k.layout).launch_over(stream, total, kThreads, src, dst, total, k.n, k.heads, k.channels,
      k.head_stride, k.offset);
}

template <typename D>
void launch_extract(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* src, void* dst,
                    int64_t batch, int64_t key_dim, int64_t heads, int64_t n) {
  const int64_t total = batch * 4 * key_dim * heads * n;  // one thread per qkv element
  if (total == 0) return;
  cuda::kernel_instance<D>(dtype, checked_pow2(key_dim, "key_dim"), layout).launch_over(stream, total, kThreads, src, dst, total, n, heads);
}

}  // namespace

PsaChannelsToRows::PsaChannelsToRows(core::DType t, int width, core::Layout l)
    : KernelDescriptor(psa_spec("psa_channels_to_rows", t, "w", width, l, kRowsParams)) {}
PsaRowsToChannels::PsaRowsToChannels(core::DType t, int width, core::Layout l)
    : KernelDescriptor(psa_spec("psa_rows_to_channels", t, "w", width, l, kRowsParams)) {}
PsaExtractVForward::PsaExtractVForward(core::DType t, int key_dim, core::Layout l)
    : KernelDescriptor(psa_spec("psa_extract_v_forward", t, "kd", key_dim, l, kExtractParams)) {}
PsaExtractVBackward::PsaExtractVBackward(core::DType t, int key_dim, core::Layout l)
    : KernelDescriptor(psa_spec("psa_extract_v_backward", t, "kd", key_dim, l, kExtractParams)) {}

PsaAttentionForwardSm90::PsaAttentionForwardSm90(core::DType t, int key_dim) : KernelDescriptor(direct_spec(t, key_dim)) {}

bool psa_attention_direct_usable(core::DType dtype, int64_t key_dim) {
  return direct_exists(dtype, key_dim) &&
         flash_attention2_sm90_usable(dtype, static_cast<int>(key_dim), static_cast<int>(2 * key_dim));
}

void launch_psa_attention_direct(cudaStream_t stream, core::DType dtype, const void* qkv, void* image, int64_t batch,
                                 int64_t n, int64_t key_dim, int64_t heads, float scale) {
  VISION_CHECK(psa_attention_direct_usable(dtype, key_dim), "psa_attention_forward_sm90: needs an sm_90a GPU, f16 or "
               "bf16 and key_dim 16, 32 or 64 (got {}, key_dim {})", core::dtype_name(dtype), key_dim);
  VISION_CHECK(scale > 0, "psa_attention_forward_sm90: the softmax scale must be positive (got {})", scale);
  VISION_CHECK(n <= INT32_MAX && heads <= INT32_MAX, "psa_attention_forward_sm90: n = {} or heads = {} too large", n,
               heads);
  VISION_CHECK(reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(image) % 16 == 0,
               "psa_attention_forward_sm90: qkv and the image must be 16-byte aligned");
  if (batch == 0 || n == 0) return;
  const auto& kernel = cuda::kernel_instance<PsaAttentionForwardSm90>(dtype, static_cast<int>(key_dim));
  const FlashAttention2Instance in = direct_instance(dtype, static_cast<int>(key_dim));
  const FlashAttention2Launch l = flash_attention2_launch(
      FlashAttention2Kernel::forward_sm90, dtype, AttentionSizes{batch * heads, n, n, key_dim, 2 * key_dim}, in.tiles);
  kernel.launch(stream, dim3(l.grid[0], l.grid[1], l.grid[2]), dim3(l.threads), l.smem_bytes, qkv, image,
                static_cast<int32_t>(n), static_cast<int32_t>(heads), scale);
}

void launch_psa_channels_to_rows(cudaStream_t stream, core::DType dtype, const void* channels, void* rows,
                                 const PsaRowsBlock& block) {
  launch_rows<PsaChannelsToRows>(stream, dtype, channels, rows, block);
}
void launch_psa_rows_to_channels(cudaStream_t stream, core::DType dtype, const void* rows, void* channels,
                                 const PsaRowsBlock& block) {
  launch_rows<PsaRowsToChannels>(stream, dtype, rows, channels, block);
}
void launch_psa_extract_v(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* qkv, void* image,
                          int64_t batch, int64_t key_dim, int64_t heads, int64_t n) {
  launch_extract<PsaExtractVForward>(stream, dtype, layout, qkv, image, batch, key_dim, heads, n);
}
void launch_psa_extract_v_backward(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* grad_image,
                                   void* grad_qkv, int64_t batch, int64_t key_dim, int64_t heads, int64_t n) {
  launch_extract<PsaExtractVBackward>(stream, dtype, layout, grad_image, grad_qkv, batch, key_dim, heads, n);
}

std::vector<const cuda::Kernel*> psa_kernels(PsaOpKind op, const PsaConfig& c, const graph::Format& f) {
  const int kd = checked_pow2(c.key_dim, "key_dim"), vw = checked_pow2(c.v_part_width(), "the V width");
  const core::DType dtype = f.dtype;
  const core::Layout l = f.layout;
  if (op == PsaOpKind::extract_v)
    return {&cuda::kernel_instance<PsaExtractVForward>(dtype, kd, l),
            &cuda::kernel_instance<PsaExtractVBackward>(dtype, kd, l)};
  // pack_qkv and merge_attn: the two transposes at each row width.
  std::vector<const cuda::Kernel*> out;
  std::vector<int> widths{kd};
  if (vw != kd) widths.push_back(vw);  // one_pass: V rows are 2·KEY_DIM wide
  for (int w : widths) {
    out.push_back(&cuda::kernel_instance<PsaChannelsToRows>(dtype, w, l));
    out.push_back(&cuda::kernel_instance<PsaRowsToChannels>(dtype, w, l));
  }
  return out;
}

namespace {

class CudaCopies final : public PsaCopies {
 public:
  void channels_to_rows(graph::BackendContext& b, const Tensor& channels, const PsaRowsBlock& block,
                        const Tensor& rows) const override {
    check(channels, block.batch * block.channels * block.n, channels.dtype(), "the channel-major tensor");
    check(rows, block.rows_numel(), channels.dtype(), "the rows");
    launch_psa_channels_to_rows(graph::stream_of(&b), channels.dtype(), channels.raw(), rows.raw(), block);
  }
  void rows_to_channels(graph::BackendContext& b, const Tensor& rows, const PsaRowsBlock& block,
                        const Tensor& channels) const override {
    check(rows, block.rows_numel(), rows.dtype(), "the rows");
    check(channels, block.batch * block.channels * block.n, rows.dtype(), "the channel-major tensor");
    launch_psa_rows_to_channels(graph::stream_of(&b), rows.dtype(), rows.raw(), channels.raw(), block);
  }
  void extract_v(graph::BackendContext& b, const Tensor& qkv, const PsaConfig& c, const Tensor& image) const override {
    check(qkv, qkv.numel(), qkv.dtype(), "qkv");
    check(image, qkv.numel() / 2, qkv.dtype(), "the V image");
    VISION_CHECK(qkv.layout() == image.layout(), "psa_extract_v (CUDA): qkv is {}, the image {}", qkv.str(),
                 image.str());
    if (qkv.layout() == core::Layout::nhwc) {
      // Per pixel and head a run of 2·key_dim V channels: one pitched copy (the backend's vectorised copy kernel).
      const size_t e = core::dtype_size(qkv.dtype()), run = static_cast<size_t>(2 * c.key_dim) * e;
      b.copy_2d(image.raw(), run, static_cast<const std::byte*>(qkv.raw()) + run, 2 * run, run,
                static_cast<size_t>(qkv.dim(0) * qkv.dim(2) * qkv.dim(3) * c.heads));
      return;
    }
    launch_psa_extract_v(graph::stream_of(&b), qkv.dtype(), qkv.layout(), qkv.raw(), image.raw(), qkv.dim(0), c.key_dim, c.heads,
                         qkv.dim(2) * qkv.dim(3));
  }
  void extract_v_backward(graph::BackendContext& b, const Tensor& grad_image, const PsaConfig& c,
                          const Tensor& grad_qkv) const override {
    check(grad_qkv, grad_qkv.numel(), grad_image.dtype(), "the qkv gradient");
    check(grad_image, grad_qkv.numel() / 2, grad_image.dtype(), "the V image gradient");
    VISION_CHECK(grad_qkv.layout() == grad_image.layout(), "psa_extract_v backward (CUDA): d_qkv is {}, the image "
                 "gradient {}", grad_qkv.str(), grad_image.str());
    launch_psa_extract_v_backward(graph::stream_of(&b), grad_image.dtype(), grad_image.layout(), grad_image.raw(), grad_qkv.raw(),
                                  grad_qkv.dim(0), c.key_dim, c.heads, grad_qkv.dim(2) * grad_qkv.dim(3));
  }
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  bool has_direct_attention(const graph::Format& f, const PsaConfig& c) const override {
    return f.layout == core::Layout::nhwc && psa_attention_direct_usable(f.dtype, c.key_dim);
  }
  void direct_attention(graph::BackendContext& b, const Tensor& qkv, const PsaConfig& c, float scale,
                        const Tensor& image) const override {
    check(qkv, qkv.numel(), qkv.dtype(), "qkv");
    check(image, qkv.numel() / 2, qkv.dtype(), "the attention image");
    VISION_CHECK(qkv.layout() == core::Layout::nhwc && image.layout() == core::Layout::nhwc,
                 "psa_attention (CUDA): the direct path takes NHWC qkv and image, got {} and {}", qkv.str(),
                 image.str());
    launch_psa_attention_direct(graph::stream_of(&b), qkv.dtype(), qkv.raw(), image.raw(), qkv.dim(0), qkv.dim(2) * qkv.dim(3),
                                c.key_dim, c.heads, scale);
  }
  std::vector<graph::KernelInfo> direct_attention_kernels(const PsaConfig& c, const graph::Format& f) const override {
    if (!direct_exists(f.dtype, c.key_dim)) return {};
    return {graph::kernel_info(cuda::kernel_instance<PsaAttentionForwardSm90>(f.dtype, static_cast<int>(c.key_dim)))};
  }
  std::vector<graph::KernelInfo> kernels(PsaOpKind op, const PsaConfig& c, const graph::Format& f) const override {
    std::vector<graph::KernelInfo> out;
    for (const cuda::Kernel* k : psa_kernels(op, c, f)) out.push_back(graph::kernel_info(*k));
    return out;
  }

 private:
  static void check(const Tensor& t, int64_t numel, core::DType dtype, const char* what) {
    VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.numel() == numel && t.dtype() == dtype,
                 "psa (CUDA): {} must be a {} tensor of {} elements on the GPU, got {}", what, core::dtype_name(dtype),
                 numel, t.defined() ? t.str() : std::string("an undefined tensor"));
  }
};

}  // namespace

std::shared_ptr<const PsaCopies> psa_cuda_copies() {
  static const auto copies = std::make_shared<CudaCopies>();
  return copies;
}

}  // namespace vision::models::yolo::kernels::attention
