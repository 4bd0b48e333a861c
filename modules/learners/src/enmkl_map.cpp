#include "enmkl_map.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace neuromkl::learners {

namespace {

constexpr double kEarlyEntry = 1e-3;      ///< Newton step (normalised) from which the kernels outside the support are screened at
                                          ///< every step, so that one that must enter does so before the full-precision steps
constexpr double kEnteringWeight = 1e-3;  ///< normalised weight a kernel the optimality check brings in enters with
constexpr double kNewtonTrust = 0.1;      ///< largest Newton step (normalised) taken: a larger one means the start was too far
constexpr double kLeavingWeight = 5e-4;   ///< normalised weight from which a Newton step does not drop a kernel the check brought in
                                          ///< (half the entering weight, so a kernel that just entered is guarded) ...
constexpr double kKeptFraction = 0.1;     ///< ... but is shortened to leave it this fraction of its weight

}  // namespace

std::vector<Eigen::Index> Support(const Eigen::VectorXd& beta) {
  std::vector<Eigen::Index> A;
  for (Eigen::Index j = 0; j < beta.size(); ++j)
    if (beta[j] > 0) A.push_back(j);
  return A;
}

Eigen::VectorXd WaterFill(const Eigen::VectorXd& c, double mu, double* level) {
  const Eigen::Index m = c.size();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return c[a] > c[b]; });
  double sum = 0, S = 0;
  std::size_t active = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const double cj = c[order[i]];
    const double candidate = (sum + cj) / (1.0 - mu + mu * static_cast<double>(i + 1));
    if (!(cj > 0) || !(cj > mu * candidate)) break;
    sum += cj;
    S = candidate;
    active = i + 1;
  }
  Eigen::VectorXd beta = Eigen::VectorXd::Zero(m);
  for (std::size_t i = 0; i < active; ++i) {
    const auto j = order[i];
    beta[j] = (c[j] - mu * S) / ((1.0 - mu) * c[j]);
  }
  if (level) *level = S;
  return beta;
}

EnmklNewton EnmklNewtonStep(const Eigen::VectorXd& c, const Eigen::VectorXd& b, const Eigen::MatrixXd& H, double mu) {
  const Eigen::Index a = c.size();
  EnmklNewton e;
  e.S = b.dot(c);
  const Eigen::VectorXd R = (1.0 - mu) * b.cwiseProduct(c) + Eigen::VectorXd::Constant(a, mu * e.S) - c;
  const Eigen::MatrixXd Dc = -(c.cwiseInverse().asDiagonal() * H);  // d c_j / d beta_k
  Eigen::MatrixXd J = (1.0 - mu) * (Eigen::MatrixXd(c.asDiagonal()) + b.asDiagonal() * Dc) - Dc;
  J.rowwise() += mu * (c + Dc.transpose() * b).transpose();
  e.delta = SolveNewtonSystem(J, -R);
  if (!e.delta.allFinite()) return e;
  e.residual = R.cwiseAbs().maxCoeff();
  e.leftover = (J * e.delta + R).cwiseAbs().maxCoeff();
  return e;
}

bool EnmklNewton::Usable(double tolerance, double step) const {
  // A singular J whose range misses R (mu = 1 with no free support vector: the SVM's solution does not move with
  // the weights, H = 0, and J = 1 c' has rank 1) gives a least-squares step that can be ~1e-17 with R at 6e-2 of S:
  // no distance to a fixed point, which that support does not have. A step that leaves more than tolerance S of R
  // fails, handing over to the damped steps, when it removes less than half of R or is too small to move R at all;
  // so a step below `tolerance` that gets past here left no residual.
  if (leftover > tolerance * S && (leftover > 0.5 * residual || step < tolerance)) return false;
  return step <= kNewtonTrust;  // beyond: not yet where Newton's model of the map holds
}

EnmklMap::EnmklMap(std::string_view learner, const KernelList& train, const FitOptions& options, const InnerSolver& solver, double mu, FitInfo& info)
    : stack_(CheckedStack(learner, train, options, ownStack_)), screen_(stack_), broughtIn_(static_cast<std::size_t>(stack_.Size()), 0), solver_(solver), mu_(mu),
      info_(info) {}

bool EnmklMap::Solve(const Eigen::VectorXd& beta, InnerSolution& sol, bool warm, double& objective, double looseTolerance, Eigen::MatrixXd* products) {
  stack_.Combine(beta, K_);  // reuses K_'s storage (no n x n allocation per iteration)
  sol = solver_.SolveLoosely(K_, warm ? &sol : nullptr, looseTolerance);
  ++info_.innerSolves;
  info_.innerIterations += sol.iterations;
  screen_.Begin(sol);  // one-vs-rest (shared weights): quadratics summed over the classes
  if (products) products->resize(0, 0);
  if (!products || !screen_.EvaluateWithProducts(Support(beta), *products)) screen_.Evaluate(Support(beta));
  double total = 0, squares = 0;
  for (Eigen::Index j = 0; j < beta.size(); ++j) {
    if (!(beta[j] > 0)) continue;
    const double norm = beta[j] * screen_.Exact(j);
    total += norm;
    squares += norm * norm;
  }
  objective = 0.5 * mu_ * total * total + 0.5 * (1.0 - mu_) * squares + solver_.SolutionLoss(K_, sol);
  return total > 0;
}

Eigen::VectorXd EnmklMap::Update(const Eigen::VectorXd& beta) {
  double total = 0;
  for (Eigen::Index j = 0; j < beta.size(); ++j)
    if (beta[j] > 0) total += beta[j] * screen_.Exact(j);
  Eigen::VectorXd next = Eigen::VectorXd::Zero(beta.size());
  for (Eigen::Index j = 0; j < beta.size(); ++j) {
    const double norm = beta[j] > 0 ? beta[j] * screen_.Exact(j) : 0.0;
    if (norm > 0) next[j] = norm / (mu_ * total + (1.0 - mu_) * norm);
  }
  return next;
}

Eigen::VectorXd EnmklMap::ScreenedWaterFill(const Eigen::VectorXd& beta, bool outside) {
  const Eigen::Index m = beta.size();
  Eigen::VectorXd c = Eigen::VectorXd::Zero(m);
  for (Eigen::Index j = 0; j < m; ++j)
    if (beta[j] > 0 || screen_.Known(j)) c[j] = screen_.Exact(j);
  while (outside) {
    double S = 0;
    WaterFill(c, mu_, &S);
    std::vector<Eigen::Index> entering;
    for (Eigen::Index j = 0; j < m; ++j)
      if (!screen_.Known(j) && screen_.Bound(j) > mu_ * S) entering.push_back(j);
    if (entering.empty()) break;
    screen_.Evaluate(entering);
    for (const auto j : entering) c[j] = screen_.Exact(j);
  }
  return WaterFill(c, mu_);
}

EnmklMap::Newton EnmklMap::SolveOnSupport(Eigen::VectorXd& beta, InnerSolution& sol, bool& haveSol, double& objective, double tolerance,
                                          int maxIterations, int steps) {
  double lastStep = 1.0;
  bool jumped = false;  // to the frozen optimum (mu = 1, JumpToFrozenOptimum)
  for (int k = 0; k < steps; ++k) {
    if (info_.iterations >= maxIterations) return Newton::Failed;
    ++info_.iterations;
    // Newton's next step is ~ the last one squared: the inner solve needs only that precision (a
    // hundredth of it); the certifying steps are solved to the learner's full tolerance.
    Eigen::MatrixXd products;  // K_j a for j in the support, when Solve could form them
    const double loose = std::min(kLoosest, kLooseFactor * lastStep * lastStep);
    if (!Solve(beta, sol, haveSol, objective, loose, &products)) return Newton::Failed;
    haveSol = true;
    const OnSupport s = SupportOf(beta);
    if (!(s.c.minCoeff() > 0)) return Newton::Failed;
    if (mu_ == 1.0 && solver_.Frozen(sol)) {
      const Jump jump = JumpToFrozenOptimum(beta, s, jumped, lastStep);
      if (jump == Jump::Failed) return Newton::Failed;
      if (jump == Jump::Jumped) continue;
    }
    NewtonStep n;
    if (!ComputeNewtonStep(sol, products, s, tolerance, n)) return Newton::Failed;
    double fraction = 1.0;
    bool leaves = false;
    Eigen::VectorXd moved = Moved(beta, s, n, fraction, leaves);
    lastStep = fraction * n.step;
    // Only a step computed at an inner solve asked for at most a hundredth of `tolerance` (the previous step was below
    // sqrt(tolerance); svm_tolerance is the floor), or at an exact one, certifies. A first step from water-filled
    // weights is solved to 1e-3, and a warm-started SMO may stop at once on the previous iterate's solution, at whose
    // quadratics those weights are an exact fixed point: a step of ~1e-16 that says nothing (seen: weights up to 3e-3
    // from the fixed point, reported converged). The next step is then solved fully.
    if (n.step < tolerance && fraction == 1.0 && !leaves && (loose <= kLooseFactor * tolerance || solver_.Exact()))
      return Certify(beta, moved, s, n, tolerance);
    if (!(moved.sum() > 0)) return Newton::Failed;
    // Once Newton's steps are small, the kernels outside A that must enter (found through the screening bounds: few
    // exact quadratics) enter now, at a small weight, rather than at the certifying step: the steps left on A are the
    // ones solved to full precision, which a late entry would repeat on the larger support (about 2
    // full-precision SVM solves per support change of a warm-started grid fit). From steps below 1e-2 instead of 1e-3,
    // an entry while Newton is still converging slowly can cost the attempt (seen on an interpolating SVM, C = 100).
    if (k >= 1 && lastStep < kEarlyEntry) {
      const auto entering = Entering(beta, n.S, n.sum, tolerance);
      if (!entering.empty()) {
        for (const auto j : entering) Enter(moved, j, n.sum);
        PredictNextSolution(sol, s, n, moved);
        beta = moved;
        return Newton::SupportChanged;
      }
    }
    PredictNextSolution(sol, s, n, moved);
    beta = moved;
  }
  return Newton::Failed;
}

EnmklMap::OnSupport EnmklMap::SupportOf(const Eigen::VectorXd& beta) {
  OnSupport s;
  s.A = Support(beta);
  const auto a = static_cast<Eigen::Index>(s.A.size());
  s.c.resize(a);
  s.b.resize(a);
  for (Eigen::Index i = 0; i < a; ++i) {
    s.c[i] = screen_.Exact(s.A[static_cast<std::size_t>(i)]);
    s.b[i] = beta[s.A[static_cast<std::size_t>(i)]];
  }
  return s;
}

EnmklMap::Jump EnmklMap::JumpToFrozenOptimum(Eigen::VectorXd& beta, const OnSupport& s, bool& jumped, double& lastStep) {
  // No free variable: the solution does not move with the weights (H = 0, and J = 1 c' is singular). For it, the
  // l1-MKL optimum is all weight on the largest c_j over every kernel, which is where the multiplicative steps
  // go, one factor c_j / max c at a time (30-130 iterations at small C, more on permuted targets): jump there at once.
  // Newton goes on from there: at the next solve the support is one kernel, or the solution has free variables.
  const Eigen::Index m = beta.size();
  const auto a = static_cast<Eigen::Index>(s.A.size());
  Eigen::Index top = 0;
  double largest = s.c.maxCoeff(&top);
  top = s.A[static_cast<std::size_t>(top)];
  for (Eigen::Index j = 0; j < m; ++j)
    if (!(beta[j] > 0) && screen_.Bound(j) > largest && screen_.Exact(j) > largest) {
      top = j;
      largest = screen_.Exact(j);
    }
  if (!(a > 1 || top != s.A[0])) return Jump::NotNeeded;
  // A solution at another vertex after the jump (other variables at their bounds) has other c_j: the frozen
  // optimum does not hold there, and jumping on could cycle between vertices.
  if (jumped) return Jump::Failed;
  jumped = true;
  const double sum = s.b.sum();
  Eigen::VectorXd moved = Eigen::VectorXd::Zero(m);
  moved[top] = sum;
  lastStep = (moved - beta).cwiseAbs().maxCoeff() / sum;
  info_.gap = lastStep;
  beta = moved;
  return Jump::Jumped;
}

bool EnmklMap::ComputeNewtonStep(const InnerSolution& sol, const Eigen::MatrixXd& products, const OnSupport& s, double tolerance, NewtonStep& out) {
  const auto a = static_cast<Eigen::Index>(s.A.size());
  const Eigen::VectorXd& c = s.c;
  const Eigen::VectorXd& b = s.b;
  Eigen::MatrixXd H;
  const auto gradients = [&](const Eigen::VectorXd& coef) {
    return products.cols() == a && coef == sol.coef ? products : stack_.Products(s.A, coef);
  };
  if (!solver_.Curvature(K_, sol, gradients, H, &out.dcoef)) {
    noCurvature_ = true;
    return false;
  }
  const EnmklNewton e = EnmklNewtonStep(c, b, H, mu_);
  out.delta = e.delta;
  if (!out.delta.allFinite()) return false;
  out.S = e.S;
  out.sum = b.sum();
  out.step = out.delta.cwiseAbs().maxCoeff() / out.sum;
  info_.gap = out.step;
  return e.Usable(tolerance, out.step);
}

Eigen::VectorXd EnmklMap::Moved(const Eigen::VectorXd& beta, const OnSupport& s, const NewtonStep& n, double& fraction, bool& leaves) const {
  const auto a = static_cast<Eigen::Index>(s.A.size());
  const Eigen::VectorXd& b = s.b;
  const Eigen::VectorXd& delta = n.delta;
  // A kernel the full check brought in is not dropped by one step while its weight is not negligible: the step
  // is shortened so that it keeps a fraction of its weight. Newton's model is local, and such a kernel can be
  // sent below 0 by an overshooting first step, then enter again at the next check, and so on (seen on
  // interpolating SVMs). Other kernels leave at once, as they do where Newton's model holds.
  fraction = 1.0;
  for (Eigen::Index i = 0; i < a; ++i) {
    const bool broughtIn = broughtIn_[static_cast<std::size_t>(s.A[static_cast<std::size_t>(i)])] != 0;
    if (broughtIn && !(b[i] + delta[i] > 0) && b[i] > kLeavingWeight * n.sum) fraction = std::min(fraction, (1.0 - kKeptFraction) * b[i] / -delta[i]);
  }
  Eigen::VectorXd moved = beta;
  leaves = false;
  for (Eigen::Index i = 0; i < a; ++i) {
    const auto j = s.A[static_cast<std::size_t>(i)];
    moved[j] = b[i] + fraction * delta[i];
    if (!(moved[j] > 0)) {
      moved[j] = 0;  // this kernel leaves the support
      leaves = true;
    }
  }
  return moved;
}

EnmklMap::Newton EnmklMap::Certify(Eigen::VectorXd& beta, const Eigen::VectorXd& moved, const OnSupport& s, const NewtonStep& n, double tolerance) {
  const Eigen::Index m = beta.size();
  // The full optimality check over every kernel, at the solution of this iterate.
  const Eigen::VectorXd all = screen_.All();
  if (mu_ < 1.0) {
    const Eigen::VectorXd target = WaterFill(all, mu_);
    if (Support(target) != s.A) {
      // The next attempt keeps the weights Newton found on A and lets the entering kernels in at a small weight
      // (as at mu = 1). The water-filled weights of the frozen solution would also move or drop kernels of A and
      // start Newton where its model of the map does not hold: attempts from them can cycle between two supports,
      // and on large supports they fail and send the fit back to the damped steps (docs/learners.md, "Newton's
      // restarts keep its weights").
      bool enters = false;
      for (Eigen::Index j = 0; j < m; ++j)
        if (target[j] > 0 && !(beta[j] > 0)) {
          Enter(beta, j, n.sum);
          enters = true;
        }
      if (!enters) beta = target;  // only kernels at the threshold leave (rounding): the water-filled weights drop them
      return Newton::SupportChanged;
    }
  } else {
    const double level = n.S / n.sum * (1.0 + tolerance);
    bool optimal = true;
    for (Eigen::Index j = 0; j < m; ++j)
      if (!(beta[j] > 0) && all[j] > level) {
        Enter(beta, j, n.sum);  // a violating kernel enters with a small weight
        optimal = false;
      }
    if (!optimal) return Newton::SupportChanged;
  }
  beta = moved;
  return Newton::Converged;
}

void EnmklMap::PredictNextSolution(InnerSolution& sol, const OnSupport& s, const NewtonStep& n, const Eigen::VectorXd& moved) const {
  // The next solve starts from the solution moved along d coef / d beta by this step (first order: off by about
  // the step squared), not from this one.
  const auto a = static_cast<Eigen::Index>(s.A.size());
  if (n.dcoef.cols() != a) return;
  Eigen::VectorXd change(a);
  for (Eigen::Index i = 0; i < a; ++i) change[i] = moved[s.A[static_cast<std::size_t>(i)]] - s.b[i];
  solver_.Shift(sol, n.dcoef * change);
}

void EnmklMap::Enter(Eigen::VectorXd& beta, Eigen::Index j, double sum) {
  beta[j] = kEnteringWeight * sum;
  broughtIn_[static_cast<std::size_t>(j)] = 1;
}

std::vector<Eigen::Index> EnmklMap::Entering(const Eigen::VectorXd& beta, double S, double sum, double tolerance) {
  std::vector<Eigen::Index> entering;
  if (mu_ < 1.0) {
    const Eigen::VectorXd target = ScreenedWaterFill(beta, true);
    for (Eigen::Index j = 0; j < beta.size(); ++j)
      if (target[j] > 0 && !(beta[j] > 0)) entering.push_back(j);
    return entering;
  }
  const double level = S / sum * (1.0 + tolerance);
  for (Eigen::Index j = 0; j < beta.size(); ++j)
    if (!(beta[j] > 0) && screen_.Bound(j) > level && screen_.Exact(j) > level) entering.push_back(j);
  return entering;
}

}  // namespace neuromkl::learners
