// vision demo — records the foundation's small network, plans it, runs inference and training steps, prints timings.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "commands.h"
#include "vision/graph/executor.h"
#include "vision/graph/loss_scaler.h"
#include "vision/models/demo/small_net.h"

namespace vision::cli {

namespace {

struct DemoOptions {
  std::string device = "auto";
  int64_t batch = 4;
  int64_t size = 64;
  int iters = 20;
  int train_steps = 5;
  std::string dtype = "f32";
  std::string layout = "nchw";
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <typename F>
double time_ms(graph::BackendContext& b, F&& f) {
  b.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  b.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void run_demo(const DemoOptions& o) {
  VISION_CHECK(o.batch > 0 && o.size > 0 && o.size % 2 == 0 && o.iters > 0 && o.train_steps >= 0,
               "demo: --batch, --size and --iters must be positive, --size even");
  auto backend = graph::make_backend(graph::parse_device_choice(o.device));
  const graph::PlanOptions options{.compute_dtype = core::parse_dtype(o.dtype),
                                   .layout = o.layout == "nhwc" ? core::Layout::nhwc : core::Layout::nchw};
  fmt::print("vision demo on {}: small network, batch {}, {}x{} images, computing in {} {}{}\n",
             graph::backend_name(backend->backend()), o.batch, o.size, o.size, o.dtype, o.layout,
             backend->backend() == graph::Backend::cpu && (o.dtype != "f32" || o.layout != "nchw")
                 ? " (the CPU ops compute in f32 NCHW: the plan converts around them)"
                 : "");

  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pixels(static_cast<size_t>(o.batch * 3 * o.size * o.size));
  for (auto& p : pixels) p = nd(rng);
  const core::Tensor images = core::Tensor::from_vector(core::Shape{o.batch, 3, o.size, o.size}, pixels);

  // Inference.
  graph::Executor infer(models::demo::small_net({}), backend, options);
  std::vector<core::Tensor> out;
  std::vector<double> times;
  const double first = time_ms(*backend, [&] { out = infer.forward({images}); });
  for (int i = 0; i < o.iters; ++i) times.push_back(time_ms(*backend, [&] { out = infer.forward({images}); }));
  const core::Tensor y = backend->download(out[0]);
  double sum = 0, sq = 0;
  for (float v : y.to_vector()) sum += v, sq += double(v) * v;
  const double n = static_cast<double>(y.numel());
  const auto& plan = infer.plan(graph::Mode::inference, {images.shape()});
  fmt::print("\ninference plan ({} steps after fusion, arena {:.1f} KiB, {} parameters):\n{}", plan.steps().size(),
             plan.arena_bytes() / 1024.0, infer.state().parameter_count(), plan.describe());
  fmt::print("output {}  mean {:+.6f}  std {:.6f}\n", y.shape().str(), sum / n, std::sqrt(sq / n - sum * sum / n / n));

  // Training: plain SGD on ½·Σy², which must go down. f32 master weights; in f16 with dynamic loss scaling.
  graph::Executor train(models::demo::small_net({.loss = models::demo::SmallNetConfig::Loss::sum_squares}), backend,
                        options);
  const bool scaled = options.compute_dtype == core::DType::f16;
  graph::LossScaler scaler;
  std::vector<double> step_times;
  fmt::print("\ntraining (SGD, lr 2e-5, loss ½·Σy²{}):\n",
             scaled ? ", dynamic loss scaling" : "");
  const float lr = 2e-5f;
  for (int s = 0; s < o.train_steps; ++s) {
    float loss = 0;
    bool applied = true;
    step_times.push_back(time_ms(*backend, [&] {
      auto l = train.forward_train({images});
      train.backward({}, false, scaled ? scaler.scale() : 1.0f);
      loss = backend->download(l[0]).to_vector()[0];
      applied = !scaled || scaler.unscale(train.state());
      if (!applied) return;  // an overflow in f16: skip the step (the scale was halved)
      backend->axpy(train.state().flat_params(), -lr, train.state().flat_grads());
      train.state().mark_updated();  // inference plans refold BatchNorm, compute copies are refreshed
    }));
    fmt::print("  step {}  loss {:.4f}{}\n", s, loss,
               applied ? "" : fmt::format("  (skipped: gradients overflowed; loss scale now {})", scaler.scale()));
  }

  fmt::print("\n{:<28} {:>12}\n", "timing", "ms");
  fmt::print("{:<28} {:>12.3f}\n", "first inference (plan build)", first);
  fmt::print("{:<28} {:>12.3f}\n", fmt::format("inference, median of {}", o.iters), median(times));
  if (!step_times.empty())
    fmt::print("{:<28} {:>12.3f}\n", fmt::format("train step, median of {}", step_times.size()), median(step_times));
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("demo", "Run the small demo network (inference and training) and print timings");
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--batch", opts->batch, "images per batch")->check(CLI::PositiveNumber);
  cmd->add_option("--size", opts->size, "image side in pixels (even)")->check(CLI::PositiveNumber);
  cmd->add_option("--iters", opts->iters, "timed inference runs")->check(CLI::PositiveNumber);
  cmd->add_option("--train-steps", opts->train_steps, "SGD steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", opts->dtype, "compute dtype: f32, f16 or bf16 (f32 master weights)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--layout", opts->layout, "activation layout: nchw or nhwc")->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->callback([opts] { run_demo(*opts); });
}

}  // namespace vision::cli
