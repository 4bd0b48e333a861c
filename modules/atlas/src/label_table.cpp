#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
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

std::string XmlText(std::string s) {
  const std::pair<const char*, const char*> entities[] = {{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities)
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + 1)) s.replace(p, std::strlen(from), to);
  return Trim(s);
}

/// FSL atlas XML: <label index="i" x=".." y=".." z="..">Name</label>. Region i is value i + 1 in
/// a label (maxprob) image and volume i in a 4-D probabilistic image.
LabelTable ReadFslXml(const std::string& path, const std::string& text) {
  LabelTable table;
  table.path = path;
  table.format = "fsl_xml";
  std::vector<std::int64_t> plusOne, index;
  for (std::size_t p = text.find("<label"); p != std::string::npos; p = text.find("<label", p + 1)) {
    const std::size_t close = text.find('>', p);
    const std::size_t end = text.find("</label>", p);
    if (close == std::string::npos || end == std::string::npos || end < close)
      throw InputError("atlas:TableSyntax", path, "FSL atlas XML: a <label> element is not closed by </label>");
    const std::string tag = text.substr(p, close - p);
    const std::size_t at = tag.find("index=");
    std::int64_t i = 0;
    if (at == std::string::npos || at + 7 >= tag.size() || !ParseInt(tag.substr(at + 7, tag.find(tag[at + 6], at + 7) - at - 7), i))
      throw InputError("atlas:TableSyntax", path, "FSL atlas XML: expected <label index=\"N\" ...>, found " + tag + ">");
    index.push_back(i);
    plusOne.push_back(i + 1);
    table.lines.push_back(static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(p), '\n')) + 1);
    table.names.push_back(XmlText(text.substr(close + 1, end - close - 1)));
  }
  if (table.names.empty()) throw InputError("atlas:TableEmpty", path, "FSL atlas XML without any <label> element");
  table.labelColumns = {{"index+1", plusOne}, {"index", index}};
  table.volumeIndex = index;
  return table;
}

/// FreeSurfer colour LUT: "value name R G B A" (colours 0..255), '#' comments; value 0 is background.
bool LooksLikeLut(const std::vector<std::vector<std::string>>& rows) {
  for (const auto& row : rows) {
    std::int64_t v;
    if (row.size() != 6 || !ParseInt(row[0], v) || ParseInt(row[1], v)) return false;
    for (std::size_t c = 2; c < 6; ++c)
      if (!ParseInt(row[c], v) || v < 0 || v > 255) return false;
  }
  return !rows.empty();
}

/// A text table's rows of cells, without blank and comment lines, and the line number of each.
struct TableRows {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> lines;
};

/// The rows of a text table: atlas:TableEmpty when there are none.
TableRows ReadRows(std::istream& in, const std::string& path) {
  TableRows t;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty() || Trim(line)[0] == '#') continue;
    t.rows.push_back(Tokens(line));
    t.lines.push_back(number);
  }
  if (t.rows.empty()) throw InputError("atlas:TableEmpty", path, "the atlas label table has no rows");
  return t;
}

/// A FreeSurfer colour LUT (LooksLikeLut) as a label table: value 0 ("Unknown") is the background.
LabelTable LutTable(const std::string& path, const TableRows& t) {
  LabelTable lut;
  lut.path = path;
  lut.format = "freesurfer_lut";
  std::vector<std::int64_t> values;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    std::int64_t v = 0;
    ParseInt(t.rows[r][0], v);
    if (v == 0) continue;  // "Unknown": background
    values.push_back(v);
    lut.names.push_back(t.rows[r][1]);
    lut.lines.push_back(t.lines[r]);
  }
  lut.labelColumns = {{"value", values}};
  return lut;
}

/// Removes and returns the header row, if there is one: its first row has no integer cell while later rows do.
std::vector<std::string> TakeHeader(const std::string& path, TableRows& t) {
  std::vector<std::string> header;
  std::int64_t dummy;
  bool firstHasInt = false;
  for (const auto& c : t.rows[0]) firstHasInt |= ParseInt(c, dummy);
  if (!firstHasInt && t.rows.size() == 1)
    throw InputError("atlas:TableEmpty", path + ":" + std::to_string(t.lines[0]),
                     "the atlas label table has a header (\"" + Join(t.rows[0], " ") + "\") but no rows: expected one row per region below it");
  if (!firstHasInt && t.rows.size() > 1) {
    header = t.rows[0];
    t.rows.erase(t.rows.begin());
    t.lines.erase(t.lines.begin());
  }
  return header;
}

/// Every row has as many columns as the first, and a label column holds integers only (naming the row that does not).
void CheckColumns(const std::string& path, const TableRows& t, const std::vector<std::string>& header) {
  const auto& rows = t.rows;
  const std::size_t ncols = rows[0].size();
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (rows[r].size() != ncols)
      throw InputError("atlas:TableRagged", path + ":" + std::to_string(t.lines[r]),
                       "this row has " + std::to_string(rows[r].size()) + " columns, expected " + std::to_string(ncols) + " (as the first row, line " +
                           std::to_string(t.lines[0]) + ")");
  // A label column with a cell that is not an integer would otherwise stop counting as a label column, and the table
  // would fail later with no row named: the header names it ("index", "label", ...), or all its other cells are integers.
  for (std::size_t c = 0; c < ncols; ++c) {
    const std::string h = c < header.size() ? ToLower(header[c]) : "";
    std::size_t ints = 0, firstBad = rows.size();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      std::int64_t v;
      if (ParseInt(rows[r][c], v)) ++ints;
      else if (firstBad == rows.size()) firstBad = r;
    }
    const bool named = h == "index" || h == "label" || h == "value" || h == "code";
    const bool nearlyAll = ints >= 2 && ints + 1 == rows.size();
    if (firstBad < rows.size() && (named ? ints > 0 : nearlyAll))
      throw InputError("atlas:TableBadLabel", path + ":" + std::to_string(t.lines[firstBad]),
                       "column " + (h.empty() ? std::to_string(c + 1) : "\"" + header[c] + "\"") + " holds \"" + rows[firstBad][c] +
                           "\", expected an integer label code (as in its other rows)");
  }
}

/// A table of columns: every all-integer column is a candidate label column; the names are the column the header calls
/// "name", "label_name" or "region", else the text column with the longest cells.
LabelTable ColumnsTable(const std::string& path, const TableRows& t, const std::vector<std::string>& header) {
  const auto& rows = t.rows;
  const std::size_t ncols = rows[0].size();
  LabelTable table;
  table.path = path;
  table.format = "tsv";
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
  table.lines = t.lines;
  return table;
}

}  // namespace

LabelTable ReadLabelTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("atlas:TableUnreadable", path, "cannot open the atlas label table");
  {
    std::ostringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '<') return ReadFslXml(path, text);
    in.clear();
    in.seekg(0);
  }
  TableRows t = ReadRows(in, path);
  if (LooksLikeLut(t.rows)) return LutTable(path, t);
  const std::vector<std::string> header = TakeHeader(path, t);
  CheckColumns(path, t, header);
  return ColumnsTable(path, t, header);
}

}  // namespace neuromkl::atlas
