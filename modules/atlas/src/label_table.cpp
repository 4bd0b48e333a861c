#include <charconv>
#include <fstream>
#include <sstream>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::atlas {

namespace {

std::vector<std::string> Tokens(const std::string& line) {
  if (line.find('\t') != std::string::npos) {
    auto cells = Split(line, '\t');
    for (auto& c : cells) c = Trim(c);
    return cells;
  }
  if (line.find(',') != std::string::npos) {
    auto cells = Split(line, ',');
    for (auto& c : cells) c = Trim(c);
    return cells;
  }
  std::istringstream ss(line);
  std::vector<std::string> out;
  std::string t;
  while (ss >> t) out.push_back(t);
  return out;
}

bool ParseInt(const std::string& s, std::int64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

LabelTable ReadLabelTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("atlas:TableUnreadable", path, "cannot open the atlas label table");
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty() || Trim(line)[0] == '#') continue;
    rows.push_back(Tokens(line));
  }
  if (rows.empty()) throw InputError("atlas:TableEmpty", path, "the atlas label table has no rows");
  // A header row: its first row has no integer cell while later rows do.
  std::vector<std::string> header;
  std::int64_t dummy;
  bool firstHasInt = false;
  for (const auto& c : rows[0]) firstHasInt |= ParseInt(c, dummy);
  if (!firstHasInt && rows.size() > 1) {
    header = rows[0];
    rows.erase(rows.begin());
  }
  const std::size_t ncols = rows[0].size();
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (rows[r].size() != ncols)
      throw InputError("atlas:TableRagged", path, "row " + std::to_string(r + 1) + " has " + std::to_string(rows[r].size()) +
                                                      " columns, expected " + std::to_string(ncols));
  LabelTable table;
  table.path = path;
  std::optional<std::size_t> nameCol;
  double bestLen = -1;
  for (std::size_t c = 0; c < ncols; ++c) {
    const std::string h = c < header.size() ? ToLower(header[c]) : "col" + std::to_string(c + 1);
    bool allInt = true;
    std::vector<std::int64_t> values;
    double len = 0;
    for (const auto& row : rows) {
      std::int64_t v;
      if (ParseInt(row[c], v)) values.push_back(v);
      else allInt = false;
      len += static_cast<double>(row[c].size());
    }
    if (allInt) {
      table.labelColumns.emplace_back(h, std::move(values));
    } else if (!header.empty() && (h == "name" || h == "label_name" || h == "region")) {
      nameCol = c;
      bestLen = 1e300;
    } else if (len > bestLen) {
      nameCol = c;
      bestLen = len;
    }
  }
  if (!nameCol) throw InputError("atlas:TableNoNames", path, "no text column with region names found");
  if (table.labelColumns.empty())
    throw InputError("atlas:TableNoLabels", path, "no integer column with label values found (expected e.g. \"2001 Precentral_L\" per row)");
  for (const auto& row : rows) table.names.push_back(row[*nameCol]);
  return table;
}

}  // namespace neuromkl::atlas
