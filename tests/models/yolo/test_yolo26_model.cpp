// YOLO26's structure and weights: the parameter count of every scale, YOLO26n's state against ultralytics' state_dict
// (yolo26n_state_dict.tsv), the inference and exported graphs' state, the loading rules and their errors, initial
// weights (`vision init`), model metadata, input sizes and the plan cache.
#include <gtest/gtest.h>

#include <chrono>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "cli_util.h"
#include "models/yolo/yolo26_fixture.h"
#include "vision/models/yolo/model.h"
#include "vision/ops/reduce.h"

using namespace vision;
using namespace vision::test::yolo26_fixture;
using yolo::Scale;

namespace {

const core::Shape kSmall{1, 3, 32, 32};

// The state a graph recorded by `record` holds, as key → (shape, kind).
struct StateEntryInfo {
  std::string shape;
  bool parameter = false;
  bool operator==(const StateEntryInfo&) const = default;
  friend void PrintTo(const StateEntryInfo& e, std::ostream* os) {
    *os << e.shape << (e.parameter ? " param" : " buffer");
  }
};
using StateList = std::map<std::string, StateEntryInfo>;

std::string shape_text(const core::Shape& s) {
  if (s.rank() == 0) return "scalar";
  std::string t;
  for (size_t i = 0; i < s.rank(); ++i) t += (i ? "x" : "") + std::to_string(s[static_cast<int>(i)]);
  return t;
}

StateList state_of(const graph::Graph& g) {
  StateList out;
  for (const graph::StateEntry& e : graph::state_entries(g, g.inputs(), {kSmall}))
    out[e.key] = {shape_text(e.shape), e.kind == graph::StateKind::parameter};
  return out;
}

StateList training_state(yolo::Yolo26Spec spec) {
  graph::Graph g;
  yolo::record_yolo26_training(g.input("images", kSmall), spec);
  return state_of(g);
}

// yolo26n_state_dict.tsv: key, shape ("16x3x3x3" or "scalar"), kind (param or buffer).
StateList ultralytics_state() {
  std::ifstream f(fixture_path("yolo26n_state_dict.tsv"));
  EXPECT_TRUE(f.good()) << "cannot read yolo26n_state_dict.tsv";
  StateList out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    std::string key, shape, kind;
    std::getline(row, key, '\t');
    std::getline(row, shape, '\t');
    std::getline(row, kind, '\t');
    out[key] = {shape, kind == "param"};
  }
  return out;
}

bool is_one2many(const std::string& key) {
  return key.starts_with("model.23.cv2.") || key.starts_with("model.23.cv3.");
}

std::string differences(const StateList& ours, const StateList& want) {
  std::string s;
  for (const auto& [k, v] : want)
    if (!ours.count(k)) s += "\n  missing " + k;
    else if (!(ours.at(k) == v)) s += fmt::format("\n  {}: {} (ours {})", k, v.shape, ours.at(k).shape);
  for (const auto& [k, v] : ours)
    if (!want.count(k)) s += "\n  extra " + k;
  return s;
}

TEST(Yolo26, ParameterCountOfEveryScale) {
  const std::map<Scale, size_t> tensors = {
      {Scale::n, 708}, {Scale::s, 708}, {Scale::m, 768}, {Scale::l, 1092}, {Scale::x, 1092}};
  for (const auto& [scale, count] : tensors) {
    graph::Graph g;
    yolo::record_yolo26_training(g.input("images", kSmall), {.scale = scale});
    int64_t parameters = 0;
    const auto entries = graph::state_entries(g, g.inputs(), {kSmall});
    for (const graph::StateEntry& e : entries)
      if (e.kind == graph::StateKind::parameter) parameters += e.shape.numel();
    EXPECT_EQ(parameters, yolo::scale_info(scale).parameters) << "YOLO26" << yolo::scale_name(scale);
    EXPECT_EQ(entries.size(), count) << "YOLO26" << yolo::scale_name(scale);
  }
  EXPECT_EQ(yolo::scale_info(Scale::n).parameters, 2'572'280);
  EXPECT_EQ(yolo::scale_info(Scale::s).parameters, 10'009'784);
  EXPECT_EQ(yolo::scale_info(Scale::m).parameters, 21'896'248);
  EXPECT_EQ(yolo::scale_info(Scale::l).parameters, 26'299'704);
  EXPECT_EQ(yolo::scale_info(Scale::x).parameters, 58'993'368);
}

TEST(Yolo26, StateOfYolo26nIsUltralyticsStateDict) {
  const StateList want = ultralytics_state();
  ASSERT_EQ(want.size(), 708u);
  const StateList ours = training_state({});
  EXPECT_EQ(ours, want) << differences(ours, want);
}

// Any nc: only the class branches change, c3 = max(ch0, min(nc, 100)) channels wide.
TEST(Yolo26, OtherNumberOfClasses) {
  const StateList want = ultralytics_state();
  for (int64_t nc : {3, 150}) {
    const StateList ours = training_state({.nc = nc});
    ASSERT_EQ(ours.size(), want.size());
    for (const auto& [key, v] : want) {
      ASSERT_TRUE(ours.count(key)) << key;
      if (key.find("cv3.") == std::string::npos) EXPECT_EQ(ours.at(key), v) << key;
    }
  }
  const StateList few = training_state({.nc = 3}), many = training_state({.nc = 150});
  EXPECT_EQ(few.at("model.23.one2one_cv3.1.2.weight").shape, "3x64x1x1");  // c3 = ch0 = 64
  EXPECT_EQ(few.at("model.23.cv3.2.2.bias").shape, "3");
  EXPECT_EQ(many.at("model.23.cv3.0.1.1.conv.weight").shape, "100x100x1x1");  // c3 = 100
  EXPECT_EQ(many.at("model.23.cv3.0.2.weight").shape, "150x100x1x1");
}

TEST(Yolo26, InferenceGraphHoldsTheOneToOneHeadOnly) {
  StateList want = ultralytics_state();
  std::erase_if(want, [](const auto& kv) { return is_one2many(kv.first); });
  const StateList ours = state_of(*yolo::yolo26_inference_graph({}));
  EXPECT_EQ(ours, want) << differences(ours, want);
  // With NMS, the one-to-many head instead.
  StateList nms = ultralytics_state();
  std::erase_if(nms, [](const auto& kv) { return kv.first.starts_with("model.23.one2one_"); });
  EXPECT_EQ(state_of(*yolo::yolo26_inference_graph({}, {.nms = true})), nms);
}

// The exported graph's state is what fold_batchnorm writes: conv weight + bias in place of each Conv's BatchNorm.
TEST(Yolo26, ExportedGraphStateIsTheFoldedCheckpoint) {
  const auto exported = yolo::fold_batchnorm(weights(), core::DType::f16);
  StateList folded;
  for (const auto& [name, t] : exported.tensors) {
    EXPECT_EQ(t.dtype(), core::DType::f16) << name;
    folded[name] = {shape_text(t.shape()), true};
  }
  const StateList ours = state_of(*yolo::yolo26_inference_graph({.norm = yolo::ConvNorm::folded}));
  EXPECT_EQ(ours, folded) << differences(ours, folded);
  EXPECT_EQ(ours.at("model.0.conv.bias").shape, "16");
  EXPECT_EQ(exported.metadata.at("format"), "fused");
  EXPECT_EQ(ours.size(), 2 * 96u + 2 * 6u);  // 96 Conv blocks and 6 plain head convolutions, weight + bias each
}

TEST(Yolo26, ScaleRules) {
  const yolo::Yolo26Spec n{.scale = Scale::n}, m{.scale = Scale::m}, x{.scale = Scale::x};
  EXPECT_EQ(n.channels(64), 16);
  EXPECT_EQ(n.channels(1024), 256);
  EXPECT_EQ(m.channels(1024), 512);  // max_channels 512
  EXPECT_EQ(x.channels(1024), 768);
  EXPECT_EQ(x.channels(64), 96);
  EXPECT_EQ(n.repeats(2), 1);
  EXPECT_EQ(yolo::Yolo26Spec{.scale = Scale::l}.repeats(2), 2);
  EXPECT_EQ(n.repeats(1), 1);
  EXPECT_EQ(yolo::parse_scale("s"), Scale::s);
  EXPECT_EQ(yolo::parse_scale("yolo26x"), Scale::x);
  EXPECT_NE(test::error_of([] { yolo::parse_scale("q"); }).find("n, s, m, l and x"), std::string::npos);
  EXPECT_NE(test::error_of([] { yolo::yolo26_inference_graph({.nc = 0}); }).find("at least 1"), std::string::npos);
}

// The training forward: the one-to-one head sees the features detached (its loss reaches its own head only), the
// one-to-many head does not (its loss reaches the backbone).
TEST(Yolo26, TrainingForwardDetachesTheOneToOneHead) {
  for (const bool one2one : {true, false}) {
    auto g = std::make_shared<graph::Graph>();
    constexpr int64_t any = core::Shape::kAny;
    const auto out = yolo::record_yolo26_training(g->input("images", core::Shape{any, 3, any, any}), kSpec);
    const yolo::HeadOutputs& head = one2one ? *out.one2one : *out.one2many;
    g->mark_output(ops::sum_squares(head.logits, "loss"), graph::kTrainingLoss);
    graph::Executor ex(g, graph::cpu_backend());
    load(ex, weights(), kSpec, graph::Mode::train);
    ex.forward_train({test::random_tensor(core::Shape{2, 3, 64, 64}, 0.0f, 1.0f)});
    ex.backward();
    auto grad_norm = [&](const std::string& key) { return test::max_abs(ex.state().grad(key).to_vector()); };
    const std::string own = one2one ? "model.23.one2one_cv3.0.1.1.conv.weight" : "model.23.cv3.0.1.1.conv.weight";
    const std::string other = one2one ? "model.23.cv3.0.1.1.conv.weight" : "model.23.one2one_cv3.0.1.1.conv.weight";
    EXPECT_GT(grad_norm(own), 0.0) << own;
    EXPECT_EQ(grad_norm(other), 0.0) << other;
    for (const char* backbone : {"model.0.conv.weight", "model.10.m.0.attn.qkv.conv.weight", "model.22.cv2.bn.weight"})
      if (one2one)
        EXPECT_EQ(grad_norm(backbone), 0.0) << backbone << ": the one-to-one loss must not reach the backbone";
      else
        EXPECT_GT(grad_norm(backbone), 0.0) << backbone;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Weights files

// The fixture's tensors with some changed, as a file in dir.
std::filesystem::path edited_weights(const test::TempDir& dir, const std::function<void(
                                         std::vector<std::pair<std::string, core::Tensor>>&,
                                         std::map<std::string, std::string>&)>& edit) {
  auto tensors = weights().tensors;
  auto metadata = weights().metadata;
  edit(tensors, metadata);
  const auto path = dir.path() / "edited.safetensors";
  core::write_safetensors(path, tensors, metadata);
  return path;
}

std::string load_error(const std::filesystem::path& path, const yolo::Yolo26Model::Options& options = {}) {
  return test::error_of([&] { yolo::Yolo26Model::load(path, graph::cpu_backend(), options); });
}

TEST(Yolo26Weights, ModelInfoFromMetadataAndFromTensors) {
  const yolo::ModelInfo info = yolo::read_model_info(weights());
  EXPECT_EQ(info.spec.scale, Scale::n);
  EXPECT_EQ(info.spec.nc, 80);
  EXPECT_FALSE(info.fused());
  ASSERT_EQ(info.names.size(), 80u);
  EXPECT_EQ(info.names[7], "class7");
  EXPECT_EQ(info.imgsz, (std::array<int64_t, 2>{640, 640}));

  // Without scale and nc in the metadata, the tensors tell them.
  test::TempDir dir;
  const auto bare = edited_weights(dir, [](auto&, auto& md) { md.clear(); });
  const yolo::ModelInfo guessed = yolo::read_model_info(core::read_safetensors(bare));
  EXPECT_EQ(guessed.spec.scale, Scale::n);
  EXPECT_EQ(guessed.spec.nc, 80);

  // Names as ultralytics keeps them (an object of indices), a rectangular imgsz.
  const auto object = edited_weights(dir, [](auto&, auto& md) {
    nlohmann::json names;
    for (int i = 0; i < 80; ++i) names[std::to_string(i)] = fmt::format("name{}", i);
    md["names"] = names.dump();
    md["imgsz"] = "[480, 640]";
  });
  const yolo::ModelInfo obj = yolo::read_model_info(core::read_safetensors(object));
  EXPECT_EQ(obj.names[79], "name79");
  EXPECT_EQ(obj.imgsz, (std::array<int64_t, 2>{480, 640}));
}

TEST(Yolo26Weights, MalformedMetadataIsAnErrorNamingTheField) {
  test::TempDir dir;
  auto error = [&](const std::string& key, const std::string& value) {
    return test::error_of([&] {
      yolo::read_model_info(core::read_safetensors(edited_weights(dir, [&](auto&, auto& md) { md[key] = value; })));
    });
  };
  EXPECT_NE(error("format", "onnx").find("'format' is 'onnx'"), std::string::npos);
  EXPECT_NE(error("scale", "q").find("metadata 'scale'"), std::string::npos);
  EXPECT_NE(error("nc", "eighty").find("'nc' is not valid JSON"), std::string::npos);
  EXPECT_NE(error("names", "[\"a\", \"b\"]").find("2 names for 80 classes"), std::string::npos);
  EXPECT_NE(error("stride", "[8, 16]").find("strides [8, 16, 32]"), std::string::npos);
  EXPECT_NE(error("imgsz", "\"big\"").find("'imgsz'"), std::string::npos);
  // int8 calibration: only in an exported model, a map of this file's convolutions to positive numbers.
  EXPECT_NE(error("int8_absmax", "{\"model.0.conv\": 1}").find("'int8_absmax' belongs to an exported model"),
            std::string::npos);
  auto fused_error = [&](const std::string& value) {
    return test::error_of([&] {
      yolo::read_model_info(core::read_safetensors(edited_weights(dir, [&](auto&, auto& md) {
        md["format"] = "fused";
        md["int8_absmax"] = value;
      })));
    });
  };
  EXPECT_NE(fused_error("[1, 2]").find("must map convolution names"), std::string::npos);
  EXPECT_NE(fused_error("{\"model.0.conv\": -1}").find("model.0.conv"), std::string::npos);
  EXPECT_NE(fused_error("{\"model.0.conv\": \"big\"}").find("not a positive number"), std::string::npos);
  EXPECT_NE(fused_error("{\"model.99.conv\": 2}").find("model.99.conv"), std::string::npos);
}

// Hostile metadata (issue #33): deeply nested names crashed with a stack overflow; an absurd nc made a tiny file
// allocate gigabytes; a huge imgsz overflowed a shape's element count. Each is now an error naming the file, at once.
TEST(Yolo26Weights, HostileMetadataIsRefusedBeforeAnythingIsBuilt) {
  test::TempDir dir;
  auto error = [&](const std::string& key, const std::string& value) {
    const auto path = edited_weights(dir, [&](auto&, auto& md) { md[key] = value; });
    return test::error_of([&] { yolo::read_model_info(core::read_safetensors(path)); });
  };
  const std::string nested = std::string(200000, '[') + std::string(200000, ']');
  std::string e = error("names", nested);
  EXPECT_NE(e.find("metadata 'names' nests JSON deeper"), std::string::npos) << e;
  e = error("names", "[[\"a\"]]");
  EXPECT_NE(e.find("must list strings, got [\"a\"]"), std::string::npos) << e;
  for (const char* nc : {"1000000", "4611686018427387904", "-3", "0"}) {
    const auto t0 = std::chrono::steady_clock::now();
    e = error("nc", nc);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << nc;
    EXPECT_NE(e.find("edited.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("'nc'"), std::string::npos) << e;
  }
  EXPECT_NE(error("nc", "81").find("the class convolution model.23.one2one_cv3.0.2.bias has 80 outputs"),
            std::string::npos);
  for (const char* imgsz : {"1099511627776", "[640, 1099511627776]", "-640", "[100, 640]", "16384"}) {
    e = error("imgsz", imgsz);
    EXPECT_NE(e.find("metadata 'imgsz'"), std::string::npos) << imgsz << ": " << e;
    EXPECT_NE(e.find("edited.safetensors"), std::string::npos) << e;
  }
  // The element count of a shape that overflows 64 bits is an error, not undefined behaviour.
  EXPECT_NE(test::error_of([] { (void)core::Shape({int64_t{1} << 40, int64_t{1} << 40}).numel(); })
                .find("more elements than a 64-bit count"),
            std::string::npos);
  // A model file of another scale is named as such.
  const auto path = edited_weights(dir, [](auto&, auto& md) { md["scale"] = "s"; });
  e = test::error_of([&] { yolo::Yolo26Model::load(path, graph::cpu_backend(), {}); });
  EXPECT_NE(e.find("edited.safetensors"), std::string::npos) << e;
}

// A full checkpoint loads into the end-to-end inference model (its one-to-many head ignored) and into an NMS model.
TEST(Yolo26Weights, FullCheckpointLoadsIntoEveryInferenceModel) {
  const auto path = fixture_path("yolo26n_random.safetensors");
  auto e2e = yolo::Yolo26Model::load(path, graph::cpu_backend(), {});
  EXPECT_EQ(e2e.executor().state().find("model.23.cv2.0.2.bias"), nullptr);
  const core::Shape shape{2, 3, 64, 96};
  const auto out = e2e.forward(test::random_tensor(shape, 0.0f, 1.0f));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (core::Shape{2, 300, 6}));
  EXPECT_EQ(out[1].shape(), (core::Shape{2}));
  // BatchNorm folded into the convolutions, SiLU fused: no BatchNorm or SiLU step is left.
  std::map<std::string, int> ops;
  for (const graph::PlanStep& step : e2e.executor().plan(graph::Mode::inference, {shape}).steps()) ++ops[step.op->name()];
  EXPECT_EQ(ops.count("ops.batchnorm2d") + ops.count("ops.silu"), 0u);
  EXPECT_EQ(ops["ops.conv2d_bn_silu"] + ops["ops.conv2d_bn"], 96);  // every Conv block of the one-to-one model
  EXPECT_EQ(ops["ops.conv2d"], 6);                                   // the head's plain 1×1 convolutions
  // The loaded values, not the initialisation.
  const auto bias = e2e.executor().state().tensor("model.23.one2one_cv3.1.2.bias").to_vector();
  EXPECT_EQ(bias, weights().at("model.23.one2one_cv3.1.2.bias").to_vector());

  yolo::Yolo26Model::Options nms;
  nms.inference.nms = true;
  auto with_nms = yolo::Yolo26Model::load(path, graph::cpu_backend(), nms);
  EXPECT_NE(with_nms.executor().state().find("model.23.cv2.0.2.bias"), nullptr);
  EXPECT_EQ(with_nms.forward(test::random_tensor(core::Shape{1, 3, 64, 64}, 0.0f, 1.0f))[0].shape(),
            (core::Shape{1, 300, 6}));
}

// An exported model in f32 or f16 against the reference (the fixture's rectangular image): within 2× the reference's
// own f32 error, or its f16 error (its emulated f16 inference rounds the folded weights as the f16 file does, and its
// activations besides).
TEST(Yolo26Weights, ExportedModelsLoadInF16AndF32) {
  test::TempDir dir;
  yolo::Yolo26Model::Options raw;
  raw.inference.raw_outputs = true;
  for (core::DType dtype : {core::DType::f32, core::DType::f16}) {
    const auto exported = yolo::fold_batchnorm(weights(), dtype);
    const auto path = dir.path() / "fused.safetensors";
    core::write_safetensors(path, exported.tensors, exported.metadata);
    auto fused = yolo::Yolo26Model::load(path, graph::cpu_backend(), raw);
    const auto out = fused.forward(image("image_192x320"));
    SCOPED_TRACE(core::dtype_name(dtype));
    expect_matches_reference(out[2].to_vector(), "rect.one2one.ltrb", dtype == core::DType::f32);
    expect_matches_reference(out[3].to_vector(), "rect.one2one.logits", dtype == core::DType::f32);
  }
}

TEST(Yolo26Weights, MissingUnexpectedAndMisShapedTensorsAreListed) {
  test::TempDir dir;
  const auto path = edited_weights(dir, [](auto& tensors, auto&) {
    std::erase_if(tensors, [](const auto& t) {
      return t.first == "model.4.m.0.cv1.bn.running_var" || t.first == "model.23.one2one_cv2.1.0.conv.weight";
    });
    tensors.emplace_back("model.99.conv.weight", core::Tensor::zeros(core::Shape{2}));
    for (auto& [name, t] : tensors)
      if (name == "model.9.cv2.bn.bias") t = core::Tensor::zeros(core::Shape{7});
  });
  const std::string msg = load_error(path);
  for (const char* want : {"2 missing tensors", "model.4.m.0.cv1.bn.running_var", "model.23.one2one_cv2.1.0.conv.weight",
                           "1 tensors the model does not have: model.99.conv.weight",
                           "model.9.cv2.bn.bias (file [7], model [256])", "edited.safetensors"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  // The one-to-many head is ignored only by a model without it, never what else it holds.
  EXPECT_EQ(msg.find("model.23.cv2"), std::string::npos) << msg;
}

TEST(Yolo26Weights, OtherScaleNcOrFormatIsAClearError) {
  test::TempDir dir;
  const core::SafetensorsFile& file = weights();
  auto load_into = [&](yolo::Yolo26Spec spec) {
    return test::error_of([&] {
      graph::Executor ex(yolo::yolo26_inference_graph(spec), graph::cpu_backend());
      yolo::load_weights(ex.state(graph::Mode::inference, {kSmall}), spec, file);
    });
  };
  EXPECT_NE(load_into({.scale = Scale::s}).find("holds YOLO26n weights, the model is YOLO26s"), std::string::npos);
  EXPECT_NE(load_into({.nc = 20}).find("weights for 80 classes, the model has 20"), std::string::npos);
  EXPECT_NE(load_into({.norm = yolo::ConvNorm::folded}).find("is a full checkpoint"), std::string::npos);

  // Metadata that lies about the tensors: the shapes tell.
  const auto lying = edited_weights(dir, [](auto&, auto& md) { md["nc"] = "20"; md.erase("names"); });
  EXPECT_NE(load_error(lying).find("metadata 'nc' is 20, but the class convolution model.23.one2one_cv3.0.2.bias has 80 "
                                   "outputs"),
            std::string::npos);

  // An exported model has no one-to-many head: NMS needs a full checkpoint.
  const auto exported = yolo::fold_batchnorm(file);
  const auto fused = dir.path() / "fused.safetensors";
  core::write_safetensors(fused, exported.tensors, exported.metadata);
  yolo::Yolo26Model::Options nms;
  nms.inference.nms = true;
  EXPECT_NE(load_error(fused, nms).find("needs a full checkpoint"), std::string::npos);
  EXPECT_NE(load_error(dir.path() / "absent.safetensors").find("absent.safetensors"), std::string::npos);
  EXPECT_NE(test::error_of([&] { yolo::fold_batchnorm(core::read_safetensors(fused)); }).find("already"),
            std::string::npos);
}

TEST(Yolo26Weights, ImageSizesMustBeMultiplesOf32) {
  auto model = yolo::Yolo26Model::load(fixture_path("yolo26n_random.safetensors"), graph::cpu_backend(), {});
  EXPECT_NE(test::error_of([&] { model.forward(test::random_tensor(core::Shape{1, 3, 64, 80})); }).find("64x80"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { model.forward(test::random_tensor(core::Shape{1, 1, 64, 64})); }).find("RGB"),
            std::string::npos);
  EXPECT_NO_THROW(model.forward(test::random_tensor(core::Shape{1, 3, 32, 96})));
}

// Plans are cached per input shape, batch included, the least recently used dropped beyond max_plans.
TEST(Yolo26Weights, PlansAreCachedPerShapeLeastRecentlyUsedDropped) {
  yolo::Yolo26Model::Options options;
  options.max_plans = 2;
  auto model = yolo::Yolo26Model::load(fixture_path("yolo26n_random.safetensors"), graph::cpu_backend(), options);
  const core::Tensor a = test::random_tensor(core::Shape{1, 3, 32, 32}, 0.0f, 1.0f);
  const core::Tensor b = test::random_tensor(core::Shape{2, 3, 32, 32}, 0.0f, 1.0f);
  const core::Tensor c = test::random_tensor(core::Shape{1, 3, 64, 32}, 0.0f, 1.0f);
  const std::vector<float> first = model.forward(a)[0].to_vector();
  model.forward(b);
  model.forward(a);  // a is now the most recent: c drops b
  EXPECT_EQ(model.executor().cached_plans(), 2u);
  const graph::Plan* plan_a = &model.executor().plan(graph::Mode::inference, {a.shape()});
  model.forward(c);
  EXPECT_EQ(model.executor().cached_plans(), 2u);
  EXPECT_EQ(&model.executor().plan(graph::Mode::inference, {a.shape()}), plan_a);
  EXPECT_EQ(model.forward(a)[0].to_vector(), first);
}

// ---------------------------------------------------------------------------------------------------------------
// Initial weights

TEST(Yolo26Init, CliWritesAFullCheckpointWithYolo26Biases) {
  test::TempDir dir;
  const auto path = dir.path() / "init.safetensors";
  int status = 0;
  const std::string out = test::run_command(
      fmt::format("'{}' init --scale n --nc 7 --out '{}' 2>&1", VISION_CLI, path.string()), &status);
  ASSERT_EQ(test::exit_code(status), 0) << out;
  EXPECT_NE(out.find("YOLO26n, 7 classes, 708 tensors"), std::string::npos) << out;

  const core::SafetensorsFile file = core::read_safetensors(path);
  const yolo::ModelInfo info = yolo::read_model_info(file);
  EXPECT_EQ(info.spec.nc, 7);
  EXPECT_EQ(info.names[6], "class6");
  EXPECT_EQ(file.metadata.at("format"), "full");
  EXPECT_EQ(file.metadata.at("stride"), "[8,16,32]");
  for (const char* head : {"cv", "one2one_cv"})
    for (int level = 0; level < 3; ++level) {
      EXPECT_EQ(file.at(fmt::format("model.23.{}2.{}.2.bias", head, level)).to_vector(), std::vector<float>(4, 2.0f));
      const float cls = static_cast<float>(std::log(5.0 / 7 / std::pow(640.0 / (8 << level), 2)));
      for (float b : file.at(fmt::format("model.23.{}3.{}.2.bias", head, level)).to_vector()) EXPECT_FLOAT_EQ(b, cls);
    }
  // BatchNorm starts as the identity; convolutions are not zero.
  EXPECT_EQ(file.at("model.5.bn.running_var").to_vector(), std::vector<float>(128, 1.0f));
  EXPECT_GT(test::max_abs(file.at("model.5.conv.weight").to_vector()), 0.0);

  // It loads into the inference model and into a training model.
  EXPECT_NO_THROW(yolo::Yolo26Model::load(path, graph::cpu_backend(), {}));
  graph::Executor train(training_graph({.nc = 7}), graph::cpu_backend());
  EXPECT_NO_THROW(load(train, file, {.nc = 7}, graph::Mode::train));

  const std::string bad = test::run_command(fmt::format("'{}' init --scale q --out '{}' 2>&1", VISION_CLI,
                                                        (dir.path() / "x").string()), &status);
  EXPECT_NE(test::exit_code(status), 0);
  EXPECT_NE(bad.find("--scale"), std::string::npos) << bad;

  // initial_weights (what `vision bench --scale` loads) is the written file, in memory.
  yolo::ModelInfo seven = yolo::default_model_info({.nc = 7});
  const core::SafetensorsFile memory = yolo::initial_weights(seven);
  EXPECT_EQ(memory.metadata, file.metadata);
  ASSERT_EQ(memory.tensors.size(), file.tensors.size());
  for (const auto& [name, t] : memory.tensors) {
    const core::Tensor& written = file.at(name);
    EXPECT_EQ(t.shape(), written.shape()) << name;
    ASSERT_EQ(t.dtype(), written.dtype()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), written.raw(), t.nbytes()), 0) << name;
  }
}

}  // namespace
