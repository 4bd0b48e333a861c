// The nested cross-validation stage: every learner's outcome, its summary and the warnings a reader must see.
#include "neuromkl/pipeline/study_stages.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/core/strings.hpp"

namespace neuromkl::pipeline {

namespace {

/// A warning when a learner's outer folds did not all converge: their models are usable but not at
/// the optimum (capped, stalled) or missing (failed), which a reader must know.
std::optional<std::string> FitStatusWarning(const cv::LearnerOutcome& o) {
  const auto counts = cv::FoldStatusCounts(o);
  const int converged = counts.count("converged") ? counts.at("converged") : 0;
  if (converged == static_cast<int>(o.folds.size())) return std::nullopt;
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts)
    if (status != "converged") parts.push_back(fmt::format("{} {}", count, status));
  return fmt::format("learner {}: {} of {} outer folds did not converge ({}); their models are not at the optimum{}", o.label,
                     o.folds.size() - static_cast<std::size_t>(converged), o.folds.size(), Join(parts, ", "),
                     counts.count("max_iterations_reached") ? ": raise max_iterations or loosen the tolerance" : "");
}

/// A warning when inner-CV fits did not converge: the parameter search then compared some grid points at models
/// short of their optimum (the outer folds' own models are reported by FitStatusWarning).
std::optional<std::string> InnerFitStatusWarning(const cv::LearnerOutcome& o) {
  if (o.innerNotConverged == 0) return std::nullopt;
  // Capped fits need more iterations; stalled ones (no descent at the inner solver's accuracy) a looser tolerance.
  const long stalled = o.innerNotConverged - o.innerCapped;
  std::vector<std::string> parts, advice;
  if (o.innerCapped > 0) {
    parts.push_back(fmt::format("{} capped at max_iterations", o.innerCapped));
    advice.push_back("raise max_iterations");
  }
  if (stalled > 0) {
    parts.push_back(fmt::format("{} stalled", stalled));
    advice.push_back("loosen the tolerance");
  }
  return fmt::format("learner {}: {} of {} inner-CV fits did not converge ({}); the parameter search compared some grid points at models short of "
                     "their optimum: {}",
                     o.label, o.innerNotConverged, o.innerFits, Join(parts, ", "), Join(advice, " or "));
}

/// Warnings for searched parameters chosen at the same end of their grid in most outer folds: the
/// best value may lie beyond the grid. Grids of fewer than 3 values have no interior, so no warning.
std::vector<std::string> GridEdgeWarnings(const cv::LearnerOutcome& o, const std::vector<std::string>& searched) {
  std::vector<std::string> out;
  const learners::LearnerInfo* info = learners::FindLearner(o.name);
  for (const auto& name : searched) {
    // An end that is the parameter's own bound (mu = 1 is l1-MKL, mu = 0 the uniform sum) cannot be extended.
    const learners::ParamSpec* spec = nullptr;
    if (info)
      for (const auto& p : info->params)
        if (p.name == name) spec = &p;
    double lo = INFINITY, hi = -INFINITY;
    std::set<double> values;
    for (const auto& point : o.grid) {
      const double v = point.at(name);
      values.insert(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (values.size() < 3) continue;
    int atLow = 0, atHigh = 0, folds = 0;
    for (const auto& f : o.folds) {
      if (!f.error.empty()) continue;
      ++folds;
      const double v = o.grid[f.chosen].at(name);
      atLow += v == lo;
      atHigh += v == hi;
    }
    for (const auto& [count, value, end] : {std::tuple{atLow, lo, "smallest"}, std::tuple{atHigh, hi, "largest"}})
      if (folds > 0 && 2 * count > folds && !(spec && (value == spec->lo || value == spec->hi)))
        out.push_back(fmt::format("learner {}: {} was chosen at the {} value of its grid ({}) in {} of {} outer folds; the best value may lie "
                                  "beyond the grid: extend it",
                                  o.label, name, end, FormatDouble(value), count, folds));
  }
  return out;
}


/// Below this slope of the inner-CV predictions on the target, a bias correction divides the predictions' noise by a
/// small number: its corrected predictions are unreliable, and the reader is told.
constexpr double kSmallCorrectionSlope = 0.1;

/// A warning when the brain-age bias correction of some outer folds has a slope below kSmallCorrectionSlope.
std::optional<std::string> SmallCorrectionSlopeWarning(const cv::LearnerOutcome& o) {
  std::vector<std::string> folds;
  for (const auto& f : o.folds)
    if (f.bias.Valid() && f.bias.slope < kSmallCorrectionSlope) folds.push_back(fmt::format("{} ({})", f.index, FormatDouble(f.bias.slope)));
  if (folds.empty()) return std::nullopt;
  return fmt::format("learner {}: the bias correction's slope (of the inner-CV predictions on the target) is below {} in outer fold(s) {}: the "
                     "predictions barely follow the target, and dividing by that slope amplifies their noise, so prediction_corrected "
                     "and the corrected_ metrics are unreliable here",
                     o.label, FormatDouble(kSmallCorrectionSlope), Join(folds, ", "));
}

}  // namespace

/// Multiclass metric keys with class names instead of label indices: recall_<class>, precision_<class>,
/// auc_<class>, confusion_<true>_<predicted>.
void NameClasses(cv::Summary& s, const std::vector<std::string>& names) {
  auto rename = [&](std::map<std::string, double>& m) {
    std::map<std::string, double> out;
    for (const auto& [k, v] : m) {
      std::string key = k;
      for (const std::string prefix : {"recall_", "precision_", "auc_"})
        if (k.rfind(prefix, 0) == 0 && std::isdigit(static_cast<unsigned char>(k[prefix.size()]))) key = prefix + names.at(std::stoul(k.substr(prefix.size())));
      if (k.rfind("confusion_", 0) == 0) {
        const auto parts = Split(k.substr(10), '_');
        key = "confusion_";
        key += names.at(std::stoul(parts.at(0)));
        key += "_";
        key += names.at(std::stoul(parts.at(1)));
      }
      out[key] = v;
    }
    m = std::move(out);
  };
  rename(s.pooled);
  rename(s.foldMean);
  rename(s.foldSd);
}

CrossValidationResult RunCrossValidation(const StudyContext& ctx) {
  const learners::Targets targets = ctx.TargetsOf(ctx.cohort.y);
  CrossValidationResult result;
  auto outcomes = cv::RunNestedCv(*ctx.kernels, targets, ctx.outer, ctx.Inner(), ctx.plans, ctx.nestedOptions);
  for (std::size_t l = 0; l < outcomes.size(); ++l) {
    exporting::LearnerRecord lr;
    lr.summary = cv::Summarise(outcomes[l], targets);
    if (targets.task == learners::Task::Multiclass) NameClasses(lr.summary, ctx.cohort.classNames);
    for (const auto& [k, _] : ctx.study.learners[l].grid) lr.searched.push_back(k);
    if (ctx.study.learners[l].classWeightBalanced) lr.classWeight = "balanced";
    std::vector<std::string> given;
    for (const auto& [name, w] : ctx.study.learners[l].classWeights) given.push_back(name + " = " + FormatDouble(w));
    if (!given.empty()) lr.classWeight = Join(given, ", ");
    for (const auto& f : outcomes[l].folds)
      if (!f.error.empty()) result.warnings.push_back(fmt::format("learner {} fold {} failed: {}", outcomes[l].label, f.index, f.error));
    if (const double failed = lr.summary.pooled.at("failed_folds"); failed > 0)
      result.warnings.push_back(fmt::format("learner {}: {} of {} outer folds FAILED (no model, no prediction); its metrics are over the {} "
                                            "subjects of the successful folds only",
                                            outcomes[l].label, failed, outcomes[l].folds.size(), lr.summary.pooled.at("scored_subjects")));
    if (auto w = FitStatusWarning(outcomes[l])) result.warnings.push_back(*w);
    if (auto w = InnerFitStatusWarning(outcomes[l])) result.warnings.push_back(*w);
    for (auto& w : GridEdgeWarnings(outcomes[l], lr.searched)) result.warnings.push_back(std::move(w));
    if (auto w = SmallCorrectionSlopeWarning(outcomes[l])) result.warnings.push_back(*w);
    lr.outcome = std::move(outcomes[l]);
    result.learners.push_back(std::move(lr));
  }
  for (const auto& w : result.warnings) spdlog::warn("{}", w);  // on the console too, not only in the outputs
  return result;
}

}  // namespace neuromkl::pipeline
