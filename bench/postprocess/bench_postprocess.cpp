// bench_postprocess — YOLO26's end-to-end inference tail on the GPU: detect-decode (LTRB + anchor grid → xyxy boxes
// in pixels) then the end-to-end postprocess (sigmoid scores, top-k anchors, top-k (anchor, class) pairs, conf
// filter → [B, 300, 6] + count), through the graph engine with CUDA-graph replay, in f16 (the head's dtype in an f16
// plan). Prints one table row per batch; --json writes JSON lines for run.sh, which puts them next to peer.py's
// PyTorch implementation of the same (topk / gather) timed in the same run. See NOTES.md.
//
// Each call includes copying the inputs (LTRB [B, 4, A], logits [B, nc, A] f16, and three 1-channel level maps that
// only give the decode its sizes) into the plan's arena; peer.py's CUDA-graph rows copy theirs into static inputs too.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../common/bench_util.h"
#include "vision/core/dtype.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/postprocess.h"

using namespace vision;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
namespace yk = vision::models::yolo::kernels;

namespace {

Tensor random_f16(const Shape& shape, float lo, float hi, std::mt19937& rng, Layout layout = Layout::nchw) {
  return bench::random_host(shape, DType::f16, layout, rng, lo, hi);
}

struct Row {
  int64_t batch;
  double us, min_us;
  int iters;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bench_postprocess: decode + end-to-end postprocess (f16, CUDA-graph replay)");
  std::string json_path, batches_s = "1,32";
  int64_t size = 640, nc = 80, max_det = 300;
  bench::TimingOptions timing{.warmup = 3, .repeats = 15, .target_ms = 10, .max_iters = 1000};
  float conf = 0.25f;
  app.add_option("--json", json_path, "write the rows as JSON lines");
  app.add_option("--batches", batches_s, "comma-separated batch sizes");
  app.add_option("--size", size, "input size in pixels (a multiple of 32)");
  app.add_option("--classes", nc, "number of classes");
  app.add_option("--max-det", max_det, "detections per image");
  app.add_option("--conf", conf, "confidence threshold");
  app.add_option("--repeats", timing.repeats, "measurements (the median is reported)");
  app.add_option("--target-ms", timing.target_ms, "duration of one measurement (sets the calls per measurement)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto backend = graph::cuda_backend();
    bench::Clock clock(*backend);
    const int64_t anchors = yk::detect_anchor_count(size, size);
    std::vector<Row> rows;
    std::mt19937 rng(1);
    size_t start = 0;
    while (start < batches_s.size()) {
      const size_t comma = std::min(batches_s.find(',', start), batches_s.size());
      const int64_t b = std::stoll(batches_s.substr(start, comma - start));
      start = comma + 1;
      auto g = std::make_shared<graph::Graph>();
      auto ltrb = g->input("ltrb", Shape{b, 4, anchors}, DType::f16);
      auto logits = g->input("logits", Shape{b, nc, anchors}, DType::f16);
      std::vector<graph::SymTensor> levels;
      for (int64_t s : yk::kDetectStrides)
        levels.push_back(g->input(fmt::format("p{}", s), Shape{b, 1, size / s, size / s}, DType::f16, Layout::nhwc));
      auto boxes = yk::detect_decode(ltrb, levels[0], levels[1], levels[2], yk::DecodeMode::pixels);
      yk::PostprocessOptions options;
      options.max_det = max_det;
      options.conf = conf;
      auto det = yk::postprocess_e2e(boxes, logits, options);
      g->mark_output(det.detections);
      g->mark_output(det.count);
      graph::Executor ex(g, backend, graph::PlanOptions{.compute_dtype = DType::f16, .layout = Layout::nhwc});
      std::vector<Tensor> inputs = {backend->upload(random_f16(Shape{b, 4, anchors}, 0.0f, 6.0f, rng)),
                                    backend->upload(random_f16(Shape{b, nc, anchors}, -9.0f, 3.0f, rng))};
      for (int64_t s : yk::kDetectStrides)
        inputs.push_back(backend->upload(random_f16(Shape{b, 1, size / s, size / s}, 0.0f, 1.0f, rng, Layout::nhwc)));
      // Warm-up: eager, capture, then replays.
      const bench::Timing t = bench::measure(clock, [&] { ex.forward(inputs); }, timing);
      rows.push_back({b, t.median_us(), t.min_us(), t.iters});
      const graph::Plan& plan = ex.plan(graph::Mode::inference, {inputs[0].shape(), inputs[1].shape(),
                                                                inputs[2].shape(), inputs[3].shape(),
                                                                inputs[4].shape()});
      if (!plan.graph_replayed()) fmt::print(stderr, "warning: batch {}: the plan was not replayed\n", b);
    }
    fmt::print("vision-cpp decode + end-to-end postprocess, {}x{} ({} anchors), {} classes, max_det {}, f16 inputs, "
               "CUDA-graph replay; median of {} measurements, per call\n",
               size, size, anchors, nc, max_det, timing.repeats);
    fmt::print("{:<8} {:>10} {:>10}\n", "batch", "us", "min us");
    for (const Row& r : rows) fmt::print("{:<8} {:>10.1f} {:>10.1f}\n", r.batch, r.us, r.min_us);
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      for (const Row& r : rows)
        out << fmt::format(R"({{"side": "ours", "batch": {}, "us": {:.3f}, "min_us": {:.3f}}})", r.batch, r.us,
                           r.min_us)
            << "\n";
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_postprocess: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
