#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuromkl {

std::string Trim(std::string_view s);
std::string ToLower(std::string_view s);
std::vector<std::string> Split(std::string_view s, char sep);
std::string Join(const std::vector<std::string>& items, std::string_view sep);
/// The first `limit` items joined with ", ", then ", ... (N in all)" when there are more: lists in messages.
std::string Shown(const std::vector<std::string>& items, std::size_t limit = 10);
/// Levenshtein distance (for did-you-mean hints).
std::size_t EditDistance(std::string_view a, std::string_view b);
/// The candidate closest to `word` if it is plausibly a typo of it, else nullopt.
std::optional<std::string> ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);
/// ` (did you mean "x"?)` or empty.
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);
/// Shortest representation that reads back to the same double ("%.17g" trimmed).
std::string FormatDouble(double v);

}  // namespace neuromkl
