// Parameter groups — which optimizer group each trainable tensor of a model's state belongs to, from the state's
// entry names and shapes (ultralytics state_dict keys), and which tensors are frozen.
//
// Rules, first match wins, for every trainable parameter that is not frozen:
//   1. (MuSGD only) rank ≥ 2                                   → muon   (weight decay)
//   2. the key contains "bias"                                 → bias   (no decay)
//   3. a normalisation layer's weight: "<prefix>.weight" where the state has a buffer "<prefix>.running_mean"
//      (BatchNorm)                                             → bn     (no decay)
//   4. anything else                                           → weight (weight decay)
// Under MuSGD each group is split again: tensors whose key matches one of GroupRules::boost_patterns (glob, '*' any
// run of characters; YOLO26's Detect class branch "model.23.*cv3*", the one-to-one copy included) form a twin group
// with lr × boost_factor. Groups are listed weight, bn, bias, muon, each followed by its boosted twin; empty groups
// are left out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vision/graph/state.h"

namespace vision::train {

enum class OptimizerKind { sgd, adamw, musgd };
std::string_view optimizer_name(OptimizerKind kind);  // "SGD", "AdamW", "MuSGD"
// "SGD", "AdamW", "MuSGD" (any case); throws vision::Error naming the choices otherwise ("auto" is resolved by
// choose_auto_optimizer, before).
OptimizerKind parse_optimizer(std::string_view name);

enum class GroupKind { weight, bn, bias, muon };
std::string_view group_kind_name(GroupKind kind);  // "weight", "bn", "bias", "muon"

struct GroupRules {
  std::vector<std::string> boost_patterns;  // MuSGD: keys matching one of these get lr × boost_factor
  double boost_factor = 3.0;
  std::vector<std::string> frozen_prefixes;  // keys starting with one of these get no updates (freeze_prefixes)
};

// A trainable tensor: its key, shape and first element in the flat parameter buffer.
struct ParamTensor {
  std::string key;
  core::Shape shape;
  int64_t offset = 0;
};

struct ParamGroup {
  GroupKind kind = GroupKind::weight;
  bool boosted = false;   // the MuSGD twin of kind with lr × boost_factor
  double lr_scale = 1.0;  // boost_factor when boosted
  bool decay = false;     // weight and muon groups
  std::vector<size_t> tensors;  // indices into GroupAssignment::params, in entry order
  // "weight", "bn", "bias", "muon", or with the boost "bias.x3" (the factor as written by {:g}).
  std::string name() const;
};

struct GroupAssignment {
  std::vector<ParamTensor> params;  // every trainable parameter, in entry order
  std::vector<ParamGroup> groups;   // the non-empty groups
  std::vector<size_t> frozen;       // indices into params of the frozen tensors (in no group)
  // The group of params[i], or −1 when it is frozen.
  std::vector<int> group_of;
};

// Groups of the trainable parameters among entries (a StateStore's entries(), or graph::state_entries()). Parameter
// offsets are converted from the entries' bytes to f32 elements.
GroupAssignment assign_param_groups(const std::vector<graph::StateEntry>& entries, OptimizerKind kind,
                                    const GroupRules& rules = {});

// Whether text matches a glob pattern ('*' any run of characters, possibly empty; every other character itself).
bool glob_match(std::string_view pattern, std::string_view text);
// The prefixes of the first n layers: "model.0.", …, "model.{n−1}." (`--freeze N`); none for n ≤ 0.
std::vector<std::string> freeze_prefixes(int n);
bool is_frozen(std::string_view key, const std::vector<std::string>& frozen_prefixes);

}  // namespace vision::train
