// ONNX export (models/yolo/onnx_export.h, vision export --format onnx) against the independent PyTorch reference of
// the YOLO26n fixture, run by ONNX Runtime's CPU library (the npm package onnxruntime-node, through
// tests/onnx/ort_run.js):
// - raw (the one-to-many head, ultralytics' [B, 4 + nc, A]: cx, cy, w, h in pixels, then σ(logits)) at 640: within 2×
//   the f32 error of a float32 computation of the model (ours, and PyTorch's own) of the float64 reference;
// - end-to-end ([B, K, 6]) at 640: the reference's detections as sets (the rows above its confidence), and ours;
// - dynamic batch, height and width: batch 1 and batch 3 at 320×320 and 192×320, each image's rows those of the
//   engine for it; f16 (--half) close to f32;
// - the model's structure: opset, input and output shapes (static and symbolic), the metadata ultralytics writes;
// - refusals with clear errors: an opset out of range, the raw output of a model without the one-to-many head.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "cli_util.h"
#include "models/yolo/yolo26_fixture.h"
#include "vision/core/dtype.h"
#include "vision/exporter.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/onnx_export.h"

using namespace vision;
using namespace vision::test::yolo26_fixture;

namespace {

namespace fs = std::filesystem;

struct OrtOutput {
  std::vector<int64_t> dims;
  std::vector<float> values;
};

// Where onnxruntime-node is: the environment's VISION_ORT_NODE_MODULES, else the node_modules folder CMake found; ""
// when neither holds it.
std::string ort_modules() {
  const char* s = std::getenv("VISION_ORT_NODE_MODULES");
  const std::string dir = s && *s ? s : VISION_ORT_NODE_MODULES;
  return !dir.empty() && fs::is_directory(fs::path(dir) / "onnxruntime-node") ? dir : std::string();
}

#define SKIP_WITHOUT_ORT()                                                                                    \
  do {                                                                                                        \
    if (ort_modules().empty())                                                                                \
      GTEST_SKIP() << "ONNX Runtime (npm onnxruntime-node) was not found when the build was configured: "     \
                      "tools/install-deps.sh --test installs it";                                             \
  } while (0)

// images [B, 3, H, W] f32 through ONNX Runtime (as f16 bits when f16).
OrtOutput run_ort(const fs::path& model, const core::Tensor& images, bool f16, const fs::path& dir) {
  const fs::path input = dir / "input.bin", prefix = dir / "ort_out";
  const std::vector<float> v = images.to_vector();
  std::string bytes;
  if (f16) {
    for (float x : v) {
      const uint16_t h = core::float_to_half(x);
      bytes.append(reinterpret_cast<const char*>(&h), 2);
    }
  } else {
    bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  test::write_file(input, bytes);
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("NODE_PATH='{}' node '{}/onnx/ort_run.js' '{}' '{}' {} {} '{}' 2 2>&1", ort_modules(),
                  VISION_SOURCE_DIR "/tests", model.string(), input.string(),
                  fmt::format("{},{},{},{}", images.dim(0), images.dim(1), images.dim(2), images.dim(3)),
                  f16 ? "f16" : "f32", prefix.string()),
      &status);
  EXPECT_EQ(test::exit_code(status), 0) << out;
  OrtOutput r;
  if (test::exit_code(status) != 0) return r;
  const nlohmann::json meta = nlohmann::json::parse(test::read_file(prefix.string() + ".json"));
  r.dims = meta["dims"].get<std::vector<int64_t>>();
  const std::string raw = test::read_file(prefix.string() + ".bin");
  if (meta["type"] == "float16") {
    for (size_t i = 0; i + 1 < raw.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, raw.data() + i, 2);
      r.values.push_back(core::half_to_float(h));
    }
  } else {
    EXPECT_EQ(meta["type"], "float32");
    r.values.resize(raw.size() / sizeof(float));
    std::memcpy(r.values.data(), raw.data(), r.values.size() * sizeof(float));
  }
  return r;
}

onnx::ModelProto read_proto(const fs::path& path) {
  onnx::ModelProto m;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << path;
  return m;
}

std::vector<std::string> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<std::string> d;
  for (const auto& dim : v.type().tensor_type().shape().dim())
    d.push_back(dim.has_dim_param() ? dim.dim_param() : std::to_string(dim.dim_value()));
  return d;
}

fs::path fixture_model() { return fixture_path("yolo26n_random.safetensors"); }

// ultralytics' raw output of a head from its LTRB [1, 4, A] and logits [1, nc, A] in float64: cx, cy, w, h in pixels,
// then σ(logits), [4 + nc, A] row-major.
std::vector<double> raw_output(const std::vector<double>& ltrb, const std::vector<double>& logits, int64_t h,
                               int64_t w) {
  const std::vector<float> grid = models::yolo::kernels::detect_anchor_grid(h, w);
  const size_t a = grid.size() / 3, nc = logits.size() / a;
  std::vector<double> out((4 + nc) * a);
  for (size_t i = 0; i < a; ++i) {
    const double ax = grid[i], ay = grid[a + i], s = grid[2 * a + i];
    const double x1 = ax - ltrb[i], y1 = ay - ltrb[a + i], x2 = ax + ltrb[2 * a + i], y2 = ay + ltrb[3 * a + i];
    out[i] = (x1 + x2) / 2 * s, out[a + i] = (y1 + y2) / 2 * s, out[2 * a + i] = (x2 - x1) * s;
    out[3 * a + i] = (y2 - y1) * s;
    for (size_t c = 0; c < nc; ++c) out[(4 + c) * a + i] = 1.0 / (1.0 + std::exp(-logits[c * a + i]));
  }
  return out;
}

// ORT's rows [B, K, 6] above `conf` as detections [B, K, 6] (zero rows after them) and counts [B].
std::pair<core::Tensor, core::Tensor> kept_rows(const OrtOutput& o, float conf) {
  const int64_t b = o.dims.at(0), k = o.dims.at(1);
  core::Tensor dets = core::Tensor::zeros(core::Shape{b, k, 6}), count = core::Tensor::zeros(core::Shape{b}, core::DType::i32);
  for (int64_t i = 0; i < b; ++i) {
    int32_t n = 0;
    for (int64_t r = 0; r < k; ++r) {
      const float* row = &o.values[static_cast<size_t>((i * k + r) * 6)];
      if (row[4] > conf) std::copy(row, row + 6, dets.data<float>() + (i * k + n++) * 6);
    }
    count.data<int32_t>()[i] = n;
  }
  return {dets, count};
}

TEST(OnnxExport, RawOutputMatchesTheReferenceAt640) {
  SKIP_WITHOUT_ORT();
  test::TempDir dir;
  const fs::path path = dir.path() / "raw.onnx";
  const ExportSummary s = export_onnx(fixture_model(), path, {.end2end = false, .imgsz = {640, 640}});
  EXPECT_EQ(s.output, "output0 f32[1, 84, 8400]");
  const core::Tensor images = image("image_640");
  const OrtOutput ort = run_ort(path, images, false, dir.path());
  ASSERT_EQ(ort.dims, (std::vector<int64_t>{1, 84, 8400}));

  const std::vector<double> ref =
      raw_output(test::to_double(output("eval640.one2many.ltrb")), test::to_double(output("eval640.one2many.logits")),
                 640, 640);
  // Ours: the engine's f32 one-to-many head on the CPU, through the same float64 transform.
  graph::Executor ex(inference_graph(), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({images});
  const std::vector<double> ours = raw_output(test::to_double(out[4]), test::to_double(out[5]), 640, 640);
  // The boxes (rows 0–3, in pixels) and the class scores (rows 4…) each: within 2× our own error of the float64
  // reference (plus the fixture's rounding to f32), and within 2× PyTorch's own f32 error of the raw head.
  const size_t split = 4 * 8400;
  for (const bool boxes : {true, false}) {
    auto part = [&](const auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      return boxes ? std::vector<T>(v.begin(), v.begin() + split) : std::vector<T>(v.begin() + split, v.end());
    };
    const std::vector<double> r = part(ref);
    const double err_ort = test::rel_error(part(ort.values), r), err_ours = test::rel_error(part(ours), r);
    const double err_peer = peer_error(boxes ? "eval640.one2many.ltrb" : "eval640.one2many.logits").rel;
    std::printf("  raw output0 %s vs float64: ONNX Runtime %.3g, ours %.3g (bound 2x ours + 2^-24: %.3g), PyTorch's "
                "raw head f32 %.3g; ONNX Runtime vs ours %.3g\n",
                boxes ? "boxes " : "scores", err_ort, err_ours, 2 * err_ours + std::ldexp(1.0, -24), err_peer,
                test::rel_error(part(ort.values), part(ours)));
    EXPECT_LE(err_ort, 2 * err_ours + std::ldexp(1.0, -24)) << (boxes ? "boxes" : "scores");
    EXPECT_LE(err_ort, 2 * err_peer + std::ldexp(1.0, -24)) << (boxes ? "boxes" : "scores");
  }
  EXPECT_GT(test::max_abs(ref), 100.0);  // boxes in pixels: the comparison can fail
}

TEST(OnnxExport, EndToEndDetectionsAreTheReferencesAt640) {
  SKIP_WITHOUT_ORT();
  test::TempDir dir;
  const fs::path path = dir.path() / "e2e.onnx";
  const ExportSummary s = export_onnx(fixture_model(), path, {.imgsz = {640, 640}});
  EXPECT_EQ(s.output, "output0 f32[1, 300, 6]");
  const core::Tensor images = image("image_640");
  const OrtOutput ort = run_ort(path, images, false, dir.path());
  ASSERT_EQ(ort.dims, (std::vector<int64_t>{1, 300, 6}));
  const float conf = metadata_float("e2e_conf");
  const auto [dets, count] = kept_rows(ort, conf);
  expect_same_detections({dets, count}, {output("e2e640.detections"), output("e2e640.count")},
                         score_tolerance("eval640"), box_tolerance("eval640"), "ONNX Runtime vs the reference");
  graph::Executor ex(inference_graph(kSpec, false, conf), graph::cpu_backend());
  load(ex);
  const auto out = ex.forward({images});
  expect_same_detections({dets, count}, {out[0], out[1]}, score_tolerance("eval640"), box_tolerance("eval640"),
                         "ONNX Runtime vs ours");
}

TEST(OnnxExport, DynamicBatchAndSizeGiveEachImagesDetections) {
  SKIP_WITHOUT_ORT();
  test::TempDir dir;
  const fs::path path = dir.path() / "dynamic.onnx";
  const ExportSummary s = export_onnx(fixture_model(), path, {.dynamic = true});
  EXPECT_EQ(s.input, "images f32[batch, 3, height, width]");
  EXPECT_EQ(s.output, "output0 f32[batch, detections, 6]");
  const float conf = metadata_float("e2e_conf");
  graph::Executor ex(inference_graph(kSpec, false, conf), graph::cpu_backend());
  load(ex);
  for (const char* name : {"image_320", "image_192x320"}) {
    // A batch of three different images: the fixture's, its mirror and its negative.
    const core::Tensor one = image(name);
    const int64_t h = one.dim(2), w = one.dim(3), plane = h * w;
    std::vector<float> v = one.to_vector(), three = v;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) three.push_back(v[static_cast<size_t>(c * plane + y * w + (w - 1 - x))]);
    for (float x : v) three.push_back(1.0f - x);
    const core::Tensor batch3 = core::Tensor::from_vector(core::Shape{3, 3, h, w}, three);
    const auto mine = ex.forward({batch3});
    for (const core::Tensor& input : {one, batch3}) {
      const OrtOutput ort = run_ort(path, input, false, dir.path());
      ASSERT_EQ(ort.dims, (std::vector<int64_t>{input.dim(0), 300, 6})) << name;
      const auto [dets, count] = kept_rows(ort, conf);
      for (int64_t b = 0; b < input.dim(0); ++b)
        expect_same_detections({dets, count, b}, {mine[0], mine[1], b}, score_tolerance(), box_tolerance(),
                               fmt::format("{} batch {} image {}", name, input.dim(0), b));
    }
  }
}

TEST(OnnxExport, HalfRunsCloseToF32) {
  SKIP_WITHOUT_ORT();
  test::TempDir dir;
  const fs::path f32 = dir.path() / "f32.onnx", f16 = dir.path() / "f16.onnx";
  export_onnx(fixture_model(), f32, {.end2end = false, .imgsz = {320, 320}});
  const ExportSummary s = export_onnx(fixture_model(), f16, {.half = true, .end2end = false, .imgsz = {320, 320}});
  EXPECT_EQ(s.input, "images f16[1, 3, 320, 320]");
  EXPECT_LT(fs::file_size(f16), fs::file_size(f32) * 6 / 10);
  const core::Tensor images = image("image_320");
  const OrtOutput a = run_ort(f32, images, false, dir.path()), b = run_ort(f16, images, true, dir.path());
  ASSERT_EQ(a.dims, b.dims);
  const double rel = test::rel_error(b.values, test::to_double(a.values));
  std::printf("  f16 vs f32 raw output0: rel %.3g\n", rel);
  EXPECT_LT(rel, 2e-2);
  EXPECT_GT(rel, 0.0);  // it did compute in f16
}

TEST(OnnxExport, ModelStructureAndMetadata) {
  test::TempDir dir;
  const fs::path path = dir.path() / "m.onnx";
  const ExportSummary s = export_onnx(fixture_model(), path, {.imgsz = {384, 640}, .batch = 2, .max_det = 100});
  EXPECT_EQ(s.format, "onnx");
  EXPECT_EQ(s.opset, 17);
  const onnx::ModelProto m = read_proto(path);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).version(), 17);
  ASSERT_EQ(m.graph().input_size(), 1);
  EXPECT_EQ(m.graph().input(0).name(), "images");
  EXPECT_EQ(dims_of(m.graph().input(0)), (std::vector<std::string>{"2", "3", "384", "640"}));
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(m.graph().output(0).name(), "output0");
  EXPECT_EQ(dims_of(m.graph().output(0)), (std::vector<std::string>{"2", "100", "6"}));
  std::map<std::string, std::string> meta;
  for (const auto& e : m.metadata_props()) meta[e.key()] = e.value();
  EXPECT_EQ(meta["task"], "detect");
  EXPECT_EQ(meta["stride"], "32");
  EXPECT_EQ(meta["imgsz"], "[384, 640]");
  EXPECT_EQ(meta["batch"], "2");
  EXPECT_EQ(meta["end2end"], "True");
  EXPECT_EQ(meta["names"].substr(0, 24), "{0: 'class0', 1: 'class1");
  // Every weight once: BatchNorm folded (no BatchNormalization node), the one-to-many head absent.
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ++ops[n.op_type()];
  EXPECT_EQ(ops.count("BatchNormalization"), 0u);
  EXPECT_GT(ops["Conv"], 80);
  EXPECT_EQ(ops["Softmax"], 2);  // the PSA attention of layers 10 and 22
  EXPECT_EQ(ops["TopK"], 2);
  for (const auto& init : m.graph().initializer()) EXPECT_EQ(init.name().find(".cv2.0.0."), std::string::npos) << init.name();

  const ExportSummary raw = export_onnx(fixture_model(), path, {.dynamic = true, .end2end = false});
  EXPECT_EQ(raw.output, "output0 f32[batch, 84, anchors]");
  const onnx::ModelProto raw_proto = read_proto(path);
  for (const auto& e : raw_proto.metadata_props())
    if (e.key() == "end2end") EXPECT_EQ(e.value(), "False");
}

TEST(OnnxExport, RefusalsAreClearErrors) {
  test::TempDir dir;
  const fs::path path = dir.path() / "x.onnx";
  EXPECT_NE(test::error_of([&] { export_onnx(fixture_model(), path, {.opset = 16}); }).find("opset 16 is not supported"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { export_onnx(fixture_model(), path, {.opset = 99}); }).find("choose 17 to"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { export_onnx(fixture_model(), path, {.imgsz = {100, 640}}); }).find("multiples of 32"),
            std::string::npos);
  // An exported model keeps only the one-to-one head.
  const fs::path fused = dir.path() / "fused.safetensors";
  export_model(fixture_model(), fused, "f32");
  EXPECT_NE(test::error_of([&] { export_onnx(fused, path, {.end2end = false}); }).find("one-to-many head"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path));
  // End-to-end from the exported model is the checkpoint's model.
  export_onnx(fused, path, {.imgsz = {320, 320}});
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_NE(test::error_of([&] { export_onnx(path, path, {}); }).find("the input model itself"), std::string::npos);
}

TEST(OnnxExport, TheCliWritesTheModelAndRefusesOnnxFlagsForSafetensors) {
  test::TempDir dir;
  const fs::path out = dir.path() / "cli.onnx";
  const test::CliRun r = test::run_cli(fmt::format("'{}' export --model '{}' --format onnx --out '{}' --imgsz 320 2>&1",
                                                   VISION_CLI, fixture_model().string(), out.string()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("output0 f32[1, 300, 6]"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(out));
  const test::CliRun bad = test::run_cli(fmt::format("'{}' export --model '{}' --out '{}' --dynamic 2>&1", VISION_CLI,
                                                     fixture_model().string(), (dir.path() / "x.safetensors").string()));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--dynamic applies to --format onnx only"), std::string::npos) << bad.out;
}

}  // namespace
