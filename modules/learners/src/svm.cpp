// The C-SVC and epsilon-SVR solvers (SMO, smo.cpp; Chang & Lin 2011) behind the SVM-type learners, with their
// sensitivity to the kernel weights (the free-set KKT system) and warm-start shifts for the MKL learners' Newton steps.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <Eigen/QR>

#include "inner.hpp"
#include "smo.hpp"

namespace neuromkl::learners {

namespace {

/// An SMO solution as the MKL learners read it: `coef` and `bias` in the learner's own terms (C-SVC: y alpha and -rho;
/// epsilon-SVR: the difference of the paired variables, the bias shifted back by the centred target's mean).
InnerSolution FromSmo(const SmoResult& r, Eigen::VectorXd coef, double bias) {
  InnerSolution s;
  s.alpha = r.alpha;
  s.coef = std::move(coef);
  s.bias = bias;
  s.dual = -r.objective;
  s.iterations = r.iterations;
  s.converged = r.converged;
  s.violation = r.violation;
  return s;
}

// SVM sensitivity (C-SVC and epsilon-SVR alike): on the free set F (subjects with a variable strictly
// inside its box) the KKT conditions (K coef)_F + b = const_F and sum(coef) = 0 hold with the bounded
// coefficients fixed, so d coef_F / d beta_k solves [K_FF 1; 1' 0] [dcoef_F; db] = [-(K_k coef)_F; 0].
// The minimum-norm solution covers a rank-deficient K_FF (its null directions move neither the
// decision function nor any a'K_j a of the kernels in K).
// With `dcoef`: the columns d coef / d beta_k = -x_k on F (0 elsewhere).
bool FreeSetCurvature(const Eigen::MatrixXd& K, const Eigen::VectorXd& coef, const std::vector<Eigen::Index>& free,
                      const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients, Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) {
  const Eigen::MatrixXd G = gradients(coef);
  const auto f = static_cast<Eigen::Index>(free.size());
  Eigen::MatrixXd KFF(f, f), RF(f, G.cols());
  for (Eigen::Index b = 0; b < f; ++b) {
    const double* column = K.col(free[static_cast<std::size_t>(b)]).data();
    for (Eigen::Index a = 0; a < f; ++a) KFF(a, b) = column[free[static_cast<std::size_t>(a)]];
  }
  for (Eigen::Index a = 0; a < f; ++a) RF.row(a) = G.row(free[static_cast<std::size_t>(a)]);
  return BorderedCurvature(KFF, std::move(RF), free, K.rows(), H, dcoef);
}

}  // namespace

bool BorderedCurvature(const Eigen::MatrixXd& KFF, Eigen::MatrixXd RF, const std::vector<Eigen::Index>& free, Eigen::Index rows, Eigen::MatrixXd& H,
                       Eigen::MatrixXd* dcoef) {
  H = Eigen::MatrixXd::Zero(RF.cols(), RF.cols());
  if (dcoef) dcoef->setZero(rows, RF.cols());
  if (free.empty()) return true;
  // dcoef's rows of F from X (f x kernels): -X.
  const auto scatter = [&](const Eigen::MatrixXd& X) {
    if (!dcoef) return;
    for (std::size_t a = 0; a < free.size(); ++a) dcoef->row(free[a]) = -X.row(static_cast<Eigen::Index>(a));
  };
  const auto f = static_cast<Eigen::Index>(free.size());
  // K_FF is a PSD Gram matrix. When it is safely positive definite the border is eliminated:
  // x = K_FF^-1 (r - 1 t) with t = 1'K_FF^-1 r / 1'K_FF^-1 1, so H = R'X = Y'Y - z z' / u'u with
  // K_FF = LL', Y = L^-1 R, u = L^-1 1, z = Y'u: a Cholesky (f^3 / 6) and one triangular solve
  // instead of an LU of the bordered system (f^3 / 3) and two (the curvature is a large share of an ENMKL
  // nested CV). The pivot bound keeps K_FF's condition below ~1e10, as the LU's residual test did.
  constexpr double kSmallestPivot = 1e-10;  // smallest (L_ii / max L_jj)^2 taken
  const Eigen::LLT<Eigen::MatrixXd> llt(KFF);
  if (llt.info() == Eigen::Success) {
    const Eigen::VectorXd pivots = llt.matrixLLT().diagonal();
    if (pivots.minCoeff() > 0 && pivots.minCoeff() * pivots.minCoeff() > kSmallestPivot * pivots.maxCoeff() * pivots.maxCoeff()) {
      Eigen::MatrixXd Y = std::move(RF);
      llt.matrixL().solveInPlace(Y);
      Eigen::VectorXd u = Eigen::VectorXd::Ones(f);
      llt.matrixL().solveInPlace(u);
      const Eigen::VectorXd z = Y.transpose() * u;
      H.selfadjointView<Eigen::Lower>().rankUpdate(Y.transpose());
      H.selfadjointView<Eigen::Lower>().rankUpdate(z, -1.0 / u.squaredNorm());
      H = H.selfadjointView<Eigen::Lower>();
      if (dcoef) {  // X = K_FF^-1 (R - 1 t') = L^-T (Y - u z' / u'u)
        Eigen::MatrixXd X = Y - u * (z.transpose() / u.squaredNorm());
        llt.matrixU().solveInPlace(X);
        scatter(X);
      }
      return H.allFinite();
    }
  }
  // Singular or ill-conditioned K_FF: the bordered system, by LU when its residual is small, else the
  // minimum-norm solution.
  Eigen::MatrixXd M(f + 1, f + 1);
  M.topLeftCorner(f, f) = KFF;
  M.col(f).head(f).setOnes();
  M.row(f).head(f).setOnes();
  M(f, f) = 0;
  Eigen::MatrixXd R(f + 1, RF.cols());
  R.topRows(f) = RF;
  R.row(f).setZero();
  Eigen::MatrixXd X = M.partialPivLu().solve(R);
  if (!X.allFinite() || (M * X - R).norm() > 1e-10 * (M.norm() * X.norm() + R.norm())) X = M.completeOrthogonalDecomposition().solve(R);
  H = R.topRows(f).transpose() * X.topRows(f);
  H = 0.5 * (H + H.transpose()).eval();
  scatter(X.topRows(f));
  return H.allFinite();
}

namespace {

class SvcSolver final : public InnerSolver {
 public:
  SvcSolver(const Eigen::VectorXd& y, double C, double tol, long maxIter, const Eigen::VectorXd& weights)
      : y_(y), C_(C), tol_(tol), maxIter_(maxIter), weights_(EffectiveWeights(weights)) {}
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const override { return SolveLoosely(K, warm, 0.0); }
  InnerSolution SolveLoosely(const Eigen::MatrixXd& K, const InnerSolution* warm, double tolerance) const override {
    const Eigen::VectorXd p = Eigen::VectorXd::Constant(y_.size(), -1.0);
    const double tol = std::max(tol_, tolerance);
    // Class weights: per-subject bounds 0 <= alpha_i <= C w_i (LIBSVM's weighted C-SVC).
    const SmoResult r = weights_.size() > 0 ? SolveSmo(K, y_, p, Eigen::VectorXd(C_ * weights_), warm ? &warm->alpha : nullptr, tol, maxIter_)
                                            : SolveSmo(K, y_, p, C_, warm ? &warm->alpha : nullptr, tol, maxIter_);
    return FromSmo(r, y_.cwiseProduct(r.alpha), -r.rho);
  }
  double Loss(const Eigen::VectorXd& f) const override {
    if (weights_.size() > 0) return C_ * (weights_.array() * (1.0 - y_.cwiseProduct(f).array()).max(0.0)).sum();
    return C_ * (1.0 - y_.cwiseProduct(f).array()).max(0.0).sum();
  }
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    return FreeSetCurvature(K, sol.coef, FreeSet(sol), gradients, H, dcoef);
  }
  bool Frozen(const InnerSolution& sol) const override { return FreeSet(sol).empty(); }
  bool BoxInactive(const InnerSolution& sol) const override {
    if (sol.alpha.size() != y_.size()) return false;
    for (Eigen::Index i = 0; i < sol.alpha.size(); ++i)
      if (!(sol.alpha[i] < Upper(i))) return false;
    return true;
  }
  // coef = y alpha (y = +-1), so alpha moves by y dcoef. Where that leaves the box [0, C w_i], the result is the
  // Euclidean projection of alpha + y dcoef onto the box and the constraint sum_i y_i alpha_i = 0 (over the moving
  // variables): alpha_i = clip(alpha_i + y_i (dcoef_i + lambda)), with lambda found by bisection (the sum grows with
  // it). Shortening the whole move instead kept ~5 % of it at n = 2,000, where some of ~1,000 free variables is always
  // near a bound.
  bool Shift(InnerSolution& sol, const Eigen::VectorXd& dcoef) const override {
    const Eigen::Index n = y_.size();
    if (sol.alpha.size() != n || dcoef.size() != n || !dcoef.allFinite()) return false;
    std::vector<Eigen::Index> moving;
    double target = 0, reach = 0;
    for (Eigen::Index i = 0; i < n; ++i)
      if (dcoef[i] != 0.0) {
        moving.push_back(i);
        target += y_[i] * sol.alpha[i];
        reach = std::max(reach, Upper(i) + std::abs(dcoef[i]));
      }
    if (moving.empty()) return false;
    const auto moved = [&](Eigen::Index i, double lambda) { return std::clamp(sol.alpha[i] + y_[i] * (dcoef[i] + lambda), 0.0, Upper(i)); };
    const auto sum = [&](double lambda) {
      double total = 0;
      for (const auto i : moving) total += y_[i] * moved(i, lambda);
      return total;
    };
    double lo = -reach, hi = reach;
    for (int halving = 0; halving < 100 && lo < hi; ++halving) {
      const double mid = 0.5 * (lo + hi);
      (sum(mid) < target ? lo : hi) = mid;
    }
    const double lambda = 0.5 * (lo + hi);
    for (const auto i : moving) sol.alpha[i] = moved(i, lambda);
    sol.coef = y_.cwiseProduct(sol.alpha);
    return true;
  }

 private:
  /// Subject i's box bound C w_i (w_i = 1 without class weights).
  double Upper(Eigen::Index i) const { return C_ * (weights_.size() > 0 ? weights_[i] : 1.0); }
  /// 0 < alpha_i < C w_i.
  std::vector<Eigen::Index> FreeSet(const InnerSolution& sol) const {
    std::vector<Eigen::Index> free;
    for (Eigen::Index i = 0; i < sol.alpha.size(); ++i)
      if (sol.alpha[i] > 0 && sol.alpha[i] < Upper(i)) free.push_back(i);
    return free;
  }
  Eigen::VectorXd y_;
  double C_, tol_;
  long maxIter_;
  Eigen::VectorXd weights_;  ///< class weights per subject; empty = all 1
};

class SvrSolver final : public InnerSolver {
 public:
  SvrSolver(const Eigen::VectorXd& z, double C, double eps, double tol, long maxIter)
      : mean_(z.mean()), epsilon_(eps), C_(C), tol_(tol), maxIter_(maxIter) {
    const Eigen::Index n = z.size();
    const Eigen::VectorXd zc = z.array() - mean_;
    y2_.resize(2 * n);
    p_.resize(2 * n);
    y2_.head(n).setOnes();
    y2_.tail(n).setConstant(-1.0);
    p_.head(n) = eps - zc.array();
    p_.tail(n) = eps + zc.array();
  }
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const override {
    const Eigen::Index n = K.rows();
    const SmoResult r = SolveSmo(K, y2_, p_, C_, warm ? &warm->alpha : nullptr, tol_, maxIter_);
    return FromSmo(r, r.alpha.head(n) - r.alpha.tail(n), -r.rho + mean_);
  }
  double Loss(const Eigen::VectorXd& f) const override {
    const Eigen::Index n = f.size();
    const Eigen::ArrayXd z = p_.tail(n).array() - p_.head(n).array();  // 2 (z - mean)
    return C_ * ((0.5 * z + mean_ - f.array()).abs() - epsilon_).max(0.0).sum();
  }
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    return FreeSetCurvature(K, sol.coef, FreeSet(sol), gradients, H, dcoef);
  }
  bool Frozen(const InnerSolution& sol) const override { return FreeSet(sol).empty(); }
  bool BoxInactive(const InnerSolution& sol) const override { return sol.alpha.size() == y2_.size() && (sol.alpha.array() < C_).all(); }

 private:
  /// Subjects with either variable strictly inside (0, C).
  std::vector<Eigen::Index> FreeSet(const InnerSolution& sol) const {
    const Eigen::Index n = sol.alpha.size() / 2;
    std::vector<Eigen::Index> free;
    for (Eigen::Index i = 0; i < n; ++i)
      if ((sol.alpha[i] > 0 && sol.alpha[i] < C_) || (sol.alpha[i + n] > 0 && sol.alpha[i + n] < C_)) free.push_back(i);
    return free;
  }
  double mean_, epsilon_;
  Eigen::VectorXd y2_, p_;
  double C_, tol_;
  long maxIter_;
};

}  // namespace

std::unique_ptr<InnerSolver> MakeSvcSolver(const Eigen::VectorXd& y, double C, double tolerance, long maxIterations, const Eigen::VectorXd& weights) {
  return std::make_unique<SvcSolver>(y, C, tolerance, maxIterations, weights);
}
std::unique_ptr<InnerSolver> MakeSvrSolver(const Eigen::VectorXd& z, double C, double epsilon, double tolerance, long maxIterations) {
  return std::make_unique<SvrSolver>(z, C, epsilon, tolerance, maxIterations);
}

}  // namespace neuromkl::learners
