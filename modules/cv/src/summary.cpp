// What a nested CV's outcome says: fold status, pooled metrics over the out-of-fold predictions, fold mean and SD.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "neuromkl/core/stats.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/metrics/calibration.hpp"
#include "neuromkl/metrics/metrics.hpp"

namespace neuromkl::cv {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

std::string FoldStatus(const OuterFoldResult& fold) { return fold.error.empty() ? std::string(learners::ToString(fold.model.info.status)) : "failed"; }

std::map<std::string, int> FoldStatusCounts(const LearnerOutcome& outcome) {
  std::map<std::string, int> counts;
  for (const auto& f : outcome.folds) ++counts[FoldStatus(f)];
  return counts;
}


bool FoldFailed(const OuterFoldResult& fold) { return !fold.error.empty() || !fold.decision.allFinite(); }

std::map<std::string, double> Metrics(const learners::Targets& targets, const Eigen::VectorXd& y, const Eigen::VectorXd& f, const Eigen::MatrixXd& scores) {
  if (targets.task == learners::Task::Multiclass) return metrics::AsMap(metrics::MultiClassify(y, scores, targets.classes));
  return targets.task == learners::Task::Classification ? metrics::AsMap(metrics::Classify(y, f)) : metrics::AsMap(metrics::Regress(y, f));
}

namespace {
/// Probabilities (binary: brier, log_loss) and bias correction (regression: corrected_<metric>, gap_slope,
/// corrected_gap_slope) of one set of out-of-fold predictions; empty when the folds carry neither.
std::map<std::string, double> CalibrationMetrics(const Eigen::VectorXd& y, const Eigen::VectorXd& f, const Eigen::VectorXd& probability,
                                                 const Eigen::VectorXd& corrected) {
  std::map<std::string, double> out;
  if (probability.size() > 0) {
    out["brier"] = metrics::BrierScore(y, probability);
    out["log_loss"] = metrics::LogLoss(y, probability);
  }
  if (corrected.size() > 0) {
    for (const auto& [k, v] : metrics::AsMap(metrics::Regress(y, corrected)))
      if (k != "n") out["corrected_" + k] = v;
    Eigen::VectorXd fFinite = f;  // gap slopes over the subjects both versions score
    for (Eigen::Index i = 0; i < f.size(); ++i)
      if (!std::isfinite(corrected[i])) fFinite[i] = kNaN;
    out["gap_slope"] = metrics::GapSlope(y, fFinite);
    out["corrected_gap_slope"] = metrics::GapSlope(y, corrected);
  }
  return out;
}
}  // namespace

Summary Summarise(const LearnerOutcome& outcome, const learners::Targets& targets) {
  Summary s;
  bool withProbability = false, withCorrected = false;
  for (const auto& fold : outcome.folds) {
    withProbability |= fold.probability.size() > 0;
    withCorrected |= fold.corrected.size() > 0;
  }
  const bool multiclass = targets.task == learners::Task::Multiclass;
  int repeats = 0;
  for (const auto& f : outcome.folds) repeats = std::max(repeats, f.repeat + 1);
  // Pooled: per repeat over all out-of-fold predictions, then the mean over repeats.
  std::map<std::string, std::vector<double>> pooled;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> y, f, p, c;
    std::vector<Eigen::RowVectorXd> rows;
    for (const auto& fold : outcome.folds) {
      if (fold.repeat != r) continue;
      const Eigen::VectorXd target = HeldOutTargets(fold, targets.y);
      for (std::size_t i = 0; i < fold.test.size(); ++i) {
        y.push_back(target[static_cast<Eigen::Index>(i)]);
        f.push_back(fold.decision[static_cast<Eigen::Index>(i)]);
        if (multiclass) rows.push_back(fold.scores.row(static_cast<Eigen::Index>(i)));
        if (withProbability) p.push_back(fold.probability.size() > 0 ? fold.probability[static_cast<Eigen::Index>(i)] : kNaN);
        if (withCorrected) c.push_back(fold.corrected.size() > 0 ? fold.corrected[static_cast<Eigen::Index>(i)] : kNaN);
      }
    }
    const Eigen::Map<Eigen::VectorXd> yv(y.data(), static_cast<Eigen::Index>(y.size())), fv(f.data(), static_cast<Eigen::Index>(f.size()));
    Eigen::MatrixXd scores(static_cast<Eigen::Index>(rows.size()), multiclass ? targets.classes : 0);
    for (std::size_t i = 0; i < rows.size(); ++i) scores.row(static_cast<Eigen::Index>(i)) = rows[i];
    for (const auto& [k, v] : Metrics(targets, yv, fv, scores)) pooled[k].push_back(v);
    const Eigen::Map<Eigen::VectorXd> pv(p.data(), static_cast<Eigen::Index>(p.size())), corr(c.data(), static_cast<Eigen::Index>(c.size()));
    for (const auto& [k, v] : CalibrationMetrics(yv, fv, pv, corr)) pooled[k].push_back(v);
  }
  for (const auto& [k, v] : pooled) {
    double sum = 0;
    for (double x : v) sum += x;
    s.pooled[k] = sum / static_cast<double>(v.size());
  }
  // A failed fit has no prediction: its subjects are never scored (the metrics leave out NaN decision
  // values), so the pooled metrics cover the successful folds only, and say how many failed.
  int failed = 0;
  for (const auto& fold : outcome.folds) failed += FoldFailed(fold) ? 1 : 0;
  s.pooled["failed_folds"] = failed;
  s.pooled["scored_subjects"] = s.pooled.count("n") ? s.pooled.at("n") : 0.0;
  std::map<std::string, std::vector<double>> perFold;
  for (const auto& fold : outcome.folds) {
    if (FoldFailed(fold)) continue;
    const Eigen::VectorXd y = HeldOutTargets(fold, targets.y);
    for (const auto& [k, v] : Metrics(targets, y, fold.decision, fold.scores))
      if (!std::isnan(v)) perFold[k].push_back(v);
    for (const auto& [k, v] : CalibrationMetrics(y, fold.decision, fold.probability, fold.corrected))
      if (!std::isnan(v)) perFold[k].push_back(v);
  }
  for (const auto& [k, v] : perFold) {
    const MeanSd ms = SampleMeanSd(v);
    s.foldMean[k] = ms.mean;
    s.foldSd[k] = ms.sd;
  }
  return s;
}

std::vector<std::pair<std::string, bool>> PermutationMetrics(learners::Task task) {
  if (task == learners::Task::Classification) return {{"balanced_accuracy", true}, {"auc", true}, {"accuracy", true}};
  if (task == learners::Task::Multiclass) return {{"balanced_accuracy", true}, {"macro_auc", true}, {"kappa", true}, {"accuracy", true}};
  return {{"pearson_r", true}, {"r2", true}, {"mse", false}};
}


}  // namespace neuromkl::cv
