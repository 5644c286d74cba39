#include "vision/core/json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "vision/core/error.h"

namespace vision::core {

namespace {

// Thrown from the parser callback; caught and rethrown as vision::Error with the caller's WHAT.
struct TooDeep {};

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view what, int max_depth, const JsonEvent& on_event) {
  try {
    return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if ((event == nlohmann::json::parse_event_t::object_start ||
           event == nlohmann::json::parse_event_t::array_start) &&
          depth >= max_depth)
        throw TooDeep{};
      return on_event ? on_event(depth, event, parsed) : true;
    });
  } catch (const TooDeep&) {
    fail("{} nests JSON deeper than {} levels, which no valid file does", what, max_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON ({})", what, e.what());
  }
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "…";
  return s;
}

std::string read_text_file(const std::filesystem::path& path, std::string_view what, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{} '{}' is a folder, not a file", what, path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {} '{}': {}", what, path.string(), std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) fail("cannot read {} '{}': cannot tell its size", what, path.string());
  if (static_cast<uint64_t>(size) > max_bytes)
    fail("{} '{}' has {} bytes, more than the {} accepted", what, path.string(), size, max_bytes);
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) fail("cannot read {} '{}': read error", what, path.string());
  return text;
}

}  // namespace vision::core
