// ultralytics checkpoints (.pt) loaded without PyTorch (models/yolo/ultralytics_checkpoint.h), against the
// safetensors file tools/convert_ultralytics.py makes of them: the stripped YOLO26n of
// tools/reference/make_torch_checkpoint_fixtures.py holds yolo26n_random.safetensors' tensors, so the two must give
// the same tensors, metadata, raw outputs and detections, bit for bit. The training form (ema), the fused form and
// hostile module trees (too deep, exponential, cyclic, wrong types) are read or refused with clear errors.
#include "vision/models/yolo/ultralytics_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/torch_pickle_util.h"
#include "models/yolo/detector_test_util.h"
#include "models/yolo/yolo26_fixture.h"
#include "test_util.h"
#include "vision/detector.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/model.h"

namespace vision {
namespace {

namespace fs = std::filesystem;
namespace yolo = models::yolo;
using core::PyValue;
using test::Pickle;

fs::path fixture(const std::string& name) { return fs::path(VISION_FIXTURE_DIR) / name; }

bool same_bytes(const core::Tensor& a, const core::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

TEST(UltralyticsCheckpoint, StrippedCheckpointHoldsExactlyTheConvertedTensors) {
  const core::SafetensorsFile pt = yolo::read_model_file(fixture("yolo26n_random.pt"));
  const core::SafetensorsFile& converted = test::yolo26_fixture::weights();
  EXPECT_EQ(pt.path, fixture("yolo26n_random.pt"));
  ASSERT_EQ(pt.tensors.size(), 708u);
  ASSERT_EQ(pt.tensors.size(), converted.tensors.size());
  for (const auto& [name, want] : converted.tensors) {
    const core::Tensor* got = pt.find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_TRUE(same_bytes(*got, want)) << name << ": " << got->str() << " vs " << want.str();
  }
  EXPECT_EQ(pt.at("model.0.conv.weight").dtype(), core::DType::f16) << "ultralytics' f16 is kept";
  EXPECT_EQ(pt.at("model.0.bn.num_batches_tracked").dtype(), core::DType::i64);
  for (size_t i = 1; i < pt.tensors.size(); ++i) {  // in a written file's data order: larger elements, then name
    const auto& [a, ta] = pt.tensors[i - 1];
    const auto& [b, tb] = pt.tensors[i];
    const size_t sa = core::dtype_size(ta.dtype()), sb = core::dtype_size(tb.dtype());
    EXPECT_TRUE(sa > sb || (sa == sb && a < b)) << a << " before " << b;
  }

  const auto& md = pt.metadata;
  EXPECT_EQ(md.at("format"), "full");
  EXPECT_EQ(md.at("scale"), "n");
  EXPECT_EQ(md.at("nc"), "80");
  EXPECT_EQ(md.at("names"), converted.metadata.at("names"));  // both as Python's json.dumps writes them
  EXPECT_EQ(md.at("imgsz"), "640");
  EXPECT_EQ(md.at("stride"), "[8, 16, 32]");
  EXPECT_EQ(md.at("source"), "yolo26n_random.pt");
  EXPECT_EQ(md.at("ultralytics_version"), "8.4.0");
  const yolo::ModelInfo a = yolo::read_model_info(pt), b = yolo::read_model_info(converted);
  EXPECT_EQ(a.spec.scale, b.spec.scale);
  EXPECT_EQ(a.spec.nc, b.spec.nc);
  EXPECT_EQ(a.fused(), b.fused());
  EXPECT_EQ(a.names, b.names);
  EXPECT_EQ(a.imgsz, b.imgsz);
}

TEST(UltralyticsCheckpoint, RawOutputsAndDetectionsEqualTheConvertedFileBitForBit) {
  const auto backend = graph::make_backend(graph::parse_device_choice("cpu"));
  yolo::Yolo26Model::Options o;
  o.inference.raw_outputs = true;
  o.inference.both_heads = true;
  o.inference.postprocess.conf = 0.01f;
  yolo::Yolo26Model from_pt = yolo::Yolo26Model::load(fixture("yolo26n_random.pt"), backend, o);
  yolo::Yolo26Model from_st(test::yolo26_fixture::weights(), backend, o);
  const core::Tensor image = test::yolo26_fixture::image("image_320");
  const std::vector<core::Tensor> got = from_pt.forward(image);
  std::vector<core::Tensor> want;
  for (const core::Tensor& t : from_st.forward(image)) want.push_back(t.clone());  // views until the next forward
  ASSERT_EQ(got.size(), want.size());
  ASSERT_GE(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bytes(got[i], want[i])) << "output " << i;
  EXPECT_GT(want[1].data<int32_t>()[0], 0) << "no detections to compare";

  Detector pt_detector(fixture("yolo26n_random.pt"), {.device = "cpu", .conf = 0.01f});
  Detector st_detector(fixture("yolo26n_random.safetensors"), {.device = "cpu", .conf = 0.01f});
  const data::Image im = test::yolo26_fixture::fixture_image("image_320");
  const std::vector<data::Detection> d1 = pt_detector.detect(im), d2 = st_detector.detect(im);
  ASSERT_GT(d2.size(), 0u);
  ASSERT_EQ(d1.size(), d2.size());
  for (size_t i = 0; i < d1.size(); ++i) {
    EXPECT_EQ(d1[i].cls, d2[i].cls) << i;
    EXPECT_EQ(std::memcmp(&d1[i].score, &d2[i].score, sizeof(float)), 0) << i;
    EXPECT_EQ(std::memcmp(d1[i].box.data(), d2[i].box.data(), sizeof(float) * 4), 0) << i;
  }
  EXPECT_EQ(pt_detector.names(), st_detector.names());
}

// The module at a dotted path of the checkpoint's ema ("model.0.bn"), for checking the walk.
const PyValue* module_at(const PyValue* m, const std::string& path) {
  size_t start = 0;
  while (m && start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const PyValue* children = m->get("_modules");
    m = children ? children->get(part) : nullptr;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

TEST(UltralyticsCheckpoint, TrainingCheckpointIsReadFromItsEma) {
  // Written by PyTorch 1.13 and (torch2/) by PyTorch 2.11.
  for (const char* name : {"ultralytics_train_tiny.pt", "ultralytics_train_tiny_p5.pt",
                           "torch2/ultralytics_train_tiny.pt", "torch2/ultralytics_train_tiny_p5.pt"}) {
    SCOPED_TRACE(name);
    const core::SafetensorsFile f = yolo::read_model_file(fixture(name));
    std::vector<std::string> names;
    for (const auto& [n, t] : f.tensors) names.push_back(n);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"model.0.bn.bias", "model.0.bn.num_batches_tracked",
                                               "model.0.bn.running_mean", "model.0.bn.running_var", "model.0.bn.weight",
                                               "model.0.conv.weight", "model.23.one2one_cv3.0.2.bias",
                                               "model.23.one2one_cv3.0.2.weight"}));
    EXPECT_EQ(f.at("model.0.bn.num_batches_tracked").data<int64_t>()[0], 1234);
    EXPECT_EQ(f.at("model.23.one2one_cv3.0.2.weight").shape(), (core::Shape{6, 16, 1, 1}));
    // The same bytes as the ema's own buffer, found by walking the pickle by hand.
    const core::TorchCheckpoint ck = core::TorchCheckpoint::read(fixture(name));
    const PyValue* bn = module_at(ck.root().get("ema"), "model.0.bn");
    ASSERT_NE(bn, nullptr);
    EXPECT_TRUE(same_bytes(f.at("model.0.bn.running_var"),
                           ck.tensor(*bn->get("_buffers")->get("running_var"), "running_var")));

    const auto& md = f.metadata;
    EXPECT_EQ(md.at("format"), "full");
    EXPECT_EQ(md.at("scale"), "n");
    EXPECT_EQ(md.at("nc"), "6");
    EXPECT_EQ(md.at("imgsz"), "320") << "train_args' imgsz";
    EXPECT_EQ(md.at("names"), R"(["circle", "square", "triangle", "star", "cross", "ring"])");
    EXPECT_EQ(md.at("stride"), "[8, 16, 32]");
    EXPECT_EQ(md.at("ultralytics_version"), "8.4.0");
    const yolo::ModelInfo info = yolo::read_model_info(f);
    EXPECT_EQ(info.names, (std::vector<std::string>{"circle", "square", "triangle", "star", "cross", "ring"}));
    EXPECT_EQ(info.imgsz, (std::array<int64_t, 2>{320, 320}));
    EXPECT_EQ(info.spec.nc, 6);
    EXPECT_FALSE(info.fused());
  }
}

TEST(UltralyticsCheckpoint, ModelSavedAfterFuseIsTheFusedFormat) {
  for (const char* name : {"ultralytics_fused_tiny.pt", "torch2/ultralytics_fused_tiny.pt"}) {
    SCOPED_TRACE(name);
    const core::SafetensorsFile f = yolo::read_model_file(fixture(name));
    EXPECT_EQ(f.metadata.at("format"), "fused");
    EXPECT_NE(f.find("model.0.conv.bias"), nullptr);
    EXPECT_EQ(f.find("model.0.bn.weight"), nullptr);
    EXPECT_EQ(f.metadata.at("imgsz"), "[256, 320]");
    const yolo::ModelInfo info = yolo::read_model_info(f);
    EXPECT_TRUE(info.fused());
    EXPECT_EQ(info.imgsz, (std::array<int64_t, 2>{256, 320}));
    // Its Conv holds forward = getattr(conv, "forward_fuse"): an inert placeholder.
    const core::TorchCheckpoint ck = core::TorchCheckpoint::read(fixture(name));
    const PyValue* conv = module_at(ck.root().get("model"), "model.0");
    ASSERT_NE(conv, nullptr);
    ASSERT_NE(conv->get("forward"), nullptr);
    EXPECT_EQ(conv->get("forward")->text, "bound method ultralytics.nn.modules.conv.Conv.forward_fuse");
  }
}

// ---- Hostile module trees ---------------------------------------------------------------------------------------

// A pickled module: `attrs` writes the key/value pairs of its attribute dict.
void module(Pickle& p, const std::function<void()>& attrs, std::string_view cls = "Sequential") {
  p.begin_object("torch.nn.modules.container", cls);
  attrs();
  p.end_object();
}
// A module whose only attribute is _modules {name: child}.
void parent(Pickle& p, const std::string& name, const std::function<void()>& child) {
  module(p, [&] {
    p.str("_modules").empty_dict().mark().str(name);
    child();
    p.setitems();
  });
}
// A module holding one parameter (or `value` written by the caller) under _parameters.
void leaf(Pickle& p, const std::string& param, const std::function<void()>& value) {
  module(p, [&] {
    p.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce().mark().str(param);
    value();
    p.setitems();
  });
}
// The chain model → model.23.one2one_cv3.0.2 with `bias` as its bias: what a YOLO26 checkpoint needs at least.
void class_head(Pickle& p, const std::function<void()>& bias) {
  parent(p, "model", [&] {
    parent(p, "23", [&] {
      parent(p, "one2one_cv3", [&] { parent(p, "0", [&] { parent(p, "2", [&] { leaf(p, "bias", bias); }); }); });
    });
  });
}

std::string weights_error(const std::string& pickle, std::vector<std::pair<std::string, std::string>> storages = {}) {
  return test::error_of([&] {
    yolo::ultralytics_weights(core::TorchCheckpoint::from_pickle(pickle, std::move(storages), "hostile.pt"));
  });
}

TEST(UltralyticsCheckpointHostile, ModuleTreesAreWalkedWithBounds) {
  // 100 nested modules.
  Pickle deep;
  deep.proto();
  std::function<void(int)> nest = [&](int level) {
    if (level == 100) return module(deep, [] {});
    parent(deep, "m", [&] { nest(level + 1); });
  };
  nest(0);
  std::string e = weights_error(deep.stop().b);
  EXPECT_NE(e.find("modules nest deeper than 64 levels"), std::string::npos) << e;

  // 40 levels of two children that are the same module: 2^40 paths.
  Pickle wide;
  wide.proto();
  module(wide, [] {});
  wide.put(0);
  for (uint32_t i = 1; i <= 40; ++i) {
    module(wide, [&] { wide.str("_modules").empty_dict().mark().str("a").get(i - 1).str("b").get(i - 1).setitems(); });
    wide.put(i);
  }
  e = weights_error(wide.stop().b);
  EXPECT_NE(e.find("more than 1048576 modules (shared or cyclic submodules?)"), std::string::npos) << e;

  // A module that holds itself.
  Pickle cycle;
  cycle.proto().global("torch.nn.modules.container", "Sequential").empty_tuple().newobj().put(0);
  cycle.empty_dict().mark().str("_modules").empty_dict().mark().str("self").get(0).setitems().setitems().build();
  e = weights_error(cycle.stop().b);
  EXPECT_NE(e.find("modules nest deeper than 64 levels"), std::string::npos) << e;
}

TEST(UltralyticsCheckpointHostile, WrongShapesOfCheckpointGiveClearErrors) {
  const std::string f16x3(6, '\0'), f64x3(24, '\0');
  const auto bias = [](Pickle& p, std::string_view type) {
    return [&p, type] { p.tensor("0", type, 3, {3}, {1}); };
  };
  struct Case {
    std::string pickle, expect;
  };
  std::vector<Case> cases;
  cases.push_back({Pickle().proto().empty_list().stop().b,
                   "holds a list; an ultralytics checkpoint is a dict with 'model' or 'ema'"});
  cases.push_back({Pickle().proto().empty_dict().str("epoch").integer(1).setitem().stop().b,
                   "neither 'ema' nor 'model' holds a model (keys: epoch)"});
  cases.push_back({Pickle().proto().empty_dict().mark().str("ema").none().str("model").none().setitems().stop().b,
                   "neither 'ema' nor 'model' holds a model (keys: ema, model)"});
  {
    Pickle p;
    p.proto().empty_dict().str("model");
    module(p, [] {});
    cases.push_back({p.setitem().stop().b, "the model (torch.nn.modules.container.Sequential) has no tensors"});
  }
  {
    Pickle p;
    p.proto();
    leaf(p, "weight", [&] { p.str("x"); });
    cases.push_back({p.stop().b, "parameter 'weight' is a str 'x', not a tensor"});
  }
  {
    Pickle p;
    p.proto();
    module(p, [&] { p.str("_modules").empty_list(); });
    cases.push_back({p.stop().b, "the model's _modules is a list, not a dict"});
  }
  {
    Pickle p;
    p.proto();
    parent(p, "a.b", [&] { module(p, [] {}); });
    cases.push_back({p.stop().b, "has a key that is not a plain name: str 'a.b'"});
  }
  {
    Pickle p;
    p.proto();
    leaf(p, "weight", [&] { p.tensor("0", "HalfStorage", 3, {3}, {1}); });
    cases.push_back({p.stop().b, "no YOLO26 end-to-end Detect head (model.23.one2one_cv3.0.2.bias)"});
  }
  {
    Pickle p;
    p.proto().global("ultralytics.nn.tasks", "DetectionModel").empty_tuple().newobj().empty_dict().mark();
    p.str("names").empty_dict().mark().integer(0).str("a").integer(1).str("b").setitems();
    p.str("_modules").empty_dict().mark().str("model");
    class_head(p, [&] { p.tensor("0", "HalfStorage", 3, {3}, {1}); });  // model.model.23…: an extra "model" level
    p.setitems().setitems().build();
    cases.push_back({p.stop().b, "no YOLO26 end-to-end Detect head"});
  }
  for (const Case& c : cases) {
    const std::string e = weights_error(c.pickle, {{"0", f16x3}});
    EXPECT_NE(e.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << e;
    EXPECT_NE(e.find("hostile.pt"), std::string::npos) << e;
  }

  // The class head of a model whose names do not match nc, or whose tensors are float64.
  const auto model_with = [&](const std::function<void(Pickle&)>& names, std::string_view type) {
    Pickle p;
    p.proto().global("ultralytics.nn.tasks", "DetectionModel").empty_tuple().newobj().empty_dict().mark();
    names(p);
    p.str("_modules").empty_dict().mark().str("model");
    parent(p, "23", [&] {
      parent(p, "one2one_cv3", [&] { parent(p, "0", [&] { parent(p, "2", [&] { leaf(p, "bias", bias(p, type)); }); }); });
    });
    p.setitems().setitems().build();
    return p.stop().b;
  };
  const auto two_names = [](Pickle& p) {
    p.str("names").empty_dict().mark().integer(0).str("a").integer(1).str("b").setitems();
  };
  std::string e = weights_error(model_with(two_names, "HalfStorage"), {{"0", f16x3}});
  EXPECT_NE(e.find("2 class names for 3 classes"), std::string::npos) << e;
  e = weights_error(model_with([](Pickle&) {}, "DoubleStorage"), {{"0", f64x3}});
  EXPECT_NE(e.find("tensor 'model.23.one2one_cv3.0.2.bias' is torch.float64"), std::string::npos) << e;
  // Well formed, it reads: default names, imgsz 640.
  const core::SafetensorsFile ok = yolo::ultralytics_weights(
      core::TorchCheckpoint::from_pickle(model_with([](Pickle&) {}, "HalfStorage"), {{"0", f16x3}}, "ok.pt"));
  EXPECT_EQ(ok.metadata.at("nc"), "3");
  EXPECT_EQ(ok.metadata.at("names"), R"(["class0", "class1", "class2"])");
  EXPECT_EQ(ok.metadata.at("imgsz"), "640");
  EXPECT_EQ(ok.metadata.at("format"), "fused");
  EXPECT_EQ(ok.metadata.count("scale"), 0u) << "no yaml: read_model_info tells the scale from the tensors";
}

TEST(UltralyticsCheckpoint, ReadModelFileTellsTheFormatsApart) {
  test::TempDir dir;
  // The legacy (PyTorch < 1.6) format: a pickled magic number first.
  const fs::path legacy = dir.path() / "old.pt";
  test::write_file(legacy, std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  std::string e = test::error_of([&] { yolo::read_model_file(legacy); });
  EXPECT_NE(e.find("the legacy format of PyTorch < 1.6"), std::string::npos) << e;
  e = test::error_of([&] { yolo::read_model_file(dir.path() / "missing.pt"); });
  EXPECT_NE(e.find("PyTorch checkpoint '" + (dir.path() / "missing.pt").string() + "': file not found"),
            std::string::npos)
      << e;
  const fs::path junk = dir.path() / "junk.pt";
  test::write_file(junk, "not a checkpoint");
  e = test::error_of([&] { yolo::read_model_file(junk); });
  EXPECT_NE(e.find("junk.pt': not a readable zip archive"), std::string::npos) << e;
  e = test::error_of([&] { yolo::read_model_file(dir.path() / "missing.safetensors"); });
  EXPECT_NE(e.find("safetensors file"), std::string::npos) << e;
  // A checkpoint under another name is still a checkpoint; safetensors are still safetensors.
  const fs::path renamed = dir.path() / "weights.bin";
  fs::copy_file(fixture("ultralytics_train_tiny.pt"), renamed);
  EXPECT_EQ(yolo::read_model_file(renamed).metadata.at("nc"), "6");
  EXPECT_EQ(yolo::read_model_file(fixture("yolo26n_random.safetensors")).tensors.size(), 708u);
  const fs::path misnamed = dir.path() / "converted.pt";
  fs::copy_file(fixture("yolo26n_random.safetensors"), misnamed);
  EXPECT_EQ(yolo::read_model_file(misnamed).tensors.size(), 708u);
}

}  // namespace
}  // namespace vision
