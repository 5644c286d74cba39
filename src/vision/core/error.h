// vision::Error — the one exception type of the engine, with a message a user can act on.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vision {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws vision::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace vision

// VISION_CHECK(cond, "fmt {}", args...) throws vision::Error when cond is false.
#define VISION_CHECK(cond, ...)            \
  do {                                     \
    if (!(cond)) ::vision::fail(__VA_ARGS__); \
  } while (0)
