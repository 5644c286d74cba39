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
  EXPECT_EQ(PsaChannelsToRows(core::DType::f32, 32).id(), "psa_channels_to_rows__f32__w32");
  EXPECT_EQ(PsaRowsToChannels(core::DType::bf16, 64).id(), "psa_rows_to_channels__bf16__w64");
  EXPECT_EQ(PsaExtractVForward(core::DType::f16, 16).id(), "psa_extract_v_forward__f16__kd16");
  EXPECT_EQ(PsaExtractVBackward(core::DType::f32, 32).id(), "psa_extract_v_backward__f32__kd32");
  EXPECT_THROW(PsaChannelsToRows(core::DType::f32, 24), Error);
  EXPECT_THROW(PsaExtractVForward(core::DType::i32, 32), Error);
  const PsaConfig two{32, 2, PsaForm::two_pass}, one{32, 2, PsaForm::one_pass};
  EXPECT_EQ(psa_kernels(PsaOpKind::pack_qkv, two, core::DType::f32).size(), 2u);  // width 32 both ways
  EXPECT_EQ(psa_kernels(PsaOpKind::pack_qkv, one, core::DType::f32).size(), 4u);  // widths 32 and 64
  EXPECT_EQ(psa_kernels(PsaOpKind::extract_v, one, core::DType::f32).size(), 2u);
  const auto rt = PsaPackQkvOp(one).lower(graph::Backend::cuda, graph::Mode::train);
  EXPECT_EQ(rt->name(), "yolo.psa_pack_qkv");
  EXPECT_TRUE(rt->has_backward());
  EXPECT_EQ(rt->kernels().size(), 4u);
  for (const auto& k : rt->kernels()) EXPECT_NE(k.source.find("psa_channel_index"), std::string::npos) << k.id;
}

// The CUDA op against the CPU twin on the same inputs and output gradients: outputs and input gradients bit-equal.
void expect_cuda_equals_cpu(const graph::Op& op, const std::vector<Tensor>& inputs, const std::string& what) {
  const std::vector<Tensor> outs = run_op(op, inputs, *graph::cpu_backend()).outputs;
  std::vector<Tensor> grads;
  for (const Tensor& t : outs) grads.push_back(random_tensor(t.shape()));
  const OpRun cpu = run_op(op, inputs, *graph::cpu_backend(), grads);
  const OpRun gpu = run_op(op, inputs, *graph::cuda_backend(), grads);
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

}  // namespace
