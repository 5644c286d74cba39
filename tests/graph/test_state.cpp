#include <gtest/gtest.h>

#include <filesystem>

#include "graph/test_ops.h"
#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"

using namespace vision;
using namespace vision::graph;
using vision::test::error_of;
using vision::test::random_tensor;
using vision::test::TempDir;

namespace {

std::shared_ptr<Graph> two_scales(int channels) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, channels, 2, 2});
  auto _ = g->scope("model");
  auto a = g->apply(std::make_shared<test::ScaleOp>(), {x}, "0");
  g->mark_output(g->apply(std::make_shared<test::ScaleOp>(), {a}, "1"));
  return g;
}

}  // namespace

TEST(StateStore, SaveLoadRoundTripReproducesOutputs) {
  TempDir dir;
  Executor a(two_scales(3), cpu_backend());
  auto x = random_tensor(Shape{2, 3, 2, 2});
  a.state({x.shape()}).set_from_host("model.0.weight", random_tensor(Shape{3}));
  const auto ya = a.forward({x})[0].to_vector();
  a.state().save_safetensors(dir.path() / "w.safetensors", {{"format", "vision"}});

  Executor b(two_scales(3), cpu_backend());
  b.state({x.shape()}).load_safetensors(dir.path() / "w.safetensors");
  EXPECT_EQ(b.forward({x})[0].to_vector(), ya);
  EXPECT_EQ(b.state().find("model.1.weight")->kind, StateKind::parameter);
}

TEST(StateStore, LoadNamesMissingUnexpectedAndMisShapedTensors) {
  TempDir dir;
  Executor ex(two_scales(3), cpu_backend());
  auto& st = ex.state({Shape{1, 3, 2, 2}});
  const auto p = dir.path() / "w.safetensors";

  core::write_safetensors(p, {{"model.0.weight", random_tensor(Shape{3})}});
  auto msg = error_of([&] { st.load_safetensors(p); });
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.1.weight"), std::string::npos) << msg;

  core::write_safetensors(p, {{"model.0.weight", random_tensor(Shape{3})},
                              {"model.1.weight", random_tensor(Shape{3})},
                              {"model.2.weight", random_tensor(Shape{3})}});
  msg = error_of([&] { st.load_safetensors(p); });
  EXPECT_NE(msg.find("does not have"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.2.weight"), std::string::npos) << msg;

  core::write_safetensors(p, {{"model.0.weight", random_tensor(Shape{4})},
                              {"model.1.weight", random_tensor(Shape{3})}});
  msg = error_of([&] { st.load_safetensors(p); });
  EXPECT_NE(msg.find("model.0.weight (file [4], model [3])"), std::string::npos) << msg;

  msg = error_of([&] { st.load_safetensors(dir.path() / "nope.safetensors"); });
  EXPECT_NE(msg.find("nope.safetensors"), std::string::npos) << msg;
}

TEST(StateStore, HalfPrecisionCheckpointsAreConverted) {
  TempDir dir;
  Executor ex(two_scales(2), cpu_backend());
  auto& st = ex.state({Shape{1, 2, 2, 2}});
  core::Tensor h = core::Tensor::zeros(Shape{2}, core::DType::f16);
  h.data<uint16_t>()[0] = core::float_to_half(0.25f);
  h.data<uint16_t>()[1] = core::float_to_half(-3.0f);
  core::write_safetensors(dir.path() / "h.safetensors", {{"model.0.weight", h}, {"model.1.weight", h}});
  st.load_safetensors(dir.path() / "h.safetensors");
  EXPECT_EQ(st.tensor("model.1.weight").to_vector(), (std::vector<float>{0.25f, -3.0f}));
}
