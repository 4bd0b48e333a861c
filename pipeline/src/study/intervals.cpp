// Confidence intervals of every learner's pooled metrics: a seeded, class-stratified subject bootstrap of the
// out-of-fold predictions (percentile intervals), and DeLong's interval of the binary AUC (docs/statistics.md).
#include "neuromkl/pipeline/study_stages.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <tbb/parallel_for.h>

#include "neuromkl/core/random.hpp"
#include "neuromkl/metrics/comparison.hpp"

namespace neuromkl::pipeline {

namespace {


/// The metrics given an interval: rates and scores, not counts (n, confusion cells) nor the accuracy's own Wilson interval.
bool WithInterval(const std::string& metric) {
  static const std::vector<std::string> skipped = {"n", "true_positive", "false_negative", "false_positive", "true_negative", "accuracy_ci95_low",
                                                   "accuracy_ci95_high", "failed_folds", "scored_subjects"};
  return std::find(skipped.begin(), skipped.end(), metric) == skipped.end() && metric.rfind("confusion_", 0) != 0;
}

/// One repeat's out-of-fold predictions by subject (finite ones only).
struct RepeatPredictions {
  std::map<int, double> decision;
  std::map<int, double> target;              ///< what the decision is scored against (cv::HeldOutTargets)
  std::map<int, Eigen::RowVectorXd> scores;  ///< multiclass
};

/// The quantile q of sorted finite values (linear interpolation between order statistics).
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::nan("");
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

}  // namespace

int BootstrapResamples(const StudyContext& ctx) { return ctx.study.statistics.bootstrapResamples; }
std::uint64_t BootstrapSeed(const StudyContext& ctx) { return cv::DeriveSeed(ctx.study.seed, 0x626f6f74ULL); }  // "boot"

void AddMetricIntervals(const StudyContext& ctx, exporting::LearnerRecord& lr, std::size_t learnerIndex) {
  const auto& outcome = lr.outcome;
  const bool multiclass = ctx.study.target.task == learners::Task::Multiclass;
  std::vector<RepeatPredictions> repeats;
  for (const auto& f : outcome.folds) {
    if (cv::FoldFailed(f)) continue;
    if (repeats.size() <= static_cast<std::size_t>(f.repeat)) repeats.resize(static_cast<std::size_t>(f.repeat) + 1);
    const Eigen::VectorXd target = cv::HeldOutTargets(f, ctx.cohort.y);
    for (std::size_t i = 0; i < f.test.size(); ++i) {
      const auto r = static_cast<Eigen::Index>(i);
      if (!std::isfinite(f.decision[r])) continue;
      repeats[static_cast<std::size_t>(f.repeat)].decision[f.test[i]] = f.decision[r];
      repeats[static_cast<std::size_t>(f.repeat)].target[f.test[i]] = target[r];
      if (multiclass) repeats[static_cast<std::size_t>(f.repeat)].scores[f.test[i]] = f.scores.row(r);
    }
  }
  if (repeats.empty() || repeats[0].decision.size() < 2) return;
  // The subjects to resample: those of the first repeat, grouped by class (classification: each class keeps its size,
  // so every resample has both classes and an AUC).
  std::map<double, std::vector<int>> strata;
  for (const auto& [subject, unused] : repeats[0].decision)
    strata[ctx.study.target.task == learners::Task::Regression ? 0.0 : ctx.cohort.y[subject]].push_back(subject);
  const learners::Targets targets = ctx.TargetsOf(ctx.cohort.y);
  const std::uint64_t seed = cv::DeriveSeed(BootstrapSeed(ctx), learnerIndex);
  const int resamples = BootstrapResamples(ctx);
  std::vector<std::map<std::string, double>> resampled(static_cast<std::size_t>(resamples));
  tbb::parallel_for(0, resamples, [&](int b) {
    Rng rng(cv::DeriveSeed(seed, static_cast<std::uint64_t>(b)));
    std::vector<int> drawn;
    for (const auto& [label, subjects] : strata)
      for (std::size_t k = 0; k < subjects.size(); ++k) drawn.push_back(subjects[static_cast<std::size_t>(rng.Below(subjects.size()))]);
    std::map<std::string, double> sum;
    std::map<std::string, int> count;
    for (const auto& repeat : repeats) {  // each repeat's metric on the drawn subjects, then the mean over repeats (as the pooled metrics)
      std::vector<double> y, d;
      std::vector<Eigen::RowVectorXd> rows;
      for (int s : drawn) {
        const auto it = repeat.decision.find(s);
        if (it == repeat.decision.end()) continue;
        y.push_back(repeat.target.at(s));
        d.push_back(it->second);
        if (multiclass) rows.push_back(repeat.scores.at(s));
      }
      Eigen::MatrixXd scores(static_cast<Eigen::Index>(rows.size()), multiclass ? targets.classes : 0);
      for (std::size_t i = 0; i < rows.size(); ++i) scores.row(static_cast<Eigen::Index>(i)) = rows[i];
      const Eigen::Map<Eigen::VectorXd> yv(y.data(), static_cast<Eigen::Index>(y.size())), dv(d.data(), static_cast<Eigen::Index>(d.size()));
      for (const auto& [metric, value] : cv::Metrics(targets, yv, dv, scores))
        if (WithInterval(metric) && std::isfinite(value)) {
          sum[metric] += value;
          ++count[metric];
        }
    }
    cv::Summary named;  // multiclass: per-class metrics under the class names the pooled metrics use
    for (const auto& [metric, total] : sum) named.pooled[metric] = total / count[metric];
    if (multiclass) NameClasses(named, ctx.cohort.classNames);
    resampled[static_cast<std::size_t>(b)] = std::move(named.pooled);
  });
  std::map<std::string, std::vector<double>> values;
  for (const auto& r : resampled)
    for (const auto& [metric, v] : r) values[metric].push_back(v);
  for (auto& [metric, v] : values) {
    if (!lr.summary.pooled.count(metric)) continue;
    std::sort(v.begin(), v.end());
    lr.pooledInterval[metric] = {Quantile(v, 0.025), Quantile(v, 0.975)};
  }
  if (ctx.study.target.task == learners::Task::Classification) {
    std::vector<double> scores;
    std::vector<char> positive;
    for (const auto& [subject, decision] : repeats[0].decision) {
      scores.push_back(decision);
      positive.push_back(static_cast<char>(ctx.cohort.y[subject] > 0));
    }
    if (std::count(positive.begin(), positive.end(), 1) > 1 && std::count(positive.begin(), positive.end(), 0) > 1) {  // a variance per class
      const auto auc = metrics::DeLongAuc(scores, positive);
      const double half = 1.959963984540054 * std::sqrt(auc.variance);
      lr.aucDeLongInterval = {std::max(0.0, auc.auc - half), std::min(1.0, auc.auc + half)};
    }
  }
}

}  // namespace neuromkl::pipeline
