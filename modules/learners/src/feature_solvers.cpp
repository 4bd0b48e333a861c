// C-SVC by dual coordinate descent and kernel ridge regression by conjugate gradients, on a fold's features.
#include "feature_solvers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <Eigen/Cholesky>

#include "inner.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMultiplierUpdates = 200;  ///< cap on the bias's multiplier updates per solve

/// Per-row diagonal of K_beta: sum_r beta_r ||z_ir||^2.
Eigen::VectorXd Diagonal(const gram::FoldFeatures& fold, const Eigen::VectorXd& beta) {
  Eigen::VectorXd d = Eigen::VectorXd::Zero(fold.TrainingRows());
  for (Eigen::Index i = 0; i < d.size(); ++i)
    for (std::size_t r = 0; r < fold.Regions(); ++r) d[i] += beta[static_cast<Eigen::Index>(r)] * fold.SquaredNorm(i, r);
  return d;
}

/// Whether the Gram matrix of `rows` rows over `support`'s voxels is within `macs` multiply-adds and kCurvatureValues
/// values.
bool GramWithinLimits(const gram::FoldFeatures& fold, double rows, const std::vector<Eigen::Index>& support, double macs) {
  double voxels = 0;
  for (const auto j : support) voxels += static_cast<double>(fold.Matrix().RegionSize(static_cast<std::size_t>(j)));
  return rows * rows * voxels <= macs && rows * rows <= kCurvatureValues;
}

/// The Gram matrix sum_j beta_j Z_j,rows Z_j,rows' of `rows` over the regions `support`, and the columns (K_j coef)_rows
/// of those regions (u = Z' coef, every region); false beyond `macs` multiply-adds or kCurvatureValues values. Region by
/// region, so that only one region's prepared rows are written out at a time (rows x its voxels).
bool RowsGram(const gram::FoldFeatures& fold, const std::vector<Eigen::Index>& rows, const std::vector<Eigen::Index>& support, const Eigen::VectorXd& beta,
              const gram::PreparedVector& u, double macs, Eigen::MatrixXd& gram, Eigen::MatrixXd& products) {
  if (!GramWithinLimits(fold, static_cast<double>(rows.size()), support, macs)) return false;
  const auto f = static_cast<Eigen::Index>(rows.size());
  products.resize(f, static_cast<Eigen::Index>(support.size()));
  gram = Eigen::MatrixXd::Zero(f, f);
  if (f == 0) return true;  // no free row (a frozen solution): nothing to form
  const auto& start = fold.Matrix().regionStart;
  const Eigen::VectorXd w = fold.Dense(u);
  for (std::size_t k = 0; k < support.size(); ++k) {
    const auto r = static_cast<std::size_t>(support[k]);
    const Eigen::MatrixXd P = fold.PreparedRows(rows, {r});
    products.col(static_cast<Eigen::Index>(k)) = P * w.segment(start[r], P.cols());
    gram.selfadjointView<Eigen::Lower>().rankUpdate(P, beta[support[k]]);
  }
  gram = gram.selfadjointView<Eigen::Lower>();
  return true;
}

// The dual of LIBSVM's C-SVC, min 1/2 a'K a - sum alpha over 0 <= alpha_i <= C_i with y'alpha = 0 (a = y o alpha),
// by the method of multipliers on the equality: each subproblem
//   min 1/2 a'K a - sum alpha + nu y'alpha + rho/2 (y'alpha)^2   over the box
// is solved by dual coordinate descent with shrinking (Hsieh et al. 2008, Algorithm 3), then nu <- nu + rho y'alpha.
// The subproblem's coupling term is that of one more feature of value sqrt(rho) (liblinear's bias feature), so each
// coordinate step still costs one pass over a row; at the fixed point y'alpha = 0 and nu is the bias of f = K a + b.
// The model's bias is then LIBSVM's: the mean of y_i - f_i over the free variables.
class FeatureSvc final : public FeatureSolver {
 public:
  FeatureSvc(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double C, const Eigen::VectorXd& weights, double tolerance, long maxEpochs)
      : fold_(fold), y_(y), upper_(weights.size() > 0 ? Eigen::VectorXd(C * weights.array()) : Eigen::VectorXd::Constant(y.size(), C)),
        tolerance_(tolerance), maxEpochs_(maxEpochs), alpha_(Eigen::VectorXd::Zero(y.size())), coef_(Eigen::VectorXd::Zero(y.size())),
        u_(fold.Zero()) {}

  bool BoxInactive() const override { return (alpha_.array() < upper_.array()).all(); }

  // On the free set F the conditions (K_beta coef)_F + b = y_F and sum coef = 0 hold with the bounded variables
  // fixed: the kernel path's sensitivity (BorderedCurvature) with K_FF formed from the free rows.
  bool Curvature(const Eigen::VectorXd& beta, const std::vector<Eigen::Index>& support, Eigen::MatrixXd& H) const override {
    const std::vector<Eigen::Index> free = FreeRows();
    Eigen::MatrixXd KFF, RF;
    if (!RowsGram(fold_, free, support, beta, u_, curvatureMacs_, KFF, RF)) return false;
    return BorderedCurvature(KFF, std::move(RF), free, alpha_.size(), H, nullptr);
  }
  bool CurvatureWithinLimits(const std::vector<Eigen::Index>& support) const override {
    return GramWithinLimits(fold_, static_cast<double>(FreeRows().size()), support, curvatureMacs_);
  }

  bool Solve(const Eigen::VectorXd& beta) override {
    const Eigen::VectorXd diag = Diagonal(fold_, beta);
    const double rho = diag.mean();
    bool capped = false;
    if (rho > 0) {
      // The row state must hold every region beta uses. The last solve left it exact for every region (Finish), so it
      // is rebuilt from alpha (one pass over the rows) only after a Start; the coordinate steps skip regions with
      // beta_r = 0 and Finish rebuilds it.
      if (!rowStateExact_) u_ = fold_.TrainingTransposeTimes(coef_);
      rowStateExact_ = false;
      double s = coef_.sum();
      for (int update = 0; update < kMultiplierUpdates; ++update) {
        capped = !Descend(beta, diag, rho, s);
        const double step = rho * s;
        nu_ += step;
        if (std::abs(step) <= tolerance_ || capped) break;
      }
      SnapToBounds(tolerance_ / rho);
    }
    Finish(beta);
    return !capped;
  }

  const Eigen::VectorXd& Coef() const override { return coef_; }
  double Bias() const override { return bias_; }
  const Eigen::VectorXd& Alpha() const override { return alpha_; }
  const Eigen::VectorXd& RegionNorms2() const override { return norms2_; }
  double Loss() const override {
    double loss = 0;
    for (Eigen::Index i = 0; i < y_.size(); ++i) loss += upper_[i] * std::max(0.0, 1.0 - y_[i] * (f_[i] + bias_));
    return loss;
  }
  long Iterations() const override { return updates_; }
  double Violation() const override { return violation_; }
  void SetTolerance(double tolerance) override { tolerance_ = tolerance; }
  double Tolerance() const override { return tolerance_; }
  Eigen::VectorXd State() const override {
    Eigen::VectorXd state(alpha_.size() + 1);
    state << alpha_, nu_;
    return state;
  }
  bool Start(const Eigen::VectorXd& state) override {
    if (state.size() != alpha_.size() + 1 || !state.allFinite()) return false;
    alpha_ = state.head(alpha_.size()).cwiseMax(0.0).cwiseMin(upper_);
    coef_ = alpha_.cwiseProduct(y_);
    nu_ = state[alpha_.size()];
    rowStateExact_ = false;
    return true;
  }

 private:
  // Coordinate descent on the subproblem at the current nu until the projected gradients spread less than the
  // tolerance (false: the epoch cap came first). `s` = y'alpha, kept up to date.
  bool Descend(const Eigen::VectorXd& beta, const Eigen::VectorXd& diag, double rho, double& s) {
    const Eigen::Index l = y_.size();
    std::vector<Eigen::Index> active(static_cast<std::size_t>(l));
    std::iota(active.begin(), active.end(), 0);
    std::vector<double> dots(fold_.Regions());
    double maxOld = kInf, minOld = -kInf;
    while (epochs_ < maxEpochs_) {
      ++epochs_;
      std::shuffle(active.begin(), active.end(), rng_);
      double maxNew = -kInf, minNew = kInf;
      for (std::size_t k = 0; k < active.size();) {
        const Eigen::Index i = active[k];
        fold_.RowDots(i, u_, beta, dots.data());
        double ka = 0;
        for (std::size_t r = 0; r < dots.size(); ++r) ka += beta[static_cast<Eigen::Index>(r)] * dots[r];
        const double g = y_[i] * (ka + nu_ + rho * s) - 1.0;
        double pg = 0;
        if (alpha_[i] <= 0) {
          if (g > maxOld) {  // shrunk: at its lower bound and likely to stay there
            active[k] = active.back();
            active.pop_back();
            continue;
          }
          pg = std::min(g, 0.0);
        } else if (alpha_[i] >= upper_[i]) {
          if (g < minOld) {
            active[k] = active.back();
            active.pop_back();
            continue;
          }
          pg = std::max(g, 0.0);
        } else {
          pg = g;
        }
        maxNew = std::max(maxNew, pg);
        minNew = std::min(minNew, pg);
        if (pg != 0) {
          const double next = std::clamp(alpha_[i] - g / (diag[i] + rho), 0.0, upper_[i]);
          const double delta = (next - alpha_[i]) * y_[i];
          if (delta != 0) {
            fold_.AddRow(i, delta, beta, u_);
            s += delta;
            coef_[i] += delta;
            alpha_[i] = next;
            ++updates_;
          }
        }
        ++k;
      }
      if (maxNew - minNew <= tolerance_) {
        if (static_cast<Eigen::Index>(active.size()) == l) return true;
        active.resize(static_cast<std::size_t>(l));  // converged on the shrunk set: check every variable again
        std::iota(active.begin(), active.end(), 0);
        maxOld = kInf;
        minOld = -kInf;
        continue;
      }
      maxOld = maxNew <= 0 ? kInf : maxNew;
      minOld = minNew >= 0 ? -kInf : minNew;
    }
    return false;
  }

  /// 0 < alpha_i < C w_i.
  std::vector<Eigen::Index> FreeRows() const {
    std::vector<Eigen::Index> free;
    for (Eigen::Index i = 0; i < alpha_.size(); ++i)
      if (alpha_[i] > 0 && alpha_[i] < upper_[i]) free.push_back(i);
    return free;
  }

  // The multipliers approach y'alpha = 0 from inside the box, so a variable whose optimum is its bound can stop a hair
  // short of it and would count as free in LIBSVM's bias rule, which then takes that one variable's value instead of
  // the middle of the interval the bounded variables allow: a jump of the bias by half that interval on a last-digit
  // difference. The stopping rule resolves y'alpha only to `resolved` (|rho y'alpha| <= tolerance), so a variable
  // nearer than that to a bound is at it.
  void SnapToBounds(double resolved) {
    for (Eigen::Index i = 0; i < alpha_.size(); ++i) {
      const double toLower = alpha_[i], toUpper = upper_[i] - alpha_[i];
      if (std::min(toLower, toUpper) > resolved || toLower == 0 || toUpper == 0) continue;
      const double snapped = toLower <= toUpper ? 0.0 : upper_[i];
      alpha_[i] = snapped;
      coef_[i] = snapped * y_[i];
    }
  }

  // Exact products of the final alpha (no accumulated rounding), the bias by LIBSVM's rule and the violation.
  void Finish(const Eigen::VectorXd& beta) {
    u_ = fold_.TrainingTransposeTimes(coef_);
    rowStateExact_ = true;
    norms2_ = fold_.RegionSquaredNorms(u_);
    f_ = fold_.Times(u_, beta, false);
    double freeSum = 0, ub = kInf, lb = -kInf;
    long free = 0;
    for (Eigen::Index i = 0; i < y_.size(); ++i) {
      const double yg = f_[i] - y_[i];  // y_i times LIBSVM's gradient (Q alpha - e)_i
      const bool atUpper = alpha_[i] >= upper_[i], atLower = alpha_[i] <= 0;
      if (!atUpper && !atLower) {
        freeSum += yg;
        ++free;
      } else if ((atUpper && y_[i] < 0) || (atLower && y_[i] > 0)) {
        ub = std::min(ub, yg);
      } else {
        lb = std::max(lb, yg);
      }
    }
    bias_ = free > 0 ? -freeSum / static_cast<double>(free) : std::isfinite(ub + lb) ? -(ub + lb) / 2 : nu_;
    // LIBSVM's maximal violating pair: max over I_up of -y G minus min over I_low of -y G.
    double up = -kInf, low = kInf;
    for (Eigen::Index i = 0; i < y_.size(); ++i) {
      const double myg = -(f_[i] - y_[i]);
      const bool inUp = (y_[i] > 0 && alpha_[i] < upper_[i]) || (y_[i] < 0 && alpha_[i] > 0);
      const bool inLow = (y_[i] > 0 && alpha_[i] > 0) || (y_[i] < 0 && alpha_[i] < upper_[i]);
      if (inUp) up = std::max(up, myg);
      if (inLow) low = std::min(low, myg);
    }
    violation_ = std::isfinite(up - low) ? std::max(0.0, up - low) : 0.0;
  }

  const gram::FoldFeatures& fold_;
  Eigen::VectorXd y_, upper_;
  double tolerance_;
  long maxEpochs_, epochs_ = 0, updates_ = 0;
  Eigen::VectorXd alpha_, coef_, f_, norms2_;
  gram::PreparedVector u_;
  bool rowStateExact_ = true;  ///< u_ = Z' coef_ for every region (alpha_ = 0 at the start)
  double nu_ = 0, bias_ = 0, violation_ = 0;
  std::mt19937 rng_{5489u};
};

// Kernel ridge regression by conjugate gradients, preconditioned by the diagonal, warm-started from the last solve.
class FeatureKrr final : public FeatureSolver {
 public:
  FeatureKrr(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights, double tolerance)
      : fold_(fold), lambda_(lambda), weights_(weights), tolerance_(tolerance), coef_(Eigen::VectorXd::Zero(y.size())) {
    mean_ = weights.size() > 0 ? weights.dot(y) / weights.sum() : y.mean();
    y_ = y;
    yc_ = (y.array() - mean_).matrix();
    ridge_ = weights.size() > 0 ? Eigen::VectorXd(lambda / weights.array()) : Eigen::VectorXd::Constant(y.size(), lambda);
  }

  bool Solve(const Eigen::VectorXd& beta) override {
    const Eigen::VectorXd diag = (Diagonal(fold_, beta) + ridge_).eval();
    const auto apply = [&](const Eigen::VectorXd& v) { return (fold_.Times(fold_.TrainingTransposeTimes(v), beta, false) + ridge_.cwiseProduct(v)).eval(); };
    Eigen::VectorXd r = yc_ - apply(coef_);
    const double target = tolerance_ * yc_.norm();
    Eigen::VectorXd z = r.cwiseQuotient(diag), p = z;
    double rz = r.dot(z);
    const long cap = 10 * coef_.size() + 100;
    long steps = 0;
    while (r.norm() > target && steps < cap) {
      const Eigen::VectorXd ap = apply(p);
      const double step = rz / p.dot(ap);
      coef_ += step * p;
      r -= step * ap;
      z = r.cwiseQuotient(diag);
      const double next = r.dot(z);
      p = z + (next / rz) * p;
      rz = next;
      ++steps;
    }
    iterations_ += steps;
    u_ = fold_.TrainingTransposeTimes(coef_);
    norms2_ = fold_.RegionSquaredNorms(u_);
    f_ = fold_.Times(u_, beta, false);
    violation_ = yc_.norm() > 0 ? (yc_ - f_ - ridge_.cwiseProduct(coef_)).norm() / yc_.norm() : 0.0;
    return steps < cap || r.norm() <= target;
  }

  const Eigen::VectorXd& Coef() const override { return coef_; }
  double Bias() const override { return mean_; }
  const Eigen::VectorXd& Alpha() const override { return coef_; }
  const Eigen::VectorXd& RegionNorms2() const override { return norms2_; }
  double Loss() const override {
    const Eigen::ArrayXd e2 = (y_ - f_).array() - mean_;
    return (weights_.size() > 0 ? (weights_.array() * e2.square()).sum() : e2.square().sum()) / (2.0 * lambda_);
  }
  long Iterations() const override { return iterations_; }
  double Violation() const override { return violation_; }
  void SetTolerance(double tolerance) override { tolerance_ = tolerance; }
  double Tolerance() const override { return tolerance_; }
  Eigen::VectorXd State() const override { return coef_; }
  // coef = (K + lambda W^-1)^-1 yc: d coef / d beta_k = -(K + lambda W^-1)^-1 K_k coef, so H = G'(K + lambda W^-1)^-1 G
  // with G the columns K_k coef, as on the kernel path.
  bool Curvature(const Eigen::VectorXd& beta, const std::vector<Eigen::Index>& support, Eigen::MatrixXd& H) const override {
    std::vector<Eigen::Index> rows(static_cast<std::size_t>(coef_.size()));
    std::iota(rows.begin(), rows.end(), Eigen::Index{0});
    Eigen::MatrixXd A, G;
    if (!RowsGram(fold_, rows, support, beta, u_, curvatureMacs_, A, G)) return false;
    A.diagonal() += ridge_;
    const Eigen::LLT<Eigen::MatrixXd> llt(A);
    if (llt.info() != Eigen::Success) return false;
    H = G.transpose() * llt.solve(G);
    H = 0.5 * (H + H.transpose()).eval();
    return H.allFinite();
  }
  bool CurvatureWithinLimits(const std::vector<Eigen::Index>& support) const override {
    return GramWithinLimits(fold_, static_cast<double>(coef_.size()), support, curvatureMacs_);
  }
  bool Start(const Eigen::VectorXd& state) override {
    if (state.size() != coef_.size() || !state.allFinite()) return false;
    coef_ = state;
    return true;
  }

 private:
  const gram::FoldFeatures& fold_;
  double lambda_;
  Eigen::VectorXd weights_;
  double tolerance_, mean_ = 0;
  Eigen::VectorXd y_, yc_, ridge_, coef_, f_, norms2_;
  gram::PreparedVector u_;  ///< Z' coef_ of the last solve
  long iterations_ = 0;
  double violation_ = 0;
};

}  // namespace

std::unique_ptr<FeatureSolver> MakeFeatureSvc(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double C, const Eigen::VectorXd& weights,
                                              double tolerance, long maxEpochs) {
  return std::make_unique<FeatureSvc>(fold, y, C, weights, tolerance, maxEpochs);
}

std::unique_ptr<FeatureSolver> MakeFeatureKrr(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights,
                                              double tolerance) {
  return std::make_unique<FeatureKrr>(fold, y, lambda, weights, tolerance);
}

}  // namespace neuromkl::learners
