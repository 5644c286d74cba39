#include "vision/ops/batchnorm.h"

#include <cmath>
#include <optional>

#include "vision/cpu/dnnl_context.h"
#include "vision/graph/collective.h"
#include "vision/cpu/parallel.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

using dnnl::memory;
using dnnl::normalization_flags;

std::vector<ParamSpec> batchnorm2d_state_specs(int64_t c) {
  return {{"weight", Shape{c}, DType::f32, StateKind::parameter},
          {"bias", Shape{c}, DType::f32, StateKind::parameter},
          {"running_mean", Shape{c}, DType::f32, StateKind::buffer},
          {"running_var", Shape{c}, DType::f32, StateKind::buffer},
          {"num_batches_tracked", Shape{}, DType::i64, StateKind::buffer}};
}

std::vector<std::byte> batchnorm2d_state_init(size_t i, int64_t c) {
  switch (i) {
    case 0: return graph::filled_bytes(Shape{c}, 1.0f);
    case 1: return graph::filled_bytes(Shape{c}, 0.0f);
    case 2: return graph::filled_bytes(Shape{c}, 0.0f);
    case 3: return graph::filled_bytes(Shape{c}, 1.0f);
    case 4: return std::vector<std::byte>(sizeof(int64_t), std::byte{0});
  }
  fail("batchnorm2d has 5 state tensors, asked for #{}", i);
}

namespace {

enum State { kWeight, kBias, kRunningMean, kRunningVar, kNumBatches };

// Each rank's values summed over the ranks, in rank order: every rank gets the same bits.
std::vector<double> sum_over_ranks(graph::Collective& ranks, const std::vector<double>& mine) {
  const size_t n = mine.size(), world = static_cast<size_t>(ranks.world());
  std::vector<double> all(n * world);
  ranks.all_gather(mine.data(), all.data(), n * sizeof(double));
  std::vector<double> total(n, 0.0);
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < n; ++i) total[i] += all[r * n + i];
  return total;
}
enum Saved { kBatchMean, kBatchVar };

const auto kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

// The CPU twin (f32 NCHW, oneDNN). With silu (BatchNorm → SiLU fused in a training plan) it applies SiLU in place
// after the normalisation, and its backward recomputes the normalised y from x and the saved statistics to take the
// gradient through SiLU before BatchNorm's own backward — the CUDA kernels' arithmetic, one pass at a time.
class BatchNorm2dRuntime final : public CpuRuntimeOp {
 public:
  BatchNorm2dRuntime(float eps, float momentum, Mode mode, bool silu, std::string prefix)
      : CpuRuntimeOp(silu ? "ops.batchnorm2d_silu" : "ops.batchnorm2d", 1),
        eps_(eps),
        momentum_(momentum),
        mode_(mode),
        silu_(silu),
        prefix_(std::move(prefix)) {}

  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return prefixed(batchnorm2d_state_specs(in.at(0)[1]), prefix_);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape&,
                                         uint64_t) const override {
    return batchnorm2d_state_init(i, in.at(0)[1]);
  }
  // The batch mean and biased variance, for backward.
  std::vector<TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape&) const override {
    if (mode_ != Mode::train) return {};
    return {{Shape{in.at(0)[1]}, DType::f32}, {Shape{in.at(0)[1]}, DType::f32}};
  }

  void forward(ForwardCtx& ctx) override {
    prepare(ctx.inputs[0].shape());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, cpu::as_memory(data_, ctx.inputs[0])},
                                         {DNNL_ARG_DST, cpu::as_memory(data_, ctx.output)},
                                         {DNNL_ARG_SCALE, cpu::as_memory(stat_, ctx.params[kWeight])},
                                         {DNNL_ARG_SHIFT, cpu::as_memory(stat_, ctx.params[kBias])}};
    if (ctx.training)
      forward_training(ctx, args);
    else
      forward_inference(ctx, args);
    if (silu_) {
      float* z = ctx.output.data<float>();
      cpu::parallel_for(
          ctx.output.numel(), [&](int64_t i) { z[i] = silu_value(z[i]); }, ctx.output.numel());
    }
  }

  // Gradients through the batch statistics (the training-mode forward).
  void backward(BackwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    prepare(x.shape());
    VISION_CHECK(ctx.saved.size() == 2, "batchnorm2d backward needs the batch statistics saved by a training forward");
    if (!backward_) {
      using Bwd = dnnl::batch_normalization_backward;
      backward_ = cpu::dnnl_guard("a batch normalization backward", [&] {
        Bwd::desc d(dnnl::prop_kind::backward, data_, data_, eps_, kScaleShift);
        return Bwd(Bwd::primitive_desc(d, cpu::dnnl_engine(), training_pd()));
      });
    }
    const size_t c = static_cast<size_t>(x.dim(1));
    const std::vector<float> dy_silu = silu_ ? silu_gradient(ctx) : std::vector<float>();
    const float* dy = silu_ ? dy_silu.data() : ctx.grad_output.data<float>();
    if (ctx.collective) return backward_synchronized(ctx, dy);
    F32Scratch dx(ctx.grad_inputs[0], static_cast<size_t>(x.numel()));
    F32Scratch dgamma(ctx.grad_params[kWeight], c), dbeta(ctx.grad_params[kBias], c);
    cpu::execute(*backward_,
                 {{DNNL_ARG_SRC, cpu::as_memory(data_, x)},
                  {DNNL_ARG_MEAN, cpu::as_memory(stat_, ctx.saved[kBatchMean])},
                  {DNNL_ARG_VARIANCE, cpu::as_memory(stat_, ctx.saved[kBatchVar])},
                  {DNNL_ARG_DIFF_DST, cpu::as_memory(data_, const_cast<float*>(dy))},
                  {DNNL_ARG_SCALE, cpu::as_memory(stat_, ctx.params[kWeight])},
                  {DNNL_ARG_SHIFT, cpu::as_memory(stat_, ctx.params[kBias])},  // unused, but oneDNN asks for it
                  {DNNL_ARG_DIFF_SRC, cpu::as_memory(data_, dx.data())},
                  {DNNL_ARG_DIFF_SCALE, cpu::as_memory(stat_, dgamma.data())},
                  {DNNL_ARG_DIFF_SHIFT, cpu::as_memory(stat_, dbeta.data())}},
                 "batch normalization backward");
  }

 private:
  // dy = dz·silu'(y) with y = (x − mean)·γ·invstd + β recomputed from the saved batch statistics (f32).
  std::vector<float> silu_gradient(const BackwardCtx& ctx) const {
    const Tensor& x = ctx.inputs[0];
    const int64_t c = x.dim(1), plane = x.dim(2) * x.dim(3), n = x.numel();
    const float *px = x.data<float>(), *dz = ctx.grad_output.data<float>();
    const float *mean = ctx.saved[kBatchMean].data<float>(), *var = ctx.saved[kBatchVar].data<float>();
    const float *gamma = ctx.params[kWeight].data<float>(), *beta = ctx.params[kBias].data<float>();
    std::vector<float> dy(static_cast<size_t>(n));
    cpu::parallel_for(
        x.dim(0) * c,
        [&](int64_t nc) {
          const int64_t ch = nc % c;
          const float a = gamma[ch] * (1.0f / std::sqrt(var[ch] + eps_)), m = mean[ch], b = beta[ch];
          for (int64_t i = nc * plane; i < (nc + 1) * plane; ++i)
            dy[static_cast<size_t>(i)] = dz[i] * silu_derivative((px[i] - m) * a + b);
        },
        n);
    return dy;
  }

  // SyncBatchNorm's backward (PyTorch's arithmetic): with x̂ = (x − μ)·invstd over the job's batch statistics, this
  // rank's Σdy and Σdy·(x − μ) per channel are summed over the ranks (in rank order, so that every rank has the same
  // bits), and dx = γ·invstd·(dy − Σdy/N − x̂·invstd·Σdy·(x − μ)/N) with the job's count N; dγ and dβ stay this rank's
  // own (the gradient all-reduce sums them, as DDP does SyncBatchNorm's).
  void backward_synchronized(BackwardCtx& ctx, const float* dy) const {
    const Tensor& x = ctx.inputs[0];
    const int64_t batch = x.dim(0), c = x.dim(1), plane = x.dim(2) * x.dim(3);
    const float *px = x.data<float>(), *mean = ctx.saved[kBatchMean].data<float>();
    const float *var = ctx.saved[kBatchVar].data<float>(), *gamma = ctx.params[kWeight].data<float>();
    // [count, Σdy per channel, Σdy·(x − μ) per channel] of this rank.
    std::vector<double> mine(static_cast<size_t>(2 * c + 1), 0.0);
    mine[0] = static_cast<double>(batch * plane);
    cpu::parallel_for(
        c,
        [&](int64_t ch) {
          double sdy = 0, sdyx = 0;
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = (b * c + ch) * plane; i < (b * c + ch + 1) * plane; ++i) {
              sdy += dy[i];
              sdyx += static_cast<double>(dy[i]) * (static_cast<double>(px[i]) - mean[ch]);
            }
          mine[static_cast<size_t>(1 + ch)] = sdy;
          mine[static_cast<size_t>(1 + c + ch)] = sdyx;
        },
        x.numel());
    const std::vector<double> job = sum_over_ranks(*ctx.collective, mine);
    const double n = job[0];
    float* dgamma = ctx.grad_params[kWeight].defined() ? ctx.grad_params[kWeight].data<float>() : nullptr;
    float* dbeta = ctx.grad_params[kBias].defined() ? ctx.grad_params[kBias].data<float>() : nullptr;
    float* dx = ctx.grad_inputs[0].defined() ? ctx.grad_inputs[0].data<float>() : nullptr;
    for (int64_t ch = 0; ch < c; ++ch) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(var[ch]) + eps_);
      if (dbeta) dbeta[ch] = static_cast<float>(mine[static_cast<size_t>(1 + ch)]);
      if (dgamma) dgamma[ch] = static_cast<float>(mine[static_cast<size_t>(1 + c + ch)] * invstd);
    }
    if (!dx) return;
    cpu::parallel_for(
        batch * c,
        [&](int64_t bc) {
          const int64_t ch = bc % c;
          const double invstd = 1.0 / std::sqrt(static_cast<double>(var[ch]) + eps_);
          const double mean_dy = job[static_cast<size_t>(1 + ch)] / n;
          const double k = invstd * invstd * job[static_cast<size_t>(1 + c + ch)] / n, a = gamma[ch] * invstd;
          for (int64_t i = bc * plane; i < (bc + 1) * plane; ++i)
            dx[i] = static_cast<float>(a * (dy[i] - mean_dy - (static_cast<double>(px[i]) - mean[ch]) * k));
        },
        x.numel());
  }

  void forward_inference(ForwardCtx& ctx, std::unordered_map<int, memory>& args) {
    args.emplace(DNNL_ARG_MEAN, cpu::as_memory(stat_, ctx.params[kRunningMean]));
    args.emplace(DNNL_ARG_VARIANCE, cpu::as_memory(stat_, ctx.params[kRunningVar]));
    cpu::execute(inference(), args, "batch normalization forward (inference)");
  }

  // Normalises with the batch statistics (kept in `saved` for backward) and updates the running ones. The statistics
  // are computed here in float64 (two passes), then oneDNN normalises with them: its own f32 accumulation over the
  // N·H·W values of a channel loses several digits at large batches and feature maps.
  void forward_training(ForwardCtx& ctx, std::unordered_map<int, memory>& args) {
    const Tensor& x = ctx.inputs[0];
    const int64_t c = x.dim(1);
    const bool keep = !ctx.saved.empty();
    F32Scratch mean(keep ? ctx.saved[kBatchMean] : Tensor(), static_cast<size_t>(c));
    F32Scratch var(keep ? ctx.saved[kBatchVar] : Tensor(), static_cast<size_t>(c));
    // n values per channel: this rank's, or with SyncBatchNorm the job's.
    const double n = batch_statistics(x, mean.data(), var.data(), ctx.collective);
    VISION_CHECK(n > 1, "batchnorm2d in training needs more than one value per channel, got input {}{}", x.str(),
                 ctx.collective ? " over every rank" : "");
    args.emplace(DNNL_ARG_MEAN, cpu::as_memory(stat_, mean.data()));
    args.emplace(DNNL_ARG_VARIANCE, cpu::as_memory(stat_, var.data()));
    cpu::execute(inference(), args, "batch normalization forward (training)");

    float* rm = ctx.params[kRunningMean].data<float>();
    float* rv = ctx.params[kRunningVar].data<float>();
    const double m = momentum_, unbias = n / (n - 1);
    for (int64_t i = 0; i < c; ++i) {
      rm[i] = static_cast<float>((1 - m) * rm[i] + m * mean.data()[i]);
      rv[i] = static_cast<float>((1 - m) * rv[i] + m * var.data()[i] * unbias);
    }
    ctx.params[kNumBatches].data<int64_t>()[0] += 1;
  }

  // Per channel of x (f32 NCHW): the mean and the biased variance, each summed in float64 in a fixed order; with a
  // collective (SyncBatchNorm) over every rank's x: the ranks' sums, then their sums of squared deviations from the
  // job's mean, added in rank order. Returns the values per channel the statistics cover.
  static double batch_statistics(const Tensor& x, float* mean, float* var, graph::Collective* ranks) {
    const int64_t batch = x.dim(0), c = x.dim(1), plane = x.numel() / batch / c;
    const float* p = x.data<float>();
    auto plane_of = [&](int64_t b, int64_t ch) { return p + (b * c + ch) * plane; };
    // [count, Σx per channel], then [Σ(x − μ)² per channel].
    std::vector<double> sums(static_cast<size_t>(c + 1)), squares(static_cast<size_t>(c));
    sums[0] = static_cast<double>(batch * plane);
    cpu::parallel_for(
        c,
        [&](int64_t ch) {
          double sum = 0;
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < plane; ++i) sum += plane_of(b, ch)[i];
          sums[static_cast<size_t>(ch + 1)] = sum;
        },
        x.numel());
    if (ranks) sums = sum_over_ranks(*ranks, sums);
    const double count = sums[0];
    cpu::parallel_for(
        c,
        [&](int64_t ch) {
          const double mu = sums[static_cast<size_t>(ch + 1)] / count;
          double sq = 0;
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < plane; ++i) {
              const double d = plane_of(b, ch)[i] - mu;
              sq += d * d;
            }
          mean[ch] = static_cast<float>(mu);
          squares[static_cast<size_t>(ch)] = sq;
        },
        x.numel());
    if (ranks) squares = sum_over_ranks(*ranks, squares);
    for (int64_t ch = 0; ch < c; ++ch) var[ch] = static_cast<float>(squares[static_cast<size_t>(ch)] / count);
    return count;
  }

  void prepare(const Shape& x) {
    if (x == x_shape_) return;
    x_shape_ = x;
    data_ = cpu::f32_desc(cpu::dims_of(x));
    stat_ = cpu::f32_desc({x[1]});
    inference_.reset();
    training_pd_.reset();
    backward_.reset();
  }

  const dnnl::batch_normalization_forward::primitive_desc& training_pd() {
    if (!training_pd_)
      training_pd_ = cpu::dnnl_guard("a batch normalization forward (training)", [&] {
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_training, data_, eps_, kScaleShift);
        return dnnl::batch_normalization_forward::primitive_desc(d, cpu::dnnl_engine());
      });
    return *training_pd_;
  }
  const dnnl::batch_normalization_forward& inference() {
    if (!inference_)
      inference_ = cpu::dnnl_guard("a batch normalization forward (inference)", [&] {
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, data_, eps_,
                                                  kScaleShift | normalization_flags::use_global_stats);
        return dnnl::batch_normalization_forward(dnnl::batch_normalization_forward::primitive_desc(d, cpu::dnnl_engine()));
      });
    return *inference_;
  }

  float eps_, momentum_;
  Mode mode_;
  bool silu_;
  std::string prefix_;
  Shape x_shape_;
  memory::desc data_, stat_;
  std::optional<dnnl::batch_normalization_forward> inference_;
  std::optional<dnnl::batch_normalization_forward::primitive_desc> training_pd_;
  std::optional<dnnl::batch_normalization_backward> backward_;
};

}  // namespace

BatchNorm2dOp::BatchNorm2dOp(float eps, float momentum, bool silu, std::string state_prefix)
    : eps_(eps), momentum_(momentum), silu_(silu), prefix_(std::move(state_prefix)) {
  VISION_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "batchnorm2d needs eps > 0 and momentum in [0, 1], got {} {}",
               eps, momentum);
}

Shape BatchNorm2dOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, 4, "batchnorm2d");
  VISION_CHECK(inputs[0][1] > 0, "batchnorm2d needs a known channel count, the input is {}", inputs[0].str());
  return inputs[0];
}

std::unique_ptr<RuntimeOp> BatchNorm2dOp::lower(Backend backend, Mode mode) const {
  VISION_CHECK(!silu_ || mode == Mode::train,
               "{} is a training-time fusion: an inference plan folds BatchNorm into the convolution instead", name());
  return lower_cpu_or_cuda<BatchNorm2dRuntime>(
      *this, backend, VISION_CUDA_FACTORY(cuda_impl::make_batchnorm2d(std::move(twin), eps_, momentum_, mode, silu_)),
      eps_, momentum_, mode, silu_, prefix_);
}

std::shared_ptr<const Op> BatchNorm2dOp::fuse_with(const Op& next, Mode mode, const std::string& self_prefix,
                                                   const std::string&) const {
  if (mode != Mode::train || silu_ || !dynamic_cast<const SiluOp*>(&next)) return nullptr;
  return std::make_shared<BatchNorm2dOp>(eps_, momentum_, true, self_prefix + prefix_);
}

SymTensor batchnorm2d(SymTensor x, float eps, float momentum, const std::string& name) {
  return record<BatchNorm2dOp>({x}, name, eps, momentum);
}

}  // namespace vision::ops
