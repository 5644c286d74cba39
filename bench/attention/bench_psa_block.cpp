// bench_psa_block — YOLO26's PSA Attention block (models::yolo::blocks::attention: qkv Conv+BN → PsaPackQkv →
// FlashAttn2PsaOp → PsaMergeAttn, PsaExtractV → depthwise pe Conv+BN → add → proj Conv+BN) through the graph engine,
// inference in f16 NHWC (BatchNorm folded by the plan, the plan replayed as a CUDA graph), in both PSA forms, at
// YOLO26n (dim 128, 2 heads) and YOLO26s (dim 256, 4 heads) widths, 20×20 and 40×40 feature maps (N = 400, 1600:
// 640² and 1280² inputs), batch 1 and 32. Prints one table; --json writes the same rows as JSON lines for
// bench/attention/run_psa.sh, which puts them next to PyTorch's (psa_peer.py builds the same block). See NOTES.md,
// "PSA block".
//
// The graph input is declared f16 NHWC and the output is marked f16 NHWC, so the plan has no conversion step: what
// is timed is the block (each row reports the plan's conversion steps; there should be none on CUDA).
//
// Timing (as bench/graph): warm-up calls (the 1st runs eagerly, the 2nd captures the plan into a CUDA graph, later
// ones replay it), one timed call picks `iters` so that a measurement takes about --target-ms, then --repeats
// measurements of `iters` back-to-back executor.forward calls with CUDA events on the backend's stream around each;
// the row reports the median (and the minimum) per call. Every call includes the copy of the input into the plan's
// arena (psa_peer.py's CUDA-graph peers copy their input into the static input the same way).
//
// --breakdown also times prefixes of the block (its first steps only, their last values as the graph outputs, in
// f16): qkv; + pack; + attention; + merge; + extract_v and pe; the differences estimate each step's share.
//
// FLOPs per forward (the table's TFLOP/s; psa_peer.py counts the same): 2·B·N·(dim·2dim + 9·dim + dim·dim) for the
// three convolutions, + 2·B·heads·N²·(key_dim + 2·key_dim) for QKᵀ and PV. BatchNorm, softmax, the add not counted.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
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
#include "vision/models/yolo/blocks/attention.h"
#include "vision/models/yolo/blocks/conv.h"
#include "vision/models/yolo/kernels/attention/psa.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"

using namespace vision;
using namespace vision::bench;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
using graph::SymTensor;
namespace psa = models::yolo::kernels::attention;
using psa::PsaForm;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Shapes and rows.

struct Scale {
  std::string name;  // "n", "s"
  int64_t dim, heads;
  int64_t key_dim() const { return dim / heads / 2; }
};

std::optional<Scale> parse_scale(const std::string& s) {
  if (s == "n") return Scale{"n", 128, 2};  // YOLO26n: C2PSA / C3k2(attn) at 256 channels · e 0.5, heads 128 / 64
  if (s == "s") return Scale{"s", 256, 4};  // YOLO26s
  return std::nullopt;
}

// Our variants: the two PSA forms as separate pack → attention → merge ops, and the one-pass form fused into one
// PsaAttentionOp step (its attention kernel reads qkv and writes the merged image; the library's default).
struct Variant {
  PsaForm form;
  bool fused;
  const char* name() const { return fused ? "fused" : form == PsaForm::two_pass ? "two_pass" : "one_pass"; }
};
std::optional<Variant> parse_variant(std::string_view s) {
  if (s == "two_pass") return Variant{PsaForm::two_pass, false};
  if (s == "one_pass") return Variant{PsaForm::one_pass, false};
  if (s == "fused") return Variant{PsaForm::one_pass, true};
  return std::nullopt;
}

struct RowSpec {
  Scale scale;
  int64_t side;  // H = W
  int64_t batch;
  Variant variant;
  int64_t n() const { return side * side; }
  // The shape key both sides use ("n_N400_b32"); the variant is the row's variant.
  std::string key() const { return fmt::format("{}_N{}_b{}", scale.name, n(), batch); }
  std::string full_key() const { return key() + "_" + variant.name(); }
  Shape input_shape() const { return Shape{batch, scale.dim, side, side}; }
  double flops() const {
    const double b = double(batch), n = double(this->n()), d = double(scale.dim);
    const double convs = 2.0 * b * n * (d * 2 * d + 9 * d + d * d);
    const double attn = 2.0 * b * double(scale.heads) * n * n * double(3 * scale.key_dim());
    return convs + attn;
  }
};

// The prefixes --breakdown times, in order; "full" is the row itself.
const std::vector<std::string>& stages() {
  static const std::vector<std::string> s = {"qkv", "pack", "attention", "merge", "pe"};
  return s;
}

struct RowResult {
  RowSpec spec;
  std::optional<Timing> timing;
  std::string error;
  bool graph_replayed = false, finite = true;
  size_t plan_steps = 0, conversions = 0, arena_bytes = 0;
  std::vector<std::pair<std::string, double>> breakdown;  // stage → cumulative median µs (prefix graphs)
  std::string breakdown_error;
};

// ---------------------------------------------------------------------------------------------------------------
// Graphs.

constexpr DType kDtype = DType::f16;
constexpr Layout kLayout = Layout::nhwc;

graph::OutputUse f16_nhwc_output() {
  return graph::OutputUse{
      .inference = true, .train = false, .seed_gradient = false, .format = graph::Format{kDtype, kLayout}};
}

models::yolo::blocks::AttentionConfig config_of(const RowSpec& s) {
  return {.dim = s.scale.dim, .heads = s.scale.heads, .form = s.variant.form, .fused = s.variant.fused};
}

// x [B, dim, side, side] f16 NHWC → the block (the library's) → y, an f16 NHWC inference output.
std::shared_ptr<graph::Graph> block_graph(const RowSpec& s) {
  auto g = std::make_shared<graph::Graph>();
  SymTensor x = g->input("x", s.input_shape(), kDtype, kLayout);
  g->mark_output(models::yolo::blocks::attention(x, config_of(s), "attn"), f16_nhwc_output());
  return g;
}

// Conv2d (no bias) → BatchNorm, no activation, under scope `name`: the Conv block blocks::attention records (the
// same node names, so the plan fuses the same way).
SymTensor conv_bn(SymTensor x, int64_t c2, int64_t k, int64_t groups, const std::string& name) {
  return models::yolo::blocks::conv(x, {.c2 = c2, .k = k, .g = groups, .act = false},
                                    models::yolo::blocks::ConvNorm::batchnorm, name);
}

// The block's first steps, as blocks::attention records them, up to `stage` (one of stages()); the values the last
// step produced are the graph outputs (f16; rank-4 ones NHWC).
std::shared_ptr<graph::Graph> prefix_graph(const RowSpec& s, const std::string& stage) {
  auto g = std::make_shared<graph::Graph>();
  SymTensor x = g->input("x", s.input_shape(), kDtype, kLayout);
  const psa::PsaConfig cfg = config_of(s).psa();
  std::vector<SymTensor> out;
  {
    auto _ = g->scope("attn");
    SymTensor qkv = conv_bn(x, cfg.qkv_channels(), 1, 1, "qkv");
    out = {qkv};
    if (stage != "qkv") {
      auto packed = psa::psa_pack_qkv(qkv, cfg, "pack");
      out = packed;
      if (stage != "pack") {
        auto attn = psa::flash_attention2_psa(packed, cfg, "attention");
        out = attn;
        if (stage != "attention") {
          SymTensor merged = psa::psa_merge_attn(attn, cfg, s.side, s.side, "merge");
          out = {merged};
          if (stage != "merge") {
            VISION_CHECK(stage == "pe", "unknown stage '{}'", stage);
            SymTensor v = psa::psa_extract_v(qkv, cfg, "extract_v");
            out = {merged, conv_bn(v, s.scale.dim, 3, s.scale.dim, "pe")};
          }
        }
      }
    }
  }
  for (const SymTensor& t : out) g->mark_output(t, f16_nhwc_output());
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// One row.

struct Context {
  std::shared_ptr<graph::BackendContext> backend;
  TimingOptions timing{.warmup = 3, .repeats = 15, .target_ms = 10, .max_iters = 1000};
  bool describe = false, breakdown = false, profile = false;
  uint64_t seed = 1;
};

graph::PlanOptions plan_options() {
  return graph::PlanOptions{.deterministic = false, .compute_dtype = kDtype, .layout = kLayout};
}

struct Timed {
  Timing timing;
  bool graph_replayed = false, finite = true;
  size_t plan_steps = 0, conversions = 0, arena_bytes = 0;
  std::string described, profile;
};

// A fresh executor of g with random BatchNorm state, timed on a random f16 NHWC input.
Timed time_graph(const Context& cx, std::shared_ptr<graph::Graph> g, const Shape& shape, bool check_finite) {
  std::mt19937 rng(static_cast<uint32_t>(cx.seed));
  graph::Executor ex(std::move(g), cx.backend, plan_options());
  randomize_batchnorm(ex.state(graph::Mode::inference, {shape}), rng);
  const Tensor x = cx.backend->upload(random_host(shape, kDtype, kLayout, rng, -1.f, 1.f));
  graph::Plan& plan = ex.plan(graph::Mode::inference, {shape});
  Timed t;
  t.plan_steps = plan.steps().size();
  t.conversions = plan.conversion_steps();
  t.arena_bytes = plan.arena_bytes();
  if (cx.describe) t.described = plan.describe();
  Clock clock(*cx.backend);
  std::vector<Tensor> out;
  t.timing = measure(
      clock, [&] { out = ex.forward({x}); }, cx.timing);
  t.graph_replayed = plan.graph_replayed();
  if (cx.profile) t.profile = graph::Plan::format_profile(plan.profile_forward({x}, 10));
  if (check_finite)
    for (const Tensor& o : out) t.finite = t.finite && all_finite(cx.backend->download(o));
  return t;
}

RowResult run_row(const Context& cx, const RowSpec& spec) {
  RowResult r;
  r.spec = spec;
  try {
    Timed t = time_graph(cx, block_graph(spec), spec.input_shape(), true);
    if (cx.describe) std::fprintf(stderr, "--- %s\n%s", spec.full_key().c_str(), t.described.c_str());
    if (cx.profile) std::fprintf(stderr, "--- profile %s\n%s", spec.full_key().c_str(), t.profile.c_str());
    r.timing = t.timing;
    r.graph_replayed = t.graph_replayed;
    r.finite = t.finite;
    r.plan_steps = t.plan_steps;
    r.conversions = t.conversions;
    r.arena_bytes = t.arena_bytes;
  } catch (const std::exception& e) {
    r.error = e.what();
    r.timing.reset();
    try {
      cx.backend->synchronize();
    } catch (...) {
    }
    return r;
  }
  if (cx.breakdown && !spec.variant.fused) {  // the prefixes are of the three separate ops
    try {
      for (const std::string& stage : stages())
        r.breakdown.emplace_back(stage,
                                 time_graph(cx, prefix_graph(spec, stage), spec.input_shape(), false).timing.median_us());
    } catch (const std::exception& e) {
      r.breakdown_error = e.what();
      r.breakdown.clear();
      try {
        cx.backend->synchronize();
      } catch (...) {
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// The cross-check dump: the state (after the BatchNorm randomisation), an input and our inference output, as f32
// NCHW tensors; psa_peer.py --check-against loads the state into its torch block and compares (NOTES.md).
void write_check(const Context& cx, const RowSpec& spec, const std::string& path) {
  std::mt19937 rng(static_cast<uint32_t>(cx.seed));
  const Shape shape = spec.input_shape();
  graph::Executor ex(block_graph(spec), cx.backend, plan_options());
  graph::StateStore& state = ex.state(graph::Mode::inference, {shape});
  randomize_batchnorm(state, rng);
  const Tensor host_x = random_host(shape, kDtype, kLayout, rng, -1.f, 1.f);
  const Tensor x = cx.backend->upload(host_x);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [key, t] : state.to_host()) tensors.emplace_back(key, t);
  tensors.emplace_back("check.input", to_f32_nchw(host_x));
  // Three runs: eager, captured, replayed; the replayed output is the one compared.
  Tensor y;
  for (int run = 0; run < 3; ++run) y = ex.forward({x}).at(0);
  tensors.emplace_back("check.output", to_f32_nchw(cx.backend->download(y)));
  const graph::Plan& plan = ex.plan(graph::Mode::inference, {shape});
  core::write_safetensors(path, tensors,
                          {{"format", "f16_nhwc"},
                           {"scale", spec.scale.name},
                           {"dim", std::to_string(spec.scale.dim)},
                           {"heads", std::to_string(spec.scale.heads)},
                           {"form", spec.variant.name()},
                           {"side", std::to_string(spec.side)},
                           {"batch", std::to_string(spec.batch)},
                           {"graph_replayed", plan.graph_replayed() ? "true" : "false"},
                           {"device", std::string(graph::backend_name(cx.backend->backend()))}});
}


double tflops(double flops, double us) { return us > 0 ? flops / us * 1e-6 : 0.0; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"YOLO26's PSA Attention block through the graph engine: f16 NHWC inference, CUDA-graph replay"};
  std::string json_path, only, device = "cuda", check_path;
  std::string scales_s = "n,s", sides_s = "20,40", batches_s = "1,32", forms_s = "two_pass,one_pass,fused";
  int64_t check_batch = 2;
  Context cx;
  app.add_option("--json", json_path, "write the rows as JSON lines (a meta line first) for run_psa.sh");
  app.add_option("--only", only, "run only the rows whose key contains this text (e.g. n_N400, _b32, one_pass)");
  app.add_option("--device", device, "cuda (the benchmark) or cpu (a smoke test of the program's logic)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--scales", scales_s, "comma-separated: n (dim 128, 2 heads), s (dim 256, 4 heads)");
  app.add_option("--sides", sides_s,
                 "comma-separated feature-map sides H = W (20: N 400 at 640², 40: N 1600 at 1280²)");
  app.add_option("--batches", batches_s, "comma-separated batch sizes");
  app.add_option("--forms", forms_s,
                 "comma-separated variants: two_pass, one_pass (pack → attention → merge as three ops), fused (one "
                 "PsaAttentionOp step, one_pass)");
  app.add_option("--repeats", cx.timing.repeats, "timed measurements per row (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--warmup", cx.timing.warmup, "untimed calls first (at least 2: the 2nd captures the CUDA graph)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--target-ms", cx.timing.target_ms, "duration of one measurement (sets the calls per measurement)");
  app.add_option("--max-iters", cx.timing.max_iters, "most calls per measurement")->check(CLI::Range(1, 100000));
  app.add_option("--seed", cx.seed, "seed of the random input and BatchNorm state");
  app.add_flag("--profile", cx.profile,
               "print where each row's forward time goes (steps run eagerly, timed one by one) to stderr");
  app.add_flag("--describe", cx.describe, "print each row's plan (steps after fusion, their formats) to stderr");
  app.add_flag("--breakdown", cx.breakdown,
               "also time prefixes of the block (qkv, +pack, +attention, +merge, +extract_v/pe) for a per-step "
               "estimate");
  app.add_option("--check-dump", check_path,
                 "instead of timing: write the state, an input and our output for psa_peer.py --check-against (first "
                 "of --scales, --sides, --forms; batch --check-batch)");
  app.add_option("--check-batch", check_batch, "batch of the --check-dump input")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    cx.backend = graph::make_backend(graph::parse_device_choice(device));
    std::vector<Scale> scales;
    for (const auto& s : split_list(scales_s)) {
      auto sc = parse_scale(s);
      VISION_CHECK(sc.has_value(), "unknown scale '{}' (n or s)", s);
      scales.push_back(*sc);
    }
    std::vector<int64_t> sides, batches;
    for (const auto& s : split_list(sides_s)) sides.push_back(std::stoll(s));
    for (const auto& b : split_list(batches_s)) batches.push_back(std::stoll(b));
    std::vector<Variant> forms;
    for (const auto& f : split_list(forms_s)) {
      const auto v = parse_variant(f);
      VISION_CHECK(v.has_value(), "unknown form '{}' (two_pass, one_pass or fused)", f);
      forms.push_back(*v);
    }
    VISION_CHECK(!scales.empty() && !sides.empty() && !batches.empty() && !forms.empty(),
                 "empty --scales, --sides, --batches or --forms");
    for (int64_t s : sides) VISION_CHECK(s > 0, "--sides must be positive, got {}", s);
    for (int64_t b : batches) VISION_CHECK(b > 0, "--batches must be positive, got {}", b);

    if (!check_path.empty()) {
      const RowSpec spec{scales.front(), sides.front(), check_batch, forms.front()};
      write_check(cx, spec, check_path);
      std::printf("bench_psa_block: wrote %s (%s, f16 NHWC, batch %lld)\n", check_path.c_str(), spec.full_key().c_str(),
                  static_cast<long long>(check_batch));
      return 0;
    }

    std::vector<RowSpec> specs;
    for (const Scale& sc : scales)
      for (int64_t side : sides)
        for (int64_t b : batches)
          for (const Variant& f : forms) {
            RowSpec s{sc, side, b, f};
            if (!only.empty() && s.full_key().find(only) == std::string::npos) continue;
            specs.push_back(s);
          }

    const std::string device_name = bench::device_name(*cx.backend);
    const bool on_gpu = cx.backend->backend() == graph::Backend::cuda;
    const std::string method = fmt::format(
        "median of {} measurements of back-to-back executor.forward calls ({}), "
        "per call",
        cx.timing.repeats, on_gpu ? "CUDA events on the backend stream" : "host clock");
    const std::string default_form = Variant{psa::default_psa_form(), false}.name();
    nlohmann::json state_shapes = nlohmann::json::object();  // per scale: state key → shape (psa_peer.py: the same)
    for (const Scale& sc : scales) {
      const RowSpec one{sc, sides.front(), 1, forms.front()};
      graph::StateStore st(*block_graph(one), cx.backend, {one.input_shape()});
      nlohmann::json keys = nlohmann::json::object();
      for (const graph::StateEntry& e : st.entries()) keys[e.key] = e.shape.dims();
      state_shapes[sc.name] = keys;
    }
    std::printf(
        "vision-cpp PSA Attention block on %s, f16 NHWC in and out, BatchNorm folded%s; %s; default_psa_form() "
        "= %s\n",
        device_name.c_str(), on_gpu ? ", CUDA-graph replay" : "", method.c_str(), default_form.c_str());
    std::printf("%-14s %-9s %5s %6s %10s %10s %8s %6s  %s\n", "row", "form", "dim", "heads", "us", "min us", "TFLOP/s",
                "steps", "note");
    std::fflush(stdout);

    std::vector<RowResult> results;
    for (const RowSpec& s : specs) {
      RowResult r = run_row(cx, s);
      if (r.timing) {
        std::string note = r.finite ? "" : "NON-FINITE OUTPUT ";
        if (on_gpu && !r.graph_replayed) note += "(not replayed) ";
        if (r.conversions) note += fmt::format("({} conversion steps) ", r.conversions);
        std::printf("%-14s %-9s %5lld %6lld %10.2f %10.2f %8.2f %6zu  %s\n", s.key().c_str(), s.variant.name(),
                    static_cast<long long>(s.scale.dim), static_cast<long long>(s.scale.heads), r.timing->median_us(),
                    r.timing->min_us(), tflops(s.flops(), r.timing->median_us()), r.plan_steps, note.c_str());
      } else {
        std::printf("%-14s %-9s %5lld %6lld %10s %10s %8s %6s  %s\n", s.key().c_str(), s.variant.name(),
                    static_cast<long long>(s.scale.dim), static_cast<long long>(s.scale.heads), "n/a", "n/a", "", "",
                    r.error.substr(0, 300).c_str());
      }
      if (!r.breakdown.empty() && r.timing) {
        std::string line = "    cumulative us:";
        for (const auto& [stage, us] : r.breakdown) line += fmt::format(" {} {:.2f} |", stage, us);
        line += fmt::format(" full {:.2f}", r.timing->median_us());
        std::printf("%s\n", line.c_str());
      } else if (!r.breakdown_error.empty()) {
        std::printf("    breakdown failed: %s\n", r.breakdown_error.substr(0, 300).c_str());
      }
      std::fflush(stdout);
      results.push_back(std::move(r));
    }

    if (!json_path.empty()) {
      std::ofstream f(json_path);
      VISION_CHECK(f.good(), "cannot write {}", json_path);
      nlohmann::json meta = {{"kind", "meta"},
                             {"impl", "ours"},
                             {"implementation", "vision-cpp graph engine (blocks::attention)"},
                             {"device", device_name},
                             {"backend", std::string(graph::backend_name(cx.backend->backend()))},
                             {"format", "f16_nhwc"},
                             {"default_psa_form", default_form},
                             {"method", method},
                             {"stages", stages()},
                             {"state", state_shapes}};
      f << meta.dump() << "\n";
      for (const RowResult& r : results) {
        const RowSpec& s = r.spec;
        nlohmann::json j = {{"kind", "row"},
                            {"impl", "ours"},
                            {"key", s.key()},
                            {"scale", s.scale.name},
                            {"dim", s.scale.dim},
                            {"heads", s.scale.heads},
                            {"key_dim", s.scale.key_dim()},
                            {"side", s.side},
                            {"N", s.n()},
                            {"batch", s.batch},
                            {"variant", s.variant.name()},
                            {"flops", s.flops()},
                            {"us", nullptr}};
        if (r.timing) {
          j["us"] = r.timing->median_us();
          j["us_min"] = r.timing->min_us();
          j["iters"] = r.timing->iters;
          j["repeats"] = r.timing->repeats;
          j["finite"] = r.finite;
          j["plan_steps"] = r.plan_steps;
          j["conversions"] = r.conversions;
          j["arena_bytes"] = r.arena_bytes;
          if (cx.backend->supports_graph_capture()) j["graph_replayed"] = r.graph_replayed;
          if (!r.breakdown.empty()) {
            nlohmann::json b = nlohmann::json::object();
            for (const auto& [stage, us] : r.breakdown) b[stage] = us;
            j["breakdown_cumulative_us"] = b;
          }
          if (!r.breakdown_error.empty()) j["breakdown_error"] = r.breakdown_error;
        } else {
          j["error"] = r.error;
        }
        f << j.dump() << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_psa_block: %s\n", e.what());
    return 1;
  }
  return 0;
}
