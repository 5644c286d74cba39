// PSA data-movement ops on CUDA: every op's CUDA RuntimeOp against its CPU twin (exact: the ops are copies), forward
// and backward in f32 with poisoned outputs, both forms, heads 1 and 2, KEY_DIM 16 and 32, batch 1 and 3, N = 5·7;
// and the descriptors (no GPU). GPU tests skip without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/yolo/psa_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/kernels/attention/psa_cuda.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::psa;
using namespace vision::models::yolo::kernels::attention;
using core::Shape;
using core::Tensor;

namespace {

constexpr int64_t kH = 5, kW = 7, kN = kH * kW;

TEST(PsaDescriptors, IdsAndKernelsPerOp) {
  using core::Layout;
  EXPECT_EQ(PsaChannelsToRows(core::DType::f32, 32, Layout::nchw).id(), "psa_channels_to_rows__f32__w32_nhwc0");
  EXPECT_EQ(PsaRowsToChannels(core::DType::bf16, 64, Layout::nhwc).id(), "psa_rows_to_channels__bf16__w64_nhwc1");
  EXPECT_EQ(PsaExtractVForward(core::DType::f16, 16, Layout::nhwc).id(), "psa_extract_v_forward__f16__kd16_nhwc1");
  EXPECT_EQ(PsaExtractVBackward(core::DType::f32, 32, Layout::nchw).id(), "psa_extract_v_backward__f32__kd32_nhwc0");
  EXPECT_THROW(PsaChannelsToRows(core::DType::f32, 24, Layout::nchw), Error);
  EXPECT_THROW(PsaExtractVForward(core::DType::i32, 32, Layout::nchw), Error);
  const PsaConfig two{32, 2, PsaForm::two_pass}, one{32, 2, PsaForm::one_pass};
  const graph::Format f32{}, f16_nhwc{core::DType::f16, Layout::nhwc};
  EXPECT_EQ(psa_kernels(PsaOpKind::pack_qkv, two, f32).size(), 2u);  // width 32 both ways
  EXPECT_EQ(psa_kernels(PsaOpKind::pack_qkv, one, f32).size(), 4u);  // widths 32 and 64
  EXPECT_EQ(psa_kernels(PsaOpKind::extract_v, one, f32).size(), 2u);
  const auto rt = PsaPackQkvOp(one).lower(graph::Backend::cuda, graph::Mode::train);
  EXPECT_EQ(rt->name(), "yolo.psa_pack_qkv");
  EXPECT_TRUE(rt->has_backward());
  EXPECT_TRUE(rt->supports(f16_nhwc));
  rt->set_format(f16_nhwc);
  EXPECT_EQ(rt->kernels().size(), 4u);
  for (const auto& k : rt->kernels()) {
    EXPECT_NE(k.source.find("psa_channel_index"), std::string::npos) << k.id;
    EXPECT_NE(k.id.find("__f16__"), std::string::npos) << k.id;
    EXPECT_NE(k.id.find("nhwc1"), std::string::npos) << k.id;
  }
  // The CPU twin: f32 in either layout.
  const auto cpu = PsaPackQkvOp(one).lower(graph::Backend::cpu, graph::Mode::train);
  EXPECT_TRUE(cpu->supports(graph::Format{core::DType::f32, Layout::nhwc}));
  EXPECT_FALSE(cpu->supports(f16_nhwc));
}

// The CUDA op in format f against the CPU twin in f32 NCHW on the same inputs and output gradients (rounded to f's
// dtype): the ops are copies, so outputs and input gradients are bit-equal.
void expect_cuda_equals_cpu(const graph::Op& op, std::vector<Tensor> inputs, const std::string& what,
                            const graph::Format& f = {}) {
  for (Tensor& t : inputs) t = rounded_to(t, f);
  const std::vector<Tensor> outs = run_op(op, inputs, *graph::cpu_backend()).outputs;
  std::vector<Tensor> grads;
  for (const Tensor& t : outs) grads.push_back(rounded_to(random_tensor(t.shape()), f));
  const OpRun cpu = run_op(op, inputs, *graph::cpu_backend(), grads);
  const OpRun gpu = run_op(op, inputs, *graph::cuda_backend(), grads, f);
  ASSERT_EQ(gpu.outputs.size(), cpu.outputs.size()) << what;
  for (size_t k = 0; k < cpu.outputs.size(); ++k)
    EXPECT_EQ(max_abs_diff(gpu.outputs[k].to_vector(), to_double(cpu.outputs[k])), 0.0) << what << " output " << k;
  for (size_t k = 0; k < cpu.grad_inputs.size(); ++k)
    EXPECT_EQ(max_abs_diff(gpu.grad_inputs[k].to_vector(), to_double(cpu.grad_inputs[k])), 0.0)
        << what << " input gradient " << k;
}

TEST(PsaGpu, EveryOpMatchesItsCpuTwinForwardAndBackward) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (PsaForm form : {PsaForm::two_pass, PsaForm::one_pass})
    for (int64_t heads : {1, 2})
      for (int64_t kd : {16, 32})
        for (int64_t batch : {1, 3}) {
          const PsaConfig cfg{kd, heads, form};
          const std::string what = std::string(form == PsaForm::two_pass ? "two_pass" : "one_pass") + " heads " +
                                   std::to_string(heads) + " key_dim " + std::to_string(kd) + " batch " +
                                   std::to_string(batch);
          const Tensor qkv = random_tensor(Shape{batch, cfg.qkv_channels(), kH, kW});
          expect_cuda_equals_cpu(PsaPackQkvOp(cfg), {qkv}, "pack " + what);
          expect_cuda_equals_cpu(PsaExtractVOp(cfg), {qkv}, "extract_v " + what);
          std::vector<Tensor> parts;
          for (int64_t k = 0; k < cfg.v_parts(); ++k)
            parts.push_back(random_tensor(Shape{batch * heads, kN, cfg.v_part_width()}));
          expect_cuda_equals_cpu(PsaMergeAttnOp(cfg, kH, kW), parts, "merge " + what);
        }
}

// Every op in f16 and bf16, NCHW and NHWC, against the CPU twin in f32 NCHW (bit-equal: copies).
TEST(PsaGpu, EveryFormatMatchesTheCpuTwin) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (core::DType dt : {core::DType::f32, core::DType::f16, core::DType::bf16})
    for (core::Layout layout : {core::Layout::nchw, core::Layout::nhwc})
      for (PsaForm form : {PsaForm::two_pass, PsaForm::one_pass}) {
        const graph::Format f{dt, layout};
        const PsaConfig cfg{32, 2, form};
        const std::string what = graph::format_name(f) + (form == PsaForm::two_pass ? " two_pass" : " one_pass");
        const Tensor qkv = random_tensor(Shape{2, cfg.qkv_channels(), kH, kW});
        expect_cuda_equals_cpu(PsaPackQkvOp(cfg), {qkv}, "pack " + what, f);
        expect_cuda_equals_cpu(PsaExtractVOp(cfg), {qkv}, "extract_v " + what, f);
        std::vector<Tensor> parts;
        for (int64_t k = 0; k < cfg.v_parts(); ++k)
          parts.push_back(random_tensor(Shape{2 * cfg.heads, kN, cfg.v_part_width()}));
        expect_cuda_equals_cpu(PsaMergeAttnOp(cfg, kH, kW), parts, "merge " + what, f);
      }
}

}  // namespace
