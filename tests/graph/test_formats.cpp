// The plan's format pass on the CPU backend: declared input and output formats, per-step formats chosen from what
// each op supports, cast and layout steps only where two formats meet (and their backward), compute copies of f32
// parameters shared across plans and refreshed when the state changes, and dynamic loss scaling.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/graph/loss_scaler.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"

using namespace vision;
using namespace vision::graph;
using core::Layout;
using test::random_tensor;

namespace {

float element_of(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::f16: return core::half_to_float(t.data<uint16_t>()[i]);
    default: return core::bf16_to_float(t.data<uint16_t>()[i]);
  }
}
void store(const Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::f32: t.data<float>()[i] = v; break;
    case DType::f16: t.data<uint16_t>()[i] = core::float_to_half(v); break;
    default: t.data<uint16_t>()[i] = core::float_to_bf16(v); break;
  }
}

// y[n, c, h, w] = weight[c] · x[n, c, h, w] on the CPU in any of the given formats, reading the memory order from
// format() (and checking the tensors it gets carry it). In a low-precision format it reads its weight as a compute
// copy in that dtype. Records the format of each forward.
class ChannelScaleRuntime final : public RuntimeOp {
 public:
  ChannelScaleRuntime(std::vector<Format> formats, std::vector<Format>* seen)
      : formats_(std::move(formats)), seen_(seen) {}
  std::string name() const override { return "test.channel_scale"; }
  int n_activation_inputs() const override { return 1; }
  bool supports(const Format& f) const override {
    return std::find(formats_.begin(), formats_.end(), f) != formats_.end();
  }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    ParamSpec w{"weight", Shape{in[0][1]}, DType::f32, StateKind::parameter};
    if (format().dtype != DType::f32) w.compute_format = Format{format().dtype, Layout::nchw};
    return {w};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&,
                                         uint64_t seed) const override {
    auto v = uniform_init(Shape{in[0][1]}, 0.5f, seed);
    for (auto& x : v) x += 1.0f;
    return bytes_of(v);
  }
  int64_t channel(const Tensor& x, int64_t i) const {
    const int64_t c = x.dim(1);
    if (x.rank() == 4 && format().layout == Layout::nhwc) return i % c;
    int64_t inner = 1;
    for (size_t d = 2; d < x.rank(); ++d) inner *= x.dim(static_cast<int>(d));
    return (i / inner) % c;
  }
  void check(const Tensor& t) const {
    VISION_CHECK(t.dtype() == format().dtype && (t.rank() != 4 || t.layout() == format().layout),
                 "channel_scale in {} got {}", format_name(format()), t.str());
  }
  void forward(ForwardCtx& ctx) override {
    check(ctx.inputs[0]);
    check(ctx.output);
    VISION_CHECK(ctx.params[0].dtype() == format().dtype, "weight is {}", ctx.params[0].str());
    if (seen_) seen_->push_back(format());
    const Tensor &x = ctx.inputs[0], &w = ctx.params[0];
    for (int64_t i = 0; i < x.numel(); ++i) store(ctx.output, i, element_of(w, channel(x, i)) * element_of(x, i));
  }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    const Tensor &x = ctx.inputs[0], &w = ctx.params[0], &gy = ctx.grad_output;
    check(gy);
    if (ctx.grad_inputs[0].defined())
      for (int64_t i = 0; i < x.numel(); ++i) store(ctx.grad_inputs[0], i, element_of(w, channel(x, i)) * element_of(gy, i));
    const Tensor& gw = ctx.grad_params[0];
    VISION_CHECK(gw.dtype() == format().dtype, "weight gradient is {}", gw.str());
    std::vector<double> sum(static_cast<size_t>(w.numel()), 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) sum[static_cast<size_t>(channel(x, i))] += double(element_of(x, i)) * element_of(gy, i);
    for (int64_t k = 0; k < w.numel(); ++k) store(gw, k, static_cast<float>(sum[static_cast<size_t>(k)]));
  }

 private:
  std::vector<Format> formats_;
  std::vector<Format>* seen_;
};

class ChannelScaleOp final : public Op {
 public:
  ChannelScaleOp(std::vector<Format> formats, std::vector<Format>* seen) : formats_(std::move(formats)), seen_(seen) {}
  std::string name() const override { return "test.channel_scale"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override {
    return std::make_unique<ChannelScaleRuntime>(formats_, seen_);
  }

 private:
  std::vector<Format> formats_;
  std::vector<Format>* seen_;
};

const Format kF32Nchw{DType::f32, Layout::nchw}, kF32Nhwc{DType::f32, Layout::nhwc};
const Format kF16Nchw{DType::f16, Layout::nchw}, kF16Nhwc{DType::f16, Layout::nhwc};
const Format kBf16Nhwc{DType::bf16, Layout::nhwc};

SymTensor channel_scale(SymTensor x, std::vector<Format> formats, const std::string& name,
                        std::vector<Format>* seen = nullptr) {
  return x.graph()->apply(std::make_shared<ChannelScaleOp>(std::move(formats), seen), {x}, name);
}

// x · w_a (NHWC-capable) → · w_b (NHWC-capable) → SiLU (built-in CPU: f32 NCHW only) → output; a training loss
// ½·Σ of it.
std::shared_ptr<Graph> chain(std::vector<Format> formats, Layout input_layout = Layout::nchw,
                             DType input_dtype = DType::f32, std::vector<Format>* seen = nullptr) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("image", Shape{Shape::kAny, 3, 4, 5}, input_dtype, input_layout);
  auto a = channel_scale(x, formats, "a", seen);
  auto b = channel_scale(a, formats, "b", seen);
  auto y = ops::silu(b, "act");
  g->mark_output(y, kInferenceOutput);
  g->mark_output(ops::sum_squares(y, "loss"), kTrainingLoss);
  return g;
}

std::vector<float> host(const Tensor& t) { return test::to_f32_nchw(t).to_vector(); }

// A host tensor of dtype/layout holding the values of an f32 NCHW one (rounded).
Tensor as_format(const Tensor& nchw, DType dtype, Layout layout) { return test::to_format(nchw, Format{dtype, layout}); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

void copy_state(Executor& from, Executor& to, const std::vector<Shape>& shapes) {
  auto& dst = to.state(shapes);
  for (auto& [key, t] : from.state(shapes).to_host()) dst.set_from_host(key, t);
}

}  // namespace

// The plan's layout is used by the ops that have it; a layout step is added only where an op lacks it (before the
// SiLU) and at the output, whose declared format is NCHW. Results equal the NCHW plan's bit for bit (a per-channel
// scale in another memory order performs the same arithmetic).
TEST(PlanFormats, NhwcPlanConvertsOnlyWhereFormatsMeet) {
  std::vector<Format> seen;
  Executor nchw(chain({kF32Nchw, kF32Nhwc}), cpu_backend());
  Executor nhwc(chain({kF32Nchw, kF32Nhwc}, Layout::nchw, DType::f32, &seen), cpu_backend(),
                PlanOptions{.layout = Layout::nhwc});
  const Tensor x = random_tensor(Shape{2, 3, 4, 5});
  copy_state(nchw, nhwc, {x.shape()});
  const auto ref = nchw.forward({x})[0].to_vector();
  const auto out = nhwc.forward({x})[0];
  EXPECT_EQ(out.layout(), Layout::nchw);
  EXPECT_EQ(host(out), ref);
  EXPECT_EQ(seen, (std::vector<Format>{kF32Nhwc, kF32Nhwc}));
  Plan& p = nhwc.plan(Mode::inference, {x.shape()});
  // image → NHWC before 'a'; 'b' reads 'a' as it is; NCHW again before the SiLU, which then is the output.
  EXPECT_EQ(p.conversion_steps(), 2u) << p.describe();
  EXPECT_EQ(nchw.plan(Mode::inference, {x.shape()}).conversion_steps(), 0u);
}

TEST(PlanFormats, TrainingThroughLayoutStepsMatchesNchw) {
  Executor nchw(chain({kF32Nchw, kF32Nhwc}), cpu_backend());
  Executor nhwc(chain({kF32Nchw, kF32Nhwc}), cpu_backend(), PlanOptions{.layout = Layout::nhwc});
  const Tensor x = random_tensor(Shape{2, 3, 4, 5});
  copy_state(nchw, nhwc, {x.shape()});
  const float l1 = nchw.forward_train({x})[0].to_vector()[0];
  nchw.backward();
  const float l2 = nhwc.forward_train({x})[0].to_vector()[0];
  nhwc.backward();
  EXPECT_EQ(l1, l2);
  EXPECT_GT(nhwc.last_train_plan()->conversion_steps(), 0u);
  const auto g1 = nchw.state().flat_grads().to_vector(), g2 = nhwc.state().flat_grads().to_vector();
  EXPECT_LT(test::rel_error(g2, g1), 1e-6);
  EXPECT_GT(test::rel_error(g1, std::vector<float>(g1.size(), 0.0f)), 0.5);  // the gradient is not zero
}

// A graph input declared f16 NHWC: the plan takes exactly that tensor and converts it once; a tensor of another
// dtype or layout is rejected with the expected format named.
TEST(PlanFormats, DeclaredInputFormatIsCheckedAndConverted) {
  Executor ref(chain({kF32Nchw}), cpu_backend());
  Executor ex(chain({kF32Nchw}, Layout::nhwc, DType::f16), cpu_backend());
  const Tensor x32 = random_tensor(Shape{2, 3, 4, 5});
  const Tensor x16 = as_format(x32, DType::f16, Layout::nhwc);
  copy_state(ref, ex, {x32.shape()});
  // The reference sees the same f16-rounded values in f32 NCHW. The graph was recorded with an f16 input, so its
  // output's declared dtype is f16 too: the CPU ops compute in f32 between a cast in and a cast out.
  const Tensor rounded = Tensor::from_vector(x32.shape(), host(x16));
  const Tensor out = ex.forward({x16})[0];
  EXPECT_EQ(out.dtype(), DType::f16);
  const auto want = ref.forward({rounded})[0].to_vector();
  const auto got = host(out);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], core::half_to_float(core::float_to_half(want[i]))) << i;
  EXPECT_EQ(ex.plan(Mode::inference, {x32.shape()}).conversion_steps(), 2u);
  for (const Tensor& wrong : {x32, as_format(x32, DType::f16, Layout::nchw), as_format(x32, DType::f32, Layout::nhwc)}) {
    try {
      ex.forward({wrong});
      ADD_FAILURE() << "accepted " << wrong.str() << " for an f16 nhwc input";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'image'"), std::string::npos) << what;
      EXPECT_NE(what.find("f16"), std::string::npos) << what;
      EXPECT_NE(what.find("nhwc"), std::string::npos) << what;
    }
  }
}

// An output declared f16 NHWC comes out so, converted once at the end.
TEST(PlanFormats, DeclaredOutputFormat) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 3, 4, 5});
  auto y = ops::silu(x, "act");
  g->mark_output(y, OutputUse{.format = kF16Nhwc});
  Executor ex(g, cpu_backend());
  const Tensor xs = random_tensor(Shape{1, 3, 4, 5});
  const Tensor out = ex.forward({xs})[0];
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_EQ(out.layout(), Layout::nhwc);
  auto g32 = std::make_shared<Graph>();
  auto x2 = g32->input("x", Shape{1, 3, 4, 5});
  g32->mark_output(ops::silu(x2, "act"));
  const auto ref = Executor(g32, cpu_backend()).forward({xs})[0].to_vector();
  const auto got = host(out);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], core::half_to_float(core::float_to_half(ref[i]))) << i;
}

// In f16 the op reads an f16 copy of its f32 weight; the copy is shared by the model's plans, rewritten when the
// state changes, and the weight's gradient (written in f16) lands in the f32 gradient buffer.
TEST(PlanFormats, LowPrecisionComputeCopiesOfParameters) {
  std::vector<Format> seen;
  const std::vector<Format> formats{kF32Nchw, kF16Nchw, kF16Nhwc};
  Executor ref(chain(formats), cpu_backend());
  Executor ex(chain(formats, Layout::nchw, DType::f32, &seen), cpu_backend(),
              PlanOptions{.compute_dtype = DType::f16, .layout = Layout::nhwc});
  const Tensor x = random_tensor(Shape{2, 3, 4, 5});
  copy_state(ref, ex, {x.shape()});
  StateStore& state = ex.state();
  const auto out = host(ex.forward({x})[0]);
  EXPECT_EQ(seen.back(), kF16Nhwc);
  EXPECT_EQ(state.compute_copies(), 2u);  // a.weight and b.weight in f16
  const Tensor copy = state.compute_copy("a.weight", kF16Nchw);
  const auto master = state.tensor("a.weight").to_vector();
  for (size_t k = 0; k < master.size(); ++k)
    EXPECT_EQ(host(copy)[k], core::half_to_float(core::float_to_half(master[k])));
  // f16 against f32: within f16 rounding of a few operations.
  const auto expect = ref.forward({x})[0].to_vector();
  EXPECT_LT(test::rel_error(out, expect), 4e-3);
  EXPECT_GT(max_abs_diff(out, expect), 0.0);  // it did compute in f16

  // A training plan shares the copies; its gradient reaches the f32 buffer.
  ex.forward_train({x});
  ex.backward();
  EXPECT_EQ(state.compute_copies(), 2u);
  ref.forward_train({x});
  ref.backward();
  EXPECT_LT(test::rel_error(state.flat_grads().to_vector(), ref.state().flat_grads().to_vector()), 1e-2);
  // Accumulating adds the converted gradient again.
  const auto once = state.flat_grads().to_vector();
  ex.forward_train({x});
  ex.backward({}, /*accumulate=*/true);
  const auto twice = state.flat_grads().to_vector();
  for (size_t k = 0; k < once.size(); ++k) EXPECT_NEAR(twice[k], 2 * once[k], 1e-6 + 1e-6 * std::abs(once[k])) << k;

  // New weights: the next run uses a refreshed copy.
  Tensor w = Tensor::from_vector(Shape{3}, std::vector<float>{2.0f, -1.0f, 0.5f});
  state.set_from_host("a.weight", w);
  ref.state().set_from_host("a.weight", w);
  EXPECT_LT(test::rel_error(host(ex.forward({x})[0]), ref.forward({x})[0].to_vector()), 4e-3);
  EXPECT_EQ(host(state.compute_copy("a.weight", kF16Nchw)), (std::vector<float>{2.0f, -1.0f, 0.5f}));
}

// Backward seeded with a loss scale S gives S times the gradient.
TEST(PlanFormats, BackwardSeedScalesGradients) {
  Executor ex(chain({kF32Nchw}), cpu_backend());
  const Tensor x = random_tensor(Shape{2, 3, 4, 5});
  ex.forward_train({x});
  ex.backward();
  const auto g1 = ex.state().flat_grads().to_vector();
  ex.forward_train({x});
  ex.backward({}, false, 1024.0f);
  const auto g2 = ex.state().flat_grads().to_vector();
  for (size_t k = 0; k < g1.size(); ++k) EXPECT_FLOAT_EQ(g2[k], 1024.0f * g1[k]) << k;
}

TEST(LossScaler, SkipsAndShrinksOnOverflowGrowsAfterCleanSteps) {
  Executor ex(chain({kF32Nchw}), cpu_backend());
  const Tensor x = random_tensor(Shape{2, 3, 4, 5});
  StateStore& state = ex.state({x.shape()});
  LossScaler scaler(LossScaler::Options{.initial_scale = 256.0f, .growth_interval = 3});
  ex.forward_train({x});
  ex.backward({}, false, scaler.scale());
  const auto scaled = state.flat_grads().to_vector();
  EXPECT_TRUE(scaler.unscale(state));
  const auto unscaled = state.flat_grads().to_vector();
  for (size_t k = 0; k < scaled.size(); ++k) EXPECT_FLOAT_EQ(unscaled[k], scaled[k] / 256.0f);
  EXPECT_EQ(scaler.scale(), 256.0f);
  // An overflow: the step is skipped and the scale halved.
  Tensor grads = state.flat_grads();
  grads.data<float>()[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.unscale(state));
  EXPECT_EQ(scaler.scale(), 128.0f);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  grads.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.unscale(state));
  EXPECT_EQ(scaler.scale(), 64.0f);
  // Three clean steps in a row double it.
  for (int i = 0; i < 3; ++i) {
    ex.forward_train({x});
    ex.backward({}, false, scaler.scale());
    EXPECT_TRUE(scaler.unscale(state));
    EXPECT_EQ(scaler.scale(), i < 2 ? 64.0f : 128.0f) << i;
  }
}

// Concat and split along channels are views / in-place in NCHW but copies in NHWC; both give the same values.
TEST(PlanFormats, ChannelConcatAndSplitInNhwc) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    auto x = g->input("x", Shape{1, 3, 4, 5});
    auto a = channel_scale(x, {kF32Nchw, kF32Nhwc}, "a");
    auto b = channel_scale(x, {kF32Nchw, kF32Nhwc}, "b");
    auto c = ops::concat({a, b}, 1, "cat");
    auto parts = ops::split(c, {2, 4}, 1, "split");
    auto d = channel_scale(parts[1], {kF32Nchw, kF32Nhwc}, "d");
    g->mark_output(d);
    g->mark_output(parts[0]);
    return g;
  };
  Executor nchw(make(), cpu_backend());
  Executor nhwc(make(), cpu_backend(), PlanOptions{.layout = Layout::nhwc});
  const Tensor x = random_tensor(Shape{1, 3, 4, 5});
  copy_state(nchw, nhwc, {x.shape()});
  const auto r = nchw.forward({x});
  const auto o = nhwc.forward({x});
  EXPECT_EQ(host(o[0]), r[0].to_vector());
  EXPECT_EQ(host(o[1]), r[1].to_vector());
  Plan& p = nhwc.plan(Mode::inference, {x.shape()});
  EXPECT_EQ(p.conversion_steps(), 3u) << p.describe();  // x → NHWC, both outputs → NCHW
  EXPECT_EQ(p.describe().find("shares memory"), std::string::npos) << p.describe();
  EXPECT_NE(nchw.plan(Mode::inference, {x.shape()}).describe().find("shares memory"), std::string::npos);
}

// An op that computes in none of the candidate formats is an error naming the step.
TEST(PlanFormats, OpWithoutAUsableFormatIsAnError) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 3, 4, 5});
  g->mark_output(channel_scale(x, {kBf16Nhwc}, "only_bf16"));
  Executor ex(g, cpu_backend());
  try {
    ex.forward({random_tensor(Shape{1, 3, 4, 5})});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only_bf16"), std::string::npos) << e.what();
  }
}

namespace {
// y = a · b with a in the step's dtype and b always f32 (RuntimeOp::input_dtype), on the CPU in f32 or f16.
class MixedMulRuntime final : public RuntimeOp {
 public:
  std::string name() const override { return "test.mixed_mul"; }
  int n_activation_inputs() const override { return 2; }
  bool supports(const Format& f) const override { return f.layout == Layout::nchw; }
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 1 ? std::optional<DType>(DType::f32) : std::nullopt;
  }
  void forward(ForwardCtx& ctx) override {
    VISION_CHECK(ctx.inputs[0].dtype() == format().dtype && ctx.inputs[1].dtype() == DType::f32,
                 "mixed_mul in {} got {} and {}", format_name(format()), ctx.inputs[0].str(), ctx.inputs[1].str());
    for (int64_t i = 0; i < ctx.output.numel(); ++i)
      store(ctx.output, i, element_of(ctx.inputs[0], i) * ctx.inputs[1].data<float>()[i]);
  }
};
class MixedMulOp final : public Op {
 public:
  std::string name() const override { return "test.mixed_mul"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  DType infer_output_dtype(const std::vector<DType>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<MixedMulRuntime>(); }
};
}  // namespace

// An input the op takes in f32 whatever the plan's dtype is converted to f32, the other to the plan's f16.
TEST(PlanFormats, AnInputKeptInF32ByTheOp) {
  auto g = std::make_shared<Graph>();
  auto a = g->input("a", Shape{2, 6});
  auto b = g->input("b", Shape{2, 6}, DType::f16);  // declared f16: converted up to f32 for the op
  g->mark_output(g->apply(std::make_shared<MixedMulOp>(), {a, b}, "mul"));
  Executor ex(g, cpu_backend(), PlanOptions{.compute_dtype = DType::f16});
  const Tensor xa = random_tensor(Shape{2, 6});
  const Tensor xb = as_format(random_tensor(Shape{2, 6}), DType::f16, Layout::nchw);
  const auto out = host(ex.forward({xa, xb})[0]);
  // a → f16, b → f32, and the f16 product back to the output's recorded f32
  EXPECT_EQ(ex.plan(Mode::inference, {xa.shape(), xb.shape()}).conversion_steps(), 3u);
  const auto va = xa.to_vector(), vb = host(xb);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i], core::half_to_float(core::float_to_half(core::half_to_float(core::float_to_half(va[i])) * vb[i])))
        << i;
}
