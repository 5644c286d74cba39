// bench_batchnorm: every BatchNorm → SiLU of a YOLO26 training step (the shapes its training graph gives at a batch
// and image size), through our kernels' launch helpers: the fused forward (statistics pass, then one pass that
// normalises and applies SiLU) and the fused backward (sums through SiLU, then dx), beside the same work unfused
// (BatchNorm, then SiLU as its own kernels), in GB/s and as a fraction of the GPU's measured device-to-device copy
// bandwidth. bn_peer.py times PyTorch's BatchNorm2d + SiLU on the same shapes and prints the merged table.
//
//   bench_batchnorm [--scale n] [--batch 64] [--imgsz 640] [--dtype bf16] [--layout nhwc] [--json FILE] [--list]
//                   [--eager] [--sweep GRIDS]
//
// Each figure is the work as a captured training step runs it: the calls captured once into a CUDA graph and replayed
// (--eager: launched one by one, which adds the host's launch cost to the small shapes). --sweep times the fused
// forward and backward under other grids (kernels::BatchNormGrid), e.g. --sweep 1024x8/1024x8,256x8+100/1024x8: each
// REDUCE_BLOCKS x REDUCE_MIN_UNITS [+ REDUCE_MIN_BLOCKS] / APPLY_BLOCKS x APPLY_MIN_UNITS, one column per grid and
// shape.
//
// Bytes counted: forward 3 passes' worth (x read twice, the output written once), backward 5 (x and dz read twice,
// dx written once); the unfused forward adds y written and read again (2 more), its backward dy written and read
// twice (3 more). The per-channel finalize kernels are inside every timing.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "../common/bench_util.h"
#include "vision/core/dtype.h"
#include "vision/cuda/memory.h"
#include "vision/graph/graph.h"
#include "vision/graph/plan.h"
#include "vision/models/yolo/model_info.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/ops/kernels/batchnorm_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"

using namespace vision;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
namespace kn = vision::ops::kernels;

namespace {

// The input shapes of the training graph's BatchNorms, with how many share each, in graph order.
std::vector<std::pair<Shape, int>> batchnorm_shapes(const std::string& scale, int64_t batch, int64_t imgsz) {
  const models::yolo::ModelInfo info =
      models::yolo::default_model_info({.scale = models::yolo::parse_scale(scale), .nc = 80});
  graph::Graph g;
  const graph::SymTensor images = g.input("images", Shape{batch, 3, imgsz, imgsz});
  const models::yolo::Yolo26Outputs out = models::yolo::record_yolo26_training(images, info.spec);
  for (const graph::SymTensor& f : out.features) g.mark_output(f);
  const std::vector<Shape> shapes = graph::bind_shapes(g, {Shape{batch, 3, imgsz, imgsz}});
  std::vector<std::pair<Shape, int>> found;
  for (const graph::Node& n : g.nodes()) {
    if (n.op->name() != "ops.batchnorm2d") continue;
    const Shape& s = shapes.at(static_cast<size_t>(n.inputs.at(0)));
    auto it = std::find_if(found.begin(), found.end(), [&](const auto& p) { return p.first == s; });
    if (it == found.end())
      found.emplace_back(s, 1);
    else
      ++it->second;
  }
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("BatchNorm → SiLU kernels on a YOLO26 training step's shapes");
  std::string scale = "n", dtype_name = "bf16", layout_name = "nhwc", json_path;
  int64_t batch = 64, imgsz = 640;
  app.add_option("--scale", scale);
  app.add_option("--batch", batch);
  app.add_option("--imgsz", imgsz);
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--layout", layout_name)->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("--json", json_path);
  bool list = false, eager = false;
  std::string sweep;
  app.add_flag("--list", list, "print the shapes and how many BatchNorms share each, and stop (no GPU needed)");
  app.add_flag("--eager", eager, "launch the calls one by one instead of replaying them as a captured graph");
  app.add_option("--sweep", sweep,
                 "time the fused passes under these grids instead: RB x RU / AB x AU, comma-separated (reduction "
                 "passes' target blocks and fewest units a thread, the same for the element-wise passes)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<kn::BatchNormGrid> grids;
    for (const std::string& g : bench::split_list(sweep)) {
      kn::BatchNormGrid b;
      b.min_blocks = 0;
      char x1 = 0, sep = 0, x2 = 0;
      std::istringstream in(g);
      in >> b.target_blocks >> x1 >> b.min_units_per_thread >> sep;
      if (sep == '+') in >> b.min_blocks >> sep;
      in >> b.apply_target_blocks >> x2 >> b.apply_min_units_per_thread;
      if (!in || x1 != 'x' || sep != '/' || x2 != 'x' || !in.eof())
        throw std::runtime_error(
            fmt::format("--sweep: '{}' is not REDUCE_BLOCKSxUNITS[+MIN_BLOCKS]/APPLY_BLOCKSxUNITS", g));
      grids.push_back(b);
    }
    if (list) {
      for (const auto& [shape, count] : batchnorm_shapes(scale, batch, imgsz)) fmt::print("{} x{}\n", shape.str(), count);
      return 0;
    }
    const DType dtype = core::parse_dtype(dtype_name);
    const Layout layout = layout_name == "nhwc" ? Layout::nhwc : Layout::nchw;
    auto backend = graph::make_backend(graph::parse_device_choice("cuda"));
    const cudaStream_t stream = graph::CudaBackendContext::of(backend.get()).stream();
    bench::Clock clock(*backend);
    const bench::TimingOptions topt{.warmup = 3, .repeats = 11, .target_ms = 10, .max_iters = 100};

    // The copy bandwidth: a 1 GiB device-to-device copy, read + write bytes per second.
    double copy_gbs = 0;
    {
      const size_t bytes = size_t(1) << 30;
      auto a = cuda::device_alloc(bytes), b = cuda::device_alloc(bytes);
      VISION_CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, stream));
      const bench::Timing t = bench::measure(
          clock, [&] { VISION_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream)); },
          {.warmup = 2, .repeats = 9, .target_ms = 20, .max_iters = 20});
      copy_gbs = 2.0 * bytes / (t.median_ms * 1e6);
    }
    auto time = [&](const std::function<void()>& f) {
      return eager ? bench::measure(clock, f, topt) : bench::measure_graph(clock, stream, f, topt);
    };
    const auto shapes = batchnorm_shapes(scale, batch, imgsz);
    fmt::print("BatchNorm → SiLU of YOLO26{} training (batch {}, {}x{}), {} {}, on {}, {}; device copy {:.0f} GB/s "
               "(read + write)\n",
               scale, batch, imgsz, imgsz, dtype_name, layout_name, bench::device_name(*backend),
               eager ? "launched one by one" : "replayed as a captured graph", copy_gbs);
    if (grids.empty()) {
      fmt::print("{:<20} {:>3} {:>9} {:>7} {:>6} {:>9} {:>7} {:>6} {:>10} {:>10}\n", "shape (NCHW)", "n", "fwd us",
                 "GB/s", "copy%", "bwd us", "GB/s", "copy%", "unf fwd us", "unf bwd us");
    } else {
      fmt::print("{:<20} {:>3}", "shape (NCHW)", "n");
      for (const std::string& g : bench::split_list(sweep)) fmt::print(" {:>21}", g + " f+b");
      fmt::print("\n");
    }
    std::vector<double> sweep_totals(grids.size(), 0.0);
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path);
    std::mt19937 rng(1);
    double total_fused = 0, total_unfused = 0, total_bytes = 0;
    double worst_fwd = 1e30, worst_bwd = 1e30;
    for (const auto& [shape, count] : shapes) {
      const int64_t c = shape[1];
      const double n = static_cast<double>(shape.numel()), e = static_cast<double>(core::dtype_size(dtype));
      auto dev = [&](DType t, const Shape& s, float lo, float hi) {
        return backend->upload(bench::random_host(s, t, layout, rng, lo, hi));
      };
      const Tensor x = dev(dtype, shape, -2.0f, 3.0f), dz = dev(dtype, shape, -1.0f, 1.0f);
      Tensor z = dev(dtype, shape, 0, 0), y = dev(dtype, shape, 0, 0), dy = dev(dtype, shape, 0, 0),
             dx = dev(dtype, shape, 0, 0);
      const Tensor gamma = dev(DType::f32, Shape{c}, 0.5f, 1.5f), beta = dev(DType::f32, Shape{c}, -0.1f, 0.1f);
      Tensor rm = dev(DType::f32, Shape{c}, -0.1f, 0.1f), rv = dev(DType::f32, Shape{c}, 0.5f, 1.5f);
      Tensor mean = dev(DType::f32, Shape{c}, 0, 0), invstd = dev(DType::f32, Shape{c}, 0, 0);
      Tensor dg = dev(DType::f32, Shape{c}, 0, 0), db = dev(DType::f32, Shape{c}, 0, 0);
      size_t ws_bytes = kn::batchnorm_workspace_bytes(shape, layout);
      for (const kn::BatchNormGrid& g : grids) ws_bytes = std::max(ws_bytes, kn::batchnorm_workspace_bytes(shape, layout, g));
      auto ws = cuda::device_alloc(ws_bytes);
      auto f = [](const Tensor& t) { return static_cast<float*>(t.raw()); };
      auto forward = [&](bool silu, void* out, const kn::BatchNormGrid& g = {}) {
        kn::launch_batchnorm_forward_training(stream, dtype, layout, shape, x.raw(), out, f(gamma), f(beta), f(rm),
                                              f(rv), f(mean), f(invstd), ws.get(), 0.03f, 1e-3f, silu, g);
      };
      auto backward = [&](bool silu, const void* grad, const kn::BatchNormGrid& g = {}) {
        kn::launch_batchnorm_backward(stream, dtype, layout, shape, x.raw(), grad, dx.raw(), f(gamma), f(beta),
                                      f(mean), f(invstd), f(dg), f(db), ws.get(), silu, g);
      };
      if (!grids.empty()) {
        fmt::print("{:<20} {:>3}", shape.str(), count);
        for (size_t i = 0; i < grids.size(); ++i) {
          const bench::Timing gf = time([&] { forward(true, z.raw(), grids[i]); });
          const bench::Timing gb = time([&] { backward(true, dz.raw(), grids[i]); });
          sweep_totals[i] += count * (gf.median_ms + gb.median_ms);
          fmt::print(" {:>10.1f} {:>10.1f}", gf.median_us(), gb.median_us());
        }
        fmt::print("\n");
        std::fflush(stdout);
        continue;
      }
      const bench::Timing fwd = time([&] { forward(true, z.raw()); });
      const bench::Timing bwd = time([&] { backward(true, dz.raw()); });
      const bench::Timing unf_fwd = time([&] {
        forward(false, y.raw());
        kn::launch_silu_forward(stream, dtype, y.raw(), z.raw(), shape.numel());
      });
      const bench::Timing unf_bwd = time([&] {
        kn::launch_silu_backward(stream, dtype, y.raw(), dz.raw(), dy.raw(), shape.numel());
        backward(false, dy.raw());
      });
      const double fwd_gbs = 3 * n * e / (fwd.median_ms * 1e6), bwd_gbs = 5 * n * e / (bwd.median_ms * 1e6);
      worst_fwd = std::min(worst_fwd, fwd_gbs / copy_gbs), worst_bwd = std::min(worst_bwd, bwd_gbs / copy_gbs);
      total_fused += count * (fwd.median_ms + bwd.median_ms);
      total_unfused += count * (unf_fwd.median_ms + unf_bwd.median_ms);
      total_bytes += count * 8 * n * e;
      fmt::print("{:<20} {:>3} {:>9.1f} {:>7.0f} {:>5.0f}% {:>9.1f} {:>7.0f} {:>5.0f}% {:>10.1f} {:>10.1f}\n",
                 shape.str(), count, fwd.median_us(), fwd_gbs, 100 * fwd_gbs / copy_gbs, bwd.median_us(), bwd_gbs,
                 100 * bwd_gbs / copy_gbs, unf_fwd.median_us(), unf_bwd.median_us());
      std::fflush(stdout);
      if (json)
        json << fmt::format(
            "{{\"side\": \"ours\", \"shape\": [{}, {}, {}, {}], \"count\": {}, \"dtype\": \"{}\", \"layout\": \"{}\", "
            "\"fwd_us\": {:.3f}, \"bwd_us\": {:.3f}, \"unfused_fwd_us\": {:.3f}, \"unfused_bwd_us\": {:.3f}, "
            "\"copy_gbs\": {:.1f}, \"captured\": {}}}\n",
            shape[0], shape[1], shape[2], shape[3], count, dtype_name, layout_name, fwd.median_us(), bwd.median_us(),
            unf_fwd.median_us(), unf_bwd.median_us(), copy_gbs, !eager);
    }
    if (!grids.empty()) {
      fmt::print("{:<24}", "one step (ms)");
      for (double t : sweep_totals) fmt::print(" {:>21.2f}", t);
      fmt::print("\n");
      return 0;
    }
    fmt::print("one step's BatchNorm → SiLU: fused {:.2f} ms ({:.0f} GB/s, {:.0f}% of copy), unfused {:.2f} ms; the "
               "slowest shape at {:.0f}% (forward) and {:.0f}% (backward) of copy\n",
               total_fused, total_bytes / (total_fused * 1e6), 100 * total_bytes / (total_fused * 1e6) / copy_gbs,
               total_unfused, 100 * worst_fwd, 100 * worst_bwd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_batchnorm: %s\n", e.what());
    return 1;
  }
  return 0;
}
