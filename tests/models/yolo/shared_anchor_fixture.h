// The shared-anchor fixture (tools/reference/make_shared_anchor_fixture.py): a crowded batch of 2 images of 128×128
// with 40 overlapping boxes each, where ultralytics' rule for anchors kept by several gts (the argmax over ALL gts of
// the overlap, claiming or not) decides assignments in both heads, o2m (topk 10) and o2o (topk 7, topk2 1). It holds
// the float64 reference's assignment and soft targets, and the superseded rule's assignment (the claiming gts only),
// which differs from it in both heads.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "models/yolo/assigner_reference.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/assigner.h"

namespace vision::test::shared_anchor {

constexpr const char* kHeads[2] = {"o2m", "o2o"};

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(std::string(VISION_FIXTURE_DIR) + "/yolo26_shared_anchors.safetensors");
  return f;
}

inline std::vector<int32_t> ints(const std::string& name) {
  const core::Tensor& t = fixture().at(name);
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), v.size() * sizeof(int32_t));
  return v;
}

inline models::yolo::kernels::loss::AssignerOptions options(int head) {
  using models::yolo::kernels::loss::AssignerOptions;
  return head == 0 ? AssignerOptions::one_to_many() : AssignerOptions::one_to_one();
}

// The fixture's inputs as an assigner case.
inline AssignerCase fixture_case() {
  const auto& f = fixture();
  AssignerCase c;
  const core::Tensor& logits = f.at("logits");
  c.batch = logits.dim(0), c.n_classes = logits.dim(1), c.n_anchors = logits.dim(2), c.n_max = f.at("targets").dim(1);
  c.anchors = models::yolo::kernels::detect_anchor_grid(std::stoll(f.metadata.at("image_h")),
                                                        std::stoll(f.metadata.at("image_w")));
  c.logits = logits.to_vector();
  c.boxes = f.at("boxes").to_vector();
  c.targets = f.at("targets").to_vector();
  c.count = ints("count");
  return c;
}

}  // namespace vision::test::shared_anchor
