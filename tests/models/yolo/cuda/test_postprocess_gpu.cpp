// Postprocess on CUDA: the kernel descriptors, the ops' kernel lists and the launch helpers' checks (no GPU needed);
// on the GPU, the hand-computed cases at batch 1 and 7, the end-to-end top-k and NMS against the CPU twin at YOLO26's
// 640 size (A = 8400, nc = 80, max_det 300) at batch 1 and 7 in f32, f16 and bf16, with continuous and heavily tied
// logits, larger inputs (1280: A = 33600; max_det 4096), the ops inside a captured and replayed CUDA graph, and in a
// bf16 plan. Outputs are poisoned before every run. GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "models/yolo/postprocess_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/cuda/kernel.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/postprocess.h"
#include "vision/models/yolo/kernels/postprocess_cuda.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_postprocess_gpu_cpp {

using namespace vision;
using namespace vision::models::yolo::kernels;
using namespace vision::test::postprocess;
using vision::models::yolo::kernels::DetectionTensors;  // not the detector tests' one, which its batch may make visible
using core::DType;
using core::Shape;
using core::Tensor;
using vision::test::error_of;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr PostprocessMethod kMethods[] = {PostprocessMethod::end_to_end, PostprocessMethod::nms};

std::string label(PostprocessMethod m, DType t, int64_t batch, const std::string& extra = "") {
  return std::string(postprocess_method_name(m)) + " " + std::string(core::dtype_name(t)) + " batch " +
         std::to_string(batch) + (extra.empty() ? "" : " " + extra);
}

// Logits whose per-anchor maximum varies (a random offset per anchor, as objectness would give), so that conf
// selects a part of the anchors: offset in [−6, 3) plus class values in [−12, 0), optionally on a grid of `step`.
Tensor anchor_logits(int64_t batch, int64_t nc, int64_t n, float step = 0) {
  Tensor t = random_logits(batch, nc, n, -12.0f, 0.0f);
  const auto offset = vision::test::random_values(static_cast<size_t>(batch * n), -6.0f, 3.0f);
  float* p = t.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t a = 0; a < n; ++a) {
        float& v = p[(b * nc + c) * n + a];
        v += offset[static_cast<size_t>(b * n + a)];
        if (step > 0) v = std::round(v / step) * step;
      }
  return t;
}

// The op on the GPU and its CPU twin on the values the GPU saw (inputs rounded to dtype); every image compared.
void expect_gpu_matches_cpu(PostprocessMethod m, const PostprocessOptions& o, const Tensor& boxes,
                            const Tensor& logits, DType dtype, const std::string& what) {
  const PostprocessOp op(m, o);
  const OpResult gpu = run_op(op, boxes, logits, *graph::cuda_backend(), dtype);
  const Tensor rb = rounded_as(boxes, dtype), rl = rounded_as(logits, dtype);
  const OpResult cpu = run_op(op, rb, rl, *graph::cpu_backend());
  for (int64_t b = 0; b < boxes.dim(0); ++b) expect_same_detections(gpu, cpu, b, what);
}

// ---------------------------------------------------------------------------------------------------------------
// No GPU needed

TEST(PostprocessKernels, DescriptorsIdsAndTheOpsKernelLists) {
  for (DType t : kDtypes)
    for (const char* name : {"postprocess_e2e_anchor_keys", "postprocess_e2e_select", "postprocess_nms_candidates",
                             "postprocess_nms_select"}) {
      const std::string id = std::string(name) + "__" + std::string(core::dtype_name(t));
      EXPECT_NE(cuda::KernelRegistry::global().find(id), nullptr) << id;
    }
  EXPECT_NE(cuda::KernelRegistry::global().find("postprocess_nms_rank__f32"), nullptr);
  EXPECT_EQ(cuda::KernelRegistry::global().find("postprocess_nms_rank__bf16"), nullptr);
  EXPECT_NE(error_of([] { PostprocessNmsRank k(DType::bf16); }).find("f32 only"), std::string::npos);
  EXPECT_EQ(PostprocessE2eSelect(DType::f16).id(), "postprocess_e2e_select__f16");

  auto ids = [](PostprocessMethod m, DType t) {
    auto rt = PostprocessOp(m, {}).lower(graph::Backend::cuda, graph::Mode::inference);
    EXPECT_TRUE(rt->supports({t, core::Layout::nchw})) << core::dtype_name(t);
    rt->set_format({t, core::Layout::nchw});
    std::vector<std::string> out;
    for (const graph::KernelInfo& k : rt->kernels()) out.push_back(k.id);
    return out;
  };
  EXPECT_EQ(ids(PostprocessMethod::end_to_end, DType::bf16),
            (std::vector<std::string>{"postprocess_e2e_anchor_keys__bf16", "postprocess_e2e_select__bf16"}));
  EXPECT_EQ(ids(PostprocessMethod::nms, DType::f16),
            (std::vector<std::string>{"postprocess_nms_candidates__f16", "postprocess_nms_rank__f32",
                                      "postprocess_nms_select__f16"}));
  EXPECT_FALSE(PostprocessOp(PostprocessMethod::nms, {})
                   .lower(graph::Backend::cpu, graph::Mode::inference)
                   ->supports({DType::f16, core::Layout::nchw}));

  // Workspace: the anchor keys and the pair keys (end-to-end); keys, classes, counts and order (NMS), 256-aligned.
  auto al = [](size_t n) { return (n + 255) / 256 * 256; };
  const PostprocessSizes s{7, 8400, 80};
  EXPECT_EQ(postprocess_e2e_workspace_bytes(s, {}), al(7u * 8400 * 8) + al(7u * 300 * 80 * 8));
  PostprocessOptions o;
  o.max_nms = 3000;
  EXPECT_EQ(postprocess_nms_workspace_bytes(s, o), al(7u * 8400 * 8) + al(7u * 8400 * 4) + 256 + al(7u * 3000 * 4));
}

TEST(PostprocessKernels, LaunchHelpersRefuseASmallWorkspaceAndSizesOutOfRange) {
  const PostprocessSizes s{2, 100, 3};
  const std::string e = error_of([&] {
    launch_postprocess_e2e(nullptr, DType::f32, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, s, {});
  });
  EXPECT_NE(e.find("workspace"), std::string::npos) << e;
  const std::string n = error_of([&] {
    launch_postprocess_nms(nullptr, DType::f32, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 64, s, {});
  });
  EXPECT_NE(n.find("workspace"), std::string::npos) << n;
  EXPECT_NE(error_of([] { (void)postprocess_e2e_workspace_bytes({70000, 100, 3}, {}); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)postprocess_nms_workspace_bytes({1, 100, 0}, {}); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              launch_postprocess_e2e(nullptr, DType::i32, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                     {1, 10, 3}, {});
            }).find("f32, f16 and bf16"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// On the GPU

TEST(PostprocessGpu, HandComputedCasesAtBatch1And7) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (const HandCase& hc : hand_cases())
    for (int64_t batch : {1, 7}) check_hand_case(hc, *graph::cuda_backend(), batch);
}

// The values before the selections, stage by stage (the kernels launched directly): the anchor keys (each anchor's
// max-class logit and index) exactly; the NMS candidates (which anchors, their keys and best classes) as a set; the
// rank kernel's order (the candidates by descending key, the first max_nms). Logits on a 0.5 grid with some NaN.
uint64_t host_key(float logit, uint32_t index) {
  if (std::isnan(logit)) logit = -INFINITY;
  if (logit == 0.0f) logit = 0.0f;
  const uint32_t u = std::bit_cast<uint32_t>(logit);
  return (uint64_t((u & 0x80000000u) ? ~u : (u | 0x80000000u)) << 32) | uint32_t(~index);
}

TEST(PostprocessGpu, StagesBeforeTheSelectionMatchTheHost) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const int64_t batch = 3, n = 8400, nc = 80;
  Tensor logits = anchor_logits(batch, nc, n, 0.5f);
  for (int64_t i = 0; i < logits.numel(); i += 997) logits.data<float>()[i] = NAN;
  const float threshold = conf_logit_threshold(0.25f);
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(core::dtype_name(t)));
    const std::vector<float> host = rounded_as(logits, t).to_vector();
    vision::test::DeviceBuffer dl(host.size() * core::dtype_size(t));
    dl.upload(vision::test::encode(logits.to_vector(), t));
    // Per anchor: the max over classes (NaN as −∞) and its lowest class.
    std::vector<uint64_t> want_keys(static_cast<size_t>(batch * n));
    std::vector<std::pair<uint64_t, int32_t>> want_cand;
    std::vector<std::vector<std::pair<uint64_t, int32_t>>> per_image(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t a = 0; a < n; ++a) {
        float best = -INFINITY;
        int32_t cls = 0;
        for (int64_t c = 0; c < nc; ++c) {
          float x = host[static_cast<size_t>((b * nc + c) * n + a)];
          if (std::isnan(x)) x = -INFINITY;
          if (x > best) best = x, cls = static_cast<int32_t>(c);
        }
        const uint64_t key = host_key(best, static_cast<uint32_t>(a));
        want_keys[static_cast<size_t>(b * n + a)] = key;
        if (best > threshold) per_image[static_cast<size_t>(b)].push_back({key, cls});
      }

    vision::test::DeviceBuffer keys(static_cast<size_t>(batch * n) * 8), classes(static_cast<size_t>(batch * n) * 4);
    vision::test::DeviceBuffer n_valid(static_cast<size_t>(batch) * 4), order(static_cast<size_t>(batch * n) * 4);
    keys.poison();
    const dim3 key_grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(batch)), key_block(32, 8);
    cuda::kernel_instance<PostprocessE2eAnchorKeys>(t).launch(nullptr, key_grid, key_block, 0,
                                                              static_cast<const void*>(dl.get()), keys.get(), n, nc);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint64_t> got_keys(want_keys.size());
    const auto kb = keys.download(got_keys.size() * 8);
    std::memcpy(got_keys.data(), kb.data(), kb.size());
    EXPECT_EQ(got_keys, want_keys);

    keys.poison();
    classes.poison();
    order.poison();
    VISION_CUDA_CHECK(cudaMemset(n_valid.get(), 0, static_cast<size_t>(batch) * 4));
    cuda::kernel_instance<PostprocessNmsCandidates>(t).launch(nullptr, key_grid, key_block, 0,
                                                              static_cast<const void*>(dl.get()), nullptr, keys.get(),
                                                              classes.get(), n_valid.get(), n, nc, threshold);
    constexpr int32_t kMaxNms = 3000;
    cuda::kernel_instance<PostprocessNmsRank>(DType::f32).launch(
        nullptr, dim3(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(batch)), dim3(256), 0,
        static_cast<const void*>(keys.get()), static_cast<const void*>(n_valid.get()), order.get(), n, n, kMaxNms);
    VISION_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int32_t> nv(static_cast<size_t>(batch)), cl(static_cast<size_t>(batch * n)),
        ord(static_cast<size_t>(batch * n));
    std::vector<uint64_t> ck(static_cast<size_t>(batch * n));
    std::memcpy(nv.data(), n_valid.download(nv.size() * 4).data(), nv.size() * 4);
    std::memcpy(cl.data(), classes.download(cl.size() * 4).data(), cl.size() * 4);
    std::memcpy(ord.data(), order.download(ord.size() * 4).data(), ord.size() * 4);
    std::memcpy(ck.data(), keys.download(ck.size() * 8).data(), ck.size() * 8);
    for (int64_t b = 0; b < batch; ++b) {
      auto want = per_image[static_cast<size_t>(b)];
      ASSERT_EQ(nv[static_cast<size_t>(b)], static_cast<int32_t>(want.size())) << "candidates of image " << b;
      EXPECT_GT(want.size(), static_cast<size_t>(kMaxNms)) << "the test wants more candidates than max_nms";
      std::vector<std::pair<uint64_t, int32_t>> got;
      for (size_t i = 0; i < want.size(); ++i)
        got.push_back({ck[static_cast<size_t>(b * n) + i], cl[static_cast<size_t>(b * n) + i]});
      std::sort(want.begin(), want.end(), std::greater<>());
      std::sort(got.begin(), got.end(), std::greater<>());
      EXPECT_EQ(got, want) << "candidates of image " << b;
      // order: the slots of the first max_nms candidates by descending key.
      const size_t m = std::min(want.size(), static_cast<size_t>(kMaxNms));
      int64_t bad = 0;
      for (size_t r = 0; r < m; ++r) {
        const int32_t slot = ord[static_cast<size_t>(b * n) + r];
        bad += !(slot >= 0 && slot < nv[static_cast<size_t>(b)] &&
                 ck[static_cast<size_t>(b * n + slot)] == want[r].first);
      }
      EXPECT_EQ(bad, 0) << "order of image " << b;
    }
  }
}

// 640×640: A = 8400, nc = 80, max_det 300. Continuous logits, then logits on a 0.5 grid (the top 300 pairs all tie
// at the largest value, so the tie-breaks decide the whole selection); conf 0.25, a conf that leaves fewer rows than
// max_det, and a class filter.
TEST(PostprocessGpu, E2eMatchesTheCpuTwinAt8400AnchorsAnd80Classes) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (int64_t batch : {1, 7})
    for (float step : {0.0f, 0.5f}) {
      const Tensor boxes = random_boxes(batch, 8400, 640, 4, 160);
      const Tensor logits = random_logits(batch, 80, 8400, -10.0f, 5.0f, step);
      for (DType t : kDtypes) {
        PostprocessOptions o;
        const std::string s = "step " + std::to_string(step);
        expect_gpu_matches_cpu(PostprocessMethod::end_to_end, o, boxes, logits, t,
                               label(PostprocessMethod::end_to_end, t, batch, s));
        o.conf = 0.99329f;  // σ(4.995): about 220 of the 672000 continuous pairs pass
        o.classes = {0, 7, 41, 79};
        expect_gpu_matches_cpu(PostprocessMethod::end_to_end, o, boxes, logits, t,
                               label(PostprocessMethod::end_to_end, t, batch, s + " conf+classes"));
      }
    }
  // The GPU against the independent all-pairs reference once (f32, batch 1).
  const Tensor boxes = random_boxes(1, 8400, 640), logits = random_logits(1, 80, 8400, -10.0f, 5.0f);
  const OpResult gpu = run_op(PostprocessOp(PostprocessMethod::end_to_end, {}), boxes, logits, *graph::cuda_backend());
  expect_rows(gpu, 0, boxes, reference_e2e(boxes, logits, 0, {}), "GPU vs reference");
  EXPECT_EQ(gpu.count_of(0), 300);
}

// NMS at 8400 × 80 with boxes that overlap a lot: conf 0.25 (about 3700 candidates), conf 0.001 (nearly every
// anchor: many tiles), max_nms below the candidate count, IoU 0.5 and 0.7, a class filter; continuous and tied logits.
TEST(NmsGpu, MatchesTheCpuTwinAt8400AnchorsAnd80Classes) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (int64_t batch : {1, 7})
    for (float step : {0.0f, 0.5f}) {
      const Tensor boxes = random_boxes(batch, 8400, 640, 10, 120);
      const Tensor logits = anchor_logits(batch, 80, 8400, step);
      for (DType t : kDtypes) {
        const std::string s = "step " + std::to_string(step);
        PostprocessOptions o;
        expect_gpu_matches_cpu(PostprocessMethod::nms, o, boxes, logits, t, label(PostprocessMethod::nms, t, batch, s));
        o.conf = 0.001f;
        o.iou = 0.5f;
        o.max_nms = 3000;
        expect_gpu_matches_cpu(PostprocessMethod::nms, o, boxes, logits, t,
                               label(PostprocessMethod::nms, t, batch, s + " conf 0.001 max_nms 3000"));
        o.max_nms = 30000;
        o.max_det = 1000;
        o.classes = {3, 5, 77};
        expect_gpu_matches_cpu(PostprocessMethod::nms, o, boxes, logits, t,
                               label(PostprocessMethod::nms, t, batch, s + " conf 0.001 classes"));
      }
    }
  // The GPU against the independent greedy reference once (f32, batch 1).
  const Tensor boxes = random_boxes(1, 8400, 640, 10, 120), logits = anchor_logits(1, 80, 8400);
  PostprocessOptions o;
  o.conf = 0.01f;
  const OpResult gpu = run_op(PostprocessOp(PostprocessMethod::nms, o), boxes, logits, *graph::cuda_backend());
  const auto ref = reference_nms(boxes, logits, 0, o);
  EXPECT_GT(ref.size(), 10u);
  expect_rows(gpu, 0, boxes, ref, "GPU vs reference");
}

// 1280×1280 (A = 33600) at max_det 300, and many anchors with few classes at max_det 4096 (the largest sort; the NMS
// keeps its boxes in more than 48 KiB of shared memory).
TEST(PostprocessGpu, LargerInputsAndTheLargestMaxDet) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (PostprocessMethod m : kMethods) {
    const Tensor boxes = random_boxes(2, 33600, 1280, 10, 200), logits = anchor_logits(2, 80, 33600);
    expect_gpu_matches_cpu(m, {}, boxes, logits, DType::f32, label(m, DType::f32, 2, "A 33600"));
    PostprocessOptions o;
    o.max_det = kMaxDetections;
    o.conf = 0.001f;
    const Tensor b2 = random_boxes(2, 70000, 4000, 4, 40), l2 = random_logits(2, 3, 70000, -6.0f, 6.0f, 0.25f);
    expect_gpu_matches_cpu(m, o, b2, l2, DType::f16, label(m, DType::f16, 2, "A 70000 max_det 4096"));
  }
}

// Both ops in one graph on the CUDA backend: the first run is eager, the second is captured and replayed, the third
// replays on new inputs; each equals the CPU executor's result.
TEST(PostprocessGpu, RunsInsideACapturedCudaGraph) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto boxes = g->input("boxes", Shape{Shape::kAny, 4, Shape::kAny});
  auto logits = g->input("logits", Shape{Shape::kAny, 80, Shape::kAny});
  PostprocessOptions o;
  o.classes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const DetectionTensors e2e = postprocess_e2e(boxes, logits, o);
  const DetectionTensors nms = postprocess_nms(boxes, logits, {});
  for (graph::SymTensor t : {e2e.detections, e2e.count, nms.detections, nms.count})
    g->mark_output(t, graph::kInferenceOutput);
  graph::Executor cpu(g, graph::cpu_backend()), gpu(g, graph::cuda_backend());
  const int64_t batch = 7, n = 8400;
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(testing::Message() << "run " << run);
    const Tensor bx = random_boxes(batch, n, 640, 10, 120), lg = anchor_logits(batch, 80, n);
    const auto c = cpu.forward({bx, lg});
    const auto d = gpu.forward({bx, lg});
    ASSERT_EQ(d.size(), 4u);
    const OpResult ce{c[0].clone(), c[1].clone()}, cn{c[2].clone(), c[3].clone()};
    const OpResult ge{gpu.backend().download(d[0]), gpu.backend().download(d[1])};
    const OpResult gn{gpu.backend().download(d[2]), gpu.backend().download(d[3])};
    EXPECT_EQ(ge.count.dtype(), DType::i32);
    for (int64_t b = 0; b < batch; ++b) {
      expect_same_detections(ge, ce, b, "e2e");
      expect_same_detections(gn, cn, b, "nms");
    }
    graph::Plan& plan = gpu.plan(graph::Mode::inference, {bx.shape(), lg.shape()});
    EXPECT_EQ(plan.graph_replayed(), run >= 1);
  }
  EXPECT_EQ(gpu.cached_plans(), 1u);
}

// In a bf16 plan the ops compute on bf16 inputs (converted from the f32 graph inputs) and hand out f32 detections and
// i32 counts with no conversion after them.
TEST(PostprocessGpu, RunsInABf16PlanWithF32AndI32Outputs) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<graph::Graph>();
  auto boxes = g->input("boxes", Shape{Shape::kAny, 4, Shape::kAny});
  auto logits = g->input("logits", Shape{Shape::kAny, 80, Shape::kAny});
  const DetectionTensors e2e = postprocess_e2e(boxes, logits, {});
  g->mark_output(e2e.detections, graph::kInferenceOutput);
  g->mark_output(e2e.count, graph::kInferenceOutput);
  graph::Executor gpu(g, graph::cuda_backend(), graph::PlanOptions{.compute_dtype = DType::bf16});
  const Tensor bx = random_boxes(7, 8400, 640), lg = random_logits(7, 80, 8400, -10.0f, 5.0f);
  const auto d = gpu.forward({bx, lg});
  graph::Plan& plan = gpu.plan(graph::Mode::inference, {bx.shape(), lg.shape()});
  EXPECT_EQ(plan.value_format(e2e.detections.id()).dtype, DType::f32) << plan.describe();
  EXPECT_EQ(plan.value_format(e2e.count.id()).dtype, DType::i32) << plan.describe();
  EXPECT_EQ(plan.conversion_steps(), 2u) << plan.describe();  // boxes and logits to bf16
  const OpResult got{gpu.backend().download(d[0]), gpu.backend().download(d[1])};
  const OpResult cpu = run_op(PostprocessOp(PostprocessMethod::end_to_end, {}), rounded_as(bx, DType::bf16),
                              rounded_as(lg, DType::bf16), *graph::cpu_backend());
  for (int64_t b = 0; b < 7; ++b) expect_same_detections(got, cpu, b, "bf16 plan");
}

}  // namespace

}  // namespace test_postprocess_gpu_cpp
