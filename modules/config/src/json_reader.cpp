#include "json_reader.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::config {

std::string ReadConfigText(const std::string& path, const std::string& what) {
  std::optional<std::string> text = TryReadText(path);
  if (!text) throw ConfigError("config:Unreadable", path, "cannot open the " + what + " (missing or unreadable)");
  return std::move(*text);
}

Json ParseConfigJson(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    throw ConfigError("config:Syntax", source, std::string("not valid JSON: ") + e.what());
  }
}

std::string ResolvePath(const std::string& base, const std::string& p) {
  if (p.empty()) return p;
  std::filesystem::path path(p);
  if (path.is_relative()) path = std::filesystem::path(base) / path;
  return path.lexically_normal().string();
}

std::string Describe(const Json& v) {
  std::string text = v.dump();
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
  const auto i = static_cast<std::int64_t>(v.get<double>());
  if (i < lo || i > hi) Fail(key, fmt::format("an integer in [{}, {}]", lo, hi));
  return i;
}

}  // namespace neuromkl::config
