// Tests of safetensors reading (one hand-made corrupt file per rule the reader enforces) and atomic writing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"
#include "vision/core/json.h"
#include "vision/core/safetensors.h"

using namespace vision::core;
namespace fs = std::filesystem;

namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8,
                                DType::boolean};

// The bytes of a safetensors file: 8-byte little-endian header length, header, data.
std::string file_bytes(std::string_view header, std::string_view data = {}) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}

// A host tensor of the given shape and dtype filled with random bytes.
Tensor random_bytes_tensor(Shape shape, DType dtype) {
  Tensor t = Tensor::zeros(std::move(shape), dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  std::uniform_int_distribution<int> d(0, dtype == DType::boolean ? 1 : 255);
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(d(vision::test::rng()));
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

class Safetensors : public ::testing::Test {
 protected:
  fs::path write_raw(std::string_view header, std::string_view data = {}, const char* name = "t.safetensors") {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << file_bytes(header, data);
    return p;
  }

  // The message of the vision::Error that reading path throws ("" with a failure when nothing is thrown).
  static std::string read_error(const fs::path& path) {
    try {
      read_safetensors(path);
    } catch (const vision::Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "reading " << path << " did not throw";
    return "";
  }

  // Reading the file throws a message that names the file and contains every part.
  static void expect_read_error(const fs::path& path, std::initializer_list<std::string_view> parts) {
    const std::string msg = read_error(path);
    EXPECT_NE(msg.find(path.string()), std::string::npos) << "message does not name the file: " << msg;
    for (std::string_view part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "message lacks \"" << part << "\": " << msg;
  }

  // Every entry of dir_ (to check that no temporary file is left behind).
  std::vector<std::string> dir_entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  vision::test::TempDir temp_;        // one fresh directory per test
  const fs::path dir_ = temp_.path();
};

// An 8-byte data section and a valid F32[2] entry for it, spliced into corrupt headers below.
const std::string kData8(8, '\x01');
constexpr const char* kGood = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

// ---------------------------------------------------------------------------------------------- reading: violations

TEST_F(Safetensors, MissingFileSaysNotFound) { expect_read_error(dir_ / "absent.safetensors", {"file not found"}); }

TEST_F(Safetensors, DirectoryIsNotAFile) { expect_read_error(dir_, {"is a directory"}); }

TEST_F(Safetensors, FileTooSmallForLengthField) {
  const fs::path p = dir_ / "short.safetensors";
  std::ofstream(p, std::ios::binary) << "abcde";
  expect_read_error(p, {"5 bytes", "8-byte header length"});
}

TEST_F(Safetensors, HeaderLengthLargerThanFile) {
  std::string bytes = file_bytes("{}");
  bytes[0] = static_cast<char>(200);  // claims 200 header bytes, 2 follow
  const fs::path p = dir_ / "t.safetensors";
  std::ofstream(p, std::ios::binary) << bytes;
  expect_read_error(p, {"header length is 200 bytes", "only 2 bytes follow"});
}

TEST_F(Safetensors, HeaderLengthAbsurd) {
  std::string bytes = file_bytes("{}");
  bytes[5] = 1;  // 2^40 + 2 bytes
  const fs::path p = dir_ / "t.safetensors";
  std::ofstream(p, std::ios::binary) << bytes;
  expect_read_error(p, {"1099511627778 bytes", "limit"});
}

TEST_F(Safetensors, HeaderNotWellFormedJson) {
  expect_read_error(write_raw(R"({"w": {"dtype": "F32", )"), {"is not valid JSON"});
}

TEST_F(Safetensors, HeaderNotUtf8) {
  expect_read_error(write_raw("{\"w\xff\": 1}"), {"is not valid JSON"});
}

TEST_F(Safetensors, HeaderNotAnObject) {
  expect_read_error(write_raw(R"([1, 2, 3])"), {"header is a JSON array", "expected an object"});
}

TEST_F(Safetensors, EntryNotAnObject) {
  expect_read_error(write_raw(R"({"w": [0, 8]})", kData8), {"tensor 'w'", "entry is a JSON array", "expected an object"});
}

TEST_F(Safetensors, EntryMissingDtype) {
  expect_read_error(write_raw(R"({"w": {"shape":[2],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "has no \"dtype\""});
}

TEST_F(Safetensors, EntryMissingShape) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "has no \"shape\""});
}

TEST_F(Safetensors, EntryMissingDataOffsets) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[2]}})", kData8),
                    {"tensor 'w'", "has no \"data_offsets\""});
}

TEST_F(Safetensors, DtypeNotAString) {
  expect_read_error(write_raw(R"({"w": {"dtype":4,"shape":[2],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "\"dtype\" is a JSON number", "expected a string"});
}

TEST_F(Safetensors, DtypeUnknown) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "dtype \"F64\"", "F32, F16, BF16, I32, I64, U8, BOOL"});
}

TEST_F(Safetensors, ShapeNotAnArray) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":"2","data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "\"shape\" is a JSON string"});
}

TEST_F(Safetensors, ShapeHoldsNonInteger) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "holds a JSON number", "non-negative integers"});
}

TEST_F(Safetensors, ShapeNegativeDimension) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[-2, 1],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "negative dimension -2"});
}

TEST_F(Safetensors, ShapeTooLarge) {
  expect_read_error(
      write_raw(R"({"w": {"dtype":"F32","shape":[4611686018427387904, 4],"data_offsets":[0,8]}})", kData8),
      {"tensor 'w'", "too large"});
}

TEST_F(Safetensors, DataOffsetsWrongType) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", kData8),
                    {"tensor 'w'", "\"data_offsets\" is [\"0\",\"8\"]", "expected [begin, end]"});
}

TEST_F(Safetensors, DataOffsetsNotAPair) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", kData8),
                    {"tensor 'w'", "expected [begin, end]"});
}

TEST_F(Safetensors, DataOffsetsNegative) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kData8),
                    {"tensor 'w'", "non-negative integers"});
}

TEST_F(Safetensors, DataOffsetsEndBeforeBegin) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kData8),
                    {"tensor 'w'", "[8, 0] end before they begin"});
}

TEST_F(Safetensors, DataOffsetsOutsideDataSection) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kData8),
                    {"tensor 'w'", "outside the data section", "8 bytes"});
}

TEST_F(Safetensors, ByteCountDoesNotMatchShape) {
  expect_read_error(write_raw(R"({"w": {"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kData8),
                    {"tensor 'w'", "span 8 bytes", "F32 [3] needs", "= 12 bytes"});
}

TEST_F(Safetensors, BoolHoldingAnotherByte) {
  expect_read_error(write_raw(R"({"mask": {"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})", std::string("\x01\x00\x07\x01", 4)),
                    {"tensor 'mask' is BOOL", "byte 2 holds 7"});
}

TEST_F(Safetensors, RangesOverlap) {
  expect_read_error(write_raw(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                  "b": {"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              std::string(12, '\0')),
                    {"'a' [0, 8)", "'b' [4, 12)", "overlap"});
}

TEST_F(Safetensors, HoleBetweenTensors) {
  expect_read_error(write_raw(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                  "b": {"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              std::string(12, '\0')),
                    {"bytes [4, 8)", "belong to no tensor", "'b'"});
}

TEST_F(Safetensors, TrailingBytesAfterLastTensor) {
  expect_read_error(write_raw(std::string(R"({"w": )") + kGood + "}", kData8 + "xyz"),
                    {"last 3 bytes", "belong to no tensor"});
}

TEST_F(Safetensors, MetadataNotAnObject) {
  expect_read_error(write_raw(std::string(R"({"__metadata__": ["a"], "w": )") + kGood + "}", kData8),
                    {"\"__metadata__\" is a JSON array", "string values"});
}

TEST_F(Safetensors, MetadataValueNotAString) {
  expect_read_error(write_raw(std::string(R"({"__metadata__": {"epoch": 3}, "w": )") + kGood + "}", kData8),
                    {"\"__metadata__\" entry 'epoch' is a JSON number", "expected a string"});
}

TEST_F(Safetensors, DuplicateTensorName) {
  expect_read_error(write_raw(std::string(R"({"w": )") + kGood + R"(, "w": )" + kGood + "}", kData8),
                    {"tensor 'w' appears more than once"});
}

TEST_F(Safetensors, DuplicateKeyInEntry) {
  expect_read_error(
      write_raw(R"({"w": {"dtype":"F32","shape":[2],"dtype":"F16","data_offsets":[0,8]}})", kData8),
      {"key \"dtype\" appears more than once in the entry of 'w'"});
}

// ---------------------------------------------------------------------------------------------- reading: valid files

TEST_F(Safetensors, ReadsHandMadeFile) {
  // u8[1] at 0, then an f32 scalar at offset 1 (misaligned for f32: it gets its own copy), then i32[2] at 5.
  std::string data;
  data += '\x07';
  const float f = 2.5f;
  data.append(reinterpret_cast<const char*>(&f), 4);
  const int32_t ints[2] = {-3, 40000};
  data.append(reinterpret_cast<const char*>(ints), 8);
  const fs::path p = write_raw(R"({"__metadata__": {"format": "pt"},
     "s": {"dtype":"F32","shape":[],"data_offsets":[1,5]},
     "i": {"dtype":"I32","shape":[2, 1],"data_offsets":[5,13]},
     "b": {"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                               data);
  const SafetensorsFile file = read_safetensors(p);
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].first, "b");  // ordered by data offset
  EXPECT_EQ(file.tensors[1].first, "s");
  EXPECT_EQ(file.tensors[2].first, "i");
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));

  const Tensor& s = file.at("s");
  EXPECT_EQ(s.rank(), 0u);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.raw()) % 4, 0u);
  EXPECT_EQ(s.data<float>()[0], 2.5f);
  EXPECT_EQ(file.at("b").data<uint8_t>()[0], 7);
  const Tensor& i = file.at("i");
  EXPECT_EQ(i.shape(), (Shape{2, 1}));
  EXPECT_EQ(i.data<int32_t>()[0], -3);
  EXPECT_EQ(i.data<int32_t>()[1], 40000);
  EXPECT_EQ(i.device(), Device::cpu);

  EXPECT_EQ(file.find("nope"), nullptr);
  try {
    file.at("nope");
    ADD_FAILURE() << "at() of a missing tensor did not throw";
  } catch (const vision::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
  }
}

TEST_F(Safetensors, ReadsEmptyFileAndZeroSizedTensors) {
  EXPECT_TRUE(read_safetensors(write_raw("{}", {}, "empty.safetensors")).tensors.empty());
  const SafetensorsFile f = read_safetensors(write_raw(R"({"z": {"dtype":"F16","shape":[0, 3],"data_offsets":[0,0]},
      "w": {"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData8));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.at("z").numel(), 0);
  EXPECT_EQ(f.at("w").numel(), 2);
}

TEST_F(Safetensors, TensorsOutliveTheFileObject) {
  Tensor kept;
  {
    const SafetensorsFile f = read_safetensors(write_raw(std::string(R"({"w": )") + kGood + "}", kData8));
    kept = f.at("w");
  }
  float expected;
  std::memset(&expected, 1, 4);
  EXPECT_EQ(kept.data<float>()[1], expected);
}

// ---------------------------------------------------------------------------------------------- writing

TEST_F(Safetensors, RoundTripEveryDtypeAndRank) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dt : kAllDTypes) {
    const std::string n(dtype_name(dt));
    tensors.emplace_back(n + ".scalar", random_bytes_tensor(Shape{}, dt));
    tensors.emplace_back(n + ".vector", random_bytes_tensor(Shape{7}, dt));
    tensors.emplace_back(n + ".rank4", random_bytes_tensor(Shape{2, 3, 1, 5}, dt));
    tensors.emplace_back(n + ".empty", random_bytes_tensor(Shape{0, 3}, dt));
  }
  const fs::path p = dir_ / "all.safetensors";
  write_safetensors(p, tensors);
  const SafetensorsFile f = read_safetensors(p);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  EXPECT_TRUE(f.metadata.empty());
  for (const auto& [name, t] : tensors) {
    const Tensor* r = f.find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->dtype(), t.dtype()) << name;
    EXPECT_EQ(r->shape(), t.shape()) << name;
    EXPECT_TRUE(same_bytes(*r, t)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->raw()) % dtype_size(t.dtype()), 0u) << name;
  }
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"all.safetensors"});
}

TEST_F(Safetensors, RoundTripValuesAndMetadata) {
  const Tensor w = vision::test::random_tensor(Shape{4, 3, 3, 3});
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"epoch", "12"}, {"empty", ""}, {"quote\"d", "line\nbreak \\ ünï ✓"}};
  const fs::path p = dir_ / "m.safetensors";
  write_safetensors(p, {{"model.0.conv.weight", w}}, meta);
  const SafetensorsFile f = read_safetensors(p);
  EXPECT_EQ(f.metadata, meta);
  EXPECT_EQ(f.at("model.0.conv.weight").to_vector(), w.to_vector());
}

TEST_F(Safetensors, RawBytesFollowTheFormat) {
  const Tensor b = vision::test::random_tensor(Shape{2});
  Tensor a = random_bytes_tensor(Shape{3}, DType::u8);
  Tensor c = random_bytes_tensor(Shape{}, DType::i64);
  const fs::path p = dir_ / "raw.safetensors";
  write_safetensors(p, {{"b", b}, {"a", a}, {"c", c}}, {{"k", "v"}});
  const std::string bytes = vision::test::read_file(p);

  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header is padded to a multiple of 8";
  ASSERT_LE(8 + n, bytes.size());
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}')) << "only spaces pad the header";
  EXPECT_EQ(header.find('\n'), std::string::npos);

  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j.size(), 4u);
  EXPECT_EQ(j["__metadata__"], nlohmann::json({{"k", "v"}}));
  // Largest element size first, then by name: c (i64, 8 bytes), b (f32, 8 bytes), a (u8, 3 bytes).
  EXPECT_EQ(j["c"]["dtype"], "I64");
  EXPECT_TRUE(j["c"]["shape"].is_array() && j["c"]["shape"].empty());
  EXPECT_EQ(j["c"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(j["b"]["dtype"], "F32");
  EXPECT_EQ(j["b"]["shape"], nlohmann::json({2}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({8, 16}));
  EXPECT_EQ(j["a"]["dtype"], "U8");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json({3}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({16, 19}));

  EXPECT_EQ(bytes.size(), 8 + n + 19);
  const char* data = bytes.data() + 8 + n;
  EXPECT_EQ(std::memcmp(data, c.raw(), 8), 0);
  EXPECT_EQ(std::memcmp(data + 8, b.raw(), 8), 0);
  EXPECT_EQ(std::memcmp(data + 16, a.raw(), 3), 0);
}

TEST_F(Safetensors, NhwcTensorIsWrittenRowMajorNchw) {
  const Tensor nchw = vision::test::random_tensor(Shape{2, 3, 4, 5});
  const fs::path p = dir_ / "nhwc.safetensors";
  write_safetensors(p, {{"x", to_layout(nchw, Layout::nhwc)}});
  const Tensor r = read_safetensors(p).at("x");  // a copy: the file object is a temporary
  EXPECT_EQ(r.layout(), Layout::nchw);
  EXPECT_EQ(r.shape(), nchw.shape());
  EXPECT_EQ(r.to_vector(), nchw.to_vector());
}

TEST_F(Safetensors, OverwritesExistingFile) {
  const fs::path p = dir_ / "w.safetensors";
  write_safetensors(p, {{"old", vision::test::random_tensor(Shape{3})}});
  const Tensor t = vision::test::random_tensor(Shape{5});
  write_safetensors(p, {{"new", t}});
  const SafetensorsFile f = read_safetensors(p);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.at("new").to_vector(), t.to_vector());
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"w.safetensors"});
}

TEST_F(Safetensors, WriteToMissingDirectoryThrowsAndLeavesNothing) {
  const fs::path p = dir_ / "no_such_dir" / "w.safetensors";
  try {
    write_safetensors(p, {{"w", vision::test::random_tensor(Shape{3})}});
    ADD_FAILURE() << "write into a missing directory did not throw";
  } catch (const vision::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir_entries().empty());
}

TEST_F(Safetensors, FailedRenameRemovesTempAndKeepsTarget) {
  // The target is a non-empty directory: the temporary file is written, the rename fails.
  const fs::path p = dir_ / "target";
  fs::create_directories(p / "inside");
  try {
    write_safetensors(p, {{"w", vision::test::random_tensor(Shape{3})}});
    ADD_FAILURE() << "rename over a directory did not throw";
  } catch (const vision::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot rename"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_directory(p / "inside"));
}

TEST_F(Safetensors, BadInputsThrowAndKeepExistingFile) {
  const fs::path p = dir_ / "keep.safetensors";
  const Tensor t = vision::test::random_tensor(Shape{3});
  write_safetensors(p, {{"w", t}});
  const std::string before = vision::test::read_file(p);
  float dummy = 0;
  const std::vector<std::pair<std::vector<std::pair<std::string, Tensor>>, std::string>> cases = {
      {{{"w", t}, {"w", t}}, "given more than once"},
      {{{"__metadata__", t}}, "reserved"},
      {{{"", t}}, "empty name"},
      {{{"u", Tensor()}}, "undefined"},
      {{{"d", Tensor::view(&dummy, Shape{1}, DType::f32, Device::cuda)}}, "copy it to the host"},
      {{{"bad\xff", t}}, "valid UTF-8"},
  };
  for (const auto& [tensors, expected] : cases) {
    try {
      write_safetensors(p, tensors);
      ADD_FAILURE() << "no error for case '" << expected << "'";
    } catch (const vision::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(vision::test::read_file(p), before);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"keep.safetensors"});
}

// A header nested deeper than any real one (issue #33: the model loader crashed with a stack overflow on deep JSON)
// is refused before it is built; so is deep JSON anywhere parse_json reads.
TEST_F(Safetensors, DeeplyNestedHeaderIsRefused) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_read_error(write_raw("{\"w\": " + deep + "}"), {"the header nests JSON deeper than 8 levels"});
  EXPECT_NE(vision::test::error_of([&] { vision::core::parse_json(deep, "x"); }).find("x nests JSON deeper than 64"),
            std::string::npos);
  EXPECT_EQ(vision::core::parse_json("[[[1]]]", "x", 3), nlohmann::json::parse("[[[1]]]"));
  EXPECT_NE(vision::test::error_of([&] { vision::core::parse_json("[[[[1]]]]", "x", 3); }).find("deeper than 3"),
            std::string::npos);
  EXPECT_NE(vision::test::error_of([&] { vision::core::parse_json("{\"a\": ", "y"); }).find("y is not valid JSON"),
            std::string::npos);
}

// copy_file_atomic: the copy is whole; a failed one (the source missing) leaves the target as it was and no
// temporary behind.
TEST_F(Safetensors, CopyFileAtomic) {
  const fs::path from = dir_ / "from.bin", to = dir_ / "to.bin";
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7919 % 251);
  vision::test::write_file(from, big);
  vision::test::write_file(to, "old");
  vision::core::copy_file_atomic(from, to);
  EXPECT_EQ(vision::test::read_file(to), big);
  vision::test::write_file(to, "old");
  EXPECT_NE(vision::test::error_of([&] { vision::core::copy_file_atomic(dir_ / "absent", to); }).find("absent"),
            std::string::npos);
  EXPECT_EQ(vision::test::read_file(to), "old");
  EXPECT_NE(vision::test::error_of([&] { vision::core::copy_file_atomic(from, dir_ / "no" / "dir.bin"); })
                .find("does not exist"),
            std::string::npos);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"from.bin", "to.bin"}));
}

}  // namespace
