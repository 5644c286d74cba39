// The YOLO-format dataset reader (vision/data/dataset.h): data files (YAML through yaml-cpp and JSON, names as a map or a
// list, block or flow, `path` resolution, missing folders, malformed lines), label files (every kind of bad line
// reported with file:line and skipped), label paths, the pixel conversion and the val loop with predictions equal to
// the labels (mAP50 = the metrics' 0.995 ceiling).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/synth/shapes.h"
#include "vision/eval/metrics.h"

namespace vision::data::test_dataset_cpp {
namespace {

namespace fs = std::filesystem;

// A dataset folder: images/{train,val} with one image each of the given size, labels/val/a.txt.
void make_tree(const fs::path& root, int64_t w = 40, int64_t h = 20) {
  for (const char* split : {"train", "val"}) {
    fs::create_directories(root / "images" / split);
    fs::create_directories(root / "labels" / split);
    write_image(Image(w, h, 3, 90), root / "images" / split / "a.jpg");
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Dataset, ReadsTheSynthDataFile) {
  test::TempDir dir;
  synth::DatasetOptions o;
  o.out = dir.path() / "shapes";
  o.train = 1;
  o.val = 2;
  o.imgsz = 64;
  synth::write_dataset(o);
  const DataConfig c = read_data_config(o.out / "data.yaml");
  ASSERT_EQ(c.nc(), 6);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(c.names[i], synth::kClassNames[i]);
  ASSERT_EQ(c.val.size(), 1u);
  EXPECT_EQ(c.val[0], (o.out / "images" / "val").lexically_normal());
  ASSERT_EQ(c.train.size(), 1u);
  EXPECT_TRUE(c.test.empty());

  const Dataset d = load_dataset(o.out / "data.yaml", "val");
  ASSERT_EQ(d.samples.size(), 2u);
  EXPECT_EQ(d.counts.images, 2);
  EXPECT_EQ(d.counts.label_files, 2);
  EXPECT_EQ(d.counts.bad_lines, 0);
  EXPECT_TRUE(d.problems.empty());
  EXPECT_EQ(d.samples[0].image.filename(), "000000.jpg");
  EXPECT_EQ(d.samples[0].label, o.out / "labels" / "val" / "000000.txt");
  int64_t n = 0;
  for (const Sample& s : d.samples) n += static_cast<int64_t>(s.labels.size());
  EXPECT_EQ(n, d.counts.instances);
  EXPECT_GT(n, 0);
}

// Two loads compared field by field.
void expect_same(const Dataset& a, const Dataset& b) {
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) {
    EXPECT_EQ(a.samples[i].image, b.samples[i].image) << i;
    EXPECT_EQ(a.samples[i].label, b.samples[i].label) << i;
    ASSERT_EQ(a.samples[i].labels.size(), b.samples[i].labels.size()) << i;
    for (size_t k = 0; k < a.samples[i].labels.size(); ++k) {
      const LabelBox &x = a.samples[i].labels[k], &y = b.samples[i].labels[k];
      EXPECT_EQ(x.cls, y.cls);  // the doubles exactly: the cache must not round them
      EXPECT_EQ(x.cx, y.cx);
      EXPECT_EQ(x.cy, y.cy);
      EXPECT_EQ(x.w, y.w);
      EXPECT_EQ(x.h, y.h);
    }
  }
  EXPECT_EQ(a.problems, b.problems);
  EXPECT_EQ(a.counts.images, b.counts.images);
  EXPECT_EQ(a.counts.label_files, b.counts.label_files);
  EXPECT_EQ(a.counts.missing_labels, b.counts.missing_labels);
  EXPECT_EQ(a.counts.instances, b.counts.instances);
  EXPECT_EQ(a.counts.bad_lines, b.counts.bad_lines);
}

TEST(Dataset, LabelCacheServesAnUnchangedSplitAndIsRebuiltWhenItChanges) {
  test::TempDir dir;
  synth::DatasetOptions o;
  o.out = dir.path() / "shapes";
  o.train = 1;
  o.val = 5;
  o.imgsz = 64;
  synth::write_dataset(o);
  const fs::path yaml = o.out / "data.yaml", labels = o.out / "labels" / "val";
  // A bad line and an image without labels, so problems and counts have something to keep.
  test::write_file(labels / "000001.txt", test::read_file(labels / "000001.txt") + "7 0.5 0.5 0.1 0.1\n");
  fs::remove(labels / "000002.txt");

  const Dataset parsed = load_dataset(yaml, "val");
  EXPECT_FALSE(parsed.from_cache);
  EXPECT_EQ(parsed.cache, o.out / "labels" / "val.cache");
  ASSERT_TRUE(fs::is_regular_file(parsed.cache));
  EXPECT_EQ(parsed.counts.missing_labels, 1);
  EXPECT_EQ(parsed.counts.bad_lines, 1);
  const Dataset cached = load_dataset(yaml, "val");
  EXPECT_TRUE(cached.from_cache);
  expect_same(parsed, cached);
  const Dataset uncached = load_dataset(yaml, "val", /*use_cache=*/false);
  EXPECT_FALSE(uncached.from_cache);
  expect_same(parsed, uncached);

  // A label file changed: parsed again, and the cache rewritten for the next load.
  test::write_file(labels / "000000.txt", "0 0.5 0.5 0.25 0.25\n1 0.25 0.25 0.125 0.125\n1 0.75 0.75 0.125 0.125\n"
                                          "2 0.5 0.25 0.0625 0.0625\n2 0.5 0.75 0.0625 0.0625\n0 0.1 0.1 0.1 0.1\n"
                                          "0 0.9 0.9 0.1 0.1\n0 0.1 0.9 0.1 0.1\n0 0.9 0.1 0.1 0.1\n"
                                          "5 0.3 0.3 0.1 0.1\n5 0.7 0.7 0.1 0.1\n5 0.3 0.7 0.1 0.1\n4 0.7 0.3 0.1 0.1\n");
  const Dataset changed = load_dataset(yaml, "val");
  EXPECT_FALSE(changed.from_cache);
  ASSERT_EQ(changed.samples[0].labels.size(), 13u);  // more than vision synth writes (1–12)
  EXPECT_EQ(changed.samples[0].labels[12].cls, 4);
  EXPECT_EQ(changed.counts.instances, parsed.counts.instances - static_cast<int64_t>(parsed.samples[0].labels.size()) + 13);
  EXPECT_TRUE(load_dataset(yaml, "val").from_cache);
  // A label file added back, and an image removed.
  test::write_file(labels / "000002.txt", "3 0.5 0.5 0.2 0.2\n");
  Dataset d = load_dataset(yaml, "val");
  EXPECT_FALSE(d.from_cache);
  EXPECT_EQ(d.counts.missing_labels, 0);
  fs::remove(o.out / "images" / "val" / "000004.jpg");
  d = load_dataset(yaml, "val");
  EXPECT_FALSE(d.from_cache);
  EXPECT_EQ(d.samples.size(), 4u);
  const Dataset now = load_dataset(yaml, "val");
  EXPECT_TRUE(now.from_cache);
  expect_same(d, now);

  // A corrupt or foreign cache is rebuilt without an error.
  for (const char* junk : {"{\"version\": 1, \"fingerprint\": \"", "not json", "{\"version\": 99}"}) {
    test::write_file(now.cache, junk);
    const Dataset again = load_dataset(yaml, "val");
    EXPECT_FALSE(again.from_cache) << junk;
    expect_same(now, again);
    EXPECT_TRUE(load_dataset(yaml, "val").from_cache) << junk;
  }
}

TEST(Dataset, CocoAnnotations) {
  test::TempDir dir;
  const fs::path root = dir.path() / "coco";
  fs::create_directories(root / "annotations");
  fs::create_directories(root / "images" / "val2017");
  write_image(Image(40, 20, 3, 90), root / "images" / "val2017" / "b.jpg");
  write_image(Image(64, 32, 3, 90), root / "images" / "val2017" / "a.jpg");
  test::write_file(root / "annotations" / "instances_val2017.json", R"({
    "images": [{"id": 7, "file_name": "a.jpg", "width": 64, "height": 32},
               {"id": 9, "file_name": "b.jpg", "width": 40, "height": 20},
               {"id": 11, "file_name": "gone.jpg", "width": 40, "height": 20}],
    "categories": [{"id": 3, "name": "bee"}, {"id": 1, "name": "ant"}],
    "annotations": [
      {"id": 1, "image_id": 7, "category_id": 3, "bbox": [8, 4, 16, 8], "iscrowd": 0},
      {"id": 2, "image_id": 7, "category_id": 1, "bbox": [48, 16, 32, 32]},
      {"id": 3, "image_id": 9, "category_id": 1, "bbox": [0, 0, 10, 5], "iscrowd": 1},
      {"id": 4, "image_id": 9, "category_id": 5, "bbox": [0, 0, 10, 5]},
      {"id": 5, "image_id": 9, "category_id": 1, "bbox": [0, 0, 0, 5]},
      {"id": 6, "image_id": 9, "category_id": 3, "bbox": [10, 5, 20, 10]},
      {"id": 8, "image_id": 11, "category_id": 3, "bbox": [10, 5, 20, 10]}]})");
  test::write_file(root / "data.yaml", "val: annotations/instances_val2017.json\ntrain: images/val2017\n"
                                       "names: [ant, bee]\n");
  const Dataset d = load_dataset(root / "data.yaml", "val");
  ASSERT_EQ(d.samples.size(), 2u);  // gone.jpg is not there
  EXPECT_EQ(d.samples[0].image, root / "images" / "val2017" / "a.jpg");  // sorted by path
  EXPECT_EQ(d.samples[0].label, root / "annotations" / "instances_val2017.json");
  ASSERT_EQ(d.samples[0].labels.size(), 2u);
  const LabelBox& bee = d.samples[0].labels[0];  // category 3: the second id, class 1
  EXPECT_EQ(bee.cls, 1);
  EXPECT_DOUBLE_EQ(bee.cx, 16.0 / 64);
  EXPECT_DOUBLE_EQ(bee.cy, 8.0 / 32);
  EXPECT_DOUBLE_EQ(bee.w, 16.0 / 64);
  EXPECT_DOUBLE_EQ(bee.h, 8.0 / 32);
  const LabelBox& ant = d.samples[0].labels[1];  // clipped to the image: x 48..64, y 16..32
  EXPECT_EQ(ant.cls, 0);
  EXPECT_DOUBLE_EQ(ant.cx, 56.0 / 64);
  EXPECT_DOUBLE_EQ(ant.cy, 24.0 / 32);
  EXPECT_DOUBLE_EQ(ant.w, 16.0 / 64);
  EXPECT_DOUBLE_EQ(ant.h, 16.0 / 32);
  ASSERT_EQ(d.samples[1].labels.size(), 1u);  // the crowd region skipped, the two bad ones reported
  EXPECT_EQ(d.samples[1].labels[0].cls, 1);
  EXPECT_DOUBLE_EQ(d.samples[1].labels[0].cx, 20.0 / 40);
  EXPECT_EQ(d.counts.images, 2);
  EXPECT_EQ(d.counts.instances, 3);
  EXPECT_EQ(d.counts.bad_lines, 3);
  ASSERT_EQ(d.problems.size(), 3u);
  EXPECT_NE(d.problems[0].find("image 11: gone.jpg not found"), std::string::npos) << d.problems[0];
  EXPECT_NE(d.problems[1].find("annotation 4: category 5"), std::string::npos) << d.problems[1];
  EXPECT_NE(d.problems[2].find("annotation 5: bbox size 0"), std::string::npos) << d.problems[2];

  // Another class count, and a file that is not COCO, are errors naming the file.
  test::write_file(root / "three.yaml", "val: annotations/instances_val2017.json\ntrain: images/val2017\n"
                                        "names: [ant, bee, cat]\n");
  EXPECT_NE(error_of([&] { load_dataset(root / "three.yaml"); }).find("2 categories, but the data file"),
            std::string::npos);
  test::write_file(root / "annotations" / "other.json", "[1, 2]");
  test::write_file(root / "other.yaml", "val: annotations/other.json\ntrain: images/val2017\nnames: [ant, bee]\n");
  EXPECT_NE(error_of([&] { load_dataset(root / "other.yaml"); }).find("needs the arrays images, annotations"),
            std::string::npos);
}

TEST(Dataset, NamesFormsAndPath) {
  test::TempDir dir;
  make_tree(dir.path() / "data");
  const fs::path conf = dir.path() / "conf";
  fs::create_directories(conf);
  struct Case {
    const char* file;
    std::string text;
  };
  const Case cases[] = {
      // A block map with a relative path, comments, quotes and an ignored key with a block scalar below it.
      {"map.yaml",
       "# comment\npath: ../data  # the root\ntrain: images/train\nval: 'images/val'\ntest:   # optional\n"
       "download: |\n  import os\n  print('x: y')\nnc: 3\nnames:\n  0: cat\n  1: \"hot dog\"\n  2: 'it''s'\n"},
      // A block list (indented and not), a flow list, a flow map, a multi-line flow list.
      {"list.yaml", "path: ../data\ntrain: images/train\nval: images/val\nnames:\n  - cat\n  - hot dog\n  - it's\n"},
      {"list0.yaml", "path: ../data\ntrain: images/train\nval: images/val\nnames:\n- cat\n- hot dog\n- \"it's\"\n"},
      {"flow.yaml", "path: ../data\ntrain: images/train\nval: images/val\nnames: [cat, 'hot dog', \"it's\"]\n"},
      {"flowmap.yaml", "path: ../data\ntrain: images/train\nval: [images/val]\nnames: {0: cat, 1: hot dog, 2: it's}\n"},
      {"multi.yaml", "path: ../data\ntrain: images/train\nval: images/val\nnames: [cat,\n  'hot dog',\n  it's]\n"},
      // JSON, names a list and a map.
      {"list.json", R"({"path": "../data", "train": "images/train", "val": "images/val", "nc": 3,
                       "names": ["cat", "hot dog", "it's"], "other": {"x": 1}})"},
      {"map.json", R"({"path": "../data", "train": "images/train", "val": ["images/val"],
                      "names": {"1": "hot dog", "0": "cat", "2": "it's"}})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    test::write_file(conf / c.file, c.text);
    const DataConfig config = read_data_config(conf / c.file);
    EXPECT_EQ(config.names, (std::vector<std::string>{"cat", "hot dog", "it's"}));
    EXPECT_EQ(config.root, (dir.path() / "data").lexically_normal());
    ASSERT_EQ(config.val.size(), 1u);
    EXPECT_EQ(config.val[0], (dir.path() / "data" / "images" / "val").lexically_normal());
    EXPECT_TRUE(config.test.empty());
    EXPECT_EQ(load_dataset(conf / c.file).samples.size(), 1u);
  }
  // Without `path`, relative to the data file's folder.
  test::write_file(dir.path() / "data" / "d.yaml", "train: images/train\nval: images/val\nnames: [a]\n");
  const DataConfig rel = read_data_config(dir.path() / "data" / "d.yaml");
  EXPECT_EQ(rel.val[0], (dir.path() / "data" / "images" / "val").lexically_normal());
}

TEST(Dataset, DataFileErrors) {
  test::TempDir dir;
  make_tree(dir.path());
  const fs::path f = dir.path() / "d.yaml";
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"train: images/train\nval: images/nope\nnames: [a]\n", "images/nope' does not exist"},
      {"train: images/train\nval: images/val\n", "no 'names'"},
      {"train: images/train\nval: images/val\nnc: 2\nnames: [a]\n", "d.yaml:3: nc 2 does not match the 1 names"},
      {"train: images/train\nval: images/val\nnames:\n  0: a\n  2: b\n", "d.yaml:4: 'names' has no class 1"},
      // Malformed YAML: yaml-cpp's message at file:line.
      {"train: images/train\nval: images/val\nnames: [a\n", "d.yaml:4: end of sequence flow not found"},
      {"train: images/train\nval: images/val\nthis is not yaml\nnames: [a]\n", "d.yaml:4: illegal map value"},
      {"train: images/train\nval: images/val\nnames:\n  - a\n  0: b\n", "d.yaml:5: end of map not found"},
      {"train: images/train\n  oops: 1\nval: images/val\nnames: [a]\n", "d.yaml:2: illegal map value"},
      // Known keys of the wrong form.
      {"train: images/train\nval: {a: b}\nnames: [a]\n", "d.yaml:2: 'val' must be a path or a list of paths"},
      {"train: images/train\nval: images/val\nnames: [[a, b]]\n", "d.yaml:3: each item of 'names' must be a single value"},
      {"train: images/train\nval: images/val\nnames: cat\n", "d.yaml:3: 'names' must be a list or an {index: name} map"},
      {"train: images/train\nval: images/val\nnc: two\nnames: [a]\n", "d.yaml:3: 'nc' must be a positive integer"},
      {"- train\n- val\n", "the data file must be a YAML map"},
      {"names: [a]\n", "no 'train' or 'val' split"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    test::write_file(f, c.text);
    const std::string e = error_of([&] { read_data_config(f); });
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { read_data_config(dir.path() / "missing.yaml"); }).find("missing.yaml"), std::string::npos);
  test::write_file(dir.path() / "d.json", "{\"names\": [\"a\"], \"val\": ");
  EXPECT_NE(error_of([&] { read_data_config(dir.path() / "d.json"); }).find("d.json is not valid JSON"), std::string::npos);
  // A split that is absent, and one without images.
  test::write_file(f, "val: images/val\nnames: [a]\n");
  EXPECT_NE(error_of([&] { load_dataset(f, "train"); }).find("no 'train' split"), std::string::npos);
  fs::create_directories(dir.path() / "images" / "empty");
  test::write_file(f, "val: images/empty\nnames: [a]\n");
  EXPECT_NE(error_of([&] { load_dataset(f, "val"); }).find("has no images"), std::string::npos);
  // A missing test folder is an error only when the test split is listed.
  test::write_file(f, "val: images/val\ntest: images/not_downloaded\nnames: [a]\n");
  EXPECT_EQ(load_dataset(f, "val").samples.size(), 1u);
  EXPECT_NE(error_of([&] { load_dataset(f, "test"); }).find("images/not_downloaded' does not exist"),
            std::string::npos);
}

TEST(Dataset, LabelLines) {
  const std::string text =
      "0 0.5 0.5 0.2 0.4\n"        // 1 good
      "\n"                         // 2 blank: ignored
      "1 0.5 0.5 0.2\n"            // 3 four fields
      "1 0.5 0.5 0.2 0.4 0.9\n"    // 4 six fields
      "1 0.5 abc 0.2 0.4\n"        // 5 not a number
      "3 0.5 0.5 0.2 0.4\n"        // 6 class ≥ nc
      "-1 0.5 0.5 0.2 0.4\n"       // 7 negative class
      "1.5 0.5 0.5 0.2 0.4\n"      // 8 fractional class
      "1 1.2 0.5 0.2 0.4\n"        // 9 centre outside [0, 1]
      "1 0.5 -0.1 0.2 0.4\n"       // 10
      "1 0.5 0.5 0 0.4\n"          // 11 zero width
      "1 0.5 0.5 0.2 -0.4\n"       // 12 negative height
      "1 0.5 0.5 1.5 0.4\n"        // 13 size > 1
      "1 0.5 0.5 0.2 nan\n"        // 14 not finite
      "2.0 1.0005 0 1 1\r\n";      // 15 good (within the tolerance; CRLF)
  const LabelFile l = parse_labels(text, "x.txt", 3);
  ASSERT_EQ(l.boxes.size(), 2u);
  EXPECT_EQ(l.boxes[0].cls, 0);
  EXPECT_DOUBLE_EQ(l.boxes[0].h, 0.4);
  EXPECT_EQ(l.boxes[1].cls, 2);
  ASSERT_EQ(l.problems.size(), 12u);
  const char* expected[] = {"x.txt:3: expected 5 fields",      "x.txt:4: expected 5 fields",
                            "x.txt:5: 'abc' is not a number",  "x.txt:6: class 3 is not one of the 3",
                            "x.txt:7: class -1",               "x.txt:8: class 1.5",
                            "x.txt:9: cx 1.2 is outside",      "x.txt:10: cy -0.1 is outside",
                            "x.txt:11: w 0 is not positive",   "x.txt:12: h -0.4 is outside",
                            "x.txt:13: w 1.5 is outside",      "x.txt:14: 'nan' is not a number"};
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(l.problems[i].rfind(expected[i], 0), 0u) << l.problems[i];

  // Through load_dataset: counted, reported, skipped; a missing label file is no objects.
  test::TempDir dir;
  make_tree(dir.path());
  write_image(Image(40, 20, 3, 90), dir.path() / "images" / "val" / "b.png");
  test::write_file(dir.path() / "labels" / "val" / "a.txt", text);
  test::write_file(dir.path() / "d.yaml", "train: images/train\nval: images/val\nnames: [a, b, c]\n");
  const Dataset d = load_dataset(dir.path() / "d.yaml");
  ASSERT_EQ(d.samples.size(), 2u);
  EXPECT_EQ(d.samples[0].labels.size(), 2u);
  EXPECT_TRUE(d.samples[1].labels.empty());
  EXPECT_EQ(d.counts.images, 2);
  EXPECT_EQ(d.counts.label_files, 1);
  EXPECT_EQ(d.counts.missing_labels, 1);
  EXPECT_EQ(d.counts.instances, 2);
  EXPECT_EQ(d.counts.bad_lines, 12);
  ASSERT_EQ(d.problems.size(), 12u);
  EXPECT_NE(d.problems[0].find((dir.path() / "labels" / "val" / "a.txt").string() + ":3: "), std::string::npos);
}

TEST(Dataset, LabelPathsListsAndPixels) {
  EXPECT_EQ(label_path("/d/images/val/x.jpg"), fs::path("/d/labels/val/x.txt"));
  EXPECT_EQ(label_path("/images/d/images/x.PNG"), fs::path("/images/d/labels/x.txt"));
  EXPECT_EQ(label_path("d/pics/x.jpeg"), fs::path("d/pics/x.txt"));
  EXPECT_EQ(label_path("d/images/images.jpg"), fs::path("d/labels/images.txt"));

  // A .txt list of images, relative lines against the list's folder; other extensions left out; sorted.
  test::TempDir dir;
  make_tree(dir.path());
  write_image(Image(8, 8, 3, 1), dir.path() / "images" / "val" / "0.png");
  test::write_file(dir.path() / "val.txt", "./images/val/a.jpg\n\nimages/val/0.png\nimages/val/notes.md\n");
  test::write_file(dir.path() / "d.yaml", "train: images/train\nval: val.txt\nnames: [a]\n");
  const Dataset d = load_dataset(dir.path() / "d.yaml");
  ASSERT_EQ(d.samples.size(), 2u);
  EXPECT_EQ(d.samples[0].image, (dir.path() / "images" / "val" / "0.png").lexically_normal());
  EXPECT_EQ(d.samples[1].label, (dir.path() / "labels" / "val" / "a.txt").lexically_normal());

  const std::vector<LabelBox> labels = {{1, 0.5, 0.25, 0.5, 0.5}, {0, 0.1, 0.9, 0.2, 0.2}};
  const std::vector<eval::GroundTruth> px = to_pixels(labels, 200, 100);
  ASSERT_EQ(px.size(), 2u);
  EXPECT_EQ(px[0].cls, 1);
  EXPECT_FLOAT_EQ(px[0].box[0], 50.0f);
  EXPECT_FLOAT_EQ(px[0].box[1], 0.0f);
  EXPECT_FLOAT_EQ(px[0].box[2], 150.0f);
  EXPECT_FLOAT_EQ(px[0].box[3], 50.0f);
  EXPECT_FLOAT_EQ(px[1].box[0], 0.0f);
  EXPECT_FLOAT_EQ(px[1].box[1], 80.0f);
  EXPECT_FLOAT_EQ(px[1].box[2], 40.0f);
  EXPECT_FLOAT_EQ(px[1].box[3], 100.0f);
}

// The val loop with predictions equal to the labels: a synth dataset's labels, through the reader's pixel
// conversion of the decoded image's size, as score-1 detections: every class at the metrics' ceiling.
TEST(Dataset, PerfectPredictionsGiveTheCeiling) {
  test::TempDir dir;
  synth::DatasetOptions o;
  o.out = dir.path();
  o.train = 0;
  o.val = 6;
  o.imgsz = 64;
  synth::write_dataset(o);
  const Dataset d = load_dataset(dir.path() / "data.yaml");
  eval::DetectionMetrics m(d.config.nc());
  for (const Sample& s : d.samples) {
    const Image image = read_image(s.image);
    const std::vector<eval::GroundTruth> gt = to_pixels(s.labels, image.width, image.height);
    std::vector<Detection> preds;
    for (const eval::GroundTruth& g : gt) preds.push_back({g.box, 1.0f, g.cls});
    m.add_image(preds, gt);
  }
  const eval::MetricsResult r = m.compute();
  EXPECT_EQ(r.images, 6);
  EXPECT_EQ(r.instances, d.counts.instances);
  EXPECT_NEAR(r.map50, 0.995, 1e-12);
  EXPECT_NEAR(r.map, 0.995, 1e-12);
  EXPECT_NEAR(r.mp, 1.0, 1e-12);
  EXPECT_NEAR(r.mr, 1.0, 1e-12);
  // A shifted conversion (pixels of another size) would not be perfect.
  eval::DetectionMetrics off(d.config.nc());
  for (const Sample& s : d.samples) {
    const std::vector<eval::GroundTruth> gt = to_pixels(s.labels, 64, 64);
    std::vector<Detection> preds;
    for (const eval::GroundTruth& g : to_pixels(s.labels, 64, 48)) preds.push_back({g.box, 1.0f, g.cls});
    off.add_image(preds, gt);
  }
  EXPECT_LT(off.compute().map, 0.9);
}


// ---------------------------------------------------------------------------------------------------------------
// Hostile datasets (issue #33)

TEST(DatasetHostile, CocoImagesSharingAnIdAreAnError) {
  // Before, the second entry replaced the first: image 0's annotations went to the other image, no problem reported.
  test::TempDir dir;
  const fs::path root = dir.path();
  fs::create_directories(root / "images");
  write_image(Image(40, 20, 3, 90), root / "images" / "a.jpg");
  write_image(Image(40, 20, 3, 90), root / "images" / "b.jpg");
  test::write_file(root / "ann.json", R"({
    "images": [{"id": 1, "file_name": "images/a.jpg", "width": 40, "height": 20},
               {"id": 1, "file_name": "images/b.jpg", "width": 40, "height": 20}],
    "categories": [{"id": 1}],
    "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 5]}]})");
  test::write_file(root / "data.yaml", "val: ann.json\ntrain: images\nnames: [x]\n");
  const std::string e = error_of([&] { load_dataset(root / "data.yaml", "val"); });
  EXPECT_NE(e.find("'images/a.jpg' and 'images/b.jpg' share the id 1"), std::string::npos) << e;
  EXPECT_NE(e.find("ann.json"), std::string::npos) << e;
}

TEST(DatasetHostile, ATamperedLabelCacheIsCheckedAndRebuilt) {
  test::TempDir dir;
  synth::DatasetOptions o;
  o.out = dir.path() / "shapes";
  o.train = 1;
  o.val = 3;
  o.imgsz = 64;
  synth::write_dataset(o);
  const fs::path yaml = o.out / "data.yaml";
  const Dataset good = load_dataset(yaml, "val");
  ASSERT_TRUE(load_dataset(yaml, "val").from_cache);
  const std::string cache = test::read_file(good.cache);
  const auto box = nlohmann::json::parse(cache)["samples"][0]["boxes"][0];
  ASSERT_TRUE(box.is_array());
  // The fingerprint covers the label files, not the cache's own content: each tampered box is found by the checks a
  // label line gets, the cache is named, and the labels come from the label files.
  for (const auto& [replacement, why] : std::vector<std::pair<std::string, std::string>>{
           {"[99, 0.5, 0.5, 0.1, 0.1]", "class 99 is not one of the 6"},
           {"[-1, 0.5, 0.5, 0.1, 0.1]", "class -1"},
           {"[0, 1e300, 0.5, 0.1, 0.1]", "cx 1e+300 is outside"},
           {"[0, 0.5, 0.5, 0, 0.1]", "w 0 is not positive"},
           {"[0, 0.5, 0.5, -0.1, 0.1]", "w -0.1 is outside"},
           {"[0, 0.5]", "not [class, cx, cy, w, h]"},
           {"[0.5, 0.5, 0.5, 0.1, 0.1]", "not [class, cx, cy, w, h]"}}) {
    nlohmann::json j = nlohmann::json::parse(cache);
    j["samples"][0]["boxes"][0] = nlohmann::json::parse(replacement);
    test::write_file(good.cache, j.dump());
    const Dataset d = load_dataset(yaml, "val");
    EXPECT_FALSE(d.from_cache) << replacement;
    EXPECT_NE(d.cache_problem.find(good.cache.string()), std::string::npos) << d.cache_problem;
    EXPECT_NE(d.cache_problem.find(why), std::string::npos) << replacement << ": " << d.cache_problem;
    expect_same(good, d);
    EXPECT_TRUE(load_dataset(yaml, "val").cache_problem.empty());  // rewritten
  }
  // A cache nested deeper than any real one is refused as malformed, not walked.
  test::write_file(good.cache, std::string(100000, '[') + std::string(100000, ']'));
  const Dataset deep = load_dataset(yaml, "val");
  EXPECT_FALSE(deep.from_cache);
  EXPECT_NE(deep.cache_problem.find("deeper"), std::string::npos) << deep.cache_problem;
}

TEST(DatasetHostile, OddFilesAreReportedNotFatal) {
  test::TempDir dir;
  const fs::path root = dir.path();
  make_tree(root);
  write_image(Image(40, 20, 3, 90), root / "images" / "val" / "b.jpg");
  test::write_file(root / "labels" / "val" / "b.txt", "0 0.5 0.5 0.2 0.2\n");
  test::write_file(root / "data.yaml", "path: .\ntrain: images/train\nval: images/val\nnames: [x]\n");
  // A folder where a label file should be: that image has no labels, the split loads, the problem is reported.
  fs::create_directories(root / "labels" / "val" / "a.txt");
  const Dataset d = load_dataset(root / "data.yaml", "val", /*use_cache=*/false);
  ASSERT_EQ(d.samples.size(), 2u);
  EXPECT_TRUE(d.samples[0].labels.empty());
  EXPECT_EQ(d.samples[1].labels.size(), 1u);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_NE(d.problems[0].find("a folder where the image's label file should be"), std::string::npos)
      << d.problems[0];
  // A dataset with no labels at all loads (every image is background).
  fs::remove_all(root / "labels");
  const Dataset none = load_dataset(root / "data.yaml", "val", /*use_cache=*/false);
  EXPECT_EQ(none.counts.images, 2);
  EXPECT_EQ(none.counts.instances, 0);
  EXPECT_EQ(none.counts.missing_labels, 2);
  // A split folder without images is an error naming it.
  fs::create_directories(root / "images" / "empty");
  test::write_file(root / "empty.yaml", "train: images/empty\nval: images/empty\nnames: [x]\n");
  EXPECT_NE(error_of([&] { load_dataset(root / "empty.yaml", "val"); }).find("has no images"), std::string::npos);
  // Deeply nested YAML and JSON data files: a message naming the file, not "bad file" or a crash.
  test::write_file(root / "deep.yaml", "names: [x]\ntrain: " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  std::string e = error_of([&] { read_data_config(root / "deep.yaml"); });
  EXPECT_NE(e.find("deep.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("nests deeper"), std::string::npos) << e;
  test::write_file(root / "deep.json", "{\"names\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  e = error_of([&] { read_data_config(root / "deep.json"); });
  EXPECT_NE(e.find("deep.json nests JSON deeper than 64 levels"), std::string::npos) << e;
  // A data file that is a folder.
  fs::create_directories(root / "folder.yaml");
  EXPECT_NE(error_of([&] { read_data_config(root / "folder.yaml"); }).find("is a folder"), std::string::npos);
}

}  // namespace
}  // namespace vision::data::test_dataset_cpp
