#include "neuromkl/core/strings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace neuromkl {

std::string Trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Shown(const std::vector<std::string>& items, std::size_t limit) {
  const std::vector<std::string> shown(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(std::min(limit, items.size())));
  return Join(shown, ", ") + (items.size() > limit ? ", ... (" + std::to_string(items.size()) + " in all)" : std::string());
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string lw = ToLower(word);
  std::optional<std::string> best;
  std::size_t bestDistance = 0;
  for (const auto& c : candidates) {
    const std::size_t d = EditDistance(lw, ToLower(c));
    if (!best || d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  // A typo: at most a third of the longer word changed (at least 2 edits allowed).
  const std::size_t allowed = std::max<std::size_t>(2, std::max(word.size(), best ? best->size() : 0) / 3);
  if (best && bestDistance <= allowed) return best;
  return std::nullopt;
}

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  if (auto m = ClosestMatch(word, candidates)) return "; did you mean \"" + *m + "\"?";
  return "";
}

std::string FormatDouble(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace neuromkl
