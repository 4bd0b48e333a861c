#include "neuromkl/pipeline/cohort.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

std::string ResolveImagePath(const std::string& tablePath, const std::string& cell) {
  fs::path p(cell);
  if (p.is_relative()) p = fs::absolute(tablePath).parent_path() / p;
  return p.lexically_normal().string();
}

namespace {
bool ParseNumber(const std::string& s, double& v) {
  const std::string t = Trim(s);
  if (t.empty()) return false;
  char* end = nullptr;
  v = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && std::isfinite(v);
}

/// Numeric class labels sort numerically ("2" < "10"), others lexically.
bool ClassLess(const std::string& a, const std::string& b) {
  double x, y;
  if (ParseNumber(a, x) && ParseNumber(b, y)) return x < y;
  return a < b;
}
}  // namespace

Cohort LoadCohort(const config::StudyConfig& study) {
  const DelimitedTable table = ReadDelimitedTable(study.subjects.table);
  const std::string& path = table.path;
  const bool byRow = study.subjects.idColumn == "#row";  // tables without ids: data rows numbered from 1
  const std::size_t idCol = byRow ? 0 : table.Require(study.subjects.idColumn, "subject id column, /subjects/id_column");
  const std::size_t targetCol = table.Require(study.target.column, "target column, /target/column");
  const bool needImages = study.kernels.source == config::KernelSource::Images;
  const std::size_t imageCol = needImages ? table.Require(study.subjects.imageColumn, "image column, /subjects/image_column") : 0;
  if (table.rows.empty()) throw InputError("subjects:Empty", path, "the subjects table has a header but no subject rows");

  Cohort c;
  std::map<std::string, std::size_t> seen;
  std::vector<std::string> missing;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    const std::string where = path + ":" + std::to_string(table.lineNumbers[r]);
    const std::string id = byRow ? std::to_string(r + 1) : row[idCol];
    if (id.empty()) throw InputError("subjects:EmptyId", where, "empty subject id in column \"" + study.subjects.idColumn + "\"");
    if (auto it = seen.find(id); it != seen.end())
      throw InputError("subjects:DuplicateId", where,
                       fmt::format("subject id \"{}\" appears twice (lines {} and {}); ids must be unique", id,
                                   table.lineNumbers[it->second], table.lineNumbers[r]));
    seen[id] = r;
    c.ids.push_back(id);
    if (needImages) {
      if (IsMissingCell(row[imageCol]))
        throw InputError("subjects:NoImage", where, "subject " + id + " has no image path in column \"" + study.subjects.imageColumn + "\"");
      const std::string img = ResolveImagePath(path, row[imageCol]);
      std::error_code ec;
      if (!fs::is_regular_file(img, ec)) missing.push_back(id + ": " + img);
      else if (!std::ifstream(img, std::ios::binary)) missing.push_back(id + ": " + img + " (not readable)");
      c.images.push_back(img);
    }
    const bool has = !IsMissingCell(row[targetCol]);
    c.labelled.push_back(has);
    c.rawTargets.push_back(row[targetCol]);
    if (!has) c.excluded.emplace_back(id, "no target value (empty or n/a in column \"" + study.target.column + "\")");
  }
  if (!missing.empty()) {
    std::vector<std::string> shown(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(5, missing.size())));
    throw InputError("subjects:MissingImage", path,
                     fmt::format("{} of {} image files are missing: {}{}", missing.size(), c.ids.size(), Join(shown, "; "),
                                 missing.size() > 5 ? "; ..." : "") +
                         " (relative image paths resolve against the table's folder)");
  }
  for (std::size_t r = 0; r < c.ids.size(); ++r)
    if (c.labelled[r]) c.labelledRows.push_back(static_cast<int>(r));
  const auto n = static_cast<Eigen::Index>(c.labelledRows.size());
  if (n < 2)
    throw InputError("subjects:TooFewLabelled", path,
                     fmt::format("expected at least 2 subjects with a target in column \"{}\", found {}", study.target.column, n));
  // Columns the CV schemes need (outer and inner must name the same column when both use one).
  auto column = [&](const std::string& name, const char* role, std::vector<std::string>& out) {
    if (name.empty()) return;
    const std::size_t col = table.Require(name, role);
    for (auto r : c.labelledRows) {
      const std::string& cell = table.rows[static_cast<std::size_t>(r)][col];
      if (IsMissingCell(cell))
        throw InputError("subjects:MissingGroup", path + ":" + std::to_string(table.lineNumbers[static_cast<std::size_t>(r)]),
                         "subject " + c.ids[static_cast<std::size_t>(r)] + " has no value in column \"" + name + "\" (" + role + ")");
      out.push_back(cell);
    }
  };
  const std::string groupColumn = !study.cv.outer.groupColumn.empty() ? study.cv.outer.groupColumn : study.cv.inner.groupColumn;
  const std::string foldColumn = !study.cv.outer.foldColumn.empty() ? study.cv.outer.foldColumn : study.cv.inner.foldColumn;
  if (!study.cv.outer.groupColumn.empty() && !study.cv.inner.groupColumn.empty() && study.cv.outer.groupColumn != study.cv.inner.groupColumn)
    throw InputError("subjects:TwoGroupColumns", study.path, "/cv/outer/group_column and /cv/inner/group_column differ; use one group column");
  column(groupColumn, "group column, /cv/*/group_column", c.groups);
  column(foldColumn, "fold column, /cv/*/fold_column", c.customFolds);
  c.y.resize(n);
  if (study.target.task == learners::Task::Regression) {
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(c.labelledRows[static_cast<std::size_t>(i)]);
      if (!ParseNumber(c.rawTargets[r], c.y[i]))
        throw InputError("subjects:NonNumericTarget", path + ":" + std::to_string(table.lineNumbers[r]),
                         fmt::format("subject {}: regression target \"{}\" in column \"{}\" is not a finite number", c.ids[r],
                                     c.rawTargets[r], study.target.column));
    }
    return c;
  }
  std::map<std::string, int> counts;
  for (auto r : c.labelledRows) ++counts[c.rawTargets[static_cast<std::size_t>(r)]];
  std::vector<std::string> classes;
  for (const auto& [k, _] : counts) classes.push_back(k);
  std::sort(classes.begin(), classes.end(), ClassLess);
  for (const auto& k : classes) c.classCounts.emplace_back(k, counts[k]);
  std::vector<std::string> described;
  for (const auto& [k, v] : c.classCounts) described.push_back(fmt::format("\"{}\": {}", k, v));
  if (classes.size() < 2)
    throw InputError("subjects:SingleClass", path,
                     fmt::format("classification needs two classes in column \"{}\", found one ({}); is this the right target column?",
                                 study.target.column, Join(described, ", ")));
  if (classes.size() > 2)
    throw InputError("subjects:TooManyClasses", path,
                     fmt::format("found {} classes in column \"{}\" ({}); the learners support binary classification: "
                                 "select two classes (set the others to n/a) or use task \"regression\" for an ordinal score",
                                 classes.size(), study.target.column, Join(described, ", ")));
  c.positiveClass = study.target.positiveClass.empty() ? classes[1] : study.target.positiveClass;
  if (c.positiveClass != classes[0] && c.positiveClass != classes[1])
    throw InputError("subjects:UnknownPositiveClass", path,
                     fmt::format("/target/positive_class is \"{}\", but the classes in column \"{}\" are {}{}", c.positiveClass,
                                 study.target.column, Join(described, ", "), DidYouMean(c.positiveClass, classes)));
  c.negativeClass = c.positiveClass == classes[0] ? classes[1] : classes[0];
  for (Eigen::Index i = 0; i < n; ++i)
    c.y[i] = c.rawTargets[static_cast<std::size_t>(c.labelledRows[static_cast<std::size_t>(i)])] == c.positiveClass ? 1.0 : -1.0;
  return c;
}

}  // namespace neuromkl::pipeline
