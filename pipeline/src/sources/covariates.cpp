#include "neuromkl/pipeline/covariates.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"

namespace neuromkl::pipeline {

CovariateDesign BuildCovariateDesign(const config::StudyConfig& study, const config::CovariateSpec& spec, const Cohort& cohort, const std::vector<int>& rows) {
  CovariateDesign out;
  const auto n = static_cast<Eigen::Index>(rows.size());
  auto cell = [&](const std::string& column, int row) -> const std::string& { return cohort.covariateCells.at(column)[static_cast<std::size_t>(row)]; };
  // Missing values first, every subject listed (all columns at once).
  std::vector<std::string> missing;
  std::vector<std::string> all = spec.columns;
  all.insert(all.end(), spec.categorical.begin(), spec.categorical.end());
  for (int r : rows) {
    std::vector<std::string> cols;
    for (const auto& c : all)
      if (IsMissingCell(cell(c, r))) cols.push_back(c);
    if (!cols.empty()) missing.push_back(cohort.ids[static_cast<std::size_t>(r)] + " (" + Join(cols, ", ") + ")");
  }
  if (!missing.empty() && !spec.imputeMedian)
    throw InputError("covariates:Missing", study.subjects.table,
                     fmt::format("{} of {} subjects used have no value in a covariate column: {}; fill them in, remove those subjects "
                                 "(set their target to n/a), or impute them inside the folds with \"impute\": \"median\" in {}",
                                 missing.size(), rows.size(), Join(missing, "; "), spec.pointer));
  for (const auto& c : all) {
    int count = 0;
    for (int r : rows) count += IsMissingCell(cell(c, r)) ? 1 : 0;
    if (count == static_cast<int>(rows.size()))
      throw InputError("covariates:Missing", study.subjects.table,
                       fmt::format("covariate column \"{}\" ({}) has no value for any of the {} subjects used: nothing to impute from", c, spec.pointer,
                                   rows.size()));
    if (count > 0) out.missing.emplace_back(c, count);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Eigen::VectorXd> cols;
  std::vector<int> categoryOf(1 + spec.columns.size(), -1);  // the intercept and the numeric columns
  for (std::size_t i = 0; i < spec.columns.size(); ++i) {
    Eigen::VectorXd v(n);
    std::vector<std::string> bad;
    for (Eigen::Index k = 0; k < n; ++k) {
      const int r = rows[static_cast<std::size_t>(k)];
      if (IsMissingCell(cell(spec.columns[i], r))) {
        v[k] = nan;
        continue;
      }
      if (!ParseFiniteCell(cell(spec.columns[i], r), v[k])) bad.push_back(fmt::format("{}: \"{}\"", cohort.ids[static_cast<std::size_t>(r)], cell(spec.columns[i], r)));
    }
    if (!bad.empty())
      throw ConfigError("config:Value", study.path,
                        fmt::format("{}: covariate column \"{}\" must be numeric, but {} subjects hold other values ({}); list it under "
                                    "\"categorical\" if it is a category",
                                    spec.ColumnPointer(i), spec.columns[i], bad.size(), Shown(bad, 5)));
    // In double the fit has room for any units, but the coefficient images of an exported model are float32 and the
    // fold products pass through the squared inverse scale: beyond 1e+-20 they underflow or overflow silently.
    const double largest = n > 0 ? v.array().isNaN().select(0.0, v.cwiseAbs()).maxCoeff() : 0.0;
    if (largest > kCovariateMagnitudeLimit || (largest > 0 && largest < 1.0 / kCovariateMagnitudeLimit))
      throw InputError("covariates:Scale", study.subjects.table,
                       fmt::format("covariate column \"{}\" ({}) has values of magnitude up to {:.3g}; expected magnitudes between 1e-20 and 1e20: "
                                   "rescale the column (e.g. to years, or to z-scores)",
                                   spec.columns[i], spec.ColumnPointer(i), largest));
    cols.push_back(std::move(v));
    out.columns.push_back(spec.columns[i]);
  }
  for (std::size_t i = 0; i < spec.categorical.size(); ++i) {
    std::vector<std::string> levels;
    for (int r : rows)
      if (!IsMissingCell(cell(spec.categorical[i], r))) levels.push_back(cell(spec.categorical[i], r));
    std::sort(levels.begin(), levels.end(), LabelLess);  // as class labels are ordered
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    if (levels.size() < 2)
      throw ConfigError("config:Value", study.path,
                        fmt::format("{}: categorical covariate \"{}\" has a single level (\"{}\") among the {} subjects used; "
                                    "a constant cannot be in the design (remove it)",
                                    spec.CategoricalPointer(i), spec.categorical[i], levels.empty() ? "" : levels[0], rows.size()));
    for (std::size_t l = 1; l < levels.size(); ++l) {  // the first level (sorted) is the reference
      Eigen::VectorXd v(n);
      for (Eigen::Index k = 0; k < n; ++k) {
        const std::string& value = cell(spec.categorical[i], rows[static_cast<std::size_t>(k)]);
        v[k] = IsMissingCell(value) ? nan : value == levels[l] ? 1.0 : 0.0;
      }
      cols.push_back(std::move(v));
      out.columns.push_back(spec.categorical[i] + "=" + levels[l]);
      categoryOf.push_back(static_cast<int>(i));
    }
  }
  Eigen::MatrixXd& C = out.covariates.design;
  C.resize(n, static_cast<Eigen::Index>(cols.size()) + 1);
  C.col(0).setOnes();
  for (std::size_t j = 0; j < cols.size(); ++j) C.col(static_cast<Eigen::Index>(j) + 1) = cols[j];
  out.covariates.categoryOf = std::move(categoryOf);
  out.fitOn = "all";
  if (!spec.fitOnColumn.empty()) {
    out.fitOn = spec.fitOnColumn + " = " + spec.fitOnValue;
    std::set<std::string> seen;
    for (int r : rows) {
      const std::string& v = cell(spec.fitOnColumn, r);
      out.covariates.fitRow.push_back(v == spec.fitOnValue ? 1 : 0);
      seen.insert(v);
    }
    if (std::find(out.covariates.fitRow.begin(), out.covariates.fitRow.end(), 1) == out.covariates.fitRow.end())
      throw ConfigError("config:Value", study.path,
                        fmt::format("{}/value: no subject used has \"{}\" in column \"{}\" (values found: {})", spec.fitOnPointer, spec.fitOnValue,
                                    spec.fitOnColumn, Shown(std::vector<std::string>(seen.begin(), seen.end()), 10)));
  }
  return out;
}

Eigen::MatrixXd CohortImputedDesign(const CovariateDesign& design) {
  const gram::Covariates& c = design.covariates;
  if (!c.HasMissing()) return c.design;
  const Eigen::VectorXi all = Eigen::VectorXi::LinSpaced(c.design.rows(), 0, static_cast<int>(c.design.rows()) - 1);
  return gram::FilledRows(c, all, gram::ImputationFill(c, all, "the subjects used"));
}

}  // namespace neuromkl::pipeline
