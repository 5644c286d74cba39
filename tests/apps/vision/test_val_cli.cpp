// `vision val` on the CPU, end to end through the CLI: a tiny dataset from `vision synth`, a model from `vision init`;
// the table with the dataset's class names and the "all" row, COCO JSON with --save-json, a corrupt image and a bad
// label line counted and skipped (exit status 0), and errors for a missing model or data file.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace vision::test_val_cli_cpp {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

CliRun cli(const std::string& args) { return test::run_cli(fmt::format("'{}' {} 2>&1", VISION_CLI, args)); }

// A synth dataset (4 val images of 64 px) and an initial model for its 6 classes, made once.
class ValCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir;
    const CliRun s = cli(fmt::format("synth --out '{}' --train 0 --val 4 --imgsz 64", data_dir().string()));
    ASSERT_EQ(s.code, 0) << s.out;
    const CliRun i = cli(fmt::format("init --scale n --nc 6 --imgsz 64 --out '{}'", model().string()));
    ASSERT_EQ(i.code, 0) << i.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path data_dir() { return dir_->path() / "shapes"; }
  static fs::path model() { return dir_->path() / "model.safetensors"; }
  static CliRun val(const std::string& args) {
    return cli(fmt::format("val --model '{}' --device cpu --batch 3 {}", model().string(), args));
  }
  static inline test::TempDir* dir_ = nullptr;
};

TEST_F(ValCli, TableAndCocoJson) {
  const fs::path json = dir_->path() / "preds.json";
  const CliRun r = val(fmt::format("--data '{}' --save-json '{}'", (data_dir() / "data.yaml").string(), json.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("mAP50-95)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("                   all          4 "), std::string::npos) << r.out;
  for (const char* name : {"circle", "square", "triangle", "star", "cross", "ring"})
    EXPECT_NE(r.out.find(fmt::format("{:>22}", name)), std::string::npos) << name << "\n" << r.out;
  EXPECT_NE(r.out.find("4 of 4 images evaluated, 0 skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 bad label lines skipped"), std::string::npos) << r.out;

  const nlohmann::json doc = nlohmann::json::parse(test::read_file(json));
  ASSERT_TRUE(doc.is_array());
  ASSERT_GT(doc.size(), 0u);
  for (const nlohmann::json& d : doc) {
    ASSERT_TRUE(d["image_id"].is_number_integer()) << d;  // stems 000000 … 000003
    EXPECT_GE(d["image_id"].get<int64_t>(), 0);
    EXPECT_LE(d["image_id"].get<int64_t>(), 3);
    EXPECT_GE(d["category_id"].get<int64_t>(), 0);
    EXPECT_LT(d["category_id"].get<int64_t>(), 6);
    ASSERT_EQ(d["bbox"].size(), 4u);
    EXPECT_GE(d["bbox"][2].get<double>(), 0.0);
    EXPECT_GE(d["bbox"][3].get<double>(), 0.0);
    EXPECT_GT(d["score"].get<double>(), 0.001);
  }
}

TEST_F(ValCli, CorruptImageAndBadLabelAreCountedAndSkipped) {
  // A copy of the dataset with one image truncated and a bad line added to another's labels, as JSON data file.
  const fs::path copy = dir_->path() / "broken";
  fs::copy(data_dir(), copy, fs::copy_options::recursive);
  const fs::path image = copy / "images" / "val" / "000001.jpg";
  const std::string jpeg = test::read_file(image);
  test::write_file(image, jpeg.substr(0, jpeg.size() / 3));
  const fs::path label = copy / "labels" / "val" / "000002.txt";
  test::write_file(label, test::read_file(label) + "7 0.5 0.5 0.1 0.1\n");
  test::write_file(copy / "data.json",
                   R"({"val": "images/val", "train": "images/train",
                       "names": ["circle", "square", "triangle", "star", "cross", "ring"]})");
  const CliRun r = val(fmt::format("--data '{}' --workers 2", (copy / "data.json").string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("000001.jpg"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("000002.txt:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("class 7 is not one of the 6 classes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 of 4 images evaluated, 1 skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 bad label line skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("                   all          3 "), std::string::npos) << r.out;
}

TEST_F(ValCli, Errors) {
  const std::string data = (data_dir() / "data.yaml").string();
  CliRun r = cli(fmt::format("val --model '{}' --data '{}' --device cpu", (dir_->path() / "nope.safetensors").string(),
                             data));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nope.safetensors"), std::string::npos) << r.out;
  r = val(fmt::format("--data '{}'", (dir_->path() / "nope.yaml").string()));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nope.yaml"), std::string::npos) << r.out;
  // A model for another number of classes.
  r = cli(fmt::format("val --model '{}/yolo26n_random.safetensors' --data '{}' --device cpu --imgsz 64",
                      VISION_FIXTURE_DIR, data));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("80 classes but the dataset"), std::string::npos) << r.out;
  // --plots naming a file: a clear error before the run (it was "internal error: filesystem error").
  test::write_file(dir_->path() / "plots.txt", "mine\n");
  r = val(fmt::format("--data '{}' --plots '{}'", data, (dir_->path() / "plots.txt").string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("plots " + (dir_->path() / "plots.txt").string() + ": cannot create the folder"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_file(dir_->path() / "plots.txt"), "mine\n");
}

}  // namespace
}  // namespace vision::test_val_cli_cpp
