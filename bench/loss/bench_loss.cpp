// bench_loss — YOLO26's training loss through the graph engine: E2ELoss (the one-to-many and one-to-one task-aligned
// assigners, CIoU, BCE and L1 terms, the o2m/o2o-weighted total; models/yolo/loss.h) forward and its backward to both
// heads' outputs, f32, on a batch that peer.py --make-inputs wrote (by default YOLO26n's training shape: batch 64 of
// 640×640, 8400 anchors, 80 classes, 1–16 boxes per image). Prints one row; --json writes it as a JSON line for
// run.sh, which puts it next to peer.py's PyTorch reference of the same computation timed in the same run. See NOTES.md.
//
// Timed per call: forward_train (copying the four head outputs and the targets into the plan's arena) + backward (the
// gradients with respect to both heads' outputs, which grad probes make the plan compute). Training plans run eagerly
// (no CUDA-graph replay). CUDA events on the backend's stream around back-to-back calls (the host clock on the CPU); the
// median of --repeats measurements. --device cpu runs the same on the CPU backend (a smoke test of the CPU twins).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../tests/graph/grad_probe.h"
#include "../common/bench_util.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/loss.h"

using namespace vision;
using core::DType;
using core::Shape;
using core::Tensor;
namespace yolo = vision::models::yolo;

namespace {

constexpr const char* kHeads[2] = {"o2m", "o2o"};

struct LossBench {
  std::shared_ptr<graph::Graph> graph;
  yolo::E2ELossTensors loss;
  std::vector<Tensor> inputs;  // host, in the graph's input order
  int64_t boxes = 0;
};

// The graph over the file's tensors: head outputs (through grad probes), targets, count, weights, and 1-channel level
// maps that only give the anchor grid its size.
LossBench load(const std::string& path) {
  const core::SafetensorsFile f = core::read_safetensors(path);
  const int64_t h = std::stoll(f.metadata.at("image_h")), w = std::stoll(f.metadata.at("image_w"));
  LossBench b;
  b.graph = std::make_shared<graph::Graph>();
  graph::Graph& g = *b.graph;
  std::vector<graph::SymTensor> raw;
  for (const char* head : kHeads)
    for (const char* part : {"ltrb", "logits"}) {
      const std::string name = fmt::format("{}.{}", head, part);
      raw.push_back(g.input(name, f.at(name).shape()));
      b.inputs.push_back(f.at(name));
    }
  yolo::LossTargets t;
  t.targets = g.input("targets", f.at("targets").shape());
  t.count = g.input("count", f.at("count").shape(), DType::i32);
  graph::SymTensor weights = g.input("weights", f.at("weights").shape());
  for (const char* name : {"targets", "count", "weights"}) b.inputs.push_back(f.at(name));
  const int64_t batch = f.at("count").dim(0);
  std::mt19937 rng(1);
  for (size_t i = 0; i < 3; ++i) {
    const int64_t s = yolo::kernels::kDetectStrides[i];
    const Shape level{batch, 1, h / s, w / s};
    t.levels[i] = g.input(fmt::format("p{}", i + 3), level);
    b.inputs.push_back(bench::random_host(level, DType::f32, core::Layout::nchw, rng, 0.0f, 1.0f));
  }
  std::vector<graph::SymTensor> probed;
  for (size_t i = 0; i < raw.size(); ++i) probed.push_back(test::grad_probe(raw[i], fmt::format("probe{}", i)));
  b.loss = yolo::e2e_loss({probed[0], probed[1]}, {probed[2], probed[3]}, t, weights);
  const Tensor& count = f.at("count");
  for (int64_t i = 0; i < count.numel(); ++i) b.boxes += count.data<int32_t>()[i];
  return b;
}

int64_t positives(graph::BackendContext& backend, const graph::Plan& plan, const yolo::Yolo26LossTensors& head) {
  const Tensor fg = backend.download(plan.value(head.assignment.fg_mask.id()));
  int64_t n = 0;
  for (int64_t i = 0; i < fg.numel(); ++i) n += fg.data<uint8_t>()[i];
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bench_loss: YOLO26 E2ELoss + both assigners + backward through the graph engine (f32)");
  std::string inputs_path, json_path, device = "cuda";
  bench::TimingOptions timing{.warmup = 3, .repeats = 10, .target_ms = 50, .max_iters = 100};
  bool profile = false, deterministic = false;
  app.add_option("--inputs", inputs_path, "the batch (peer.py --make-inputs)")->required();
  app.add_option("--device", device, "cuda or cpu");
  app.add_option("--json", json_path, "write the row as a JSON line");
  app.add_option("--repeats", timing.repeats, "measurements (the median is reported)");
  app.add_option("--target-ms", timing.target_ms, "duration of one measurement (sets the calls per measurement)");
  app.add_flag("--profile", profile, "print the forward's time per step (eager, backend timestamps) to stderr");
  app.add_flag("--deterministic", deterministic, "a deterministic plan (the loss ops are deterministic anyway)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto backend = graph::make_backend(graph::parse_device_choice(device));
    LossBench b = load(inputs_path);
    std::vector<Tensor> inputs;
    for (const Tensor& t : b.inputs) inputs.push_back(backend->upload(t));
    graph::Executor ex(b.graph, backend, {.deterministic = deterministic});
    bench::Clock clock(*backend);
    const bench::Timing t = bench::measure(
        clock,
        [&] {
          ex.forward_train(inputs);
          ex.backward();
        },
        timing);
    const auto out = ex.forward_train(inputs);
    const float loss = backend->download(out.at(0)).to_vector().at(0);
    const auto components = backend->download(out.at(1)).to_vector();
    graph::Plan& plan = *ex.last_train_plan();
    const int64_t pos_m = positives(*backend, plan, b.loss.one_to_many);
    const int64_t pos_o = positives(*backend, plan, b.loss.one_to_one);
    if (profile) fmt::print(stderr, "{}", graph::Plan::format_profile(plan.profile_forward(inputs, 10), 30));
    const Shape& logits = b.inputs[1].shape();
    fmt::print("vision-cpp E2ELoss + both assigners + backward, batch {}, {} anchors, {} classes, {} boxes "
               "(positives: o2m {}, o2o {}), f32 on {}; loss {:.6f}\n",
               logits[0], logits[2], logits[1], b.boxes, pos_m, pos_o, backend_name(backend->backend()), loss);
    fmt::print("{:<8} {:>10} {:>10} {:>8}\n", "mode", "ms", "min ms", "iters");
    fmt::print("{:<8} {:>10.3f} {:>10.3f} {:>8}\n", "eager", t.median_ms, t.min_ms, t.iters);
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << fmt::format(R"({{"side": "ours", "mode": "eager", "device": "{}", "batch": {}, "anchors": {}, )"
                       R"("classes": {}, "boxes": {}, "positives": [{}, {}], "loss": {:.9g}, )"
                       R"("components": [{:.9g}, {:.9g}, {:.9g}], "us": {:.3f}, "min_us": {:.3f}}})",
                       device, logits[0], logits[2], logits[1], b.boxes, pos_m, pos_o, loss, components.at(0),
                       components.at(1), components.at(2), t.median_us(), t.min_us())
        << "\n";
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_loss: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
