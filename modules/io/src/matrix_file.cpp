#include "neuromkl/io/matrix_file.hpp"

#include <cstdlib>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::io {

Eigen::MatrixXd ReadMatrixFile(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") return ReadNpy(path);
  // Delimited text: one row per line, numbers separated by tabs, commas or spaces; no header.
  std::ifstream in(path);
  if (!in) throw InputError("kernels:Unreadable", path, "cannot open the kernel file");
  std::vector<std::vector<double>> rows;
  std::vector<std::size_t> lines;  // each row's line in the file (blank lines are skipped): messages name the line
  std::string line;
  std::size_t lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == ';') ch = ' ';
    if (Trim(line).empty()) continue;
    std::vector<double> row;
    const char* p = line.c_str();
    char* end = nullptr;
    while (true) {
      while (*p == ' ') ++p;
      if (!*p || *p == '\r') break;
      const double v = std::strtod(p, &end);
      if (end == p) throw InputError("kernels:NotNumeric", path + ":" + std::to_string(lineNo), "expected numbers only (a kernel matrix, no header)");
      row.push_back(v);
      p = end;
    }
    rows.push_back(std::move(row));
    lines.push_back(lineNo);
  }
  Eigen::MatrixXd K(static_cast<Eigen::Index>(rows.size()), rows.empty() ? 0 : static_cast<Eigen::Index>(rows[0].size()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (static_cast<Eigen::Index>(rows[i].size()) != K.cols())
      throw InputError("kernels:Ragged", path + ":" + std::to_string(lines[i]),
                       fmt::format("matrix row {} has {} values, the first row (line {}) has {}", i + 1, rows[i].size(), lines[0], K.cols()));
    for (std::size_t j = 0; j < rows[i].size(); ++j) K(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = rows[i][j];
  }
  return K;
}

}  // namespace neuromkl::io
