#include "vision/graph/arena.h"

#include <algorithm>
#include <numeric>

namespace vision::graph {

ArenaLayout plan_arena(const std::vector<ArenaRequest>& requests, size_t alignment) {
  ArenaLayout out;
  out.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Larger buffers first among those starting together: fewer holes.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].first != requests[b].first) return requests[a].first < requests[b].first;
    return requests[a].bytes > requests[b].bytes;
  });
  struct Placed {
    size_t offset, bytes;
    int last;
  };
  std::vector<Placed> live;  // sorted by offset
  for (size_t idx : order) {
    const ArenaRequest& r = requests[idx];
    const size_t bytes = (std::max<size_t>(r.bytes, 1) + alignment - 1) / alignment * alignment;
    // Retire buffers whose last use is before this one's first use.
    std::erase_if(live, [&](const Placed& p) { return p.last < r.first; });
    // Best fit among the gaps between live buffers (and the end).
    size_t best = static_cast<size_t>(-1), best_gap = static_cast<size_t>(-1), cursor = 0;
    for (const Placed& p : live) {
      if (p.offset >= cursor + bytes && p.offset - cursor < best_gap) {
        best = cursor;
        best_gap = p.offset - cursor;
      }
      cursor = std::max(cursor, p.offset + p.bytes);
    }
    if (best == static_cast<size_t>(-1)) best = cursor;
    out.offsets[idx] = best;
    out.total = std::max(out.total, best + bytes);
    auto pos = std::lower_bound(live.begin(), live.end(), best,
                                [](const Placed& p, size_t off) { return p.offset < off; });
    live.insert(pos, Placed{best, bytes, r.last});
  }
  return out;
}

}  // namespace vision::graph
