#include "json_reader.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::config {

std::string ReadConfigText(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("config:IsDirectory", path, "is a directory, expected the " + what + " (a JSON file)");
  std::optional<std::string> text = TryReadText(path);
  if (!text) throw ConfigError("config:Unreadable", path, "cannot open the " + what + " (missing or unreadable)");
  return std::move(*text);
}

namespace {
/// The deepest nesting of arrays and objects in `text`, counted by a scan of the brackets outside
/// strings and comments; stops as soon as `limit` is exceeded. Cheap, and not recursive: a file
/// nested 100,000 levels deep is refused before the recursive parts of the JSON library see it.
std::size_t NestingDepth(const std::string& text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const auto end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 1;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// JSON pointer of the value being parsed, kept up to date by the parser callback, so that an error
/// the parser raises inside a value (a number beyond double range) can name where it is.
struct PointerTracker {
  struct Frame {
    bool array = false;
    long index = -1;
    std::string key;
    std::set<std::string> keys;  ///< seen in this object: a key given twice is an error, not "last one wins"
  };
  std::vector<Frame> frames;
  void Element() {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  }
  std::string Pointer(bool next) const {
    std::string p;
    for (std::size_t f = 0; f < frames.size(); ++f) {
      p += '/';
      if (!frames[f].array) {
        p += PointerToken(frames[f].key);
      } else {
        p += std::to_string(frames[f].index + (next && f + 1 == frames.size() ? 1 : 0));
      }
    }
    return p.empty() ? "/" : p;
  }
};
}  // namespace

Json ParseConfigJson(const std::string& text, const std::string& source) {
  if (NestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw ConfigError("config:Syntax", source, fmt::format("not accepted: arrays and objects nested more than {} levels deep", kMaxJsonDepth));
  PointerTracker where;
  const Json::parser_callback_t track = [&where, &source](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        where.Element();
        where.frames.push_back({false, -1, "", {}});
        break;
      case Json::parse_event_t::array_start:
        where.Element();
        where.frames.push_back({true, -1, "", {}});
        break;
      case Json::parse_event_t::key:
        if (!where.frames.empty() && parsed.is_string()) {
          where.frames.back().key = parsed.get<std::string>();
          if (!where.frames.back().keys.insert(where.frames.back().key).second)
            throw ConfigError("config:DuplicateKey", source,
                              fmt::format("{}: the key \"{}\" is given twice in the same object (JSON readers would silently keep "
                                          "only one of them); remove one",
                                          where.Pointer(false), where.frames.back().key));
        }
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!where.frames.empty()) where.frames.pop_back();
        break;
      case Json::parse_event_t::value:
        where.Element();
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, track, true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    throw ConfigError("config:Syntax", source, std::string("not valid JSON: ") + e.what());
  } catch (const Json::out_of_range& e) {
    // 406: a number beyond the range of a double (1e400); the value was not stored, so point at it.
    const bool inArray = !where.frames.empty() && where.frames.back().array;
    throw ConfigError("config:Value", source,
                      fmt::format("{}: a number beyond the range of a double ({})", where.Pointer(inArray), e.what()));
  } catch (const Json::exception& e) {
    throw ConfigError("config:Syntax", source, std::string("not valid JSON: ") + e.what());
  }
}

std::string PointerToken(const std::string& name) {
  std::string token;
  for (char ch : name) token += ch == '~' ? std::string("~0") : ch == '/' ? std::string("~1") : std::string(1, ch);
  return token;
}

std::string ResolvePath(const std::string& base, const std::string& p) {
  if (p.empty()) return p;
  std::filesystem::path path(p);
  if (path.is_relative()) path = std::filesystem::path(base) / path;
  return path.lexically_normal().string();
}

namespace {
/// Appends a bounded rendering of `v`: at most `budget` characters and 3 levels (deeper values are
/// "[...]" / "{...}"). Recursion is bounded by the depth limit, whatever the value's own depth.
void DescribeInto(const Json& v, int depth, std::size_t budget, std::string& out) {
  if (out.size() > budget) return;
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const bool array = v.is_array();
  if (depth >= 3 || v.empty()) {
    out += array ? (v.empty() ? "[]" : "[...]") : (v.empty() ? "{}" : "{...}");
    return;
  }
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out.size() <= budget; ++it) {
    if (!first) out += ", ";
    first = false;
    if (!array) out += Json(it.key()).dump() + ": ";
    DescribeInto(*it, depth + 1, budget, out);
  }
  out += array ? ']' : '}';
}
}  // namespace

std::string Describe(const Json& v) {
  std::string text;
  DescribeInto(v, 0, 60, text);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text + " (" + v.type_name() + ")";
}

ObjectReader::ObjectReader(const Json& value, std::string pointer, std::string source, const std::vector<std::string>& known)
    : obj_(value), pointer_(std::move(pointer)), source_(std::move(source)) {
  if (!obj_.is_object())
    throw ConfigError("config:Type", source_, fmt::format("{}: expected an object, found {}", pointer_.empty() ? "/" : pointer_, Describe(obj_)));
  for (const auto& [key, _] : obj_.items()) {
    bool ok = false;
    for (const auto& k : known) ok |= k == key;
    if (!ok)
      throw ConfigError("config:UnknownKey", source_,
                        fmt::format("unknown key \"{}\" in {}{}", key, pointer_.empty() ? "/" : pointer_,
                                    DidYouMean(key, known).empty() ? "; allowed keys: " + Join(known, ", ") : DidYouMean(key, known)));
  }
}

bool ObjectReader::Has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

void ObjectReader::Fail(const std::string& key, const std::string& expected) const {
  throw ConfigError("config:Value", source_, fmt::format("{}: expected {}, found {}", Pointer(key), expected, Describe(obj_.at(key))));
}

void ObjectReader::FailAt(const std::string& pointer, const std::string& message) const {
  throw ConfigError("config:Value", source_, pointer + ": " + message);
}

std::string ObjectReader::String(const std::string& key, const std::string& fallback) const {
  if (!Has(key)) return fallback;
  if (!obj_.at(key).is_string()) Fail(key, "a string");
  return obj_.at(key).get<std::string>();
}

std::string ObjectReader::RequiredString(const std::string& key) const {
  if (!Has(key)) throw ConfigError("config:MissingKey", source_, fmt::format("{}: required key is missing (expected a string)", Pointer(key)));
  const std::string s = String(key, "");
  if (s.empty()) Fail(key, "a non-empty string");
  return s;
}

std::string ObjectReader::Choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed) const {
  const std::string s = String(key, fallback);
  for (const auto& a : allowed)
    if (a == s) return s;
  throw ConfigError("config:Value", source_,
                    fmt::format("{}: expected one of {}, found \"{}\"{}", Pointer(key), Join(allowed, ", "), s, DidYouMean(s, allowed)));
}

bool ObjectReader::Bool(const std::string& key, bool fallback) const {
  if (!Has(key)) return fallback;
  if (!obj_.at(key).is_boolean()) Fail(key, "true or false");
  return obj_.at(key).get<bool>();
}

double ObjectReader::Number(const std::string& key, double fallback, double lo, double hi) const {
  if (!Has(key)) return fallback;
  if (!obj_.at(key).is_number()) Fail(key, fmt::format("a number in [{}, {}]", FormatDouble(lo), FormatDouble(hi)));
  const double v = obj_.at(key).get<double>();
  if (!(v >= lo && v <= hi)) Fail(key, fmt::format("a number in [{}, {}]", FormatDouble(lo), std::isinf(hi) ? "inf" : FormatDouble(hi)));
  return v;
}

std::int64_t ObjectReader::Integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
  if (!Has(key)) return fallback;
  const Json& v = obj_.at(key);
  const bool whole = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (!whole) Fail(key, fmt::format("an integer in [{}, {}]", lo, hi));
  // Compared as doubles first: casting a double beyond the int64 range is undefined behaviour.
  const double d = v.get<double>();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || !(std::fabs(d) < 9.2e18))
    Fail(key, fmt::format("an integer in [{}, {}]", lo, hi));
  const auto i = v.is_number_integer() ? (v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>()) : v.get<std::int64_t>())
                                       : static_cast<std::int64_t>(d);
  if (i < lo || i > hi) Fail(key, fmt::format("an integer in [{}, {}]", lo, hi));
  return i;
}

}  // namespace neuromkl::config
