// Tabular sources: feature groups read from a table, and their kernels (linear, polynomial, Gaussian).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/pipeline/sources.hpp"

namespace neuromkl::pipeline {

namespace {

/// The feature groups of a tabular study: explicit, or a preset over every usable column.
std::vector<std::pair<std::string, std::vector<std::string>>> TabularGroups(const config::StudyConfig& study, const DelimitedTable& table) {
  const auto& spec = study.kernels.tabular;
  if (spec.groupsPreset.empty()) return spec.groups;
  std::vector<std::string> columns;
  for (const auto& col : table.header) {
    const bool skip = col == spec.idColumn || col == study.target.column ||
                      std::find(spec.excludeColumns.begin(), spec.excludeColumns.end(), col) != spec.excludeColumns.end();
    if (!skip) columns.push_back(col);
  }
  for (const auto& col : spec.excludeColumns) table.Require(col, "excluded column, /kernels/tabular/exclude_columns");
  if (columns.empty())
    throw InputError("tabular:NoColumns", spec.table, "no feature column is left after removing the id, target and excluded columns");
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  if (spec.groupsPreset != "all_columns")
    for (const auto& col : columns) groups.emplace_back(col, std::vector<std::string>{col});
  if (spec.groupsPreset != "each_column") groups.emplace_back("all", columns);
  return groups;
}

}  // namespace

std::vector<int> TabularFeatureTable::Missing() const {
  std::vector<int> out;
  for (Eigen::Index c = 0; c < X.cols(); ++c) out.push_back(static_cast<int>(X.col(c).array().isNaN().count()));
  return out;
}

std::vector<TabularSection> TabularSections(const config::StudyConfig& study) {
  std::vector<TabularSection> out;
  if (study.kernels.source == config::KernelSource::Tabular) out.push_back({study, "", "", "/kernels/tabular"});
  if (study.kernels.source != config::KernelSource::Sources) return out;
  for (std::size_t i = 0; i < study.kernels.sources.size(); ++i) {
    const auto& s = study.kernels.sources[i];
    if (s.kind != config::KernelSource::Tabular) continue;
    out.push_back({SourceStudy(study, s), s.name, s.name + ":", (s.pointer.empty() ? fmt::format("/kernels/sources/{}", i) : s.pointer) + "/tabular"});
  }
  return out;
}

std::vector<TabularKernelSpec> TabularKernelSpecs(const TabularFeatureTable& table, const std::vector<config::TabularFunction>& functions) {
  using Type = config::TabularFunction::Type;
  const bool plain = functions.size() == 1 && functions[0].type == Type::Linear;
  std::vector<TabularKernelSpec> out;
  for (std::size_t g = 0; g < table.groups.size(); ++g) {
    const std::string& group = table.groups[g].name;
    for (const auto& f : functions) {
      if (f.type == Type::Linear) out.push_back({plain ? group : group + ":linear", g, {gram::FeatureKernel::Type::Linear, 0, 0}});
      for (const double v : f.values) {
        if (f.type == Type::Polynomial) out.push_back({group + ":poly(" + FormatDouble(v) + ")", g, {gram::FeatureKernel::Type::Polynomial, v, f.offset}});
        if (f.type == Type::Gaussian) out.push_back({group + ":gaussian(" + FormatDouble(v) + ")", g, {gram::FeatureKernel::Type::Gaussian, v, 0}});
      }
    }
  }
  return out;
}

kernels::KernelSet TabularKernels(const config::StudyConfig& study, const Cohort& cohort) {
  const auto& spec = study.kernels.tabular;
  const TabularFeatureTable table = TabularFeatures(study, cohort);
  const Eigen::VectorXi all = Eigen::VectorXi::LinSpaced(table.X.rows(), 0, static_cast<int>(table.X.rows()) - 1);
  const gram::TabularFit fit = gram::FitTabular(table.X, all, {spec.imputeMedian, spec.standardise}, table.columns, spec.table);
  const Eigen::MatrixXd Z = gram::ApplyTabular(fit, table.X, all);
  kernels::KernelSet set;
  set.subjects = cohort.ids;
  for (const auto& k : TabularKernelSpecs(table, spec.functions)) {
    const auto& columns = table.groups[k.group].columns;
    kernels::KernelInfo info;
    info.name = k.name;
    info.features = static_cast<Eigen::Index>(columns.size());
    set.info.push_back(info);
    set.kernels.push_back(k.function.Gram(Z(Eigen::all, columns)));
    if (!set.kernels.back().allFinite())
      throw InputError("kernels:NonFinite", spec.table,
                       fmt::format("kernel {} has NaN or infinite values: its function overflows or underflows double precision on these "
                                   "features (a polynomial degree too high for their scale, or a Gaussian width whose square underflows); "
                                   "choose other values in /kernels/tabular/functions",
                                   k.name));
  }
  return set;
}

TabularFeatureTable TabularFeatures(const config::StudyConfig& study, const Cohort& cohort) {
  const auto& spec = study.kernels.tabular;
  const DelimitedTable table = ReadDelimitedTable(spec.table);
  const auto rowOf = RowsById(table, spec.idColumn, "/kernels/tabular/id_column");
  std::vector<std::size_t> rows;
  for (const auto& id : cohort.ids) {
    auto it = rowOf.find(id);
    if (it == rowOf.end())
      throw InputError("tabular:MissingSubject", spec.table, "subject \"" + id + "\" of the subjects table has no row in the feature table");
    rows.push_back(it->second);
  }
  TabularFeatureTable out;
  std::vector<std::size_t> tableColumns;
  for (const auto& [name, cols] : TabularGroups(study, table)) {
    TabularFeatureTable::Group group{name, {}};
    for (const auto& col : cols) {
      const std::size_t c = table.Require(col, "feature of group \"" + name + "\", /kernels/tabular/groups/" + name);
      auto at = std::find(out.columns.begin(), out.columns.end(), col);
      if (at == out.columns.end()) {
        out.columns.push_back(col);
        tableColumns.push_back(c);
        at = out.columns.end() - 1;
      }
      group.columns.push_back(static_cast<Eigen::Index>(at - out.columns.begin()));
    }
    out.groups.push_back(std::move(group));
  }
  const auto n = static_cast<Eigen::Index>(rows.size());
  out.X.resize(n, static_cast<Eigen::Index>(out.columns.size()));
  for (std::size_t c = 0; c < out.columns.size(); ++c)
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto r = rows[static_cast<std::size_t>(i)];
      const std::string& cell = table.rows[r][tableColumns[c]];
      const auto where = [&] { return spec.table + ":" + std::to_string(table.lineNumbers[r]); };
      if (spec.imputeMedian && IsMissingCell(cell)) {
        out.X(i, static_cast<Eigen::Index>(c)) = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      double v = 0;
      if (!ParseFiniteCell(cell, v))
        throw InputError("tabular:NotNumeric", where(),
                         fmt::format("subject {}: column \"{}\" holds \"{}\", expected a finite number{}", cohort.ids[static_cast<std::size_t>(i)],
                                     out.columns[c], cell,
                                     IsMissingCell(cell) ? " (a missing value: set \"impute\": \"median\" in the tabular section to fill it inside the folds)"
                                                         : ""));
      out.X(i, static_cast<Eigen::Index>(c)) = v;
    }
  return out;
}

}  // namespace neuromkl::pipeline
