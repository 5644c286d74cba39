// The PyTorch checkpoint reader (core/torch_checkpoint.h): checkpoints written by real PyTorch
// (tools/reference/make_torch_checkpoint_fixtures.py: the training form pickled with protocol 2 and 5), and one
// hand-made hostile file per rule the reader enforces (forbidden globals and calls, truncated and foreign archives,
// tensors outside their storages, stack / mark / value bombs, memo indices never stored).
#include "vision/core/torch_checkpoint.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/torch_pickle_util.h"
#include "test_util.h"
#include "vision/core/error.h"

namespace vision {
namespace {

namespace fs = std::filesystem;
using core::PyValue;
using core::TorchCheckpoint;
using Kind = PyValue::Kind;
using test::Pickle;

fs::path fixture(const std::string& name) { return fs::path(VISION_FIXTURE_DIR) / name; }

std::string read_error(const fs::path& path) {
  return test::error_of([&] { TorchCheckpoint::read(path); });
}
// The error of unpickling bytes with no storages ("(no error)" when they load).
std::string pickle_error(const std::string& bytes, std::vector<std::pair<std::string, std::string>> storages = {}) {
  return test::error_of([&] { TorchCheckpoint::from_pickle(bytes, std::move(storages), "hostile.pt"); });
}

// v[key], failing the test (and giving None) when it is absent.
const PyValue* at(const PyValue* v, std::string_view key) {
  static const PyValue none;
  const PyValue* r = v ? v->get(key) : nullptr;
  if (!r) ADD_FAILURE() << "no '" << key << "'";
  return r ? r : &none;
}
const PyValue* at(const PyValue* v, int64_t key) {
  static const PyValue none;
  const PyValue* r = v ? v->get(key) : nullptr;
  if (!r) ADD_FAILURE() << "no [" << key << "]";
  return r ? r : &none;
}

std::vector<int64_t> ints(const PyValue& v) {
  std::vector<int64_t> out;
  for (const PyValue* i : v.items) out.push_back(i->integer);
  return out;
}

class TorchCheckpointFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TorchCheckpointFixture, ReadsTheTrainingFormAndEverythingInIt) {
  const TorchCheckpoint ck = TorchCheckpoint::read(fixture(GetParam()));
  const PyValue& root = ck.root();
  ASSERT_EQ(root.kind, Kind::dict);
  EXPECT_TRUE(at(&root, "model")->is_none());
  const PyValue* ema = at(&root, "ema");
  ASSERT_EQ(ema->kind, Kind::object);
  EXPECT_EQ(ema->text, "ultralytics.nn.tasks.DetectionModel");
  EXPECT_EQ(at(ema, "args")->text, "ultralytics.utils.IterableSimpleNamespace");
  EXPECT_EQ(at(at(ema, "args"), "imgsz")->integer, 320);
  EXPECT_EQ(at(at(ema, "names"), int64_t{5})->text, "ring");
  EXPECT_EQ(at(&root, "version")->text, "8.4.0");
  EXPECT_EQ(at(&root, "updates")->integer, 345);
  EXPECT_EQ(at(at(&root, "train_args"), "save_dir")->text, "runs/detect/train2");  // a pathlib.PosixPath
  EXPECT_EQ(at(at(&root, "train_metrics"), "fitness")->text, "numpy scalar");
  EXPECT_EQ(at(&root, "best_fitness")->text, "numpy scalar");

  // The optimizer state: f16 momentum buffers.
  const PyValue* state = at(at(&root, "optimizer"), "state");
  ASSERT_EQ(state->kind, Kind::dict);
  ASSERT_EQ(state->dict_size(), 5u);  // conv weight, bn weight and bias, head weight and bias
  const core::Tensor momentum = ck.tensor(*at(at(state, int64_t{0}), "momentum_buffer"), "momentum");
  EXPECT_EQ(momentum.dtype(), core::DType::f16);
  for (float v : momentum.to_vector()) EXPECT_EQ(v, 0.5f);

  // What the unpickler must read besides: torch.Size, a dtype, sets, bytes, views, big ints.
  const PyValue& x = *at(&root, "extra");
  EXPECT_EQ(at(&x, "size")->kind, Kind::tuple);
  EXPECT_EQ(ints(*at(&x, "size")), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(at(&x, "dtype")->text, "torch.float16");
  EXPECT_EQ(ints(*at(&x, "set")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ints(*at(&x, "frozen")), (std::vector<int64_t>{3}));
  EXPECT_EQ(at(&x, "bytes")->kind, Kind::bytes);
  EXPECT_EQ(at(&x, "bytes")->text, std::string("\x00\xffpt", 4));
  if (std::string_view(GetParam()).ends_with("ultralytics_train_tiny.pt")) {  // protocol 5 pickles it otherwise
    EXPECT_EQ(at(&x, "ndarray")->text, "numpy array");
  }
  EXPECT_EQ(at(&x, "int")->integer, int64_t{1} << 40);
  EXPECT_EQ(at(&x, "negative")->integer, -(int64_t{1} << 62));
  EXPECT_EQ(at(&x, "float")->floating, 0.1);
  EXPECT_TRUE(at(&x, "none")->is_none());
  const PyValue* v = at(&x, "nested");  // [[1, [2, [3]]], (4,)]
  for (size_t i : {0, 1, 1, 0}) {
    ASSERT_LT(i, v->items.size());
    v = v->items[i];
  }
  EXPECT_EQ(v->integer, 3);

  const core::Tensor transposed = ck.tensor(*at(&x, "transposed"), "transposed");  // a strided view: copied
  EXPECT_EQ(transposed.shape(), (core::Shape{4, 3}));
  EXPECT_EQ(transposed.to_vector(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  const core::Tensor a = ck.tensor(*at(&x, "shared_a"), "a"), b = ck.tensor(*at(&x, "shared_b"), "b");
  EXPECT_EQ(ck.tensor_info(*at(&x, "shared_a")).storage, ck.tensor_info(*at(&x, "shared_b")).storage);
  EXPECT_EQ(std::vector<int64_t>(a.data<int64_t>(), a.data<int64_t>() + 3), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(b.data<int64_t>(), b.data<int64_t>() + 3), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(ck.tensor(*at(&x, "empty"), "empty").shape(), (core::Shape{0, 4}));
  const core::Tensor mask = ck.tensor(*at(&x, "mask"), "mask");
  EXPECT_EQ(mask.dtype(), core::DType::boolean);
  const auto* m = static_cast<const uint8_t*>(mask.raw());
  EXPECT_EQ(std::vector<uint8_t>(m, m + 3), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(ck.tensor(*at(&x, "bf16"), "bf16").to_vector(), (std::vector<float>{1.5f, -2.0f}));
  const std::string f64 = test::error_of([&] { ck.tensor(*at(&x, "f64"), "extra.f64"); });
  EXPECT_NE(f64.find("'extra.f64' is torch.float64, a type the engine does not read"), std::string::npos) << f64;
  const std::string not_tensor = test::error_of([&] { ck.tensor(*at(&x, "float"), "extra.float"); });
  EXPECT_NE(not_tensor.find("'extra.float' is a float, not a tensor"), std::string::npos) << not_tensor;
}

// Written by PyTorch 1.13 (Debian's) and, in torch2/, by PyTorch 2.11 (its archives add .format_version,
// .storage_alignment, byteorder and .data/serialization_id; numpy 2 names its arrays' rebuilder numpy._core).
INSTANTIATE_TEST_SUITE_P(Protocols, TorchCheckpointFixture,
                         ::testing::Values("ultralytics_train_tiny.pt", "ultralytics_train_tiny_p5.pt",
                                           "torch2/ultralytics_train_tiny.pt", "torch2/ultralytics_train_tiny_p5.pt"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(TorchCheckpoint, AnyTopFolderAndDeflatedEntriesAreRead) {
  test::TempDir dir;
  const std::string half = std::string("\x00\x3c\x00\x40\x00\x42\x00\x44", 8);  // f16 1, 2, 3, 4
  const std::string pickle =
      Pickle().proto().tensor("7", "HalfStorage", 4, {2, 2}, {2, 1}).stop().b;
  for (const std::string folder : {"archive", "yolo26n", "any_name.v2"})
    for (const int32_t method : {ZIP_CM_STORE, ZIP_CM_DEFLATE}) {
      const fs::path path = dir.path() / "t.pt";
      test::write_checkpoint(path, pickle, {{"7", half}}, folder, method);
      const TorchCheckpoint ck = TorchCheckpoint::read(path);
      EXPECT_EQ(ck.tensor(ck.root(), "t").to_vector(), (std::vector<float>{1, 2, 3, 4})) << folder;
    }
}

// ---- Hostile input ------------------------------------------------------------------------------------------------

TEST(TorchCheckpointHostile, GlobalsOutsideTheAllowListAreNamedAndNothingRuns) {
  test::TempDir dir;
  const fs::path marker = dir.path() / "marker";
  // The classic: os.system("touch marker") by GLOBAL + REDUCE (protocol 2) and by STACK_GLOBAL (protocol 4).
  const std::string command = "touch " + marker.string();
  const std::string by_global = Pickle().proto().global("os", "system").str(command).op('\x85').reduce().stop().b;
  const std::string by_stack_global = Pickle()
                                          .proto(4)
                                          .op('\x8c').op(2).raw("os")
                                          .op('\x8c').op(6).raw("system")
                                          .op('\x93')
                                          .str(command).op('\x85').reduce().stop().b;
  for (const std::string& p : {by_global, by_stack_global}) {
    const fs::path path = dir.path() / "evil.pt";
    test::write_checkpoint(path, p);
    const std::string e = read_error(path);
    EXPECT_NE(e.find("evil.pt"), std::string::npos) << e;
    EXPECT_NE(e.find("the global 'os.system', which a checkpoint reader does not allow"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(marker)) << "the pickle ran a command";

  for (const auto& [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"builtins", "eval"}, {"__builtin__", "exec"}, {"posix", "system"}, {"subprocess", "Popen"},
           {"datetime", "datetime"}, {"ultralytics.utils.loss", "E2EDetectLoss"}, {"torch._utils", "_rebuild_qtensor"},
           {"torch", "load"}, {"numpy", "load"}, {"torch.nn.modules.conv", "Conv2d.__init__"}}) {
    const std::string e = pickle_error(Pickle().proto().global(module, name).stop().b);
    const std::string full = (module == "__builtin__" ? "builtins" : module) + "." + name;
    EXPECT_NE(e.find("'" + full + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("does not allow"), std::string::npos) << e;
  }
}

TEST(TorchCheckpointHostile, CallsOfAnythingButTheAllowedRebuildersAreRefused) {
  struct Case {
    std::string pickle, expect;
  };
  const std::vector<Case> cases = {
      {Pickle().proto().global("torch", "float16").empty_tuple().reduce().stop().b,
       "REDUCE of torch.float16 (not callable here)"},
      {Pickle().proto().global("torch", "HalfStorage").empty_tuple().reduce().stop().b,
       "REDUCE of torch.HalfStorage (not callable here)"},
      {Pickle().proto().str("os.system").empty_tuple().reduce().stop().b, "REDUCE calls a str 'os.system'"},
      {Pickle().proto().global("torch.nn.modules.conv", "Conv2d").mark().integer(3).integer(16).tuple().reduce().stop().b,
       "REDUCE of torch.nn.modules.conv.Conv2d with arguments"},
      {Pickle().proto().global("ultralytics.nn.modules.conv", "Conv").mark().integer(1).tuple().newobj().stop().b,
       "NEWOBJ of ultralytics.nn.modules.conv.Conv with arguments"},
      {Pickle().proto().global("collections", "OrderedDict").empty_tuple().newobj().stop().b,
       "NEWOBJ of a global collections.OrderedDict"},
      {Pickle().proto().global("builtins", "getattr").mark().str("os").str("system").tuple().reduce().stop().b,
       "REDUCE of builtins.getattr with arguments other than (object, name)"},
      {Pickle().proto().global("_codecs", "encode").mark().str("x").str("rot13").tuple().reduce().stop().b,
       "REDUCE of _codecs.encode with arguments other than (str, 'latin1')"},
      {Pickle().proto().global("pathlib", "PosixPath").mark().integer(1).tuple().reduce().stop().b,
       "REDUCE of pathlib.PosixPath with arguments other than strings"},
      {Pickle().proto().global("torch._utils", "_rebuild_tensor_v2").mark().integer(1).tuple().reduce().stop().b,
       "_rebuild_tensor_v2 with arguments other than"},
      {Pickle().proto().global("collections", "OrderedDict").str("args").reduce().stop().b,
       "with a str 'args' as its arguments, not a tuple"},
      {Pickle().proto().empty_list().empty_dict().build().stop().b, "BUILD on a list"},
      {Pickle().proto().empty_tuple().str("x").append().stop().b, "APPEND on a tuple, not a list"},
      {Pickle().proto().mark().str("storage").global("os", "getcwd").str("0").str("cpu").integer(1).tuple()
           .binpersid().stop().b,
       "'os.getcwd'"},
      {Pickle().proto().str("not a storage id").binpersid().stop().b, "a persistent id that is not ('storage'"},
  };
  for (const Case& c : cases) {
    const std::string e = pickle_error(c.pickle);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << e;
    EXPECT_NE(e.find("hostile.pt"), std::string::npos) << e;
  }
}

TEST(TorchCheckpointHostile, TensorsOutsideTheirStoragesAreRefused) {
  const std::string eight(8, '\0');  // 4 f16 elements
  struct Case {
    Pickle pickle;
    std::string expect;
  };
  std::vector<Case> cases;
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {3}, {2}), "reaches outside its storage"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {2, 2}, {2, 1}, 1), "reaches outside its storage"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {0}, {1}, 5), "reaches outside its storage"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {2}, {-1}, 1), "negative or overflowing"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {-2}, {1}), "negative or overflowing"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {2}, {1}, -1), "negative or overflowing"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, {1 << 30, 1 << 30, 1 << 30}, {1, 1, 1}),
                   "negative or overflowing"});
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 2000000000, {4}, {1}),
                   "storage '0' claims 2000000000 float16 elements, but its entry holds 8 bytes"});
  cases.push_back({Pickle().proto().tensor("0", "FloatStorage", 4, {4}, {1}),
                   "storage '0' claims 4 float32 elements, but its entry holds 8 bytes"});
  cases.push_back({Pickle().proto().tensor("9", "HalfStorage", 4, {4}, {1}), "names storage '9'"});
  cases.push_back({Pickle().proto().tensor("../data.pkl", "HalfStorage", 4, {4}, {1}), "is not a plain name"});
  std::vector<int64_t> rank17(17, 1);
  cases.push_back({Pickle().proto().tensor("0", "HalfStorage", 4, rank17, rank17), "at most 16 dimensions"});
  test::TempDir dir;
  for (Case& c : cases) {
    const std::string pickle = c.pickle.stop().b;
    EXPECT_NE(pickle_error(pickle, {{"0", eight}}).find(c.expect), std::string::npos)
        << c.expect << ": " << pickle_error(pickle, {{"0", eight}});
    const fs::path path = dir.path() / "t.pt";  // the same through an archive
    test::write_checkpoint(path, pickle, {{"0", eight}});
    const std::string e = read_error(path);
    EXPECT_NE(e.find(c.expect.starts_with("names storage") ? "the archive has no entry archive/data/9" : c.expect),
              std::string::npos)
        << e;
  }
  // An expanded view (stride 0) larger than its storage is not read; a size-1 dimension's stride is never used.
  const std::string half = std::string("\x00\x3c\x00\x40\x00\x42\x00\x44", 8);  // f16 1, 2, 3, 4
  const TorchCheckpoint expanded = TorchCheckpoint::from_pickle(
      Pickle().proto().tensor("0", "HalfStorage", 4, {8}, {0}).stop().b, {{"0", half}}, "e.pt");
  EXPECT_NE(test::error_of([&] { expanded.tensor(expanded.root(), "x"); })
                .find("tensor 'x' has 8 elements, more than its storage '0' holds (an expanded view)"),
            std::string::npos);
  const TorchCheckpoint strided = TorchCheckpoint::from_pickle(
      Pickle().proto().tensor("0", "HalfStorage", 4, {1, 2}, {2147483647, 2}).stop().b, {{"0", half}}, "s.pt");
  EXPECT_EQ(strided.tensor(strided.root(), "x").to_vector(), (std::vector<float>{1, 3}));
  // A bool storage holding 2.
  const std::string bools = Pickle().proto().tensor("0", "BoolStorage", 2, {2}, {1}).stop().b;
  const TorchCheckpoint ck = TorchCheckpoint::from_pickle(bools, {{"0", std::string("\x01\x02", 2)}}, "b.pt");
  EXPECT_NE(test::error_of([&] { ck.tensor(ck.root(), "mask"); }).find("bool tensor 'mask' holds 2 at element 1"),
            std::string::npos);
}

TEST(TorchCheckpointHostile, NestingStackAndValueBombsAreBounded) {
  // 500,000 nested lists: built and freed without recursion.
  {
    Pickle p;
    p.proto();
    for (int i = 0; i < 500000; ++i) p.empty_list();
    for (int i = 0; i < 499999; ++i) p.append();
    const TorchCheckpoint ck = TorchCheckpoint::from_pickle(p.stop().b, {}, "deep.pt");
    const PyValue* v = &ck.root();
    int depth = 1;
    while (!v->items.empty()) v = v->items[0], ++depth;
    EXPECT_EQ(depth, 500000);
  }
  // A list that holds itself.
  {
    const TorchCheckpoint ck = TorchCheckpoint::from_pickle(
        Pickle().proto().empty_list().put(0).get(0).append().stop().b, {}, "cycle.pt");
    EXPECT_EQ(ck.root().items[0], &ck.root());
  }
  const auto bomb = [](std::string_view unit, size_t n) {
    std::string b = "\x80\x02";
    for (size_t i = 0; i < n; ++i) b += unit;
    return b + ".";
  };
  EXPECT_NE(pickle_error(bomb("(", 5000)).find("more than 4096 MARKs open at once"), std::string::npos);
  EXPECT_NE(pickle_error(bomb(")", 1100000)).find("more than 1048576 values on the stack"), std::string::npos);
  EXPECT_NE(pickle_error(bomb("]0", 2200000)).find("more than 2097152 values"), std::string::npos);
  // Items: set(list) of one list of 4096 items, 2100 times (8.6 M items copied).
  Pickle copies;
  copies.proto().empty_list().put(0).mark();
  for (int i = 0; i < 4096; ++i) copies.op('N');
  copies.op('e');
  for (int i = 0; i < 2100; ++i) copies.global("builtins", "set").get(0).op('\x85').reduce().op('0');
  std::string e = pickle_error(copies.stop().b);
  EXPECT_NE(e.find("containers hold more than 8388608 items"), std::string::npos) << e;
  // Strings re-encoded over and over (_codecs.encode of one 64 KiB string, 100 times).
  Pickle strings;
  strings.proto().str(std::string(65536, 'a')).put(0);
  for (int i = 0; i < 100; ++i)
    strings.global("_codecs", "encode").get(0).str("latin1").op('\x86').reduce().op('0');
  e = pickle_error(strings.stop().b);
  EXPECT_NE(e.find("strings add up to more than twice its size"), std::string::npos) << e;
}

TEST(TorchCheckpointHostile, MalformedPicklesGiveClearErrors) {
  struct Case {
    std::string pickle, expect;
  };
  const std::vector<Case> cases = {
      {Pickle().proto().empty_list().get(5).stop().b, "memo index 5 was never stored (out of range)"},
      {Pickle().proto().op('h').op(7).stop().b, "memo index 7 was never stored"},
      {Pickle().proto().op('j').le(0xffffffffu, 4).stop().b, "memo index 4294967295 was never stored"},
      {Pickle().proto().put(0).stop().b, "stack underflow"},
      {Pickle().proto().empty_dict().str("k").setitem().stop().b, "stack underflow"},
      {Pickle().proto().empty_list().b, "ends without a STOP opcode"},
      {Pickle().proto().b, "ends without a STOP opcode"},
      {"", "ends without a STOP opcode"},
      {Pickle().proto().op('X').le(0xffffffffu, 4).raw("abc").b, "needs 4294967295 more bytes, but the pickle ends"},
      {Pickle().proto().op('\x8d').le(~uint64_t{0}, 8).b, "more bytes, but the pickle ends"},
      {Pickle().proto().op('\x8b').le(0x80000000u, 4).b, "LONG4 with a negative length"},
      {Pickle().proto().op('\x8a').op(9).raw(std::string(8, '\0')).op('\x01').stop().b,
       "an integer of 9 bytes that does not fit in 64 bits"},
      {Pickle().proto(6).stop().b, "pickle protocol 6"},
      {Pickle().proto().op('\xff').b, "unknown pickle opcode 0xff"},
      {Pickle().proto().op('\x97').b, "NEXT_BUFFER (an out-of-band buffer)"},
      {Pickle().proto().op('\x82').op(1).b, "EXT1 (the copyreg extension registry)"},
      {"cos\nsystem\n(S'ls'\ntR.", "'os.system'"},
      {"(ios\nsystem\nS'ls'\n.", "INST"},
      {Pickle().proto().op('I').raw("1\n").stop().b, "text protocol 0"},
      {Pickle().proto().op('c').raw(std::string(300, 'a')).stop().b, "GLOBAL without a name line"},
      {Pickle().proto().op('e').stop().b, "needs a MARK, but none is open"},
      {Pickle().proto().mark().str("k").op('d').stop().b, "DICT with an odd number"},
      {Pickle().proto().op('\x95').le(1000, 8).stop().b, "a FRAME of 1000 bytes"},
      {Pickle().proto().mark().op('.').b, "stack underflow"},
  };
  for (const Case& c : cases) {
    const std::string e = pickle_error(c.pickle);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << e;
    EXPECT_NE(e.find("hostile.pt': data.pkl, byte"), std::string::npos) << e;
  }
}

TEST(TorchCheckpointHostile, TruncatedCorruptAndForeignArchivesGiveClearErrors) {
  test::TempDir dir;
  const std::string good = test::read_file(fixture("ultralytics_train_tiny.pt"));
  ASSERT_GT(good.size(), 10000u);
  const fs::path path = dir.path() / "bad.pt";
  // Every truncation point of a few: an error naming the file, never a crash or a hang.
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4}, size_t{30}, size_t{100}, good.size() / 3, good.size() / 2,
                     good.size() - 100, good.size() - 22, good.size() - 1}) {
    test::write_file(path, good.substr(0, cut));
    const std::string e = read_error(path);
    EXPECT_NE(e.find("PyTorch checkpoint '" + path.string() + "'"), std::string::npos) << cut << ": " << e;
  }
  // Flipped bytes anywhere: an error or (in a part the reader does not check) the same checkpoint.
  for (size_t at = 0; at < good.size(); at += 97) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    test::write_file(path, bad);
    try {
      const TorchCheckpoint ck = TorchCheckpoint::read(path);
      (void)ck.root();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.pt"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(read_error(path.string() + ".missing").find("file not found"), std::string::npos);
  EXPECT_NE(read_error(dir.path()).find("is a directory"), std::string::npos);
  test::write_file(path, "not a zip archive at all");
  EXPECT_NE(read_error(path).find("not a readable zip archive"), std::string::npos);

  test::write_zip(path, {{"archive/version", "3\n"}, {"weights.bin", "xx"}});
  EXPECT_NE(read_error(path).find("has no <folder>/data.pkl, so it is no PyTorch checkpoint (its first entries: "
                                  "archive/version, weights.bin)"),
            std::string::npos)
      << read_error(path);
  test::write_zip(path, {{"data.pkl", Pickle().proto().none().stop().b}});
  EXPECT_NE(read_error(path).find("has no <folder>/data.pkl"), std::string::npos);
  test::write_zip(path, {{"a/data.pkl", Pickle().proto().none().stop().b}, {"b/data.pkl", "x"}});
  EXPECT_NE(read_error(path).find("has 2 data.pkl entries"), std::string::npos);
  test::write_zip(path, {{"a/data.pkl", Pickle().proto().none().stop().b}, {"a/byteorder", "big"}});
  EXPECT_NE(read_error(path).find("byte order is 'big'; only little-endian"), std::string::npos);
  test::write_checkpoint(path, Pickle().proto().none().stop().b, {}, "archive", ZIP_CM_BZIP2);
  EXPECT_NE(read_error(path).find("is compressed with method 12"), std::string::npos) << read_error(path);
}

}  // namespace
}  // namespace vision
