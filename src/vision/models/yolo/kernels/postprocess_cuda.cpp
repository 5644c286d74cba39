#include "vision/models/yolo/kernels/postprocess_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::models::yolo::kernels {
namespace {

using core::DType;
using core::Shape;

// As in postprocess.cuh (pp::k*).
constexpr int kKeyThreadsX = 32, kKeyThreadsY = 8;
constexpr int kSelectThreads = 1024;
constexpr int kRankThreads = 256;
constexpr int kNmsTile = 256;

constexpr DType kPostprocessDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr const char* kPostprocessFile = "vision/models/yolo/kernels/postprocess.cuh";
constexpr const char* kPostprocessScope = "vision::models::yolo::kernels";

void register_postprocess_kernels(cuda::KernelRegistry& r) {
  for (DType t : kPostprocessDtypes) {
    r.add<PostprocessE2eAnchorKeys>(t);
    r.add<PostprocessE2eSelect>(t);
    r.add<PostprocessNmsCandidates>(t);
    r.add<PostprocessNmsSelect>(t);
  }
  r.add<PostprocessNmsRank>(DType::f32);
}
VISION_REGISTER_KERNELS(register_postprocess_kernels);

void check_postprocess_dtype(DType t) {
  VISION_CHECK(core::is_floating(t), "postprocess: no CUDA kernel for {} tensors (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

constexpr size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

void check_sizes(const PostprocessSizes& s, const PostprocessOptions& o, std::string_view op) {
  check_postprocess_options(o);
  VISION_CHECK(s.batch >= 0 && s.batch <= 65535 && s.n_anchors >= 0 &&
                   s.n_anchors <= std::numeric_limits<int32_t>::max() && s.n_classes >= 1 &&
                   s.n_anchors * s.n_classes <= int64_t{std::numeric_limits<uint32_t>::max()},
               "{} (GPU): a batch of {} with {} anchors and {} classes is out of range (batch ≤ 65535, anchors × "
               "classes < 2^32, at least one class)",
               op, s.batch, s.n_anchors, s.n_classes);
}

int64_t e2e_k(const PostprocessSizes& s, const PostprocessOptions& o) { return std::min(o.max_det, s.n_anchors); }
int64_t nms_order_stride(const PostprocessSizes& s, const PostprocessOptions& o) {
  return std::min(o.max_nms, s.n_anchors);
}
uint32_t next_pow2(int64_t k) {
  uint32_t p = 1;
  while (p < k) p <<= 1;
  return p;
}

// A zero result: no anchors (or no image) to select from.
void zero_outputs(cudaStream_t stream, float* detections, int32_t* count, const PostprocessSizes& s,
                  const PostprocessOptions& o) {
  if (s.batch == 0) return;
  VISION_CUDA_CHECK(cudaMemsetAsync(detections, 0, static_cast<size_t>(s.batch * o.max_det * 6) * sizeof(float),
                                    stream));
  VISION_CUDA_CHECK(cudaMemsetAsync(count, 0, static_cast<size_t>(s.batch) * sizeof(int32_t), stream));
}

void check_workspace(const void* workspace, size_t have, size_t need, std::string_view op) {
  VISION_CHECK(need == 0 || (workspace != nullptr && have >= need),
               "{} (GPU): the workspace has {} bytes, {} are needed (the *_workspace_bytes of postprocess_cuda.h)", op,
               have, need);
}

}  // namespace

PostprocessE2eAnchorKeys::PostprocessE2eAnchorKeys(DType t)
    : KernelDescriptor({"postprocess_e2e_anchor_keys", kPostprocessFile, t, {}, "const {T}*, uint64_t*, int64_t, int64_t",
                        kPostprocessScope}) {
  check_postprocess_dtype(t);
}

PostprocessE2eSelect::PostprocessE2eSelect(DType t)
    : KernelDescriptor({"postprocess_e2e_select", kPostprocessFile, t, {},
                        "const {T}*, const {T}*, const uint64_t*, uint64_t*, const float*, float*, int32_t*, int64_t, "
                        "int64_t, int32_t, float",
                        kPostprocessScope}) {
  check_postprocess_dtype(t);
}

PostprocessNmsCandidates::PostprocessNmsCandidates(DType t)
    : KernelDescriptor({"postprocess_nms_candidates", kPostprocessFile, t, {},
                        "const {T}*, const float*, uint64_t*, int32_t*, int32_t*, int64_t, int64_t, float", kPostprocessScope}) {
  check_postprocess_dtype(t);
}

PostprocessNmsRank::PostprocessNmsRank(DType t)
    : KernelDescriptor({"postprocess_nms_rank", kPostprocessFile, t, {},
                        "const uint64_t*, const int32_t*, int32_t*, int64_t, int64_t, int32_t", kPostprocessScope}) {
  VISION_CHECK(t == DType::f32, "postprocess_nms_rank reads no element data and exists as f32 only, not {}",
               core::dtype_name(t));
}

PostprocessNmsSelect::PostprocessNmsSelect(DType t)
    : KernelDescriptor({"postprocess_nms_select", kPostprocessFile, t, {},
                        "const {T}*, const uint64_t*, const int32_t*, const int32_t*, const int32_t*, float*, "
                        "int32_t*, int64_t, int64_t, int32_t, int32_t, float",
                        kPostprocessScope}) {
  check_postprocess_dtype(t);
}

size_t postprocess_e2e_workspace_bytes(const PostprocessSizes& s, const PostprocessOptions& o) {
  check_sizes(s, o, "postprocess_e2e");
  const auto b = static_cast<size_t>(s.batch);
  return align_up(b * static_cast<size_t>(s.n_anchors) * 8) +
         align_up(b * static_cast<size_t>(e2e_k(s, o) * s.n_classes) * 8);
}

size_t postprocess_nms_workspace_bytes(const PostprocessSizes& s, const PostprocessOptions& o) {
  check_sizes(s, o, "nms");
  const auto b = static_cast<size_t>(s.batch), n = static_cast<size_t>(s.n_anchors);
  return align_up(b * n * 8) + align_up(b * n * 4) + align_up(b * 4) +
         align_up(b * static_cast<size_t>(nms_order_stride(s, o)) * 4);
}

void launch_postprocess_e2e(cudaStream_t stream, DType dtype, const void* boxes, const void* logits,
                            const float* class_mask, float* detections, int32_t* count, void* workspace,
                            size_t workspace_bytes, const PostprocessSizes& s, const PostprocessOptions& o) {
  check_postprocess_dtype(dtype);
  const size_t need = postprocess_e2e_workspace_bytes(s, o);
  if (s.batch == 0) return;
  if (s.n_anchors == 0) return zero_outputs(stream, detections, count, s, o);
  check_workspace(workspace, workspace_bytes, need, "postprocess_e2e");
  auto* anchor_keys = static_cast<uint64_t*>(workspace);
  auto* pair_keys = reinterpret_cast<uint64_t*>(static_cast<std::byte*>(workspace) +
                                                align_up(static_cast<size_t>(s.batch * s.n_anchors) * 8));
  const float threshold = conf_logit_threshold(o.conf);
  const auto grid_x = static_cast<unsigned>((s.n_anchors + kKeyThreadsX - 1) / kKeyThreadsX);
  cuda::kernel_instance<PostprocessE2eAnchorKeys>(dtype).launch(
      stream, dim3(grid_x, static_cast<unsigned>(s.batch)), dim3(kKeyThreadsX, kKeyThreadsY), 0, logits, anchor_keys,
      s.n_anchors, s.n_classes);
  const size_t shared = static_cast<size_t>(next_pow2(e2e_k(s, o))) * 8;
  cuda::kernel_instance<PostprocessE2eSelect>(dtype).launch(
      stream, dim3(static_cast<unsigned>(s.batch)), dim3(kSelectThreads), shared, boxes, logits,
      static_cast<const uint64_t*>(anchor_keys), pair_keys, class_mask, detections, count, s.n_anchors, s.n_classes,
      static_cast<int32_t>(o.max_det), threshold);
}

void launch_postprocess_nms(cudaStream_t stream, DType dtype, const void* boxes, const void* logits,
                            const float* class_mask, float* detections, int32_t* count, void* workspace,
                            size_t workspace_bytes, const PostprocessSizes& s, const PostprocessOptions& o) {
  check_postprocess_dtype(dtype);
  const size_t need = postprocess_nms_workspace_bytes(s, o);
  if (s.batch == 0) return;
  if (s.n_anchors == 0) return zero_outputs(stream, detections, count, s, o);
  check_workspace(workspace, workspace_bytes, need, "nms");
  const auto b = static_cast<size_t>(s.batch), n = static_cast<size_t>(s.n_anchors);
  auto* base = static_cast<std::byte*>(workspace);
  auto* keys = reinterpret_cast<uint64_t*>(base);
  base += align_up(b * n * 8);
  auto* classes = reinterpret_cast<int32_t*>(base);
  base += align_up(b * n * 4);
  auto* n_valid = reinterpret_cast<int32_t*>(base);
  base += align_up(b * 4);
  auto* order = reinterpret_cast<int32_t*>(base);
  const int64_t stride = nms_order_stride(s, o);
  const float threshold = conf_logit_threshold(o.conf);

  VISION_CUDA_CHECK(cudaMemsetAsync(n_valid, 0, b * sizeof(int32_t), stream));
  const auto key_grid = static_cast<unsigned>((s.n_anchors + kKeyThreadsX - 1) / kKeyThreadsX);
  cuda::kernel_instance<PostprocessNmsCandidates>(dtype).launch(
      stream, dim3(key_grid, static_cast<unsigned>(s.batch)), dim3(kKeyThreadsX, kKeyThreadsY), 0, logits, class_mask,
      keys, classes, n_valid, s.n_anchors, s.n_classes, threshold);
  const auto rank_grid = static_cast<unsigned>((s.n_anchors + kRankThreads - 1) / kRankThreads);
  cuda::kernel_instance<PostprocessNmsRank>(DType::f32).launch(
      stream, dim3(rank_grid, static_cast<unsigned>(s.batch)), dim3(kRankThreads), 0,
      static_cast<const uint64_t*>(keys), static_cast<const int32_t*>(n_valid), order, s.n_anchors, stride,
      static_cast<int32_t>(o.max_nms));
  const size_t shared = static_cast<size_t>(o.max_det) * (16 + 4);  // kept boxes (float4) and classes
  cuda::kernel_instance<PostprocessNmsSelect>(dtype).launch(
      stream, dim3(static_cast<unsigned>(s.batch)), dim3(kNmsTile), shared, boxes,
      static_cast<const uint64_t*>(keys), static_cast<const int32_t*>(classes), static_cast<const int32_t*>(n_valid),
      static_cast<const int32_t*>(order), detections, count, s.n_anchors, stride, static_cast<int32_t>(o.max_det),
      static_cast<int32_t>(o.max_nms), o.iou);
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOp

namespace {

class PostprocessCudaRuntime final : public graph::RuntimeOp {
 public:
  PostprocessCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, PostprocessMethod method, PostprocessOptions options)
      : twin_(std::move(twin)), method_(method), options_(std::move(options)) {}

  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  // Boxes and logits in f32, f16 or bf16 (rank 3: any layout); the outputs are f32 and i32 whatever the inputs.
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return twin_->param_init_data(i, in, out, seed);
  }
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    const PostprocessSizes s = sizes_of(in.at(0), in.at(1));
    return method_ == PostprocessMethod::end_to_end ? postprocess_e2e_workspace_bytes(s, options_)
                                                    : postprocess_nms_workspace_bytes(s, options_);
  }

  void forward(graph::ForwardCtx& ctx) override {
    VISION_CHECK(ctx.inputs.size() == 2 && ctx.outputs.size() == 2, "{} (CUDA): 2 inputs and 2 outputs, got {} and {}",
                 name(), ctx.inputs.size(), ctx.outputs.size());
    const Tensor &boxes = ctx.inputs[0], &logits = ctx.inputs[1];
    const PostprocessSizes s = sizes_of(boxes.shape(), logits.shape());
    VISION_CHECK(boxes.device() == core::Device::cuda && logits.device() == core::Device::cuda &&
                     boxes.dtype() == logits.dtype() && core::is_floating(boxes.dtype()),
                 "{} (CUDA): boxes and logits must be GPU tensors of one floating dtype, got {} and {}", name(),
                 boxes.str(), logits.str());
    const Tensor &det = ctx.outputs[0], &count = ctx.outputs[1];
    VISION_CHECK(det.device() == core::Device::cuda && det.dtype() == DType::f32 &&
                     det.shape() == Shape({s.batch, options_.max_det, 6}),
                 "{} (CUDA): detections must be an f32 GPU tensor [{}, {}, 6], got {}", name(), s.batch,
                 options_.max_det, det.str());
    VISION_CHECK(count.device() == core::Device::cuda && count.dtype() == DType::i32 &&
                     count.shape() == Shape({s.batch}),
                 "{} (CUDA): count must be an i32 GPU tensor [{}], got {}", name(), s.batch, count.str());
    const float* mask = nullptr;
    if (!options_.classes.empty()) {
      const Tensor& m = ctx.params.at(0);
      VISION_CHECK(m.device() == core::Device::cuda && m.dtype() == DType::f32 && m.shape() == Shape({s.n_classes}),
                   "{} (CUDA): class_mask must be an f32 GPU tensor [{}], got {}", name(), s.n_classes, m.str());
      mask = static_cast<const float*>(m.raw());
    }
    const cudaStream_t stream = graph::stream_of(ctx.backend);
    void* ws = ctx.workspace.defined() ? ctx.workspace.raw() : nullptr;
    const size_t ws_bytes = ctx.workspace.defined() ? ctx.workspace.nbytes() : 0;
    auto* d = static_cast<float*>(det.raw());
    auto* c = static_cast<int32_t*>(count.raw());
    if (method_ == PostprocessMethod::end_to_end)
      launch_postprocess_e2e(stream, boxes.dtype(), boxes.raw(), logits.raw(), mask, d, c, ws, ws_bytes, s, options_);
    else
      launch_postprocess_nms(stream, boxes.dtype(), boxes.raw(), logits.raw(), mask, d, c, ws, ws_bytes, s, options_);
  }

  std::vector<graph::KernelInfo> kernels() const override {
    const DType t = format().dtype;
    std::vector<graph::KernelInfo> out;
    if (method_ == PostprocessMethod::end_to_end) {
      out.push_back(graph::kernel_info(cuda::kernel_instance<PostprocessE2eAnchorKeys>(t)));
      out.push_back(graph::kernel_info(cuda::kernel_instance<PostprocessE2eSelect>(t)));
    } else {
      out.push_back(graph::kernel_info(cuda::kernel_instance<PostprocessNmsCandidates>(t)));
      out.push_back(graph::kernel_info(cuda::kernel_instance<PostprocessNmsRank>(DType::f32)));
      out.push_back(graph::kernel_info(cuda::kernel_instance<PostprocessNmsSelect>(t)));
    }
    return out;
  }

 private:
  PostprocessSizes sizes_of(const Shape& boxes, const Shape& logits) const {
    VISION_CHECK(boxes.rank() == 3 && boxes[1] == 4 && logits.rank() == 3 && logits[0] == boxes[0] &&
                     logits[2] == boxes[2],
                 "{} (CUDA): boxes {} and logits {} must be [B, 4, A] and [B, nc, A] with one B and A", name(),
                 boxes.str(), logits.str());
    return {boxes[0], boxes[2], logits[1]};
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  PostprocessMethod method_;
  PostprocessOptions options_;
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_postprocess_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                        PostprocessMethod method, PostprocessOptions options) {
  VISION_CHECK(twin != nullptr, "make_postprocess_cuda: no CPU RuntimeOp to share state specs with");
  return std::make_unique<PostprocessCudaRuntime>(std::move(twin), method, std::move(options));
}

}  // namespace vision::models::yolo::kernels
