#include "vision/track/assignment.h"

#include <cmath>
#include <limits>

#include "vision/core/error.h"

namespace vision::track {

namespace {

// The minimum-cost perfect matching of a square n × n matrix: row_of[column] (shortest augmenting paths with row and
// column potentials, one row added at a time).
std::vector<int64_t> solve_square(const std::vector<double>& a, int64_t n) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  // 1-based: index 0 is the virtual column the augmenting path starts from.
  std::vector<double> u(static_cast<size_t>(n + 1), 0.0), v(static_cast<size_t>(n + 1), 0.0);
  std::vector<int64_t> row_of(static_cast<size_t>(n + 1), 0), way(static_cast<size_t>(n + 1), 0);
  std::vector<double> min_to(static_cast<size_t>(n + 1));
  std::vector<char> used(static_cast<size_t>(n + 1));
  auto at = [&](int64_t i, int64_t j) { return a[static_cast<size_t>((i - 1) * n + (j - 1))]; };
  for (int64_t i = 1; i <= n; ++i) {
    row_of[0] = i;
    int64_t j0 = 0;
    std::fill(min_to.begin(), min_to.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[static_cast<size_t>(j0)] = 1;
      const int64_t i0 = row_of[static_cast<size_t>(j0)];
      double delta = inf;
      int64_t j1 = 0;
      for (int64_t j = 1; j <= n; ++j) {
        if (used[static_cast<size_t>(j)]) continue;
        const double reduced = at(i0, j) - u[static_cast<size_t>(i0)] - v[static_cast<size_t>(j)];
        if (reduced < min_to[static_cast<size_t>(j)]) {
          min_to[static_cast<size_t>(j)] = reduced;
          way[static_cast<size_t>(j)] = j0;
        }
        if (min_to[static_cast<size_t>(j)] < delta) {
          delta = min_to[static_cast<size_t>(j)];
          j1 = j;
        }
      }
      for (int64_t j = 0; j <= n; ++j) {
        if (used[static_cast<size_t>(j)]) {
          u[static_cast<size_t>(row_of[static_cast<size_t>(j)])] += delta;
          v[static_cast<size_t>(j)] -= delta;
        } else {
          min_to[static_cast<size_t>(j)] -= delta;
        }
      }
      j0 = j1;
    } while (row_of[static_cast<size_t>(j0)] != 0);
    do {  // flip the path
      const int64_t j1 = way[static_cast<size_t>(j0)];
      row_of[static_cast<size_t>(j0)] = row_of[static_cast<size_t>(j1)];
      j0 = j1;
    } while (j0 != 0);
  }
  return row_of;
}

}  // namespace

Assignment linear_assignment(std::span<const double> cost, int64_t rows, int64_t cols, double cost_limit) {
  VISION_CHECK(rows >= 0 && cols >= 0 && cost.size() == static_cast<size_t>(rows * cols),
               "linear_assignment: {} costs for a {}×{} matrix", cost.size(), rows, cols);
  VISION_CHECK(std::isfinite(cost_limit) && cost_limit >= 0, "linear_assignment: the cost limit must be finite and "
               "non-negative, got {}", cost_limit);
  for (double c : cost) VISION_CHECK(std::isfinite(c), "linear_assignment: a cost is {}", c);
  Assignment out;
  if (rows == 0 || cols == 0) {
    for (int64_t i = 0; i < rows; ++i) out.unmatched_rows.push_back(i);
    for (int64_t j = 0; j < cols; ++j) out.unmatched_cols.push_back(j);
    return out;
  }
  // The extended square problem: [[cost, L/2], [L/2, 0]] (a row or a column left alone costs L/2).
  const int64_t n = rows + cols;
  std::vector<double> a(static_cast<size_t>(n * n), cost_limit / 2);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) a[static_cast<size_t>(i * n + j)] = cost[static_cast<size_t>(i * cols + j)];
  for (int64_t i = rows; i < n; ++i)
    for (int64_t j = cols; j < n; ++j) a[static_cast<size_t>(i * n + j)] = 0;
  const std::vector<int64_t> row_of = solve_square(a, n);
  std::vector<int64_t> col_of_row(static_cast<size_t>(rows), -1);
  std::vector<char> col_used(static_cast<size_t>(cols), 0);
  for (int64_t j = 1; j <= cols; ++j) {
    const int64_t i = row_of[static_cast<size_t>(j)] - 1;
    if (i < rows) {
      col_of_row[static_cast<size_t>(i)] = j - 1;
      col_used[static_cast<size_t>(j - 1)] = 1;
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (col_of_row[static_cast<size_t>(i)] >= 0)
      out.matches.emplace_back(i, col_of_row[static_cast<size_t>(i)]);
    else
      out.unmatched_rows.push_back(i);
  }
  for (int64_t j = 0; j < cols; ++j)
    if (!col_used[static_cast<size_t>(j)]) out.unmatched_cols.push_back(j);
  return out;
}

}  // namespace vision::track
