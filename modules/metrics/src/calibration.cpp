#include "neuromkl/metrics/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace neuromkl::metrics {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The two-parameter logistic fit min_{A,B} sum_i -[t_i log p_i + (1 - t_i) log(1 - p_i)],
/// p_i = 1 / (1 + exp(A x_i + B)), by Lin, Lin & Weng's (2007) Newton method with backtracking
/// (LIBSVM's sigmoid_train, without its prior-corrected targets, which the caller passes in t).
PlattScaling FitLogistic(const std::vector<double>& x, const std::vector<double>& t, double startB) {
  constexpr int kMaxIterations = 100;
  constexpr double kMinStep = 1e-10, kSigma = 1e-12;  // LIBSVM's values: smallest step, Hessian ridge
  const std::size_t l = x.size();
  auto objective = [&](double A, double B) {
    double f = 0;
    for (std::size_t i = 0; i < l; ++i) {
      const double fApB = x[i] * A + B;
      f += fApB >= 0 ? t[i] * fApB + std::log1p(std::exp(-fApB)) : (t[i] - 1) * fApB + std::log1p(std::exp(fApB));
    }
    return f;
  };
  PlattScaling s;
  s.samples = static_cast<int>(l);
  double A = 0, B = startB, fval = objective(A, B);
  for (int it = 0; it < kMaxIterations; ++it) {
    double h11 = kSigma, h22 = kSigma, h21 = 0, g1 = 0, g2 = 0;
    for (std::size_t i = 0; i < l; ++i) {
      const double fApB = x[i] * A + B;
      double p, q;  // p = P(y = +1) = 1 / (1 + exp(fApB)), q = 1 - p
      if (fApB >= 0) {
        const double e = std::exp(-fApB);
        p = e / (1.0 + e);
        q = 1.0 / (1.0 + e);
      } else {
        const double e = std::exp(fApB);
        p = 1.0 / (1.0 + e);
        q = e / (1.0 + e);
      }
      const double d2 = p * q;
      h11 += x[i] * x[i] * d2;
      h22 += d2;
      h21 += x[i] * d2;
      const double d1 = t[i] - p;
      g1 += x[i] * d1;
      g2 += d1;
    }
    s.iterations = it;
    if (std::abs(g1) < 1e-5 && std::abs(g2) < 1e-5) {
      s.converged = true;
      break;
    }
    const double det = h11 * h22 - h21 * h21;
    const double dA = -(h22 * g1 - h21 * g2) / det, dB = -(-h21 * g1 + h11 * g2) / det;
    const double gd = g1 * dA + g2 * dB;
    double step = 1;
    while (step >= kMinStep) {
      const double newA = A + step * dA, newB = B + step * dB, newf = objective(newA, newB);
      if (newf < fval + 1e-4 * step * gd) {  // sufficient decrease (Armijo)
        A = newA;
        B = newB;
        fval = newf;
        break;
      }
      step /= 2;
    }
    if (step < kMinStep) break;  // line search failed: keep the last accepted point
  }
  s.a = A;
  s.b = B;
  return s;
}

double Logit(double p) {
  p = std::clamp(p, 1e-15, 1 - 1e-15);
  return std::log(p / (1 - p));
}
}  // namespace

PlattScaling FitPlatt(const Eigen::Ref<const Eigen::VectorXd>& decision, const Eigen::Ref<const Eigen::VectorXd>& labels) {
  std::vector<double> x, t;
  double pos = 0, neg = 0;
  for (Eigen::Index i = 0; i < decision.size(); ++i) {
    if (!std::isfinite(decision[i]) || !std::isfinite(labels[i])) continue;
    x.push_back(decision[i]);
    (labels[i] > 0 ? pos : neg) += 1;
  }
  if (pos == 0 || neg == 0) return {};
  const double hi = (pos + 1) / (pos + 2), lo = 1 / (neg + 2);  // Platt's targets: a prior on the labels
  for (Eigen::Index i = 0; i < decision.size(); ++i)
    if (std::isfinite(decision[i]) && std::isfinite(labels[i])) t.push_back(labels[i] > 0 ? hi : lo);
  return FitLogistic(x, t, std::log((neg + 1) / (pos + 1)));
}

double PlattProbability(const PlattScaling& platt, double decision) {
  if (!platt.Valid() || !std::isfinite(decision)) return kNaN;
  const double fApB = decision * platt.a + platt.b;
  return fApB >= 0 ? std::exp(-fApB) / (1.0 + std::exp(-fApB)) : 1.0 / (1.0 + std::exp(fApB));
}

Eigen::VectorXd PlattProbabilities(const PlattScaling& platt, const Eigen::Ref<const Eigen::VectorXd>& decision) {
  Eigen::VectorXd p(decision.size());
  for (Eigen::Index i = 0; i < decision.size(); ++i) p[i] = PlattProbability(platt, decision[i]);
  return p;
}

double BrierScore(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability) {
  double sum = 0;
  int n = 0;
  for (Eigen::Index i = 0; i < labels.size(); ++i) {
    if (!std::isfinite(probability[i])) continue;
    const double y = labels[i] > 0 ? 1.0 : 0.0;
    sum += (probability[i] - y) * (probability[i] - y);
    ++n;
  }
  return n > 0 ? sum / n : kNaN;
}

double LogLoss(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability) {
  double sum = 0;
  int n = 0;
  for (Eigen::Index i = 0; i < labels.size(); ++i) {
    if (!std::isfinite(probability[i])) continue;
    const double p = std::clamp(probability[i], 1e-15, 1 - 1e-15);
    sum -= labels[i] > 0 ? std::log(p) : std::log1p(-p);
    ++n;
  }
  return n > 0 ? sum / n : kNaN;
}

double CalibrationSlope(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability) {
  std::vector<double> x, t;
  int pos = 0, neg = 0;
  for (Eigen::Index i = 0; i < labels.size(); ++i) {
    if (!std::isfinite(probability[i])) continue;
    x.push_back(Logit(probability[i]));
    t.push_back(labels[i] > 0 ? 1.0 : 0.0);
    (labels[i] > 0 ? pos : neg) += 1;
  }
  if (pos < 2 || neg < 2) return kNaN;
  const PlattScaling fit = FitLogistic(x, t, 0.0);
  return -fit.a;  // P = 1 / (1 + exp(A x + B)) = sigmoid(-A x - B): the slope on logit(p) is -A
}

std::vector<ReliabilityBin> Reliability(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability, int bins) {
  std::vector<ReliabilityBin> out(static_cast<std::size_t>(std::max(bins, 1)));
  std::vector<double> sumP(out.size(), 0), sumY(out.size(), 0);
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b].lo = static_cast<double>(b) / static_cast<double>(out.size());
    out[b].hi = static_cast<double>(b + 1) / static_cast<double>(out.size());
  }
  for (Eigen::Index i = 0; i < labels.size(); ++i) {
    const double p = probability[i];
    if (!std::isfinite(p)) continue;
    const auto b = std::min(out.size() - 1, static_cast<std::size_t>(std::max(0.0, p) * static_cast<double>(out.size())));
    ++out[b].count;
    sumP[b] += p;
    sumY[b] += labels[i] > 0 ? 1.0 : 0.0;
  }
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b].meanProbability = out[b].count > 0 ? sumP[b] / out[b].count : kNaN;
    out[b].observed = out[b].count > 0 ? sumY[b] / out[b].count : kNaN;
  }
  return out;
}

namespace {
/// Least squares y = slope x + offset over finite pairs; samples 0 when fewer than 3 or x constant.
BiasCorrection LeastSquares(const Eigen::Ref<const Eigen::VectorXd>& x, const Eigen::Ref<const Eigen::VectorXd>& y) {
  double sx = 0, sy = 0;
  int n = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) sx += x[i], sy += y[i], ++n;
  if (n < 3) return {};
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  if (!(sxx > 0)) return {};
  BiasCorrection c;
  c.slope = sxy / sxx;
  c.offset = my - c.slope * mx;
  c.samples = n;
  return c;
}
}  // namespace

BiasCorrection FitBiasCorrection(const Eigen::Ref<const Eigen::VectorXd>& targets, const Eigen::Ref<const Eigen::VectorXd>& predictions) {
  BiasCorrection c = LeastSquares(targets, predictions);
  if (!(c.slope > 0)) c.samples = 0;
  return c;
}

Eigen::VectorXd ApplyBiasCorrection(const BiasCorrection& correction, const Eigen::Ref<const Eigen::VectorXd>& predictions) {
  if (!correction.Valid()) return Eigen::VectorXd::Constant(predictions.size(), kNaN);
  return (predictions.array() - correction.offset) / correction.slope;
}

double GapSlope(const Eigen::Ref<const Eigen::VectorXd>& targets, const Eigen::Ref<const Eigen::VectorXd>& predictions) {
  const Eigen::VectorXd gap = predictions - targets;
  const BiasCorrection c = LeastSquares(targets, gap);
  return c.samples > 0 ? c.slope : kNaN;
}

}  // namespace neuromkl::metrics
