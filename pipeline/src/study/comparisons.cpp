// Comparing the study's learners, pair by pair, on the same outer folds and subjects: the corrected resampled t-test
// over folds, and on the out-of-fold predictions McNemar's exact test, DeLong's test of the AUCs and a paired
// permutation test (docs/statistics.md).
#include "neuromkl/pipeline/study_stages.hpp"

#include <cmath>
#include <iterator>
#include <map>

#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/random.hpp"
#include "neuromkl/metrics/comparison.hpp"
#include "neuromkl/core/stats.hpp"

namespace neuromkl::pipeline {

namespace {

/// Two learners' out-of-fold predictions of the first repeat, on the subjects both scored.
struct PairedPredictions {
  Eigen::VectorXd y, a, b;  ///< targets and decision values (multiclass: the predicted class)
};

PairedPredictions FirstRepeat(const cv::LearnerOutcome& a, const cv::LearnerOutcome& b, const Eigen::VectorXd& y) {
  std::map<int, double> target;  // what the decisions are scored against (cv::HeldOutTargets: adjusted ones with target confounds)
  const auto collect = [&](const cv::LearnerOutcome& o) {
    std::map<int, double> out;
    for (const auto& f : o.folds) {
      if (f.repeat != 0 || cv::FoldFailed(f)) continue;
      const Eigen::VectorXd t = cv::HeldOutTargets(f, y);
      for (std::size_t i = 0; i < f.test.size(); ++i)
        if (const double d = f.decision[static_cast<Eigen::Index>(i)]; std::isfinite(d)) {
          out[f.test[i]] = d;
          target[f.test[i]] = t[static_cast<Eigen::Index>(i)];
        }
    }
    return out;
  };
  const auto pa = collect(a), pb = collect(b);
  std::vector<int> both;
  for (const auto& [subject, unused] : pa)
    if (pb.count(subject)) both.push_back(subject);
  PairedPredictions p;
  const auto n = static_cast<Eigen::Index>(both.size());
  p.y.resize(n);
  p.a.resize(n);
  p.b.resize(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int s = both[static_cast<std::size_t>(i)];
    p.y[i] = target.at(s);
    p.a[i] = pa.at(s);
    p.b[i] = pb.at(s);
  }
  return p;
}

/// Whether a prediction is right: binary, the sign of the decision value (0 counts as +1, as metrics::Classify);
/// multiclass, the predicted class.
bool Right(double truth, double decision, learners::Task task) {
  return task == learners::Task::Multiclass ? decision == truth : (decision >= 0) == (truth > 0);
}

/// The compared metric of a set of predictions: balanced accuracy (binary: the mean of the two classes' recalls;
/// multiclass: of the recalls of the classes present, as metrics::Classify and MultiClassify) or MSE (regression).
/// Computed directly: the paired permutation test evaluates it twice per swap.
double Metric(learners::Task task, const Eigen::VectorXd& y, const Eigen::VectorXd& decision) {
  if (task == learners::Task::Regression) return (decision - y).squaredNorm() / static_cast<double>(y.size());
  std::map<double, std::pair<double, double>> perClass;  // class -> (right, total)
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    auto& [right, total] = perClass[task == learners::Task::Multiclass ? y[i] : static_cast<double>(y[i] > 0)];
    right += Right(y[i], decision[i], task);
    total += 1;
  }
  double sum = 0;
  for (const auto& [label, counts] : perClass) sum += counts.first / counts.second;
  return sum / static_cast<double>(perClass.size());
}

/// Corrected resampled t-test of the per-fold metric over the folds (and repeats) where both learners succeeded.
exporting::ComparisonRecord FoldTTest(const PairedTestSettings& settings, const cv::LearnerOutcome& a, const cv::LearnerOutcome& b) {
  const auto task = settings.task;
  std::vector<double> differences, valuesA, valuesB;
  double trainSize = 0, testSize = 0;
  for (std::size_t k = 0; k < a.folds.size() && k < b.folds.size(); ++k) {
    const auto &fa = a.folds[k], &fb = b.folds[k];
    if (cv::FoldFailed(fa) || cv::FoldFailed(fb) || fa.test != fb.test) continue;
    const Eigen::VectorXd y = cv::HeldOutTargets(fa, settings.y);
    valuesA.push_back(Metric(task, y, fa.decision));
    valuesB.push_back(Metric(task, y, fb.decision));
    differences.push_back(valuesA.back() - valuesB.back());
    trainSize += static_cast<double>(fa.train.size());
    testSize += static_cast<double>(fa.test.size());
  }
  const auto r = metrics::CorrectedResampledTTest(differences, testSize, trainSize);  // sizes summed: only their ratio enters
  exporting::ComparisonRecord c{a.label, b.label, "corrected_resampled_t", PairedMetric(task), SampleMeanSd(valuesA).mean, SampleMeanSd(valuesB).mean,
                                r.t, r.p, static_cast<std::int64_t>(differences.size()),
                                "per outer fold (x repeat) metric, difference A - B; Nadeau & Bengio (2003) variance (1/J + n_test/n_train) s^2, " +
                                    std::to_string(r.degreesOfFreedom) + " degrees of freedom"};
  return c;
}

/// McNemar's exact test of the predicted classes (binary: the sign of the decision value).
exporting::ComparisonRecord McNemar(const PairedPredictions& p, const std::string& a, const std::string& b, learners::Task task) {
  std::int64_t onlyA = 0, onlyB = 0, rightA = 0, rightB = 0;
  for (Eigen::Index i = 0; i < p.y.size(); ++i) {
    const bool ra = Right(p.y[i], p.a[i], task), rb = Right(p.y[i], p.b[i], task);
    onlyA += ra && !rb;
    onlyB += rb && !ra;
    rightA += ra;
    rightB += rb;
  }
  const double n = static_cast<double>(p.y.size());
  return {a, b, "mcnemar_exact", "accuracy", static_cast<double>(rightA) / n, static_cast<double>(rightB) / n, static_cast<double>(onlyA - onlyB),
          metrics::McNemarExactP(onlyA, onlyB), static_cast<std::int64_t>(p.y.size()),
          "first repeat's out-of-fold predicted classes; statistic = subjects right by A only - right by B only (" + std::to_string(onlyA) + " - " +
              std::to_string(onlyB) + ")"};
}

/// DeLong's test of the two AUCs on the first repeat's out-of-fold decision values.
exporting::ComparisonRecord DeLong(const PairedPredictions& p, const std::string& a, const std::string& b) {
  std::vector<double> sa(p.a.data(), p.a.data() + p.a.size()), sb(p.b.data(), p.b.data() + p.b.size());
  std::vector<char> positive;
  for (Eigen::Index i = 0; i < p.y.size(); ++i) positive.push_back(static_cast<char>(p.y[i] > 0));
  const auto t = metrics::DeLongPairedTest(sa, sb, positive);
  return {a, b, "delong", "auc", t.aucA, t.aucB, t.z, t.p, static_cast<std::int64_t>(p.y.size()),
          "first repeat's out-of-fold decision values; z = (AUC_A - AUC_B) / SE (DeLong et al. 1988)"};
}

/// Paired permutation test: each subject's two predictions swapped with probability 1/2; the statistic is the
/// pooled metric's difference A - B, two-sided.
exporting::ComparisonRecord PairedPermutation(const PairedTestSettings& settings, const PairedPredictions& p, const std::string& a,
                                              const std::string& b, std::uint64_t seed) {
  const auto task = settings.task;
  const double valueA = Metric(task, p.y, p.a), valueB = Metric(task, p.y, p.b);
  const double observed = valueA - valueB;
  Rng rng(seed);
  int atLeast = 0;
  Eigen::VectorXd da = p.a, db = p.b;
  const int swaps = settings.swaps;
  for (int s = 0; s < swaps; ++s) {
    for (Eigen::Index i = 0; i < p.y.size(); ++i) {
      const bool swap = rng.Next() & 1;
      da[i] = swap ? p.b[i] : p.a[i];
      db[i] = swap ? p.a[i] : p.b[i];
    }
    const double d = Metric(task, p.y, da) - Metric(task, p.y, db);
    // Relative slack so that a swap reproducing the observed split counts despite rounding.
    atLeast += std::abs(d) >= std::abs(observed) * (1 - 1e-12);
  }
  return {a, b, "paired_permutation", PairedMetric(task), valueA, valueB, observed, (atLeast + 1.0) / (swaps + 1.0),
          static_cast<std::int64_t>(p.y.size()),
          "first repeat's out-of-fold predictions, each subject's pair swapped at random " + std::to_string(swaps) +
              " times; statistic = pooled metric A - B"};
}

}  // namespace

std::vector<exporting::ComparisonRecord> ComparePair(const PairedTestSettings& settings, const cv::LearnerOutcome& a, const cv::LearnerOutcome& b) {
  std::vector<exporting::ComparisonRecord> out;
  const auto task = settings.task;
  out.push_back(FoldTTest(settings, a, b));
  const PairedPredictions p = FirstRepeat(a, b, settings.y);
  if (p.y.size() < 2) return out;
  if (task != learners::Task::Regression) out.push_back(McNemar(p, a.label, b.label, task));
  const bool bothClasses = (p.y.array() > 0).any() && (p.y.array() <= 0).any();  // a failed fold may leave one class only
  if (task == learners::Task::Classification && bothClasses) out.push_back(DeLong(p, a.label, b.label));
  // The pair's stream follows from its labels: adding a learner leaves the other pairs' tests as they were.
  out.push_back(PairedPermutation(settings, p, a.label, b.label, cv::DeriveSeed(settings.seed, Hasher().Update(a.label).Update(b.label).Digest().low)));
  return out;
}

std::vector<exporting::ComparisonRecord> ComparePair(const StudyContext& ctx, const cv::LearnerOutcome& a, const cv::LearnerOutcome& b) {
  return ComparePair({ctx.study.target.task, ctx.cohort.y, ComparisonSwaps(ctx), ComparisonSeed(ctx)}, a, b);
}

std::vector<exporting::ComparisonRecord> CompareLearners(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners) {
  std::vector<exporting::ComparisonRecord> out;
  for (std::size_t i = 0; i < learners.size(); ++i)
    for (std::size_t j = i + 1; j < learners.size(); ++j) {
      auto pair = ComparePair(ctx, learners[i].outcome, learners[j].outcome);
      out.insert(out.end(), std::make_move_iterator(pair.begin()), std::make_move_iterator(pair.end()));
    }
  return out;
}

std::string PairedMetric(learners::Task task) { return task == learners::Task::Regression ? "mse" : "balanced_accuracy"; }

int ComparisonSwaps(const StudyContext& ctx) { return ctx.study.statistics.pairedSwaps; }

std::uint64_t ComparisonSeed(const StudyContext& ctx) { return cv::DeriveSeed(ctx.study.seed, 0x636f6d70617265ULL); }  // "compare"

}  // namespace neuromkl::pipeline
