#pragma once
// Delimited text tables (BIDS participants.tsv, CSV): header row, one record per line.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace neuromkl {

struct DelimitedTable {
  std::string path;
  char delimiter = '\t';
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  ///< every row has header.size() cells
  std::vector<std::size_t> lineNumbers;        ///< 1-based line of each row in the file

  /// Column index or nullopt.
  std::optional<std::size_t> Find(const std::string& column) const;
  /// Column index; InputError naming the file, the available columns and a did-you-mean hint.
  std::size_t Require(const std::string& column, const std::string& role) const;
};

/// Reads a table. The delimiter is ',' for .csv, otherwise tab; a .tsv/.txt whose header has
/// no tab but commas is read as CSV. Double-quoted CSV cells are supported.
/// Errors (InputError): unreadable file, empty file, ragged rows (line number given), a column name given twice in
/// the header [table:DuplicateColumn].
DelimitedTable ReadDelimitedTable(const std::string& path);

/// True for cells that mean "no value": empty, "n/a", "NA", "nan" (case-insensitive).
bool IsMissingCell(const std::string& cell);

/// A cell that is a finite number, the whole cell (no surrounding spaces): true and `value` set; false otherwise.
bool ParseFiniteCell(const std::string& cell, double& value);

}  // namespace neuromkl
