// Linear assignment with a cost limit — the association step of the trackers: rows (tracks) to distinct columns
// (detections) at the least total cost, where a row or a column may also stay unassigned at cost_limit / 2 each, so a
// pair is only ever made at a cost of at most cost_limit (the problem lap.lapjv(..., extend_cost=True, cost_limit=…)
// solves for ultralytics' trackers). Solved exactly by the shortest augmenting path method with potentials
// (Hungarian/Jonker–Volgenant, O(n³) in n = rows + cols), deterministic for equal costs.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace vision::track {

struct Assignment {
  std::vector<std::pair<int64_t, int64_t>> matches;  // (row, column), by row
  std::vector<int64_t> unmatched_rows, unmatched_cols;  // ascending
};

// cost: rows × cols, row-major, finite. Throws vision::Error for a size mismatch, a NaN or infinite cost, or a
// negative or non-finite limit.
Assignment linear_assignment(std::span<const double> cost, int64_t rows, int64_t cols, double cost_limit);

}  // namespace vision::track
