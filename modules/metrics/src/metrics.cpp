#include "neuromkl/metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace neuromkl::metrics {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
double Ratio(double a, double b) { return b > 0 ? a / b : kNaN; }

/// The pairs whose prediction is a number: a NaN (failed fit) or infinite decision is never scored,
/// neither as a class nor as a rank. `dropped` counts the others.
struct Scored {
  Eigen::VectorXd truth, decision;
  double dropped = 0;
};
Scored FiniteOnly(const Eigen::Ref<const Eigen::VectorXd>& truth, const Eigen::Ref<const Eigen::VectorXd>& decision) {
  Scored s;
  const Eigen::Index n = std::min(truth.size(), decision.size());
  Eigen::Index kept = 0;
  for (Eigen::Index i = 0; i < n; ++i) kept += std::isfinite(decision[i]) ? 1 : 0;
  s.truth.resize(kept);
  s.decision.resize(kept);
  for (Eigen::Index i = 0, k = 0; i < n; ++i)
    if (std::isfinite(decision[i])) {
      s.truth[k] = truth[i];
      s.decision[k++] = decision[i];
    }
  s.dropped = static_cast<double>(truth.size() - kept);
  return s;
}
}  // namespace

double Auc(const Eigen::Ref<const Eigen::VectorXd>& allLabels, const Eigen::Ref<const Eigen::VectorXd>& allDecision) {
  const Scored scored = FiniteOnly(allLabels, allDecision);
  const Eigen::VectorXd& labels = scored.truth;
  const Eigen::VectorXd& decision = scored.decision;
  const Eigen::Index n = labels.size();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return decision[a] < decision[b]; });
  // Average ranks over ties, then U = sum of positive ranks - n+(n+ + 1)/2.
  std::vector<double> rank(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n;) {
    Eigen::Index j = i;
    while (j + 1 < n && decision[order[static_cast<std::size_t>(j + 1)]] == decision[order[static_cast<std::size_t>(i)]]) ++j;
    const double avg = 0.5 * static_cast<double>(i + j) + 1.0;
    for (Eigen::Index k = i; k <= j; ++k) rank[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = avg;
    i = j + 1;
  }
  double pos = 0, rankSum = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    if (labels[i] > 0) {
      ++pos;
      rankSum += rank[static_cast<std::size_t>(i)];
    }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return kNaN;
  return (rankSum - pos * (pos + 1) / 2) / (pos * neg);
}

Classification Classify(const Eigen::Ref<const Eigen::VectorXd>& allLabels, const Eigen::Ref<const Eigen::VectorXd>& allDecision) {
  const Scored scored = FiniteOnly(allLabels, allDecision);
  const Eigen::VectorXd& labels = scored.truth;
  const Eigen::VectorXd& decision = scored.decision;
  Classification m;
  m.n = static_cast<double>(labels.size());
  m.unscored = scored.dropped;
  for (Eigen::Index i = 0; i < labels.size(); ++i) {
    const bool truth = labels[i] > 0, predicted = decision[i] >= 0;
    if (truth && predicted) ++m.tp;
    else if (truth) ++m.fn;
    else if (predicted) ++m.fp;
    else ++m.tn;
  }
  m.accuracy = Ratio(m.tp + m.tn, m.n);
  m.recallPositive = Ratio(m.tp, m.tp + m.fn);
  m.recallNegative = Ratio(m.tn, m.tn + m.fp);
  // Balanced accuracy: mean recall over the classes present.
  if (std::isnan(m.recallPositive)) m.balancedAccuracy = m.recallNegative;
  else if (std::isnan(m.recallNegative)) m.balancedAccuracy = m.recallPositive;
  else m.balancedAccuracy = 0.5 * (m.recallPositive + m.recallNegative);
  m.precisionPositive = Ratio(m.tp, m.tp + m.fp);
  m.precisionNegative = Ratio(m.tn, m.tn + m.fn);
  m.auc = Auc(labels, decision);
  if (m.n == 0) m.accuracy = m.balancedAccuracy = kNaN;
  // Wilson score interval, z = 1.959964 (95 %).
  const double z = 1.959963984540054, p = m.accuracy, n = m.n;
  if (n > 0) {
    const double denom = 1 + z * z / n, centre = (p + z * z / (2 * n)) / denom;
    const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom;
    m.accuracyLow = centre - half;
    m.accuracyHigh = centre + half;
  } else {
    m.accuracyLow = m.accuracyHigh = kNaN;
  }
  return m;
}

Regression Regress(const Eigen::Ref<const Eigen::VectorXd>& allTargets, const Eigen::Ref<const Eigen::VectorXd>& allPredictions) {
  const Scored scored = FiniteOnly(allTargets, allPredictions);
  const Eigen::VectorXd& y = scored.truth;
  const Eigen::VectorXd& f = scored.decision;
  Regression m;
  const double n = static_cast<double>(y.size());
  m.n = n;
  m.unscored = scored.dropped;
  if (n == 0) {
    m.mse = m.mae = m.pearsonR = m.rSquared = m.r2 = m.nmse = kNaN;
    return m;
  }
  const Eigen::ArrayXd e = (f - y).array();
  m.mse = e.square().mean();
  m.mae = e.abs().mean();
  const Eigen::ArrayXd yc = y.array() - y.mean(), fc = f.array() - f.mean();
  const double syy = yc.square().sum(), sff = fc.square().sum();
  m.pearsonR = syy > 0 && sff > 0 ? (yc * fc).sum() / std::sqrt(syy * sff) : kNaN;
  m.rSquared = m.pearsonR * m.pearsonR;
  m.r2 = syy > 0 ? 1.0 - e.square().sum() / syy : kNaN;
  m.nmse = syy > 0 ? m.mse / (syy / n) : kNaN;
  return m;
}

std::map<std::string, double> AsMap(const Classification& m) {
  return {{"n", m.n},
          {"accuracy", m.accuracy},
          {"balanced_accuracy", m.balancedAccuracy},
          {"auc", m.auc},
          {"recall_positive", m.recallPositive},
          {"recall_negative", m.recallNegative},
          {"precision_positive", m.precisionPositive},
          {"precision_negative", m.precisionNegative},
          {"true_positive", m.tp},
          {"false_negative", m.fn},
          {"false_positive", m.fp},
          {"true_negative", m.tn},
          {"accuracy_ci95_low", m.accuracyLow},
          {"accuracy_ci95_high", m.accuracyHigh}};
}

std::map<std::string, double> AsMap(const Regression& m) {
  return {{"n", m.n},   {"mse", m.mse},     {"mae", m.mae},           {"pearson_r", m.pearsonR},
          {"r2", m.r2}, {"nmse", m.nmse},   {"r_squared_pearson", m.rSquared}};
}

}  // namespace neuromkl::metrics
