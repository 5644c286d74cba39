// vision bench — times YOLO26 inference per batch size: a normalised input already on the device, in the plan's input
// format, to the [B, max_det, 6] detections ready; prints latency (median, p90) and images/s as one table.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/model.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"
#ifdef VISION_HAS_CUDA
#include "vision/cuda/device.h"
#include "vision/ops/cuda/cudnn_conv.h"
#endif

namespace vision::cli {

namespace {

namespace yolo = models::yolo;

struct BenchOptions {
  std::string model;  // a weights file, or
  std::string scale;  // random initial weights at a scale
  int64_t nc = 80;
  std::vector<int64_t> batches = {1};
  std::string imgsz = "640";
  std::string device = "auto";
  std::string dtype;  // default: the backend's (f16 on CUDA, f32 on the CPU)
  std::string layout;  // default: the backend's (NHWC but for f32 on CUDA)
  int threads = 0;     // the CPU: OpenMP / oneDNN threads; 0: every core
  int warmup = 10;
  int iters = 0;         // 0: time each batch for about `seconds`
  double seconds = 3.0;
  int min_iters = 10;
  int max_iters = 10000;
  uint64_t seed = 0;
  std::string json;
  bool profile = false;  // after each batch's timing, the plan's per-op profile on stderr
};

struct Stats {
  double median = 0, p90 = 0, min = 0, mean = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  Stats s;
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  // Nearest rank: the smallest sample with at least 90% of the samples at or below it.
  s.p90 = v[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
  s.min = v.front();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(n);
  return s;
}

int64_t parse_side(const std::string& text, const std::string& whole) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  VISION_CHECK(ec == std::errc() && ptr == end && !text.empty(),
               "bench: --imgsz takes one side or H,W in pixels (e.g. 640 or 384,640), got '{}'", whole);
  return v;
}

// "640" → {640, 640}; "384,640" (or 384x640) → {384, 640}; each side a positive multiple of 32.
std::array<int64_t, 2> parse_imgsz(const std::string& text) {
  const size_t sep = text.find_first_of(",x");
  std::array<int64_t, 2> hw{};
  if (sep == std::string::npos) {
    hw[0] = hw[1] = parse_side(text, text);
  } else {
    hw[0] = parse_side(text.substr(0, sep), text);
    hw[1] = parse_side(text.substr(sep + 1), text);
  }
  for (int64_t side : hw) {
    if (side > 0 && side % yolo::kSizeMultiple == 0) continue;
    const int64_t below = std::max<int64_t>(side, 0) / yolo::kSizeMultiple * yolo::kSizeMultiple;
    fail("bench: --imgsz {}: every side must be a positive multiple of {} (YOLO26's largest stride), e.g. {}", text,
         yolo::kSizeMultiple,
         below > 0 ? fmt::format("{} or {}", below, below + yolo::kSizeMultiple) : std::to_string(yolo::kSizeMultiple));
  }
  return hw;
}

std::string device_description(const graph::BackendContext& backend) {
#ifdef VISION_HAS_CUDA
  if (backend.backend() == graph::Backend::cuda) return cuda::current_device_name();
#endif
  const int n = cpu::max_threads();
  return fmt::format("CPU, {} thread{}", n, n == 1 ? "" : "s");
}

// A random normalised image batch (uniform in [0, 1)) in the given format, on the backend.
core::Tensor random_images(graph::BackendContext& backend, const core::Shape& shape, const graph::Format& format,
                           std::mt19937& rng) {
  core::Tensor f32 = core::Tensor::zeros(shape);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float* p = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i) p[i] = u(rng);
  core::Tensor host = core::Tensor::zeros(shape, format.dtype, format.layout);
  graph::cpu_backend()->convert(host, f32);
  return backend.backend() == graph::Backend::cpu ? host : backend.upload(host);
}

void run_bench(const BenchOptions& o) {
  VISION_CHECK(o.model.empty() != o.scale.empty(),
               "bench: pass either --model FILE (a weights file) or --scale n|s|m|l|x (random initial weights)");
  VISION_CHECK(!o.batches.empty(), "bench: --batch needs at least one batch size");
  for (int64_t b : o.batches) VISION_CHECK(b > 0, "bench: batch sizes must be positive, got {}", b);
  const std::array<int64_t, 2> hw = parse_imgsz(o.imgsz);

  auto backend = graph::make_backend(graph::parse_device_choice(o.device));
  const bool on_cpu = backend->backend() == graph::Backend::cpu;
  const cpu::ThreadLimit threads(on_cpu ? o.threads : 0);
  graph::PlanOptions plan = yolo::default_plan_options(backend->backend());
  if (!o.dtype.empty()) {
    const core::DType asked = core::parse_dtype(o.dtype);
    VISION_CHECK(!on_cpu || asked == core::DType::f32,
                 "bench: the CPU backend computes in f32 only, --dtype {} cannot be benchmarked there: pass --dtype f32 "
                 "(or leave it out), or --device cuda on a machine with a GPU",
                 o.dtype);
    plan.compute_dtype = asked;
  }
  if (!o.layout.empty()) {
    VISION_CHECK(o.layout == "nchw" || o.layout == "nhwc", "bench: --layout takes nchw or nhwc, got '{}'", o.layout);
    plan.layout = o.layout == "nhwc" ? core::Layout::nhwc : core::Layout::nchw;
  }
  const graph::Format format{plan.compute_dtype, plan.layout};

  yolo::Yolo26Model::Options mo;
  mo.compute_dtype = plan.compute_dtype;
  mo.layout = plan.layout;
  mo.inference.input_format = format;  // the input arrives in the plan's format: no conversion is timed
  const core::SafetensorsFile weights =
      o.model.empty() ? yolo::initial_weights(yolo::default_model_info({.scale = yolo::parse_scale(o.scale), .nc = o.nc}))
                      : yolo::read_model_file(o.model);
  yolo::Yolo26Model model(weights, backend, mo);
  const yolo::ModelInfo& info = model.info();
  const std::string weights_name = o.model.empty() ? "random initial weights" : o.model;
  const std::string device_name = device_description(*backend);
  // An int8 model (vision export --int8) runs its convolutions in int8 in the CPU's NHWC plans.
  const bool int8 = on_cpu && !info.int8_absmax.empty() && format.layout == core::Layout::nhwc;
  const std::string fmt_name = graph::format_name(format) + (int8 ? " with int8 convolutions" : "");

  fmt::print("vision bench: YOLO26{} ({} classes, {}{}), {}x{} (H x W), {} on {} ({})\n",
             yolo::scale_name(info.spec.scale), info.spec.nc, weights_name, info.fused() ? ", exported" : "", hw[0],
             hw[1], fmt_name, graph::backend_name(backend->backend()), device_name);
  fmt::print("per call: a random normalised {} input {} -> detections [B, {}, 6] ready ({}{}); {}\n",
             graph::format_name(format),
             on_cpu ? "in host memory" : "on the device", mo.inference.postprocess.max_det,
             on_cpu ? "host clock" : "CUDA events, synchronised",
             on_cpu ? "" : ", CUDA-graph replay",
             o.iters > 0 ? fmt::format("{} timed calls per batch", o.iters)
                         : fmt::format("timed calls for about {:g} s per batch", o.seconds));
  fmt::print("\n{:>6} {:>11} {:>11} {:>11} {:>11} {:>7}\n", "batch", "median ms", "p90 ms", "min ms", "images/s",
             "calls");
  std::fflush(stdout);

  std::ofstream json;
  if (!o.json.empty()) {
    json.open(o.json, std::ios::trunc);
    VISION_CHECK(json.good(), "bench: cannot write --json file '{}'", o.json);
  }
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  for (int64_t batch : o.batches) {
    const core::Tensor images = random_images(*backend, core::Shape{batch, 3, hw[0], hw[1]}, format, rng);
    // At least two untimed calls: the first builds the plan (eager), the second captures the CUDA graph.
    std::vector<core::Tensor> out;
    for (int i = 0; i < std::max(o.warmup, 2); ++i) out = model.forward(images);
    backend->synchronize();
    const core::Shape want{batch, mo.inference.postprocess.max_det, 6};
    VISION_CHECK(!out.empty() && out[0].shape() == want, "bench: the model returned {}, expected detections {}",
                 out.empty() ? std::string("nothing") : out[0].str(), want.str());

    std::vector<double> ms;
    double total = 0;
    for (int i = 0; i < o.max_iters; ++i) {
      if (o.iters > 0 ? i >= o.iters : (i >= o.min_iters && total >= 1000.0 * o.seconds)) break;
      const auto from = backend->mark();
      out = model.forward(images);
      const auto to = backend->mark();
      ms.push_back(backend->elapsed_ms(from.get(), to.get()));  // waits for the detections
      total += ms.back();
    }
    const Stats s = stats_of(ms);
    graph::Plan& plan = model.executor().plan(graph::Mode::inference, {images.shape()});
    // What the plan cost to make (the warm-up calls): a first call's latency, which a benchmark's median hides.
    const graph::Plan::BuildTimes& built = plan.build_times();
    std::string choice;
#ifdef VISION_HAS_CUDA
    if (!on_cpu) {
      const ops::cuda_impl::AlgorithmChoiceTime c = ops::cuda_impl::algorithm_choice_time();
      choice = fmt::format("; cuDNN algorithm choice so far {:.1f} ms for {} geometries ({} read from the cache)", c.ms,
                           c.geometries, c.from_disk);
    }
#endif
    fmt::print(stderr, "bench: batch {}: plan made in {:.1f} ms, first run {:.1f} ms, graph captured in {:.1f} ms{}\n",
               batch, built.construct_ms, built.first_run_ms, built.capture_ms, choice);
    const bool replayed = plan.graph_replayed();
    const double img_s = static_cast<double>(batch) * 1000.0 / s.median;
    fmt::print("{:>6} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.1f} {:>7}\n", batch, s.median, s.p90, s.min, img_s,
               ms.size());
    std::fflush(stdout);
    if (json.is_open()) {
      const nlohmann::json row = {
          {"impl", "ours"},
          {"mode", on_cpu ? "plan" : "graph"},
          {"scale", std::string(yolo::scale_name(info.spec.scale))},
          {"nc", info.spec.nc},
          {"weights", weights_name},
          {"batch", batch},
          {"imgsz", {hw[0], hw[1]}},
          {"dtype", std::string(core::dtype_name(format.dtype))},
          {"layout", std::string(core::layout_name(format.layout))},
          {"int8", int8},
          {"device", on_cpu ? "cpu" : "cuda"},
          {"device_name", device_name},
          {"threads", on_cpu ? cpu::max_threads() : 0},
          {"median_ms", s.median},
          {"p90_ms", s.p90},
          {"min_ms", s.min},
          {"mean_ms", s.mean},
          {"img_s", img_s},
          {"iters", ms.size()},
          {"warmup", std::max(o.warmup, 2)},
          {"graph_replayed", replayed},
          {"plan_ms", built.construct_ms},
          {"first_run_ms", built.first_run_ms},
          {"capture_ms", built.capture_ms},
      };
      json << row.dump() << '\n';
      json.flush();
    }
    if (o.profile)  // each step run eagerly and timed apart (median of 10 runs): where the time goes
      fmt::print(stderr, "--- batch {}: per-op profile (eager steps, median of 10 runs)\n{}", batch,
                 graph::Plan::format_profile(plan.profile_forward({images}, 10), 30));
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time YOLO26 inference: a normalised input on the device to the [B, 300, 6] detections; latency (median, p90) "
      "and images/s per batch size");
  auto* model = cmd->add_option("--model", opts->model,
                                "the weights file (safetensors, or an ultralytics .pt checkpoint) to benchmark");
  auto* scale = cmd->add_option("--scale", opts->scale, "instead of --model: random initial weights at this scale")
                    ->check(CLI::IsMember({"n", "s", "m", "l", "x"}));
  model->excludes(scale);
  cmd->add_option("--nc", opts->nc, "number of classes (with --scale)")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opts->batches, "batch sizes, e.g. 1,32")->delimiter(',')->check(CLI::PositiveNumber);
  cmd->add_option("--imgsz", opts->imgsz, "image size: one side or H,W, multiples of 32 (default 640)");
  cmd->add_option("--device", opts->device, "auto (CUDA when a usable GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--dtype", opts->dtype, "compute dtype: f16, bf16 or f32 (default f16 on CUDA; the CPU: f32 only)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  cmd->add_option("--layout", opts->layout, "memory order of the activations: nchw or nhwc (default: the backend's)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_option("--threads", opts->threads, "CPU threads for the model (OpenMP and oneDNN; default 0: every core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--warmup", opts->warmup, "untimed calls per batch (at least 2: plan build, graph capture)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters", opts->iters, "timed calls per batch (default: as many as fit in --seconds)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seconds", opts->seconds, "time budget per batch when --iters is not given (at least 10 calls)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", opts->seed, "seed of the random input");
  cmd->add_option("--json", opts->json, "also write one JSON line per batch to this file (bench/model/run.sh)");
  cmd->add_flag("--profile", opts->profile,
                "after each batch, the plan's per-op profile on stderr: its 30 slowest steps and the time per op kind");
  cmd->callback([opts] { run_bench(*opts); });
}

}  // namespace vision::cli
