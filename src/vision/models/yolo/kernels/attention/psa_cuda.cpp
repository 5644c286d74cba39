#include "vision/models/yolo/kernels/attention/psa_cuda.h"

#include <string>

#include "vision/core/error.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::models::yolo::kernels::attention {
namespace {

constexpr int kThreads = 256;
constexpr const char* kFile = "vision/models/yolo/kernels/attention/psa.cuh";
constexpr const char* kScope = "vision::models::yolo::kernels::attention";
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
  s.file = kFile;
  s.dtype = dtype;
  s.constants = {{constant, checked_pow2(value, constant)}, {"nhwc", layout == core::Layout::nhwc ? 1 : 0}};
  s.params = params;
  s.scope = kScope;
  return s;
}

void register_psa_kernels(cuda::KernelRegistry& r) {
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
  cuda::kernel_instance<D>(dtype, checked_pow2(k.width, "the row width"), k.layout).launch(
      stream, dim3(cuda::grid_blocks(total, kThreads)), dim3(kThreads), 0, src, dst, total, k.n, k.heads, k.channels,
      k.head_stride, k.offset);
}

template <typename D>
void launch_extract(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* src, void* dst,
                    int64_t batch, int64_t key_dim, int64_t heads, int64_t n) {
  const int64_t total = batch * 4 * key_dim * heads * n;  // one thread per qkv element
  if (total == 0) return;
  cuda::kernel_instance<D>(dtype, checked_pow2(key_dim, "key_dim"), layout).launch(
      stream, dim3(cuda::grid_blocks(total, kThreads)), dim3(kThreads), 0, src, dst, total, n, heads);
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
    launch_psa_channels_to_rows(stream(b), channels.dtype(), channels.raw(), rows.raw(), block);
  }
  void rows_to_channels(graph::BackendContext& b, const Tensor& rows, const PsaRowsBlock& block,
                        const Tensor& channels) const override {
    check(rows, block.rows_numel(), rows.dtype(), "the rows");
    check(channels, block.batch * block.channels * block.n, rows.dtype(), "the channel-major tensor");
    launch_psa_rows_to_channels(stream(b), rows.dtype(), rows.raw(), channels.raw(), block);
  }
  void extract_v(graph::BackendContext& b, const Tensor& qkv, const PsaConfig& c, const Tensor& image) const override {
    check(qkv, qkv.numel(), qkv.dtype(), "qkv");
    check(image, qkv.numel() / 2, qkv.dtype(), "the V image");
    VISION_CHECK(qkv.layout() == image.layout(), "psa_extract_v (CUDA): qkv is {}, the image {}", qkv.str(),
                 image.str());
    launch_psa_extract_v(stream(b), qkv.dtype(), qkv.layout(), qkv.raw(), image.raw(), qkv.dim(0), c.key_dim, c.heads,
                         qkv.dim(2) * qkv.dim(3));
  }
  void extract_v_backward(graph::BackendContext& b, const Tensor& grad_image, const PsaConfig& c,
                          const Tensor& grad_qkv) const override {
    check(grad_qkv, grad_qkv.numel(), grad_image.dtype(), "the qkv gradient");
    check(grad_image, grad_qkv.numel() / 2, grad_image.dtype(), "the V image gradient");
    VISION_CHECK(grad_qkv.layout() == grad_image.layout(), "psa_extract_v backward (CUDA): d_qkv is {}, the image "
                 "gradient {}", grad_qkv.str(), grad_image.str());
    launch_psa_extract_v_backward(stream(b), grad_image.dtype(), grad_image.layout(), grad_image.raw(), grad_qkv.raw(),
                                  grad_qkv.dim(0), c.key_dim, c.heads, grad_qkv.dim(2) * grad_qkv.dim(3));
  }
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<graph::KernelInfo> kernels(PsaOpKind op, const PsaConfig& c, const graph::Format& f) const override {
    std::vector<graph::KernelInfo> out;
    for (const cuda::Kernel* k : psa_kernels(op, c, f)) out.push_back(graph::kernel_info(*k));
    return out;
  }

 private:
  static cudaStream_t stream(graph::BackendContext& b) { return graph::CudaBackendContext::of(&b).stream(); }
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
