// Task-aligned assigner on CUDA: the kernel descriptors and the workspace bound (no GPU needed); the kernels through
// their launch helper in f32, f16 and bf16 against the CPU twin on the same (dtype-rounded) inputs, one-to-many and
// one-to-one, a batch of 4 with 0–20 boxes, a dense image of 1000 boxes and the crowded shared-anchor fixture (where
// ultralytics' rule for anchors kept by several gts decides assignments in both heads), poisoned outputs and workspace.
// GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "models/yolo/assigner_reference.h"
#include "models/yolo/shared_anchor_fixture.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/models/yolo/kernels/loss/assigner.h"
#include "vision/models/yolo/kernels/loss/assigner_cuda.h"

using namespace vision;
using namespace vision::test;
using namespace vision::models::yolo::kernels::loss;
using core::DType;
using core::Shape;
using core::Tensor;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}
template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& b) {
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

AssignerOutputs run_twin(const AssignerCase& c, const AssignerOptions& o) {
  const int64_t b = c.batch, n = c.n_anchors, nc = c.n_classes, m = c.n_max;
  Tensor count = Tensor::zeros(Shape{b}, DType::i32);
  std::memcpy(count.raw(), c.count.data(), c.count.size() * 4);
  Tensor tb = Tensor::zeros(Shape{b, 4, n}), ts = Tensor::zeros(Shape{b, nc, n});
  Tensor fg = Tensor::zeros(Shape{b, n}, DType::u8), idx = Tensor::zeros(Shape{b, n}, DType::i32);
  task_aligned_assign_cpu(Tensor::from_vector(Shape{b, nc, n}, c.logits), Tensor::from_vector(Shape{b, 4, n}, c.boxes),
                          Tensor::from_vector(Shape{3, n}, c.anchors), Tensor::from_vector(Shape{b, m, 5}, c.targets),
                          count, o, tb, ts, fg, idx);
  AssignerOutputs out;
  out.target_boxes.assign(tb.data<float>(), tb.data<float>() + tb.numel());
  out.target_scores.assign(ts.data<float>(), ts.data<float>() + ts.numel());
  out.fg_mask.assign(fg.data<uint8_t>(), fg.data<uint8_t>() + fg.numel());
  out.gt_index.assign(idx.data<int32_t>(), idx.data<int32_t>() + idx.numel());
  return out;
}

AssignerOutputs run_gpu(const AssignerCase& c, const AssignerOptions& o, DType dt) {
  const int64_t b = c.batch, n = c.n_anchors, nc = c.n_classes, m = c.n_max;
  DeviceBuffer logits(c.logits.size() * core::dtype_size(dt)), boxes(c.boxes.size() * core::dtype_size(dt));
  logits.upload(encode(c.logits, dt));
  boxes.upload(encode(c.boxes, dt));
  DeviceBuffer anchors(c.anchors.size() * 4), targets(c.targets.size() * 4), count(c.count.size() * 4 + 4);
  anchors.upload(bytes_of(c.anchors));
  targets.upload(bytes_of(c.targets));
  count.upload(bytes_of(c.count));
  DeviceBuffer tb(static_cast<size_t>(b * 4 * n) * 4), ts(static_cast<size_t>(b * nc * n) * 4),
      fg(static_cast<size_t>(b * n) + 1), idx(static_cast<size_t>(b * n) * 4);
  for (DeviceBuffer* p : {&tb, &ts, &fg, &idx}) p->poison();
  const AssignerSizes s{b, n, nc, m};
  const size_t ws_bytes = assigner_workspace_bytes(s, o);
  DeviceBuffer ws(ws_bytes);
  ws.poison();
  launch_task_aligned_assigner(nullptr, dt, logits.get(), boxes.get(), static_cast<const float*>(anchors.get()),
                               static_cast<const float*>(targets.get()), static_cast<const int32_t*>(count.get()),
                               static_cast<float*>(tb.get()), static_cast<float*>(ts.get()),
                               static_cast<uint8_t*>(fg.get()), static_cast<int32_t*>(idx.get()), ws.get(), ws_bytes, s,
                               o);
  VISION_CUDA_CHECK(cudaDeviceSynchronize());
  AssignerOutputs out;
  out.target_boxes = values_of<float>(tb.download(tb.bytes()));
  out.target_scores = values_of<float>(ts.download(ts.bytes()));
  out.fg_mask = fg.download(static_cast<size_t>(b * n));
  out.gt_index = values_of<int32_t>(idx.download(idx.bytes()));
  return out;
}

// GPU and twin: equal assignments on every anchor not touched by a gt the float64 reference calls fragile (a decision
// within rounding of a tie: the devices' atanf/expf/powf differ by ulps), equal target boxes, scores within 1e-5.
void expect_gpu_matches_twin(const AssignerCase& c, const AssignerOptions& o, const AssignerOutputs& gpu,
                             const AssignerOutputs& cpu) {
  const ReferenceAssignment ref = reference_assign(c, o);
  const int64_t n = c.n_anchors, nc = c.n_classes;
  int64_t compared = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      const auto i = static_cast<size_t>(b * n + a);
      auto fragile = [&](int32_t g) { return g >= 0 && ref.fragile[static_cast<size_t>(b * c.n_max + g)]; };
      if (fragile(gpu.gt_index[i]) || fragile(cpu.gt_index[i]) || ref.fragile_anchor[i]) continue;
      ASSERT_EQ(gpu.gt_index[i], cpu.gt_index[i]) << "image " << b << " anchor " << a;
      EXPECT_EQ(gpu.fg_mask[i], cpu.fg_mask[i]);
      compared += cpu.gt_index[i] >= 0;
      for (int q = 0; q < 4; ++q) {
        const size_t j = static_cast<size_t>((b * 4 + q) * n + a);
        EXPECT_EQ(gpu.target_boxes[j], cpu.target_boxes[j]);
      }
      for (int64_t k = 0; k < nc; ++k) {
        const size_t j = static_cast<size_t>((b * nc + k) * n + a);
        EXPECT_NEAR(gpu.target_scores[j], cpu.target_scores[j], 1e-5);
      }
    }
  int64_t boxes = 0;
  for (int32_t k : c.count) boxes += k;
  if (boxes > 0) EXPECT_GT(compared, 0);
}

// The inputs as dtype holds them, so both devices see the same values.
AssignerCase rounded(AssignerCase c, DType dt) {
  c.logits = decode(encode(c.logits, dt), dt);
  c.boxes = decode(encode(c.boxes, dt), dt);
  return c;
}

}  // namespace

TEST(AssignerDescriptors, KernelsAreRegisteredAndTheWorkspaceIsBounded) {
  std::set<std::string> ids;
  for (const auto* k : cuda::KernelRegistry::global().kernels())
    if (k->id().starts_with("assigner_")) ids.insert(k->id());
  EXPECT_EQ(ids, (std::set<std::string>{"assigner_topk__f32", "assigner_topk__f16", "assigner_topk__bf16",
                                        "assigner_resolve__f32", "assigner_resolve__f16", "assigner_resolve__bf16",
                                        "assigner_finalize__f32", "assigner_finalize__f16",
                                        "assigner_finalize__bf16"}));
  EXPECT_EQ(cuda::kernel_instance<AssignerTopk>(DType::bf16).name_expression(),
            "vision::models::yolo::kernels::loss::assigner_topk<__nv_bfloat16>");
  // B·A·4 claim counts + B·A·4 owners (each part rounded to 256 bytes): for B = 16, A = 8400 about 1 MB whatever M,
  // against 538 MB for one [B, M, A] f32 tensor at M = 1000.
  const AssignerSizes s{16, 8400, 80, 1000};
  const size_t bytes = assigner_workspace_bytes(s, AssignerOptions::one_to_many());
  EXPECT_EQ(bytes, 1075200u);
  TaskAlignedAssignerOp op(AssignerOptions::one_to_one());
  const auto rt = op.lower(graph::Backend::cuda, graph::Mode::train);
  EXPECT_TRUE(rt->supports(graph::Format{DType::bf16, core::Layout::nchw}));
  EXPECT_EQ(rt->input_dtype(2), DType::f32);
  EXPECT_FALSE(rt->reads_input(4));
  EXPECT_FALSE(rt->has_backward());
}

TEST(AssignerKernels, MatchTheCpuTwinInEveryDtype) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (DType dt : kDtypes)
    for (const AssignerOptions& o : {AssignerOptions::one_to_many(), AssignerOptions::one_to_one()}) {
      SCOPED_TRACE(std::string(core::dtype_name(dt)) + (o.topk2 ? " one-to-one" : " one-to-many"));
      const AssignerCase c = rounded(random_assigner_case(4, 256, 320, 7, 32, 0, 20, rng()), dt);
      expect_gpu_matches_twin(c, o, run_gpu(c, o, dt), run_twin(c, o));
    }
}

TEST(AssignerKernels, DenseImageOf1000BoxesMatchesTheTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const AssignerCase c = random_assigner_case(2, 640, 640, 80, 1024, 1000, 1000, rng());
  expect_gpu_matches_twin(c, AssignerOptions::one_to_many(), run_gpu(c, AssignerOptions::one_to_many(), DType::f32),
                          run_twin(c, AssignerOptions::one_to_many()));
}

// The crowded shared-anchor fixture: in every dtype and both heads the kernels assign as the CPU twin does on the same
// (dtype-rounded) inputs; in f32 exactly as the float64 PyTorch reference, which differs from the superseded rule (the
// claiming gts only) in both heads.
TEST(SharedAnchorGpu, CrowdedFixtureMatchesTheCpuTwinAndTheReference) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  namespace sa = vision::test::shared_anchor;
  for (DType dt : kDtypes)
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE(std::string(core::dtype_name(dt)) + " " + sa::kHeads[h]);
      const AssignerOptions o = sa::options(h);
      const AssignerCase c = rounded(sa::fixture_case(), dt);
      const AssignerOutputs gpu = run_gpu(c, o, dt);
      expect_gpu_matches_twin(c, o, gpu, run_twin(c, o));
      if (dt != DType::f32) continue;
      const std::string head = sa::kHeads[h];
      const std::vector<int32_t> want = sa::ints("assign." + head + ".gt_index");
      const std::vector<int32_t> old = sa::ints("claiming_only." + head + ".gt_index");
      EXPECT_EQ(gpu.gt_index, want);
      EXPECT_NE(gpu.gt_index, old);
      const std::vector<float> scores = sa::fixture().at("assign." + head + ".target_scores").to_vector();
      for (size_t i = 0; i < scores.size(); ++i)
        EXPECT_NEAR(gpu.target_scores[i], scores[i], 2e-5 + 1e-4 * std::fabs(scores[i])) << "element " << i;
    }
}
