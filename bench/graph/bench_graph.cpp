// bench_graph — a YOLO26n-width stack of Conv-BN-SiLU layers and C2f blocks through the graph engine (record →
// plan → executor): inference (BatchNorm folded by the plan, CUDA-graph replay) and a training step (forward_train,
// backward, one SGD step on the f32 master weights), in f32 NCHW, f16 NHWC and bf16 NHWC, at batch 1 and 32 of
// 640×640 images. Prints one table; --json writes the same rows as JSON lines for bench/graph/run.sh, which puts
// them next to PyTorch's (peer.py builds the same stack with torch.nn). See NOTES.md.
//
// The stack (the same in peer.py; state keys are identical on both sides, "model.2.m.0.cv1.conv.weight"):
//   Conv(c1, c2, k, s)   = conv2d k×k stride s, padding k/2, no bias → BatchNorm2d(eps 1e-3, momentum 0.03) → SiLU
//   C2f(c, n)            = cv1 = Conv(c, c, 1, 1); split into halves a, b of c/2 channels;
//                          for i < n: b = b + Bottleneck_i(b),
//                                     Bottleneck = Conv(c/2, c/2, 3, 1) → Conv(c/2, c/2, 3, 1);
//                          cv2 = Conv((2 + n)·c/2, c, 1, 1) over concat(a, b₀, b₁, …, b_n)  (ultralytics' C2f)
//   model.0 Conv(3, 16, 3, 2)     640 → 320
//   model.1 Conv(16, 32, 3, 2)    320 → 160
//   model.2 C2f(32, n=1)
//   model.3 Conv(32, 64, 3, 2)    160 → 80
//   model.4 C2f(64, n=2)
//   model.5 Conv(64, 128, 3, 2)   80 → 40
//   model.6 C2f(128, n=2)
//   model.7 Conv(128, 256, 3, 2)  40 → 20
//   model.8 C2f(256, n=1)         → y [N, 256, 20, 20]
// Inference output: y. Training loss: mean(y).
//
// Timing: each row gets a fresh Executor. Warm-up calls (inference: the 1st runs eagerly, the 2nd captures the plan
// into a CUDA graph, later ones replay it), then one timed call picks `iters` so that a measurement takes about
// --target-ms, then --repeats measurements of `iters` back-to-back calls, CUDA events on the backend's stream around
// each; the row reports the median (and the minimum) of the per-call times. Every call includes the copy of the
// input into the plan's arena (peer.py's CUDA-graph peers copy their input into the static input the same way).
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/core/tensor.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/graph/loss_scaler.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"

using namespace vision;
using namespace vision::bench;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
using graph::SymTensor;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// The stack (see the header comment; peer.py's STACK is the same list).

struct Layer {
  enum Kind { conv, c2f } kind;
  int64_t channels;  // output channels
  int64_t kernel = 3, stride = 1;  // conv
  int n = 1;                       // c2f: bottlenecks
};

const std::vector<Layer>& stack_layers() {
  static const std::vector<Layer> layers = {
      {Layer::conv, 16, 3, 2},  {Layer::conv, 32, 3, 2},  {Layer::c2f, 32, 0, 0, 1},
      {Layer::conv, 64, 3, 2},  {Layer::c2f, 64, 0, 0, 2}, {Layer::conv, 128, 3, 2},
      {Layer::c2f, 128, 0, 0, 2}, {Layer::conv, 256, 3, 2}, {Layer::c2f, 256, 0, 0, 1},
  };
  return layers;
}

constexpr float kBnEps = 1e-3f, kBnMomentum = 0.03f;

// Conv → BatchNorm → SiLU under scope `name` (nodes name.conv, name.bn, name.act), as ultralytics' Conv.
SymTensor conv_block(SymTensor x, int64_t c2, int64_t k, int64_t s, const std::string& name) {
  auto _ = x.graph()->scope(name);
  ops::Conv2dAttrs a;
  a.in_channels = x.dim(1);
  a.out_channels = c2;
  a.kernel = k;
  a.stride = s;
  x = ops::conv2d(x, a, "conv");
  x = ops::batchnorm2d(x, kBnEps, kBnMomentum, "bn");
  return ops::silu(x, "act");
}

// ultralytics' C2f(c, c, n, shortcut=True, e=0.5) under scope `name`.
SymTensor c2f_block(SymTensor x, int64_t c2, int n, const std::string& name) {
  auto _ = x.graph()->scope(name);
  const int64_t c = c2 / 2;
  SymTensor y = conv_block(x, 2 * c, 1, 1, "cv1");
  std::vector<SymTensor> halves = ops::split(y, {c, c}, "split");
  std::vector<SymTensor> parts = halves;
  SymTensor b = halves[1];
  for (int i = 0; i < n; ++i) {
    auto m = x.graph()->scope(fmt::format("m.{}", i));
    SymTensor t = conv_block(b, c, 3, 1, "cv1");
    t = conv_block(t, c, 3, 1, "cv2");
    b = ops::add(b, t, "add");
    parts.push_back(b);
  }
  SymTensor cat = ops::concat(parts, "cat");
  return conv_block(cat, c2, 1, 1, "cv2");
}

// The graph: input "x" [?, 3, size, size] of the given dtype and layout; inference output y, training loss mean(y).
std::shared_ptr<graph::Graph> build_stack(int64_t size, DType input_dtype, Layout input_layout) {
  auto g = std::make_shared<graph::Graph>();
  SymTensor x = g->input("x", Shape{Shape::kAny, 3, size, size}, input_dtype, input_layout);
  SymTensor y;
  {
    auto _ = g->scope("model");
    const auto& layers = stack_layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      x = l.kind == Layer::conv ? conv_block(x, l.channels, l.kernel, l.stride, std::to_string(i))
                                : c2f_block(x, l.channels, l.n, std::to_string(i));
    }
    y = x;
  }
  g->mark_output(y, graph::kInferenceOutput);
  g->mark_output(ops::mean(y, "loss"), graph::kTrainingLoss);
  return g;
}

// Forward FLOPs per image: 2 · (multiply-adds of every convolution); BatchNorm, SiLU, adds are not counted.
double forward_flops_per_image(int64_t size) {
  auto g = build_stack(size, DType::f32, Layout::nchw);
  const std::vector<Shape> shapes = graph::bind_shapes(*g, {Shape{1, 3, size, size}});
  double flops = 0;
  for (const graph::Node& n : g->nodes()) {
    auto conv = std::dynamic_pointer_cast<const ops::Conv2dOp>(n.op);
    if (!conv) continue;
    const ops::Conv2dAttrs& a = conv->attrs();
    const Shape& out = shapes[static_cast<size_t>(n.outputs[0])];
    flops += 2.0 * double(out.numel()) * double(a.in_channels / a.groups) * double(a.kernel * a.kernel);
  }
  return flops;
}

// ---------------------------------------------------------------------------------------------------------------
// Formats and rows.

struct Format {
  std::string name;  // "f32_nchw", "f16_nhwc", "bf16_nhwc"
  DType dtype;
  Layout layout;
};

std::optional<Format> parse_format(const std::string& s) {
  if (s == "f32_nchw") return Format{s, DType::f32, Layout::nchw};
  if (s == "f16_nhwc") return Format{s, DType::f16, Layout::nhwc};
  if (s == "bf16_nhwc") return Format{s, DType::bf16, Layout::nhwc};
  if (s == "f16_nchw") return Format{s, DType::f16, Layout::nchw};
  if (s == "bf16_nchw") return Format{s, DType::bf16, Layout::nchw};
  if (s == "f32_nhwc") return Format{s, DType::f32, Layout::nhwc};
  return std::nullopt;
}

struct RowSpec {
  std::string mode;   // "infer" or "train"
  Format format;      // the plan's compute format
  std::string input;  // "native" (the graph input is declared in the compute format) or "f32_nchw"
  int64_t batch;
  std::string key() const { return fmt::format("{}_{}_in-{}_b{}", mode, format.name, input, batch); }
  DType input_dtype() const { return input == "native" ? format.dtype : DType::f32; }
  Layout input_layout() const { return input == "native" ? format.layout : Layout::nchw; }
};

struct RowResult {
  RowSpec spec;
  std::optional<Timing> timing;
  std::string error;
  std::string variant;  // "graph-replay" (inference) or "eager" (training)
  bool graph_replayed = false;
  size_t plan_steps = 0, arena_bytes = 0;
  bool finite = true;
  double loss = NAN;
  int64_t skipped_steps = -1;  // f16 training: optimizer steps the loss scaler skipped (gradient overflow)
};

// ---------------------------------------------------------------------------------------------------------------
// One row.

struct Context {
  std::shared_ptr<graph::BackendContext> backend;
  int64_t size = 640;
  float lr = 1e-3f;
  TimingOptions timing;
  bool describe = false;
  bool profile = false;
  uint64_t seed = 1;
};

graph::PlanOptions plan_options(const Format& f) {
  return graph::PlanOptions{.deterministic = false, .compute_dtype = f.dtype, .layout = f.layout};
}

RowResult run_row(const Context& cx, const RowSpec& spec) {
  RowResult r;
  r.spec = spec;
  r.variant = spec.mode == "infer" ? (cx.backend->supports_graph_capture() ? "graph-replay" : "plan") : "eager";
  try {
    std::mt19937 rng(static_cast<uint32_t>(cx.seed));
    const Shape shape{spec.batch, 3, cx.size, cx.size};
    graph::Executor ex(build_stack(cx.size, spec.input_dtype(), spec.input_layout()), cx.backend,
                       plan_options(spec.format));
    const graph::Mode mode = spec.mode == "infer" ? graph::Mode::inference : graph::Mode::train;
    graph::StateStore& state = ex.state(mode, {shape});
    randomize_batchnorm(state, rng);
    const Tensor x = cx.backend->upload(random_host(shape, spec.input_dtype(), spec.input_layout(), rng, -1.f, 1.f));
    graph::Plan& plan = ex.plan(mode, {shape});
    r.plan_steps = plan.steps().size();
    r.arena_bytes = plan.arena_bytes();
    if (cx.describe) std::fprintf(stderr, "--- %s\n%s", spec.key().c_str(), plan.describe().c_str());

    Clock clock(*cx.backend);
    std::vector<Tensor> out;
    if (mode == graph::Mode::inference) {
      r.timing = measure(clock, [&] { out = ex.forward({x}); }, cx.timing);
      r.graph_replayed = plan.graph_replayed();
      r.finite = all_finite(cx.backend->download(out.at(0)));
      if (cx.profile)
        std::fprintf(stderr, "--- profile %s\n%s", spec.key().c_str(),
                     graph::Plan::format_profile(plan.profile_forward({x}, 10), 30).c_str());
    } else {
      // f16 needs dynamic loss scaling (graph::LossScaler: backward seeded with the scale, the gradients unscaled
      // and checked, which waits for the device); f32 and bf16 need none.
      const bool scaled = spec.format.dtype == DType::f16;
      graph::LossScaler scaler;
      const float lr = cx.lr;
      r.timing = measure(
          clock,
          [&] {
            out = ex.forward_train({x});
            ex.backward({}, false, scaled ? scaler.scale() : 1.0f);
            if (!scaled || scaler.unscale(state)) {
              cx.backend->axpy(state.flat_params(), -lr, state.flat_grads());
              state.mark_updated();
            }
          },
          cx.timing);
      if (scaled) r.skipped_steps = scaler.skipped_steps();
      const Tensor loss = cx.backend->download(out.at(0));
      r.loss = loss.to_vector().at(0);
      r.finite = std::isfinite(r.loss) && all_finite(cx.backend->download(state.flat_grads()));
    }
  } catch (const std::exception& e) {
    r.error = e.what();
    r.timing.reset();
    try {
      cx.backend->synchronize();
    } catch (...) {
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// The cross-check dump: the state (after the BatchNorm randomisation), an input, our inference output (BatchNorm
// folded by the plan), then the training loss and every parameter's gradient from one forward_train + backward.
// peer.py --check-against loads it into its torch model and compares (NOTES.md).
void write_check(const Context& cx, const Format& f, const std::string& input, int64_t batch, const std::string& path) {
  RowSpec spec{"infer", f, input, batch};
  std::mt19937 rng(static_cast<uint32_t>(cx.seed));
  const Shape shape{batch, 3, cx.size, cx.size};
  graph::Executor ex(build_stack(cx.size, spec.input_dtype(), spec.input_layout()), cx.backend, plan_options(f));
  graph::StateStore& state = ex.state(graph::Mode::inference, {shape});
  randomize_batchnorm(state, rng);
  const Tensor host_x = random_host(shape, spec.input_dtype(), spec.input_layout(), rng, -1.f, 1.f);
  const Tensor x = cx.backend->upload(host_x);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [key, t] : state.to_host()) tensors.emplace_back(key, t);
  tensors.emplace_back("check.input", to_f32_nchw(host_x));
  tensors.emplace_back("check.output", to_f32_nchw(cx.backend->download(ex.forward({x}).at(0))));
  std::vector<Tensor> loss;
  if (f.dtype == DType::f16) {  // f16 gradients of a mean underflow without loss scaling
    graph::LossScaler scaler;
    bool finite = false;
    for (int attempt = 0; attempt < 24 && !finite; ++attempt) {
      loss = ex.forward_train({x});
      ex.backward({}, false, scaler.scale());
      finite = scaler.unscale(state);
    }
    VISION_CHECK(finite, "f16 gradients overflow at every loss scale down to {}", scaler.scale());
  } else {
    loss = ex.forward_train({x});
    ex.backward();
  }
  tensors.emplace_back("check.loss", to_f32_nchw(cx.backend->download(loss.at(0))));
  for (const graph::StateEntry& e : state.entries())
    if (e.kind == graph::StateKind::parameter)
      tensors.emplace_back("check.grad." + e.key, to_f32_nchw(cx.backend->download(state.grad(e.key))));
  core::write_safetensors(path, tensors,
                          {{"format", f.name},
                           {"input", input},
                           {"device", std::string(graph::backend_name(cx.backend->backend()))},
                           {"bn_eps", fmt::format("{}", kBnEps)}});
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Conv-BN-SiLU / C2f stack through the graph engine: inference (graph replay) and training steps"};
  std::string json_path, only, device = "cuda", check_path;
  std::string formats_s = "f32_nchw,f16_nhwc,bf16_nhwc", train_formats_s = "f32_nchw,f16_nhwc,bf16_nhwc";
  std::string batches_s = "1,32", inputs_s = "native,f32_nchw", modes_s = "infer,train";
  Context cx;
  app.add_option("--json", json_path, "write the rows as JSON lines (a meta line first) for run.sh");
  app.add_option("--only", only, "run only the rows whose key contains this text (e.g. infer_f16, _b32)");
  app.add_option("--device", device, "cuda (the benchmark) or cpu (a smoke test of the program's logic)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--size", cx.size, "image side in pixels (a multiple of 32)")->check(CLI::PositiveNumber);
  app.add_option("--batches", batches_s, "comma-separated batch sizes");
  app.add_option("--modes", modes_s, "comma-separated: infer, train");
  app.add_option("--formats", formats_s, "inference formats: f32_nchw, f16_nhwc, bf16_nhwc (also f16_nchw, ...)");
  app.add_option("--train-formats", train_formats_s, "training formats (f16 with dynamic loss scaling)");
  app.add_option("--inputs", inputs_s,
                 "graph input declarations for 16-bit formats: native (the compute format: the pure network) and/or "
                 "f32_nchw (the plan converts the input)");
  app.add_option("--repeats", cx.timing.repeats, "timed measurements per row (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--warmup", cx.timing.warmup, "untimed calls first (at least 2: the 2nd captures the CUDA graph)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--target-ms", cx.timing.target_ms, "duration of one measurement (sets the calls per measurement)");
  app.add_option("--max-iters", cx.timing.max_iters, "most calls per measurement")->check(CLI::Range(1, 100000));
  app.add_option("--lr", cx.lr, "SGD learning rate of the training step");
  app.add_option("--seed", cx.seed, "seed of the random input and BatchNorm state");
  app.add_flag("--profile", cx.profile,
               "print where each inference row's forward time goes (steps run eagerly, timed one by one) to stderr");
  app.add_flag("--describe", cx.describe, "print each row's plan (steps after fusion and format conversion) to stderr");
  app.add_option("--check-dump", check_path,
                 "instead of timing: write the state, an input, our output, loss and gradients for peer.py "
                 "--check-against (first of --formats, --inputs, --batches; --size)");
  CLI11_PARSE(app, argc, argv);

  try {
    VISION_CHECK(cx.size % 32 == 0, "--size must be a multiple of 32, got {}", cx.size);
    cx.backend = graph::make_backend(graph::parse_device_choice(device));
    std::vector<int64_t> batches;
    for (const auto& b : split_list(batches_s)) batches.push_back(std::stoll(b));
    auto formats_of = [](const std::string& s) {
      std::vector<Format> out;
      for (const auto& name : split_list(s)) {
        auto f = parse_format(name);
        VISION_CHECK(f.has_value(), "unknown format '{}'", name);
        out.push_back(*f);
      }
      return out;
    };
    const std::vector<Format> formats = formats_of(formats_s), train_formats = formats_of(train_formats_s);
    const std::vector<std::string> inputs = split_list(inputs_s), modes = split_list(modes_s);
    for (const auto& i : inputs) VISION_CHECK(i == "native" || i == "f32_nchw", "unknown input '{}'", i);
    for (const auto& m : modes) VISION_CHECK(m == "infer" || m == "train", "unknown mode '{}'", m);
    VISION_CHECK(!batches.empty() && !formats.empty() && !inputs.empty(), "empty --batches, --formats or --inputs");

    if (!check_path.empty()) {
      write_check(cx, formats.front(), inputs.front(), batches.front(), check_path);
      std::printf("bench_graph: wrote %s (%s, input %s, batch %lld, %lldx%lld)\n", check_path.c_str(),
                  formats.front().name.c_str(), inputs.front().c_str(), static_cast<long long>(batches.front()),
                  static_cast<long long>(cx.size), static_cast<long long>(cx.size));
      return 0;
    }

    std::vector<RowSpec> specs;
    for (const auto& mode : modes)
      for (const Format& f : mode == "infer" ? formats : train_formats)
        for (const auto& in : inputs) {
          // f32 NCHW: the two input declarations are the same graph.
          if (in == "f32_nchw" && f.dtype == DType::f32 && f.layout == Layout::nchw &&
              std::find(inputs.begin(), inputs.end(), "native") != inputs.end())
            continue;
          for (int64_t b : batches) {
            RowSpec s{mode, f, in, b};
            if (!only.empty() && s.key().find(only) == std::string::npos) continue;
            specs.push_back(s);
          }
        }

    const std::string device_name = bench::device_name(*cx.backend);
    const double gflops = forward_flops_per_image(cx.size) * 1e-9;
    int64_t n_params = 0;
    nlohmann::json state_shapes = nlohmann::json::object();
    {
      const Shape one{1, 3, cx.size, cx.size};
      graph::StateStore st(*build_stack(cx.size, DType::f32, Layout::nchw), cx.backend, {one});
      n_params = st.parameter_count();
      for (const graph::StateEntry& e : st.entries()) state_shapes[e.key] = e.shape.dims();
    }
    const bool on_gpu = cx.backend->backend() == graph::Backend::cuda;
    const std::string method = fmt::format("median of {} measurements of back-to-back calls ({}), per call",
                                           cx.timing.repeats,
                                           on_gpu ? "CUDA events on the backend stream" : "host clock");

    std::printf("vision-cpp graph engine on %s: Conv-BN-SiLU/C2f stack at %lldx%lld, %.3f GFLOP/image forward, "
                "%lld parameters; %s\n",
                device_name.c_str(), static_cast<long long>(cx.size), static_cast<long long>(cx.size), gflops,
                static_cast<long long>(n_params), method.c_str());
    std::printf("%-34s %-13s %10s %10s %11s %8s  %s\n", "row", "variant", "ms", "min ms", "img/s", "TFLOP/s", "note");
    std::fflush(stdout);

    std::vector<RowResult> results;
    for (const RowSpec& s : specs) {
      RowResult r = run_row(cx, s);
      const double flop = gflops * 1e9 * double(s.batch) * (s.mode == "train" ? 3.0 : 1.0);
      if (r.timing) {
        std::string note = r.finite ? "" : "NON-FINITE OUTPUT";
        if (s.mode == "infer" && cx.backend->supports_graph_capture() && !r.graph_replayed) note += " (not replayed)";
        std::printf("%-34s %-13s %10.3f %10.3f %11.1f %8.1f  %s\n", s.key().c_str(), r.variant.c_str(),
                    r.timing->median_ms, r.timing->min_ms, double(s.batch) * 1000.0 / r.timing->median_ms,
                    flop / (r.timing->median_ms * 1e-3) * 1e-12, note.c_str());
      } else {
        std::printf("%-34s %-13s %10s %10s %11s %8s  %s\n", s.key().c_str(), r.variant.c_str(), "n/a", "n/a", "n/a",
                    "", r.error.substr(0, 300).c_str());
      }
      std::fflush(stdout);
      results.push_back(std::move(r));
    }

    if (!json_path.empty()) {
      std::ofstream f(json_path);
      VISION_CHECK(f.good(), "cannot write {}", json_path);
      nlohmann::json meta = {{"kind", "meta"},
                             {"impl", "ours"},
                             {"implementation", "vision-cpp graph engine"},
                             {"device", device_name},
                             {"backend", std::string(graph::backend_name(cx.backend->backend()))},
                             {"size", cx.size},
                             {"gflops_per_image", gflops},
                             {"parameters", n_params},
                             {"state", state_shapes},
                             {"method", method},
                             {"lr", cx.lr}};
      f << meta.dump() << "\n";
      for (const RowResult& r : results) {
        const RowSpec& s = r.spec;
        nlohmann::json j = {{"kind", "row"},
                            {"impl", "ours"},
                            {"key", s.key()},
                            {"mode", s.mode},
                            {"format", s.format.name},
                            {"input", s.input},
                            {"batch", s.batch},
                            {"variant", r.variant},
                            {"ms", nullptr},
                            {"img_s", nullptr}};
        if (r.timing) {
          j["ms"] = r.timing->median_ms;
          j["ms_min"] = r.timing->min_ms;
          j["img_s"] = double(s.batch) * 1000.0 / r.timing->median_ms;
          j["iters"] = r.timing->iters;
          j["repeats"] = r.timing->repeats;
          j["finite"] = r.finite;
          j["plan_steps"] = r.plan_steps;
          j["arena_bytes"] = r.arena_bytes;
          if (s.mode == "infer" && cx.backend->supports_graph_capture()) j["graph_replayed"] = r.graph_replayed;
          if (s.mode == "train") j["loss"] = r.loss;
          if (r.skipped_steps >= 0) j["skipped_steps"] = r.skipped_steps;
        } else {
          j["error"] = r.error;
        }
        f << j.dump() << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_graph: %s\n", e.what());
    return 1;
  }
  return 0;
}
