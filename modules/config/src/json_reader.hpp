#pragma once
// Strict reading of JSON objects: every key must be known (unknown keys get a did-you-mean
// hint), every value is type- and range-checked, and errors carry the JSON pointer.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace neuromkl::config {

using Json = nlohmann::json;

std::string Describe(const Json& value);  ///< "\"five\" (string)", "3.5 (number)"; at most 60 characters, 3 levels

/// The text of a file; ConfigError "cannot open the <what> (missing or unreadable)" otherwise.
std::string ReadConfigText(const std::string& path, const std::string& what);
/// Deepest nesting of arrays and objects accepted in a configuration file.
inline constexpr std::size_t kMaxJsonDepth = 512;
/// JSON (comments allowed); ConfigError [config:Syntax] naming `source`, also for files nested deeper
/// than kMaxJsonDepth (refused by a non-recursive scan before parsing); ConfigError [config:Value] at
/// its JSON pointer for a number beyond the range of a double.
Json ParseConfigJson(const std::string& text, const std::string& source);
/// `name` as one token of a JSON pointer (RFC 6901: "~" -> "~0", "/" -> "~1").
std::string PointerToken(const std::string& name);
/// `p` made absolute against `base` and normalised; an empty path stays empty.
std::string ResolvePath(const std::string& base, const std::string& p);

class ObjectReader {
 public:
  /// Checks that `value` is an object whose keys are all in `known`.
  ObjectReader(const Json& value, std::string pointer, std::string source, const std::vector<std::string>& known);
  bool Has(const std::string& key) const;
  const Json& At(const std::string& key) const { return obj_.at(key); }
  std::string Pointer(const std::string& key) const { return pointer_ + "/" + key; }
  [[noreturn]] void Fail(const std::string& key, const std::string& expected) const;
  [[noreturn]] void FailAt(const std::string& pointer, const std::string& message) const;

  std::string String(const std::string& key, const std::string& fallback) const;
  std::string RequiredString(const std::string& key) const;
  std::string Choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed) const;
  bool Bool(const std::string& key, bool fallback) const;
  double Number(const std::string& key, double fallback, double lo, double hi) const;
  std::int64_t Integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const;
  const std::string& Source() const { return source_; }

 private:
  const Json& obj_;
  std::string pointer_, source_;
};

}  // namespace neuromkl::config
