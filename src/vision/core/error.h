// vision::Error — the one exception type of the engine, with a message a user can act on and a kind that says whose
// problem it is: a bad argument (an option, a value, a call), a bad input file (an image, weights, a checkpoint, a
// dataset), the device (CUDA, its libraries, the driver), memory running out, or an internal error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace vision {

enum class ErrorKind { argument, input, device, out_of_memory, internal };

constexpr std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::argument: return "bad argument";
    case ErrorKind::input: return "bad input";
    case ErrorKind::device: return "device error";
    case ErrorKind::out_of_memory: return "out of memory";
    case ErrorKind::internal: return "internal error";
  }
  return "error";
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::argument)
      : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// Throws vision::Error (a bad argument) with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// The same for a bad input file (the message names the file and what is wrong with it).
template <typename... Args>
[[noreturn]] void fail_input(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...), ErrorKind::input);
}

// The same of any kind.
template <typename... Args>
[[noreturn]] void fail_as(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...), kind);
}

}  // namespace vision

// VISION_CHECK(cond, "fmt {}", args...) throws vision::Error (a bad argument) when cond is false;
// VISION_CHECK_INPUT(cond, …) a bad-input one (a file's content).
#define VISION_CHECK(cond, ...)            \
  do {                                     \
    if (!(cond)) ::vision::fail(__VA_ARGS__); \
  } while (0)
#define VISION_CHECK_INPUT(cond, ...)               \
  do {                                              \
    if (!(cond)) ::vision::fail_input(__VA_ARGS__); \
  } while (0)
