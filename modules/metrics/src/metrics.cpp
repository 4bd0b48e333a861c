#include "neuromkl/metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "midranks.hpp"

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
  // Average ranks over ties, then U = sum of positive ranks - n+(n+ + 1)/2.
  const std::vector<double> rank = Midranks(decision.data(), static_cast<std::size_t>(n));
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

std::vector<RocPoint> RocCurve(const Eigen::Ref<const Eigen::VectorXd>& allLabels, const Eigen::Ref<const Eigen::VectorXd>& allDecision) {
  const Scored scored = FiniteOnly(allLabels, allDecision);
  const Eigen::VectorXd& labels = scored.truth;
  const Eigen::VectorXd& decision = scored.decision;
  const auto n = static_cast<std::size_t>(labels.size());
  const double pos = static_cast<double>((labels.array() > 0).count()), neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return {};
  std::vector<Eigen::Index> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return decision[a] > decision[b]; });
  std::vector<RocPoint> curve = {{0.0, 0.0}};
  double tp = 0, fp = 0;
  for (std::size_t k = 0; k < n; ++k) {
    (labels[order[k]] > 0 ? tp : fp) += 1;
    if (k + 1 < n && decision[order[k + 1]] == decision[order[k]]) continue;  // a point only after the last of tied values
    curve.push_back({fp / neg, tp / pos});
  }
  return curve;
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

Eigen::VectorXd PredictedClasses(const Eigen::Ref<const Eigen::MatrixXd>& scores) {
  Eigen::VectorXd out(scores.rows());
  for (Eigen::Index i = 0; i < scores.rows(); ++i) {
    if (!scores.row(i).allFinite() || scores.cols() == 0) {
      out[i] = kNaN;
      continue;
    }
    Eigen::Index best = 0;
    for (Eigen::Index c = 1; c < scores.cols(); ++c)
      if (scores(i, c) > scores(i, best)) best = c;
    out[i] = static_cast<double>(best);
  }
  return out;
}

Multiclass MultiClassify(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::MatrixXd>& scores, int classes) {
  Multiclass m;
  m.classes = classes;
  const auto k = static_cast<Eigen::Index>(classes);
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < std::min(labels.size(), scores.rows()); ++i)
    if (scores.row(i).allFinite()) rows.push_back(i);
  m.n = static_cast<double>(rows.size());
  m.unscored = static_cast<double>(labels.size()) - m.n;
  m.confusion = Eigen::MatrixXd::Zero(k, k);
  const Eigen::VectorXd predicted = PredictedClasses(scores);
  for (auto i : rows) m.confusion(static_cast<Eigen::Index>(labels[i]), static_cast<Eigen::Index>(predicted[i])) += 1;
  m.recall = Eigen::VectorXd::Constant(k, kNaN);
  m.precision = Eigen::VectorXd::Constant(k, kNaN);
  m.auc = Eigen::VectorXd::Constant(k, kNaN);
  double recallSum = 0, aucSum = 0, present = 0, aucCount = 0, agree = 0, expected = 0;
  for (Eigen::Index c = 0; c < k; ++c) {
    const double truth = m.confusion.row(c).sum(), said = m.confusion.col(c).sum();
    m.recall[c] = Ratio(m.confusion(c, c), truth);
    m.precision[c] = Ratio(m.confusion(c, c), said);
    agree += m.confusion(c, c);
    expected += truth * said;
    if (truth > 0) {
      recallSum += m.recall[c];
      ++present;
    }
    Eigen::VectorXd y(static_cast<Eigen::Index>(rows.size())), f(static_cast<Eigen::Index>(rows.size()));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      y[static_cast<Eigen::Index>(r)] = labels[rows[r]] == static_cast<double>(c) ? 1.0 : -1.0;
      f[static_cast<Eigen::Index>(r)] = scores(rows[r], c);
    }
    m.auc[c] = Auc(y, f);
    if (std::isfinite(m.auc[c])) {
      aucSum += m.auc[c];
      ++aucCount;
    }
  }
  m.accuracy = Ratio(agree, m.n);
  m.balancedAccuracy = present > 0 ? recallSum / present : kNaN;
  m.macroAuc = aucCount > 0 ? aucSum / aucCount : kNaN;
  const double po = m.accuracy, pe = m.n > 0 ? expected / (m.n * m.n) : kNaN;
  m.kappa = pe < 1 ? (po - pe) / (1 - pe) : kNaN;
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

std::map<std::string, double> AsMap(const Multiclass& m) {
  std::map<std::string, double> out = {
      {"n", m.n}, {"accuracy", m.accuracy}, {"balanced_accuracy", m.balancedAccuracy}, {"macro_auc", m.macroAuc}, {"kappa", m.kappa}};
  for (int c = 0; c < m.classes; ++c) {
    const auto i = static_cast<Eigen::Index>(c);
    out["recall_" + std::to_string(c)] = m.recall[i];
    out["precision_" + std::to_string(c)] = m.precision[i];
    out["auc_" + std::to_string(c)] = m.auc[i];
    for (int p = 0; p < m.classes; ++p) {
      std::string key = "confusion_";
      key += std::to_string(c);
      key += "_";
      key += std::to_string(p);
      out[key] = m.confusion(i, static_cast<Eigen::Index>(p));
    }
  }
  return out;
}

}  // namespace neuromkl::metrics
