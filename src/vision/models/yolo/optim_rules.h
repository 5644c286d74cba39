// YOLO26's optimizer parameter-group rules (YOLO26.md "Training"): under MuSGD the Detect layer's class branch
// (model.23 cv3 and its one-to-one copy one2one_cv3) gets lr × 3; `--freeze N` freezes layers model.0 … model.{N−1}.
#pragma once

#include "vision/train/param_groups.h"

namespace vision::models::yolo {

inline constexpr const char* kDetectClassBranchPattern = "model.23.*cv3*";

inline train::GroupRules yolo26_group_rules(int freeze = 0) {
  train::GroupRules rules;
  rules.boost_patterns = {kDetectClassBranchPattern};
  rules.boost_factor = 3.0;
  rules.frozen_prefixes = train::freeze_prefixes(freeze);
  return rules;
}

}  // namespace vision::models::yolo
