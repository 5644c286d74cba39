// Arena planning — offsets for buffers with known lifetimes, reusing memory whose users are done.
#pragma once

#include <cstddef>
#include <vector>

namespace vision::graph {

// v rounded up to a multiple of a.
constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct ArenaRequest {
  size_t bytes = 0;
  int first = 0;  // first step that uses the buffer
  int last = 0;   // last step that uses it (inclusive)
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // one per request
  size_t total = 0;             // bytes the arena needs
};

// Places every request so that two requests whose step ranges overlap never overlap in memory.
// Greedy best fit in order of first use; offsets are multiples of alignment.
ArenaLayout plan_arena(const std::vector<ArenaRequest>& requests, size_t alignment = 256);

}  // namespace vision::graph
