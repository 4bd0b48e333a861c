// `neuromkl predict`: the new subjects' covariate rows, and the groups of covariate levels a model was not trained
// with whose effects are estimated from their subjects (docs/predict.md).
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "predict_parts.hpp"

namespace neuromkl::pipeline::predicting {

Eigen::MatrixXd NewCovariateRows(const CovariateColumns& columns, const NewSubjects& s, std::vector<std::string>& warnings,
                                 std::vector<std::vector<std::string>>* unseen) {
  const auto n = static_cast<Eigen::Index>(s.ids.size());
  Eigen::Index width = columns.first + static_cast<Eigen::Index>(columns.numeric.size());
  for (const auto& [name, levels] : columns.categorical) width += static_cast<Eigen::Index>(levels.size()) - 1;
  Eigen::MatrixXd C(n, width);
  if (columns.first > 0) C.col(0).setOnes();
  Eigen::Index col = columns.first;
  const Eigen::RowVectorXd& fill = columns.fill;
  const bool impute = fill.size() > 0;
  auto imputed = [&](Eigen::Index i, const std::string& name, Eigen::Index first, Eigen::Index count, const std::string& value) {
    if (!impute || !IsMissingCell(s.cells.at(name)[static_cast<std::size_t>(i)])) return false;
    C.row(i).segment(first, count) = fill.segment(first, count);
    warnings.push_back(fmt::format("subject {}: {} column \"{}\" is missing; imputed with the training subjects' {}", s.ids[static_cast<std::size_t>(i)],
                                   columns.what, name, value));
    return true;
  };
  for (const auto& name : columns.numeric) {
    const auto& cells = s.cells.at(name);
    for (Eigen::Index i = 0; i < n; ++i)
      if (!imputed(i, name, col, 1, impute ? fmt::format("median {}", fill[col]) : ""))
        C(i, col) = ParseFinite(cells[static_cast<std::size_t>(i)], s.where,
                                fmt::format("subject {}: {} column \"{}\"", s.ids[static_cast<std::size_t>(i)], columns.what, name));
    ++col;
  }
  for (const auto& [name, levels] : columns.categorical) {
    const auto& cells = s.cells.at(name);
    std::string mostFrequent = levels.front();
    for (std::size_t l = 1; impute && l < levels.size(); ++l)
      if (fill[col + static_cast<Eigen::Index>(l) - 1] == 1.0) mostFrequent = levels[l];
    for (Eigen::Index i = 0; i < n; ++i) {
      if (imputed(i, name, col, static_cast<Eigen::Index>(levels.size()) - 1, "most frequent level \"" + mostFrequent + "\"")) continue;
      const std::string& v = cells[static_cast<std::size_t>(i)];
      const auto it = std::find(levels.begin(), levels.end(), v);
      if (it == levels.end() && s.unseenLevels == NewSubjects::UnseenLevels::Refuse)
        throw InputError("predict:UnknownLevel", s.where,
                         fmt::format("subject {}: {} column \"{}\" holds \"{}\", a level the model was not trained with (levels: {}); "
                                     "predict --unseen-levels reference codes such a subject as the reference level \"{}\", --unseen-levels "
                                     "estimate estimates the level's effect from its subjects",
                                     s.ids[static_cast<std::size_t>(i)], columns.what, name, v, Join(levels, ", "), levels.front()));
      if (it == levels.end() && unseen && s.unseenLevels == NewSubjects::UnseenLevels::Estimate)
        (*unseen)[static_cast<std::size_t>(i)].push_back(name + " = " + v);
      else if (it == levels.end())
        warnings.push_back(fmt::format("subject {}: {} column \"{}\" holds \"{}\", a level the model was not trained with; coded as the "
                                       "reference level \"{}\" (--unseen-levels {})",
                                       s.ids[static_cast<std::size_t>(i)], columns.what, name, v, levels.front(),
                                       s.unseenLevels == NewSubjects::UnseenLevels::Estimate ? "estimate: a " + columns.what + "'s level is not estimated"
                                                                                              : std::string("reference")));
      for (std::size_t l = 1; l < levels.size(); ++l) C(i, col + static_cast<Eigen::Index>(l) - 1) = it != levels.end() && *it == levels[l] ? 1.0 : 0.0;
    }
    col += static_cast<Eigen::Index>(levels.size()) - 1;
  }
  return C;
}

std::vector<std::string> TargetConfoundColumns(const exporting::ModelTargetConfounds& t) {
  std::vector<std::string> columns = t.numeric;
  for (const auto& [name, levels] : t.categorical) columns.push_back(name);
  return columns;
}

std::vector<std::optional<double>> AdjustedTargets(const exporting::ExportedModel& m, const NewSubjects& s, const std::vector<std::optional<double>>& y,
                                                   std::vector<std::string>& warnings) {
  const exporting::ModelTargetConfounds& t = *m.targetConfounds;
  std::vector<std::optional<double>> out(y.size());
  std::vector<std::string> absent;
  for (const auto& column : TargetConfoundColumns(t))
    if (!s.cells.count(column)) absent.push_back(column);
  if (!absent.empty()) {
    warnings.push_back(fmt::format("model {} ({}) predicts the target adjusted for confounds, but the table lacks their column(s) {}: the known "
                                   "targets cannot be adjusted, so no gaps and no metrics",
                                   m.learner, m.fold < 0 ? "final" : fmt::format("fold{}", m.fold), Join(absent, ", ")));
    spdlog::warn("{}", warnings.back());
    return out;
  }
  // Only the subjects with a target need their confounds: a missing confound elsewhere is no error.
  NewSubjects known;
  known.where = s.where;
  known.unseenLevels = s.unseenLevels;
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i]) rows.push_back(i);
  for (const std::size_t i : rows) known.ids.push_back(s.ids[i]);
  for (const auto& column : TargetConfoundColumns(t))
    for (const std::size_t i : rows) known.cells[column].push_back(s.cells.at(column)[i]);
  std::vector<std::string> notes;
  const Eigen::MatrixXd C = NewCovariateRows({"target confound", 1, t.numeric, t.categorical, t.fill}, known, notes);
  for (const auto& note : notes) spdlog::warn("{}", note);
  AddOnce(notes, warnings);
  const Eigen::VectorXd effect = C * t.coefficients;
  for (std::size_t k = 0; k < rows.size(); ++k) out[rows[k]] = *y[rows[k]] - effect[static_cast<Eigen::Index>(k)];
  return out;
}

/// The groups of new subjects that share the levels model m was not trained with (`unseen`, per subject), each with
/// the subjects its effect is estimated from: its subjects, or those of the reference group when one is named.
LevelGroups GroupUnseenLevels(const exporting::ExportedModel& m, const NewSubjects& s, const std::vector<std::vector<std::string>>& unseen) {
  LevelGroups groups;
  groups.of.assign(s.ids.size(), -1);
  const auto& [refColumn, refValue] = s.newSiteReference;
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    if (unseen[i].empty()) continue;
    const std::string name = Join(unseen[i], ", ");
    const auto at = std::find(groups.names.begin(), groups.names.end(), name);
    groups.of[i] = static_cast<int>(at - groups.names.begin());
    if (at == groups.names.end()) groups.names.push_back(name), groups.fitting.emplace_back();
    if (refColumn.empty() || (s.cells.count(refColumn) && s.cells.at(refColumn)[i] == refValue)) groups.fitting[static_cast<std::size_t>(groups.of[i])].push_back(i);
  }
  if (!groups.Any()) return groups;
  if (!m.tabularSources.empty() || !m.precomputedSources.empty())
    throw InputError("predict:EstimateLevel", s.where,
                     fmt::format("--unseen-levels estimate removes a new level's mean from its subjects' images and connections, but model {} "
                                 "also has kernel-space sources (tabular or precomputed: {}); use --unseen-levels reference or refuse",
                                 m.learner, Join(m.precomputedSources.empty() ? std::vector<std::string>{"tabular"} : m.precomputedSources, ", ")));
  if (!refColumn.empty() && !s.cells.count(refColumn))
    throw InputError("predict:NoSuchColumn", s.where, fmt::format("--new-site-reference names column \"{}\", which the table does not have", refColumn));
  const int minimum = std::max(2, s.newSiteMinimum);
  for (std::size_t g = 0; g < groups.names.size(); ++g)
    if (static_cast<int>(groups.fitting[g].size()) < minimum)
      throw InputError("predict:NewLevelTooSmall", s.where,
                       fmt::format("covariate level(s) {} that the model was not trained with: {} subjects{} to estimate their effect from, at "
                                   "least {} needed (--new-site-min); predict more of them at once, or use --unseen-levels reference",
                                   groups.names[g], groups.fitting[g].size(), refColumn.empty() ? "" : " with " + refColumn + " = " + refValue, minimum));
  return groups;
}

}  // namespace neuromkl::pipeline::predicting
