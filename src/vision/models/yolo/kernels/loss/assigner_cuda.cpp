#include "vision/models/yolo/kernels/loss/assigner_cuda.h"

#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::models::yolo::kernels::loss {
namespace {

using core::DType;
using core::Shape;

// As in assigner.cuh (tal::k*).
constexpr int kTopkThreads = 256;
constexpr int kResolveThreads = 128;
constexpr int kFinalizeThreads = 256;

constexpr DType kAssignerDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr const char* kAssignerFile = "vision/models/yolo/kernels/loss/assigner.cuh";
constexpr const char* kAssignerScope = "vision::models::yolo::kernels::loss";

void register_assigner_kernels(cuda::KernelRegistry& r) {
  for (DType t : kAssignerDtypes) {
    r.add<AssignerTopk>(t);
    r.add<AssignerResolve>(t);
    r.add<AssignerFinalize>(t);
  }
}
VISION_REGISTER_KERNELS(register_assigner_kernels);

void check_assigner_dtype(DType t) {
  VISION_CHECK(core::is_floating(t), "task_aligned_assigner: no CUDA kernel for {} tensors (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

constexpr size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

void check_sizes(const AssignerSizes& s, const AssignerOptions& o) {
  check_assigner_options(o);
  VISION_CHECK(s.batch >= 0 && s.batch <= 65535 && s.n_anchors >= 0 &&
                   s.n_anchors <= std::numeric_limits<int32_t>::max() && s.n_classes >= 1 && s.n_max >= 0 &&
                   s.n_max <= std::numeric_limits<int32_t>::max(),
               "task_aligned_assigner (GPU): a batch of {} with {} anchors, {} classes and {} target rows is out of "
               "range (batch ≤ 65535, anchors and rows < 2^31, at least one class)",
               s.batch, s.n_anchors, s.n_classes, s.n_max);
}

}  // namespace

AssignerTopk::AssignerTopk(DType t)
    : KernelDescriptor({"assigner_topk",
                        kAssignerFile,
                        t,
                        {},
                        "const {T}*, const {T}*, const float*, const float*, const int32_t*, int32_t*, int32_t*, "
                        "int64_t, int64_t, int64_t, int32_t, float, float, float, float, float",
                        kAssignerScope}) {
  check_assigner_dtype(t);
}

AssignerResolve::AssignerResolve(DType t)
    : KernelDescriptor({"assigner_resolve",
                        kAssignerFile,
                        t,
                        {},
                        "const {T}*, const float*, const float*, const int32_t*, const int32_t*, int32_t*, int64_t, "
                        "int64_t, int64_t, int64_t, float, float, float",
                        kAssignerScope}) {
  check_assigner_dtype(t);
}

AssignerFinalize::AssignerFinalize(DType t)
    : KernelDescriptor({"assigner_finalize",
                        kAssignerFile,
                        t,
                        {},
                        "const {T}*, const {T}*, const float*, const float*, const int32_t*, const int32_t*, float*, "
                        "float*, uint8_t*, int32_t*, int64_t, int64_t, int64_t, int32_t, int32_t, float, float, float, "
                        "float, float",
                        kAssignerScope}) {
  check_assigner_dtype(t);
}

size_t assigner_workspace_bytes(const AssignerSizes& s, const AssignerOptions& o) {
  check_sizes(s, o);
  return 2 * align_up(static_cast<size_t>(s.batch * s.n_anchors) * 4);
}

void launch_task_aligned_assigner(cudaStream_t stream, DType dtype, const void* logits, const void* boxes,
                                  const float* anchors, const float* targets, const int32_t* count, float* target_boxes,
                                  float* target_scores, uint8_t* fg_mask, int32_t* gt_index, void* workspace,
                                  size_t workspace_bytes, const AssignerSizes& s, const AssignerOptions& o) {
  check_assigner_dtype(dtype);
  const size_t need = assigner_workspace_bytes(s, o);
  const auto b = static_cast<size_t>(s.batch), n = static_cast<size_t>(s.n_anchors);
  if (b == 0 || n == 0) return;
  VISION_CUDA_CHECK(cudaMemsetAsync(target_boxes, 0, b * 4 * n * sizeof(float), stream));
  VISION_CUDA_CHECK(
      cudaMemsetAsync(target_scores, 0, b * static_cast<size_t>(s.n_classes) * n * sizeof(float), stream));
  VISION_CUDA_CHECK(cudaMemsetAsync(fg_mask, 0, b * n, stream));
  VISION_CUDA_CHECK(cudaMemsetAsync(gt_index, 0xff, b * n * sizeof(int32_t), stream));  // −1
  if (s.n_max == 0) return;
  VISION_CHECK(workspace != nullptr && workspace_bytes >= need,
               "task_aligned_assigner (GPU): the workspace has {} bytes, {} are needed (assigner_workspace_bytes)",
               workspace_bytes, need);
  auto* claimers = static_cast<int32_t*>(workspace);
  auto* owner = reinterpret_cast<int32_t*>(static_cast<std::byte*>(workspace) + align_up(b * n * 4));
  VISION_CUDA_CHECK(cudaMemsetAsync(claimers, 0, b * n * 4, stream));
  VISION_CUDA_CHECK(cudaMemsetAsync(owner, 0xff, b * n * 4, stream));  // −1

  const dim3 per_gt(static_cast<unsigned>(s.n_max), static_cast<unsigned>(s.batch));
  cuda::kernel_instance<AssignerTopk>(dtype).launch(stream, per_gt, dim3(kTopkThreads), 0, logits, boxes, anchors,
                                                    targets, count, claimers, owner, s.n_anchors, s.n_classes, s.n_max,
                                                    static_cast<int32_t>(o.topk), o.alpha, o.beta, o.eps, o.small_side,
                                                    o.widened_side);
  cuda::kernel_instance<AssignerResolve>(dtype).launch_over(stream, s.batch * s.n_anchors, kResolveThreads, boxes,
      anchors, targets, count, static_cast<const int32_t*>(claimers), owner, s.batch, s.n_anchors, s.n_classes,
      s.n_max, o.eps, o.small_side, o.widened_side);
  cuda::kernel_instance<AssignerFinalize>(dtype).launch(
      stream, per_gt, dim3(kFinalizeThreads), 0, logits, boxes, anchors, targets, count,
      static_cast<const int32_t*>(owner), target_boxes, target_scores, fg_mask, gt_index, s.n_anchors, s.n_classes,
      s.n_max, static_cast<int32_t>(o.topk), static_cast<int32_t>(o.topk2), o.alpha, o.beta, o.eps, o.small_side,
      o.widened_side);
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOp

namespace {

class AssignerCudaRuntime final : public graph::RuntimeOp {
 public:
  AssignerCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, AssignerOptions options)
      : twin_(std::move(twin)), options_(options) {}

  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  // Logits and boxes in f32, f16 or bf16 (rank 3: any layout); targets stay f32; the level maps are read for their
  // shapes only.
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  bool reads_input(size_t i) const override { return twin_->reads_input(i); }
  std::optional<DType> input_dtype(size_t i) const override { return twin_->input_dtype(i); }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return twin_->param_init_data(i, in, out, seed);
  }
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    return assigner_workspace_bytes(sizes_of(in.at(0), in.at(2)), options_);
  }

  void forward(graph::ForwardCtx& ctx) override {
    VISION_CHECK(ctx.inputs.size() == 7 && ctx.outputs.size() == 4,
                 "task_aligned_assigner (CUDA): 7 inputs and 4 outputs, got {} and {}", ctx.inputs.size(),
                 ctx.outputs.size());
    const Tensor &logits = ctx.inputs[0], &boxes = ctx.inputs[1], &targets = ctx.inputs[2], &count = ctx.inputs[3];
    const AssignerSizes s = sizes_of(logits.shape(), targets.shape());
    const DType t = logits.dtype();
    check(logits, "logits", Shape{s.batch, s.n_classes, s.n_anchors}, t);
    check(boxes, "boxes", Shape{s.batch, 4, s.n_anchors}, t);
    check(targets, "targets", Shape{s.batch, s.n_max, 5}, DType::f32);
    check(count, "count", Shape{s.batch}, DType::i32);
    check(ctx.params.at(0), "anchors", Shape{3, s.n_anchors}, DType::f32);
    check(ctx.outputs[0], "target_boxes", Shape{s.batch, 4, s.n_anchors}, DType::f32);
    check(ctx.outputs[1], "target_scores", Shape{s.batch, s.n_classes, s.n_anchors}, DType::f32);
    check(ctx.outputs[2], "fg_mask", Shape{s.batch, s.n_anchors}, DType::u8);
    check(ctx.outputs[3], "gt_index", Shape{s.batch, s.n_anchors}, DType::i32);
    const cudaStream_t stream = graph::stream_of(ctx.backend);
    void* ws = ctx.workspace.defined() ? ctx.workspace.raw() : nullptr;
    const size_t ws_bytes = ctx.workspace.defined() ? ctx.workspace.nbytes() : 0;
    launch_task_aligned_assigner(stream, t, logits.raw(), boxes.raw(), static_cast<const float*>(ctx.params[0].raw()),
                                 static_cast<const float*>(targets.raw()), static_cast<const int32_t*>(count.raw()),
                                 static_cast<float*>(ctx.outputs[0].raw()), static_cast<float*>(ctx.outputs[1].raw()),
                                 static_cast<uint8_t*>(ctx.outputs[2].raw()),
                                 static_cast<int32_t*>(ctx.outputs[3].raw()), ws, ws_bytes, s, options_);
  }

  std::vector<graph::KernelInfo> kernels() const override {
    const DType t = format().dtype;
    return {graph::kernel_info(cuda::kernel_instance<AssignerTopk>(t)),
            graph::kernel_info(cuda::kernel_instance<AssignerResolve>(t)),
            graph::kernel_info(cuda::kernel_instance<AssignerFinalize>(t))};
  }

 private:
  AssignerSizes sizes_of(const Shape& logits, const Shape& targets) const {
    VISION_CHECK(logits.rank() == 3 && targets.rank() == 3 && targets[0] == logits[0] && targets[2] == 5,
                 "task_aligned_assigner (CUDA): logits {} and targets {} must be [B, nc, A] and [B, M, 5]",
                 logits.str(), targets.str());
    return {logits[0], logits[2], logits[1], targets[1]};
  }
  static void check(const Tensor& t, const char* what, const Shape& shape, DType dtype) {
    VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.shape() == shape && t.dtype() == dtype,
                 "task_aligned_assigner (CUDA): {} must be a {} {} tensor on the GPU, got {}", what,
                 core::dtype_name(dtype), shape.str(), t.defined() ? t.str() : std::string("an undefined tensor"));
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  AssignerOptions options_;
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_task_aligned_assigner_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                                  AssignerOptions options) {
  VISION_CHECK(twin != nullptr, "make_task_aligned_assigner_cuda: no CPU RuntimeOp to share state specs with");
  return std::make_unique<AssignerCudaRuntime>(std::move(twin), options);
}

}  // namespace vision::models::yolo::kernels::loss
