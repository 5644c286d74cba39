#include "vision/train/param_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "vision/core/error.h"

namespace vision::train {

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "SGD";
    case OptimizerKind::adamw: return "AdamW";
    case OptimizerKind::musgd: return "MuSGD";
  }
  fail("unknown optimizer kind {}", static_cast<int>(kind));
}

OptimizerKind parse_optimizer(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "sgd") return OptimizerKind::sgd;
  if (lower == "adamw") return OptimizerKind::adamw;
  if (lower == "musgd") return OptimizerKind::musgd;
  fail("unknown optimizer '{}': choose SGD, AdamW, MuSGD or auto", name);
}

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::weight: return "weight";
    case GroupKind::bn: return "bn";
    case GroupKind::bias: return "bias";
    case GroupKind::muon: return "muon";
  }
  fail("unknown parameter group kind {}", static_cast<int>(kind));
}

std::string ParamGroup::name() const {
  std::string n(group_kind_name(kind));
  if (boosted) n += fmt::format(".x{:g}", lr_scale);
  return n;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matching with backtracking to the last '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p, ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> freeze_prefixes(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(fmt::format("model.{}.", i));
  return out;
}

bool is_frozen(std::string_view key, const std::vector<std::string>& frozen_prefixes) {
  return std::any_of(frozen_prefixes.begin(), frozen_prefixes.end(),
                     [&](const std::string& p) { return key.starts_with(p); });
}

GroupAssignment assign_param_groups(const std::vector<graph::StateEntry>& entries, OptimizerKind kind,
                                    const GroupRules& rules) {
  VISION_CHECK(rules.boost_factor > 0, "parameter groups: the lr boost factor must be positive, got {}",
               rules.boost_factor);
  std::set<std::string> norm_prefixes;  // layers with running statistics: normalisation layers
  for (const auto& e : entries) {
    constexpr std::string_view kRunningMean = ".running_mean";
    if (e.kind == graph::StateKind::buffer && std::string_view(e.key).ends_with(kRunningMean))
      norm_prefixes.insert(e.key.substr(0, e.key.size() - kRunningMean.size()));
  }
  // Slot of each (kind, boosted) pair in the listing order weight, bn, bias, muon, each with its boosted twin.
  constexpr GroupKind kOrder[] = {GroupKind::weight, GroupKind::bn, GroupKind::bias, GroupKind::muon};
  std::vector<ParamGroup> slots;
  for (GroupKind k : kOrder)
    for (bool boosted : {false, true}) {
      ParamGroup g;
      g.kind = k;
      g.boosted = boosted;
      g.lr_scale = boosted ? rules.boost_factor : 1.0;
      g.decay = k == GroupKind::weight || k == GroupKind::muon;
      slots.push_back(std::move(g));
    }
  auto slot = [](GroupKind k, bool boosted) { return static_cast<size_t>(k) * 2 + (boosted ? 1 : 0); };

  GroupAssignment out;
  std::vector<int> slot_of;
  for (const auto& e : entries) {
    if (e.kind != graph::StateKind::parameter) continue;
    VISION_CHECK(e.dtype == core::DType::f32 && e.offset % sizeof(float) == 0,
                 "parameter groups: '{}' must be an f32 parameter of the flat buffer", e.key);
    const size_t index = out.params.size();
    out.params.push_back({e.key, e.shape, static_cast<int64_t>(e.offset / sizeof(float))});
    if (is_frozen(e.key, rules.frozen_prefixes)) {
      out.frozen.push_back(index);
      slot_of.push_back(-1);
      continue;
    }
    GroupKind k = GroupKind::weight;
    const std::string_view key = e.key;
    if (kind == OptimizerKind::musgd && e.shape.rank() >= 2) {
      k = GroupKind::muon;
    } else if (key.find("bias") != std::string_view::npos) {
      k = GroupKind::bias;
    } else if (key.ends_with(".weight") && norm_prefixes.count(e.key.substr(0, e.key.size() - 7))) {
      k = GroupKind::bn;
    }
    bool boosted = false;
    if (kind == OptimizerKind::musgd)
      boosted = std::any_of(rules.boost_patterns.begin(), rules.boost_patterns.end(),
                            [&](const std::string& p) { return glob_match(p, key); });
    const size_t s = slot(k, boosted);
    slots[s].tensors.push_back(index);
    slot_of.push_back(static_cast<int>(s));
  }
  std::vector<int> group_of_slot(slots.size(), -1);
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].tensors.empty()) continue;
    group_of_slot[s] = static_cast<int>(out.groups.size());
    out.groups.push_back(std::move(slots[s]));
  }
  for (int s : slot_of) out.group_of.push_back(s < 0 ? -1 : group_of_slot[static_cast<size_t>(s)]);
  return out;
}

}  // namespace vision::train
