// Dataset — a YOLO-format detection dataset as ultralytics reads one (and `vision synth` writes one): a data file
// naming the splits and the classes, images, and one label file per image.
//
// The data file is YAML (read with yaml-cpp) or JSON, with the keys ultralytics' data files use:
//
//   path: ../datasets/shapes   # optional: the root the split paths are relative to; a relative `path` is taken
//                              # relative to the data file's folder, and without `path` the root is that folder
//   train: images/train        # a folder of images (searched recursively), a .txt file listing image paths (one a
//   val: images/val            # line, relative ones against the list's folder), a COCO annotations file, or a list
//   nc: 6                      # optional; must agree with names
//   names: {0: circle, 1: square}   # a {index: name} map or a list [circle, square]
//
// Other keys are ignored, whatever is below them (ultralytics' `download: |` scripts included). Malformed YAML, or a
// known key of the wrong form, is a vision::Error naming file:line.
//
// COCO: a split may also be (or include) a COCO annotations file (.json: `images` with id, file_name, width and
// height; `annotations` with id, image_id, category_id, bbox [x, y, w, h] in pixels and iscrowd; `categories` with
// id). Its categories are the classes in id order (as many as the data file names); an image's file_name is looked
// up under the root (`path`), the annotations' folder, and then `<stem>` beside that folder, `<root>/images/<stem>` and
// `<root>/<stem>`, where stem is the file's name without .json and a leading "instances_" (COCO's
// annotations/instances_val2017.json with val2017/ or images/val2017/). Crowd regions are skipped; a box is clipped to
// its image and normalised; an image that is not found, an unknown category, a bbox that is not 4 values of positive
// size, or one outside the image is reported (`file: image|annotation ID: why`), skipped and counted with the bad
// label lines. Its samples' label path is the annotations file.
//
// Images: the split's .jpg/.jpeg/.png files (any case), sorted by path. An image's label file is its path with the
// last `images` folder replaced by `labels` and the extension by .txt (ultralytics' img2label_paths); a missing label
// file means no objects. A label line is `class cx cy w h`, normalised to the image's width and height; a bad line
// — not five fields, a field that is not a number, a class that is not an integer in [0, nc), a centre or size
// outside [0, 1] by more than kLabelTolerance, a size that is not positive — is reported (`file:line: why`) and
// skipped; blank lines are ignored.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vision/data/detection.h"

namespace vision::data {

struct Dataset;

// How far outside [0, 1] a normalised label value may be (rounding in the tools that write labels).
inline constexpr double kLabelTolerance = 1e-3;

// The parsed data file.
struct DataConfig {
  std::filesystem::path file;  // the data file
  std::filesystem::path root;  // `path` resolved, or the data file's folder
  std::vector<std::filesystem::path> train, val, test;  // resolved against root; empty when the key is absent
  std::vector<std::string> names;                       // names[c] for c in [0, nc)
  int64_t nc() const { return static_cast<int64_t>(names.size()); }
  // The split's paths by name ("train", "val" or "test"); throws naming the data file when the split is absent.
  const std::vector<std::filesystem::path>& split(const std::string& name) const;
};

// Reads a .yaml/.yml or .json data file (any other extension is read as YAML). Throws vision::Error naming the file
// (and the line, for YAML) when it is missing or malformed, when `names` is absent, not a list or an {index: name}
// map of the indices 0..n−1, or disagrees with `nc`, when there is no train or val key, or when the train or val
// split names a folder or list file that does not exist (the message names the path; a missing `test` path is an
// error only when that split is listed).
DataConfig read_data_config(const std::filesystem::path& file);

// One label: class and normalised centre and size.
struct LabelBox {
  int64_t cls = 0;
  double cx = 0, cy = 0, w = 0, h = 0;
};

// The labels of one file, and one message per skipped line ("file:line: why").
struct LabelFile {
  std::vector<LabelBox> boxes;
  std::vector<std::string> problems;
};
// Why a label is not one a label file may hold (a class outside [0, nc), a centre or size outside [0, 1] by more than
// kLabelTolerance or not finite, a size that is not positive); empty when it is a good label.
std::string label_box_problem(const LabelBox& box, int64_t nc);
// A label cache's contents (what load_dataset reads from label_cache_path): fills d.samples, d.problems and d.counts
// and returns true when the cache is of this version and fingerprint and every box is a good label; false otherwise,
// with `why` saying what is wrong (empty when only the version or fingerprint differ). Never throws for bad text.
bool parse_label_cache(std::string_view text, const std::string& name, const std::string& fingerprint,
                       const std::vector<std::filesystem::path>& images, int64_t nc, Dataset& d, std::string& why);
// Parses label text; `name` (the file) starts each problem message.
LabelFile parse_labels(std::string_view text, const std::string& name, int64_t nc);
// Reads a label file: a missing file has no boxes and no problems; an unreadable one throws.
LabelFile read_labels(const std::filesystem::path& file, int64_t nc);

// The label file of an image (see the header comment).
std::filesystem::path label_path(const std::filesystem::path& image);

// The labels as GroundTruth boxes in the pixels of a width × height image: x1 = (cx − w/2)·width, etc.
std::vector<GroundTruth> to_pixels(std::span<const LabelBox> labels, int64_t width, int64_t height);

// The images of a split, in order (see the header comment); throws naming a missing folder or list file.
std::vector<std::filesystem::path> list_images(std::span<const std::filesystem::path> sources);

// The images a predict source names (`vision predict --source`, the Python `YOLO.predict`): a file; the images of a
// directory (by extension, sorted, not recursive; BMP, GIF, WebP and TIFF are listed so that decoding reports them
// as unsupported rather than skipping them silently); or a glob's regular files. Throws vision::Error for a missing
// source, an empty directory or a pattern that matches nothing.
std::vector<std::filesystem::path> expand_image_source(const std::string& source);

struct DatasetCounts {
  int64_t images = 0;          // images listed
  int64_t label_files = 0;     // images with a label file
  int64_t missing_labels = 0;  // images without one (no objects)
  int64_t instances = 0;       // good label lines
  int64_t bad_lines = 0;       // label lines skipped
};

struct Sample {
  std::filesystem::path image, label;
  std::vector<LabelBox> labels;
};

// One split of a dataset with every label file read up front.
struct Dataset {
  DataConfig config;
  std::string split;
  std::vector<Sample> samples;
  DatasetCounts counts;
  std::vector<std::string> problems;  // one per bad label line, "file:line: why", in sample order
  std::filesystem::path cache;        // the label cache file (empty without one)
  bool from_cache = false;            // the labels came from it, not from the label files
  std::string cache_problem;          // why an existing cache was malformed or held bad labels (it was rebuilt); or ""
};

// Reads the data file and the split's label files. Throws as read_data_config does, and when the split lists no
// images (naming the split's paths).
// Label cache (with use_cache, as ultralytics' labels/<split>.cache): the parsed labels, the problems and the counts
// are kept in a JSON file beside the labels (label_cache_path), written atomically, and a later load takes them from
// it while the image paths, nc and every label file's presence, size and modification time are unchanged (a changed,
// added or removed label or image, or a malformed cache, parses the label files again and rewrites it). A folder that
// cannot be written is no error.
Dataset load_dataset(const std::filesystem::path& data_file, const std::string& split = "val", bool use_cache = true);
// The cache file of a split: for a folder of images `…/images/train`, `…/labels/train.cache` (the labels folder it
// maps to, with .cache); for a list file `train.txt`, `train.cache` beside it.
std::filesystem::path label_cache_path(const std::vector<std::filesystem::path>& sources);

}  // namespace vision::data
