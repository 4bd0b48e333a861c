// Tabular sources: feature groups read from a table, and their kernels (linear, polynomial, Gaussian).
#include <algorithm>
#include <cmath>

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

/// One kernel per (group, function, parameter value); plain group names for the default linear kernel.
void AddTabularKernels(kernels::KernelSet& set, const std::string& group, const Eigen::MatrixXd& X, const std::vector<config::TabularFunction>& functions) {
  using Type = config::TabularFunction::Type;
  const bool plain = functions.size() == 1 && functions[0].type == Type::Linear;
  const Eigen::MatrixXd G = X * X.transpose();
  auto add = [&](std::string name, Eigen::MatrixXd K) {
    kernels::KernelInfo info;
    info.name = std::move(name);
    info.features = X.cols();
    set.info.push_back(info);
    set.kernels.push_back(std::move(K));
  };
  for (const auto& f : functions) {
    if (f.type == Type::Linear) add(plain ? group : group + ":linear", G);
    if (f.type == Type::Polynomial)
      for (double d : f.values) add(group + ":poly(" + FormatDouble(d) + ")", (G.array() + f.offset).pow(d).matrix());
    if (f.type == Type::Gaussian) {
      const Eigen::VectorXd sq = G.diagonal();
      const Eigen::MatrixXd D2 = ((sq * Eigen::RowVectorXd::Ones(G.cols()) + Eigen::VectorXd::Ones(G.rows()) * sq.transpose() - 2 * G).array().max(0.0)).matrix();
      for (double w : f.values) add(group + ":gaussian(" + FormatDouble(w) + ")", (-D2.array() / (2 * w * w)).exp().matrix());
    }
  }
}

}  // namespace

kernels::KernelSet TabularKernels(const config::StudyConfig& study, const Cohort& cohort) {
  kernels::KernelSet set;
  set.subjects = cohort.ids;
  for (const auto& g : TabularFeatures(study, cohort)) AddTabularKernels(set, g.name, g.X, study.kernels.tabular.functions);
  for (std::size_t k = 0; k < set.kernels.size(); ++k)
    if (!set.kernels[k].allFinite())
      throw InputError("kernels:NonFinite", study.kernels.tabular.table,
                       fmt::format("kernel {} has NaN or infinite values: its function overflows or underflows double precision on these "
                                   "features (a polynomial degree too high for their scale, or a Gaussian width whose square underflows); "
                                   "choose other values in /kernels/tabular/functions",
                                   set.info[k].name));
  return set;
}

std::vector<TabularGroupFeatures> TabularFeatures(const config::StudyConfig& study, const Cohort& cohort) {
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
  std::vector<TabularGroupFeatures> out;
  const auto n = static_cast<Eigen::Index>(rows.size());
  for (const auto& [name, cols] : TabularGroups(study, table)) {
    Eigen::MatrixXd X(n, static_cast<Eigen::Index>(cols.size()));
    for (std::size_t c = 0; c < cols.size(); ++c) {
      const std::size_t col = table.Require(cols[c], "feature of group \"" + name + "\", /kernels/tabular/groups/" + name);
      for (Eigen::Index i = 0; i < n; ++i) {
        const auto r = rows[static_cast<std::size_t>(i)];
        const std::string& cell = table.rows[r][col];
        char* end = nullptr;
        const double v = std::strtod(cell.c_str(), &end);
        if (cell.empty() || end != cell.c_str() + cell.size() || !std::isfinite(v))
          throw InputError("tabular:NotNumeric", spec.table + ":" + std::to_string(table.lineNumbers[r]),
                           fmt::format("subject {}: column \"{}\" holds \"{}\", expected a finite number (missing values are not imputed)",
                                       cohort.ids[static_cast<std::size_t>(i)], cols[c], cell));
        X(i, static_cast<Eigen::Index>(c)) = v;
      }
    }
    TabularGroupFeatures g{name, cols, {}, Eigen::VectorXd::Zero(X.cols()), Eigen::VectorXd::Ones(X.cols())};
    if (spec.standardise) {
      for (Eigen::Index c = 0; c < X.cols(); ++c) {
        const double mean = X.col(c).mean();
        const double sd = std::sqrt((X.col(c).array() - mean).square().sum() / std::max<double>(1.0, static_cast<double>(n - 1)));
        X.col(c) = (X.col(c).array() - mean) / (sd > 0 ? sd : 1.0);
        g.mean[c] = mean;
        g.sd[c] = sd > 0 ? sd : 1.0;
      }
    }
    g.X = std::move(X);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace neuromkl::pipeline
