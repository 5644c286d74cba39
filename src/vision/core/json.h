// JSON from outside the engine (file headers, metadata, data files, caches), parsed with bounds: a value nested
// deeper than kMaxJsonDepth is refused before it is built, so a hostile file cannot exhaust the stack of any code
// that walks, prints or destroys the value recursively.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace vision::core {

// The deepest nesting of arrays and objects accepted (real files nest a handful of levels).
inline constexpr int kMaxJsonDepth = 64;

// `text` as JSON. Malformed text, or arrays/objects nested deeper than max_depth, throw vision::Error
// "WHAT is not valid JSON (…)" / "WHAT nests JSON deeper than …". `on_event`, when given, sees every parse event as nlohmann's parser callback does (return false to
// drop the value); it may throw.
using JsonEvent = std::function<bool(int depth, nlohmann::json::parse_event_t, nlohmann::json&)>;
nlohmann::json parse_json(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth,
                          const JsonEvent& on_event = {});

// A short, safe rendering of a JSON value for a message: at most max_chars characters (nested values are bounded
// by parse_json, so dumping them is safe).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

// The whole of a text file, or vision::Error naming WHAT and the path; a file larger than max_bytes is refused
// before it is read.
std::string read_text_file(const std::filesystem::path& path, std::string_view what,
                           size_t max_bytes = size_t{1} << 30);

}  // namespace vision::core
