#include <algorithm>
#include <cmath>

#include "neuromkl/export/report.hpp"

namespace neuromkl::exporting {

namespace {

Eigen::Map<const Eigen::VectorXd> AsVector(const std::vector<double>& v) { return {v.data(), static_cast<Eigen::Index>(v.size())}; }

/// Multiclass: each class's one-vs-rest ROC curve on its score column (first repetition, rows with every score finite).
std::vector<std::vector<metrics::RocPoint>> ClassRocCurves(const LearnerRecord& lr, const RunRecord& r) {
  std::vector<std::vector<metrics::RocPoint>> curves;
  for (std::size_t c = 0; c < r.classNames.size(); ++c) {
    std::vector<double> y, f;
    for (const auto& fold : lr.outcome.folds)
      if (fold.repeat == 0 && fold.scores.cols() > static_cast<Eigen::Index>(c))
        for (std::size_t i = 0; i < fold.test.size(); ++i)
          if (fold.scores.row(static_cast<Eigen::Index>(i)).allFinite()) {
            y.push_back(r.targets[static_cast<std::size_t>(fold.test[i])] == static_cast<double>(c) ? 1.0 : -1.0);
            f.push_back(fold.scores(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(c)));
          }
    curves.push_back(metrics::RocCurve(AsVector(y), AsVector(f)));
  }
  return curves;
}

/// Binary with probabilities: the reliability bins of the pooled Platt probabilities (first repetition).
std::vector<metrics::ReliabilityBin> ReliabilityBins(const LearnerRecord& lr, const RunRecord& r) {
  std::vector<double> y, p;
  for (const auto& fold : lr.outcome.folds)
    if (fold.repeat == 0 && fold.probability.size() > 0)
      for (std::size_t i = 0; i < fold.test.size(); ++i) {
        y.push_back(r.targets[static_cast<std::size_t>(fold.test[i])]);
        p.push_back(fold.probability[static_cast<Eigen::Index>(i)]);
      }
  return metrics::Reliability(AsVector(y), AsVector(p), 10);
}

/// Regression with bias correction: each subject's gap before and after the correction (first repetition, both finite).
std::vector<ReportData::Gap> Gaps(const LearnerRecord& lr, const RunRecord& r) {
  std::vector<ReportData::Gap> gaps;
  for (const auto& fold : lr.outcome.folds)
    if (fold.repeat == 0 && fold.corrected.size() > 0)
      for (std::size_t i = 0; i < fold.test.size(); ++i) {
        const auto ii = static_cast<Eigen::Index>(i);
        if (!std::isfinite(fold.decision[ii]) || !std::isfinite(fold.corrected[ii])) continue;
        const double t = ScoredTarget(r.targets, fold, i);
        gaps.push_back({t, fold.decision[ii] - t, fold.corrected[ii] - t});
      }
  return gaps;
}

/// The fewest and most features of kernels [first, end).
ReportData::FeatureRange Features(const RunRecord& r, std::size_t first, std::size_t end) {
  ReportData::FeatureRange range;
  for (std::size_t k = first; k < end && k < r.kernels.size(); ++k) {
    range.fewest = k == first ? r.kernels[k].features : std::min(range.fewest, r.kernels[k].features);
    range.most = std::max(range.most, r.kernels[k].features);
  }
  return range;
}

}  // namespace

ReportData PrepareReportData(const RunRecord& r) {
  ReportData data;
  data.features = Features(r, 0, r.kernels.size());
  for (std::size_t s = 0, first = 0; s < r.sourceKernelCounts.size(); first += r.sourceKernelCounts[s++])
    data.sourceFeatures.push_back(Features(r, first, first + r.sourceKernelCounts[s]));
  for (const auto& lr : r.learners)
    for (const auto& f : lr.outcome.folds) data.probabilities |= f.probability.size() > 0;
  double positives = 0;
  for (double t : r.targets) positives += t > 0 ? 1 : 0;
  if (!r.targets.empty()) data.prevalence = positives / static_cast<double>(r.targets.size());
  for (const auto& lr : r.learners) {
    ReportData::Learner l;
    for (const auto& fold : lr.outcome.folds)
      if (fold.repeat == 0)
        for (std::size_t i = 0; i < fold.test.size(); ++i)
          if (std::isfinite(fold.decision[static_cast<Eigen::Index>(i)])) {
            l.targets.push_back(ScoredTarget(r.targets, fold, i));
            l.decisions.push_back(fold.decision[static_cast<Eigen::Index>(i)]);
          }
    if (r.task == "classification") l.roc = metrics::RocCurve(AsVector(l.targets), AsVector(l.decisions));
    if (r.task == "multiclass") l.classRoc = ClassRocCurves(lr, r);
    if (data.probabilities) l.reliability = ReliabilityBins(lr, r);
    l.gaps = Gaps(lr, r);
    if (!r.sourceNames.empty()) l.sources = weights::SourceShares(lr.regions, r.sourceKernelCounts);
    data.learners.push_back(std::move(l));
  }
  return data;
}

}  // namespace neuromkl::exporting
