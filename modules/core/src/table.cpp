#include "neuromkl/core/table.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl {

namespace {

std::vector<std::string> SplitRecord(const std::string& line, char delimiter, bool* unterminated = nullptr) {
  if (delimiter == '\t') {
    auto cells = Split(line, '\t');
    for (auto& c : cells) c = Trim(c);
    return cells;
  }
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        cell += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == delimiter) {
      cells.push_back(Trim(cell));
      cell.clear();
    } else {
      cell += ch;
    }
  }
  cells.push_back(Trim(cell));
  if (unterminated) *unterminated = quoted;
  return cells;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && ToLower(s.substr(s.size() - suffix.size())) == suffix;
}

}  // namespace

std::optional<std::size_t> DelimitedTable::Find(const std::string& column) const {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == column) return i;
  return std::nullopt;
}

std::size_t DelimitedTable::Require(const std::string& column, const std::string& role) const {
  if (auto idx = Find(column)) return *idx;
  for (const auto& h : header)
    if (h.size() >= 2 && h.front() == '"' && h.back() == '"' && h.substr(1, h.size() - 2) == column)
      throw InputError("table:MissingColumn", path,
                       "no column \"" + column + "\" (" + role + "): the header has it in double quotes (" + h +
                           "), and in a tab-separated file the quotes are part of the name; remove them (or save the table as .csv)");
  throw InputError("table:MissingColumn", path,
                   "no column \"" + column + "\" (" + role + ") in the header; found columns: " +
                       Join(header, ", ") + DidYouMean(column, header));
}

DelimitedTable ReadDelimitedTable(const std::string& path) {
  // A folder opens as a stream on Linux and reads as empty: say what it is instead.
  if (const std::string why = WhyNotAFile(path); !why.empty() && why != "it does not exist")
    throw InputError("table:Unreadable", path, "expected a table file, but " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("table:Unreadable", path, "cannot open the table for reading (missing file or no permission)");
  DelimitedTable table;
  table.path = path;
  std::string line;
  std::size_t lineNo = 0;
  bool haveHeader = false;
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineNo == 1 && line.size() >= 3 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // UTF-8 BOM
    if (line.find('\r') != std::string::npos)
      throw InputError("table:CrLineEnds", path + ":" + std::to_string(lineNo),
                       "the lines end in a carriage return only (old Mac OS format), so the whole file reads as one line; "
                       "save it with LF or CRLF line ends");
    if (Trim(line).empty()) continue;
    if (!haveHeader) {
      table.delimiter = EndsWith(path, ".csv") ? ',' : '\t';
      if (table.delimiter == '\t' && line.find('\t') == std::string::npos && line.find(',') != std::string::npos)
        table.delimiter = ',';
      bool unterminated = false;
      table.header = SplitRecord(line, table.delimiter, &unterminated);
      if (unterminated)
        throw InputError("table:UnterminatedQuote", path + ":" + std::to_string(lineNo),
                         "a double quote opens a cell that is not closed on this line (quoted cells cannot span lines)");
      // A name given twice makes every lookup by name ambiguous (two feature kernels of one name, a covariate read
      // from either column): refused, naming both columns.
      for (std::size_t a = 0; a < table.header.size(); ++a)
        for (std::size_t b = a + 1; b < table.header.size(); ++b)
          if (!table.header[a].empty() && table.header[a] == table.header[b])
            throw InputError("table:DuplicateColumn", path + ":" + std::to_string(lineNo),
                             "column \"" + table.header[a] + "\" appears twice in the header (columns " + std::to_string(a + 1) + " and " +
                                 std::to_string(b + 1) + "); each column name must be unique");
      haveHeader = true;
      continue;
    }
    bool unterminated = false;
    auto cells = SplitRecord(line, table.delimiter, &unterminated);
    if (unterminated)
      throw InputError("table:UnterminatedQuote", path + ":" + std::to_string(lineNo),
                       "a double quote opens a cell that is not closed on this line (quoted cells cannot span lines)");
    if (cells.size() != table.header.size()) {
      throw InputError("table:RaggedRow", path + ":" + std::to_string(lineNo),
                       "expected " + std::to_string(table.header.size()) + " cells (as in the header), found " +
                           std::to_string(cells.size()) +
                           (table.delimiter == '\t' ? " (the file is read as tab-separated)" : " (the file is read as comma-separated)"));
    }
    table.rows.push_back(std::move(cells));
    table.lineNumbers.push_back(lineNo);
  }
  if (!haveHeader) throw InputError("table:Empty", path, "the table is empty: expected a header row and one row per subject");
  return table;
}

bool IsMissingCell(const std::string& cell) {
  const std::string c = ToLower(Trim(cell));
  return c.empty() || c == "n/a" || c == "na" || c == "nan";
}

bool ParseFiniteCell(const std::string& cell, double& value) {
  if (cell.empty()) return false;
  char* end = nullptr;
  value = std::strtod(cell.c_str(), &end);
  return end == cell.c_str() + cell.size() && std::isfinite(value);
}

}  // namespace neuromkl
