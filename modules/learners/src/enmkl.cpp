// Elastic-net MKL (Mourao-Miranda et al., Algorithms 1 and 2), with the reference system's defects fixed
// (ALGORITHMS.md section 3): scale-free stopping rule, iteration cap, warm starts, a matched
// (alpha, beta) pair, the LIBSVM bias rule, and no absolute thresholds on ||w_j||.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <Eigen/QR>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kMinDamping = 1.0 / 256;   ///< smallest water-filling step
constexpr int kWaterFillIterations = 100;   ///< then the multiplicative update takes over
constexpr double kMaxExponent = 16.0;       ///< largest exponent of the multiplicative step (mu = 1, or the fallback)
constexpr double kGrowthRise = 1.1;         ///< rise of the largest weight growth ratio over a step that counts as an overshoot
constexpr double kRatioTolerance = 1e-3;  ///< |F(beta)_j / beta_j - 1| that counts as settled
constexpr double kVanishingWeight = 1e-3;  ///< normalised weight below which a decaying weight may be set to 0
constexpr double kNewtonStart = 1e-2;       ///< (water-filling phase) step (max |delta beta|, normalised) below which Newton is tried
constexpr double kNewtonStartL1 = 1e-2;     ///< (multiplicative phase) largest weight growth ratio - 1 at which Newton is tried
constexpr double kNewtonStartWarm = 0.1;    ///< both thresholds above for a warm-started fit: it starts near its neighbour's optimum
constexpr double kEarlyEntry = 1e-3;        ///< Newton step (normalised) from which the kernels outside the support are screened at
                                            ///< every step, so that one that must enter does so before the full-precision steps
constexpr int kNewtonSteps = 12;           ///< Newton steps on one support before giving up
constexpr double kLooseFactor = 1e-2;       ///< inner tolerance of a water-filling step: this x the previous step ...
constexpr double kLoosest = 1e-3;           ///< ... at most this (and never below the learner's svm_tolerance)
constexpr int kOutsideCheck = 4;            ///< water-filling steps between looks at the kernels outside the support
constexpr double kDropWeight = 1e-4;        ///< normalised weight below which a kernel the water-filling dropped leaves
constexpr int kNewtonRounds = 4;            ///< support changes handled inside one Newton attempt
constexpr double kEnteringWeight = 1e-3;    ///< normalised weight a kernel the optimality check brings in enters with
constexpr double kNewtonTrust = 0.1;        ///< largest Newton step (normalised) taken: a larger one means the start was too far
constexpr int kNewtonRetry = 3;             ///< iterations to wait after a failed Newton attempt
constexpr double kLeavingWeight = 5e-4;     ///< normalised weight from which a Newton step does not drop a kernel the check brought in
                                            ///< (half the entering weight, so a kernel that just entered is guarded) ...
constexpr double kKeptFraction = 0.1;       ///< ... but is shortened to leave it this fraction of its weight
constexpr int kHandOver = 150;              ///< (mu = 1) iterations after which a fit that has not converged goes on as SimpleMKL ...
constexpr double kHandOverGap = 1e-4;       ///< ... to this relative duality gap (SimpleMKL's default)

/// The exact minimiser of the weight step with the inner solution frozen (mu < 1): with
/// c_j = sqrt(a'K_j a), the fixed-point equations beta_j (mu S + (1 - mu) c_j beta_j) = c_j beta_j,
/// S = sum_k c_k beta_k, have the water-filling solution beta_j = (c_j - mu S) / ((1 - mu) c_j) on
/// the support A = {j : c_j > mu S}, S = sum_A c_j / (1 - mu + mu |A|), and 0 elsewhere.
/// (ENMKL's published update is one multiplicative step towards it.) `level` receives S.
Eigen::VectorXd WaterFill(const Eigen::VectorXd& c, double mu, double* level = nullptr) {
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

std::vector<Eigen::Index> Support(const Eigen::VectorXd& beta) {
  std::vector<Eigen::Index> A;
  for (Eigen::Index j = 0; j < beta.size(); ++j)
    if (beta[j] > 0) A.push_back(j);
  return A;
}

/// One ENMKL update (Mourao-Miranda et al.): solve the single-kernel problem on sum_j beta_j K_j (warm-started),
/// then beta_j <- 1 / (sqrt(mu)/lambda_j + 1 - mu), lambda_j = ||w_j|| / (sqrt(mu) sum_k ||w_k||),
/// ||w_j|| = beta_j sqrt(a'K_j a); written as ||w_j|| / (mu sum||w|| + (1 - mu)||w_j||), finite at
/// mu = 0 and for ||w_j|| = 0.
/// Active set (the optimum usually keeps few kernels): only the kernels with beta_j > 0 are combined and have
/// their quadratics formed; the others are screened (ScreenedNorms) and evaluated only where they might enter.
class EnmklMap {
 public:
  EnmklMap(std::string_view learner, const KernelList& train, const FitOptions& options, const InnerSolver& solver, double mu, FitInfo& info)
      : stack_(CheckedStack(learner, train, options, ownStack_)), screen_(stack_), broughtIn_(static_cast<std::size_t>(stack_.Size()), 0), solver_(solver), mu_(mu),
        info_(info) {}
  /// Solves on sum_j beta_j K_j (`sol` is the warm start in and the solution out) and forms c_j =
  /// sqrt(a'K_j a) on the support of beta; `objective` receives the primal objective of ENMKL's
  /// Definition 4 (Mourao-Miranda et al.) at the w this solution gives for `beta`:
  /// mu/2 (sum_j ||w_j||)^2 + (1 - mu)/2 sum_j ||w_j||^2 + loss, ||w_j|| = beta_j sqrt(a'K_j a).
  /// Returns false when the solution uses no kernel at all (e.g. constant targets).
  /// With `products` (a Newton step, which needs the columns K_j a of the support), the support's
  /// quadratics are read off those columns (ScreenedNorms::EvaluateWithProducts) where the solution
  /// allows it; `products` is left empty where it does not.
  bool Solve(const Eigen::VectorXd& beta, InnerSolution& sol, bool warm, double& objective, double looseTolerance = 0,
             Eigen::MatrixXd* products = nullptr) {
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
  /// ENMKL's update F(beta) (support of beta only) after Solve.
  Eigen::VectorXd Update(const Eigen::VectorXd& beta) {
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
  /// WaterFill of the exact c after Solve, evaluating a kernel outside the support of beta only when
  /// its bound exceeds the level mu S of the support found without it. Equal to the water-filling of
  /// all exact c: a kernel with c_j <= mu S_A is excluded, and S only grows as kernels enter.
  /// With `outside` false the kernels outside the support are not looked at (they stay out this step;
  /// the periodic checks and the final full check bring them in when they must enter).
  Eigen::VectorXd ScreenedWaterFill(const Eigen::VectorXd& beta, bool outside) {
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
  /// Newton's method on the fixed-point equations restricted to the support A of `beta`:
  /// R_j = (1 - mu) beta_j c_j + mu S - c_j = 0 for j in A (S = sum_A beta_k c_k: beta_j equals its
  /// ENMKL update), with the Jacobian from the inner solution's sensitivity (InnerSolver::Curvature).
  /// Converged: the last Newton step (the distance to the fixed point on A, to second order) is below
  /// `tolerance` relative to sum(beta), it was computed at a fully solved inner problem, its linear model left
  /// no residual (|J delta + R| <= tolerance S), and the full optimality check over all kernels passed: no kernel
  /// outside A may enter (mu < 1: the water-filling of all exact c has support A; mu = 1: c_j <= S / sum beta
  /// (1 + tolerance), the l1-MKL optimality condition). `beta` and `sol` are left at the last iterate.
  enum class Newton { Converged, SupportChanged, Failed };
  Newton SolveOnSupport(Eigen::VectorXd& beta, InnerSolution& sol, bool& haveSol, double& objective, double tolerance, int maxIterations,
                        int steps) {
    const Eigen::Index m = beta.size();
    double lastStep = 1.0;
    bool jumped = false;  // to the frozen optimum (mu = 1, below)
    for (int k = 0; k < steps; ++k) {
      if (info_.iterations >= maxIterations) return Newton::Failed;
      ++info_.iterations;
      // Newton's next step is ~ the last one squared: the inner solve needs only that precision (a
      // hundredth of it); the certifying steps are solved to the learner's full tolerance.
      Eigen::MatrixXd products;  // K_j a for j in the support, when Solve could form them
      const double loose = std::min(kLoosest, kLooseFactor * lastStep * lastStep);
      if (!Solve(beta, sol, haveSol, objective, loose, &products)) return Newton::Failed;
      haveSol = true;
      const auto A = Support(beta);
      const auto a = static_cast<Eigen::Index>(A.size());
      Eigen::VectorXd c(a), b(a);
      for (Eigen::Index i = 0; i < a; ++i) {
        c[i] = screen_.Exact(A[static_cast<std::size_t>(i)]);
        b[i] = beta[A[static_cast<std::size_t>(i)]];
      }
      if (!(c.minCoeff() > 0)) return Newton::Failed;
      if (mu_ == 1.0 && solver_.Frozen(sol)) {
        // No free variable: the solution does not move with the weights (H = 0, and J = 1 c' is singular). For it, the
        // l1-MKL optimum is all weight on the largest c_j over every kernel, which is where the multiplicative steps
        // go, one factor c_j / max c at a time (30-130 iterations at small C, more on permuted targets): jump there at once.
        // Newton goes on from there: at the next solve the support is one kernel, or the solution has free variables.
        Eigen::Index top = 0;
        double largest = c.maxCoeff(&top);
        top = A[static_cast<std::size_t>(top)];
        for (Eigen::Index j = 0; j < m; ++j)
          if (!(beta[j] > 0) && screen_.Bound(j) > largest && screen_.Exact(j) > largest) {
            top = j;
            largest = screen_.Exact(j);
          }
        if (a > 1 || top != A[0]) {
          // A solution at another vertex after the jump (other variables at their bounds) has other c_j: the frozen
          // optimum does not hold there, and jumping on could cycle between vertices.
          if (jumped) return Newton::Failed;
          jumped = true;
          const double sum = b.sum();
          Eigen::VectorXd moved = Eigen::VectorXd::Zero(m);
          moved[top] = sum;
          lastStep = (moved - beta).cwiseAbs().maxCoeff() / sum;
          info_.gap = lastStep;
          beta = moved;
          continue;
        }
      }
      Eigen::MatrixXd H, dcoef;
      const auto gradients = [&](const Eigen::VectorXd& coef) {
        return products.cols() == a && coef == sol.coef ? products : stack_.Products(A, coef);
      };
      if (!solver_.Curvature(K_, sol, gradients, H, &dcoef)) {
        noCurvature_ = true;
        return Newton::Failed;
      }
      const double S = b.dot(c);
      const Eigen::VectorXd R = (1.0 - mu_) * b.cwiseProduct(c) + Eigen::VectorXd::Constant(a, mu_ * S) - c;
      const Eigen::MatrixXd Dc = -(c.cwiseInverse().asDiagonal() * H);  // d c_j / d beta_k
      Eigen::MatrixXd J = (1.0 - mu_) * (Eigen::MatrixXd(c.asDiagonal()) + b.asDiagonal() * Dc) - Dc;
      J.rowwise() += mu_ * (c + Dc.transpose() * b).transpose();
      const Eigen::VectorXd delta = SolveNewtonSystem(J, -R);
      if (!delta.allFinite()) return Newton::Failed;
      // A singular J whose range misses R (mu = 1 with no free support vector: the SVM's solution does not move with
      // the weights, H = 0, and J = 1 c' has rank 1) gives a least-squares step that can be ~1e-17 with R at 6e-2 of S:
      // no distance to a fixed point, which that support does not have. A step that leaves more than tolerance S of R
      // fails, handing over to the damped steps, when it removes less than half of R or is too small to move R at all;
      // so a step below `tolerance` that gets past here left no residual.
      const double leftover = (J * delta + R).cwiseAbs().maxCoeff();
      const double sum = b.sum();
      const double step = delta.cwiseAbs().maxCoeff() / sum;
      info_.gap = step;
      if (leftover > tolerance * S && (leftover > 0.5 * R.cwiseAbs().maxCoeff() || step < tolerance)) return Newton::Failed;
      if (step > kNewtonTrust) return Newton::Failed;  // not yet where Newton's model of the map holds
      // A kernel the full check brought in is not dropped by one step while its weight is not negligible: the step
      // is shortened so that it keeps a fraction of its weight. Newton's model is local, and such a kernel can be
      // sent below 0 by an overshooting first step, then enter again at the next check, and so on (seen on
      // interpolating SVMs). Other kernels leave at once, as they do where Newton's model holds.
      double fraction = 1.0;
      for (Eigen::Index i = 0; i < a; ++i) {
        const bool broughtIn = broughtIn_[static_cast<std::size_t>(A[static_cast<std::size_t>(i)])] != 0;
        if (broughtIn && !(b[i] + delta[i] > 0) && b[i] > kLeavingWeight * sum) fraction = std::min(fraction, (1.0 - kKeptFraction) * b[i] / -delta[i]);
      }
      Eigen::VectorXd moved = beta;
      bool leaves = false;
      for (Eigen::Index i = 0; i < a; ++i) {
        const auto j = A[static_cast<std::size_t>(i)];
        moved[j] = b[i] + fraction * delta[i];
        if (!(moved[j] > 0)) {
          moved[j] = 0;  // this kernel leaves the support
          leaves = true;
        }
      }
      lastStep = fraction * step;
      // The next solve starts from the solution moved along d coef / d beta by this step (first order: off by about
      // the step squared), not from this one.
      const auto predictNextSolution = [&] {
        if (dcoef.cols() != a) return;
        Eigen::VectorXd change(a);
        for (Eigen::Index i = 0; i < a; ++i) change[i] = moved[A[static_cast<std::size_t>(i)]] - b[i];
        solver_.Shift(sol, dcoef * change);
      };
      // Only a step computed at an inner solve asked for at most a hundredth of `tolerance` (the previous step was below
      // sqrt(tolerance); svm_tolerance is the floor), or at an exact one, certifies. A first step from water-filled
      // weights is solved to 1e-3, and a warm-started SMO may stop at once on the previous iterate's solution, at whose
      // quadratics those weights are an exact fixed point: a step of ~1e-16 that says nothing (seen: weights up to 3e-3
      // from the fixed point, reported converged). The next step is then solved fully.
      if (step < tolerance && fraction == 1.0 && !leaves && (loose <= kLooseFactor * tolerance || solver_.Exact())) {
        // The full optimality check over every kernel, at the solution of this iterate.
        const Eigen::VectorXd all = screen_.All();
        if (mu_ < 1.0) {
          const Eigen::VectorXd target = WaterFill(all, mu_);
          if (Support(target) != A) {
            // The next attempt keeps the weights Newton found on A and lets the entering kernels in at a small weight
            // (as at mu = 1). The water-filled weights of the frozen solution would also move or drop kernels of A and
            // start Newton where its model of the map does not hold: attempts from them can cycle between two supports,
            // and on large supports they fail and send the fit back to the damped steps (docs/learners.md, "Newton's
            // restarts keep its weights").
            bool enters = false;
            for (Eigen::Index j = 0; j < m; ++j)
              if (target[j] > 0 && !(beta[j] > 0)) {
                Enter(beta, j, sum);
                enters = true;
              }
            if (!enters) beta = target;  // only kernels at the threshold leave (rounding): the water-filled weights drop them
            return Newton::SupportChanged;
          }
        } else {
          const double level = S / sum * (1.0 + tolerance);
          bool optimal = true;
          for (Eigen::Index j = 0; j < m; ++j)
            if (!(beta[j] > 0) && all[j] > level) {
              Enter(beta, j, sum);  // a violating kernel enters with a small weight
              optimal = false;
            }
          if (!optimal) return Newton::SupportChanged;
        }
        beta = moved;
        return Newton::Converged;
      }
      if (!(moved.sum() > 0)) return Newton::Failed;
      // Once Newton's steps are small, the kernels outside A that must enter (found through the screening bounds: few
      // exact quadratics) enter now, at a small weight, rather than at the certifying step: the steps left on A are the
      // ones solved to full precision, which a late entry would repeat on the larger support (about 2
      // full-precision SVM solves per support change of a warm-started grid fit). From steps below 1e-2 instead of 1e-3,
      // an entry while Newton is still converging slowly can cost the attempt (seen on an interpolating SVM, C = 100).
      if (k >= 1 && lastStep < kEarlyEntry) {
        const auto entering = Entering(beta, S, sum, tolerance);
        if (!entering.empty()) {
          for (const auto j : entering) Enter(moved, j, sum);
          predictNextSolution();
          beta = moved;
          return Newton::SupportChanged;
        }
      }
      predictNextSolution();
      beta = moved;
    }
    return Newton::Failed;
  }
  /// Kernel j enters `beta` (of sum `sum`) at the entering weight, marked as brought in by a check (the leaving guard).
  void Enter(Eigen::VectorXd& beta, Eigen::Index j, double sum) {
    beta[j] = kEnteringWeight * sum;
    broughtIn_[static_cast<std::size_t>(j)] = 1;
  }
  /// Kernels outside the support of `beta` that the certifying check would bring in at the current solution
  /// (S = sum_A beta_j c_j, sum = sum beta; the same conditions, slack included), found through the screening
  /// bounds: an exact quadratic only where a bound passes the level.
  std::vector<Eigen::Index> Entering(const Eigen::VectorXd& beta, double S, double sum, double tolerance) {
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
  const gram::KernelStack& Stack() const { return stack_; }
  ScreenedNorms& Norms() { return screen_; }
  bool NoCurvature() const { return noCurvature_; }

 private:
  std::unique_ptr<gram::KernelStack> ownStack_;  ///< without a cache: this fit's own stack
  const gram::KernelStack& stack_;
  ScreenedNorms screen_;
  Eigen::MatrixXd K_;
  bool noCurvature_ = false;
  std::vector<char> broughtIn_;  ///< kernels a full optimality check brought into the support (this fit)
  const InnerSolver& solver_;
  double mu_;
  FitInfo& info_;
};

}  // namespace

Model FitEnmkl(std::string_view learner, const KernelList& train, const InnerSolver& solver, const EnmklSettings& s, const FitOptions& options) {
  Stopwatch clock;
  const Eigen::Index m = KernelCount(train, options);
  Model model;
  FitInfo& info = model.info;
  EnmklMap F(learner, train, options, solver, s.mu, info);  // first: its stack checks the kernels' values
  const auto active = ActiveKernels(train, options);
  if (active.empty())
    throw InputError("learners:AllZeroKernels", "learner " + std::string(learner), "every training kernel is identically zero: nothing to learn from");
  Eigen::VectorXd beta = Eigen::VectorXd::Zero(m);
  for (auto j : active) beta[j] = 1.0 / static_cast<double>(active.size());
  InnerSolution sol;
  bool haveSol = false;
  const bool warmed = options.warmStart && options.warmStart->beta.size() == m && options.warmStart->beta.sum() > 0;
  if (const Model* w = options.warmStart; warmed) {
    // The neighbour's weights. At mu = 1 mixed with 10 % uniform weight: a multiplicative step cannot revive a weight
    // at 0. For mu < 1 the first water-filling step looks at every kernel (the outside check), so a kernel the
    // neighbour had at 0 comes back there, and the first combination reads the neighbour's support only (a uniform
    // share would make every warm fit start with all kernels).
    const Eigen::VectorXd uniform = beta;
    const double mix = s.mu < 1.0 ? 0.0 : 0.1;
    for (auto j : active) beta[j] = (1.0 - mix) * w->beta[j] / w->beta.sum() + mix * uniform[j];
    if (w->solverState.size() > 0) {
      sol.alpha = w->solverState;
      haveSol = true;
    }
  }
  const double newtonStart = warmed ? kNewtonStartWarm : kNewtonStart, newtonStartL1 = warmed ? kNewtonStartWarm : kNewtonStartL1;
  info.status = FitStatus::MaxIterReached;
  double prevObjective = 0, objective = 0;
  bool done = false;
  bool newtonAvailable = true;
  int newtonAfter = 0;  // iteration before which Newton is not tried again (after a failure)
  // Newton on the frozen support, then the full check; on success `beta` is the certified fixed point.
  auto polish = [&](Eigen::VectorXd& b) {
    if (!newtonAvailable || info.iterations < newtonAfter) return EnmklMap::Newton::Failed;
    auto r = EnmklMap::Newton::SupportChanged;
    for (int round = 0; round < kNewtonRounds && r == EnmklMap::Newton::SupportChanged; ++round)
      r = F.SolveOnSupport(b, sol, haveSol, objective, s.betaTolerance, s.maxIterations, kNewtonSteps);
    if (r == EnmklMap::Newton::Failed) newtonAfter = info.iterations + kNewtonRetry;
    if (F.NoCurvature()) newtonAvailable = false;
    return r;
  };
  if (s.mu < 1.0) {
    // Phase 1, damped water-filling: beta <- (1 - w) beta + w WaterFill(c(beta)). Same fixed points
    // as ENMKL's published update (the optimum), usually reached in tens of steps instead of thousands: the
    // plain update contracts at a rate near 1, the water-filling step only waits for the inner
    // solution to settle. w halves when a step is larger than the previous one and grows back
    // otherwise. Once a step is below 1e-2 (normalised; 0.1 for a warm-started fit), Newton's method on the water-filled support finds
    // the fixed point and the full optimality check certifies it (EnmklMap::SolveOnSupport); a kernel that
    // must enter does so at a small weight and Newton goes on from its own weights (docs/learners.md,
    // "Newton's restarts keep its weights"). The step size alone does not bound the distance to the fixed point.
    double omega = 1.0, prevChange = std::numeric_limits<double>::infinity();
    bool lookOutside = false;
    const int phaseOne = std::min(s.maxIterations, kWaterFillIterations);
    while (info.iterations < phaseOne && !done) {
      const int it = ++info.iterations;
      // Inexact inner solves while the weights still move a lot (the tolerance follows the last step);
      // Newton's steps and the certification use the full tolerance.
      const double loose = std::min(kLoosest, kLooseFactor * prevChange);
      if (!F.Solve(beta, sol, haveSol, objective, loose)) {  // the solution uses no kernel (e.g. constant targets)
        done = true;
        break;
      }
      haveSol = true;
      // Kernels outside the support are looked at every kOutsideCheck steps, after a Newton attempt,
      // and always when there is no Newton step (then the step-size rule below is the stopping rule).
      const Eigen::VectorXd target = F.ScreenedWaterFill(beta, it % kOutsideCheck == 1 || lookOutside || !newtonAvailable);
      lookOutside = false;
      if (!(target.sum() > 0)) {
        done = true;
        break;
      }
      const double change = (target / target.sum() - beta / beta.sum()).cwiseAbs().maxCoeff();
      const double objChange = it == 1 ? 1.0 : std::abs(objective - prevObjective) / std::max(std::abs(objective), 1e-300);
      prevObjective = objective;
      info.gap = change;
      const bool small = change < s.betaTolerance && objChange < s.objectiveTolerance;
      if (small || change < newtonStart) {
        Eigen::VectorXd b = target;
        const auto r = polish(b);
        if (r == EnmklMap::Newton::Converged) {
          beta = b;
          done = true;
          break;
        }
        if (r == EnmklMap::Newton::SupportChanged) {
          beta = b;  // go on from Newton's iterate (after kNewtonRounds support changes: the entering kernels are in it)
          lookOutside = true;
          continue;
        }
        lookOutside = true;
        if (small && !newtonAvailable) {  // no Newton step for this solver: the step-size rule (every kernel was looked at)
          beta = target;
          done = true;
          break;
        }
      }
      omega = change > prevChange ? std::max(omega * 0.5, kMinDamping) : std::min(1.0, omega * 1.25);
      prevChange = change;
      beta = (1.0 - omega) * beta + omega * target;
      // A kernel the water-filling dropped leaves the active set once its damped weight is small.
      const double total = beta.sum();
      for (Eigen::Index j = 0; j < m; ++j)
        if (target[j] == 0.0 && beta[j] < kDropWeight * total) beta[j] = 0.0;
    }
    if (done) {
      info.status = FitStatus::Converged;
    } else {
      // The water-filled support kept changing (strongly coupled inner solutions, e.g. KRR): go on
      // with the multiplicative update below, which lowers the objective at every step. A multiplicative
      // step cannot revive a weight at exactly 0, so 1 % of uniform weight is mixed back in first.
      const double share = 0.01 * beta.sum() / static_cast<double>(active.size());
      for (auto j : active) beta[j] += share;
    }
  }
  if (!done) {
    // ENMKL's multiplicative update (the only option for mu = 1, where the frozen problem is
    // degenerate: all weight on the largest c_j), raised to an adaptive power eta: beta_j <- beta_j
    // (F(beta)_j / beta_j)^eta, eta = 1 being the published step; same fixed points, faster
    // contraction; eta grows while the steps go on in one direction and falls back towards 1 when one overshoots.
    // Weights that are clearly vanishing (ratio F(beta)_j / beta_j < 1 - 1e-3 and below 1e-3) mark the
    // support of the limit; once no weight grows by more than 1 % in a step (10 % warm-started), Newton's method on it finds the
    // fixed point and the full check certifies it (as in phase 1). Without a Newton step (a solver
    // without Curvature) the stopping rule is the step-size rule: no weight may still grow (ratio <= 1 + 1e-3),
    // the others moved less than `tolerance`, and the primal objective changed by less than
    // `objective_tolerance`; the vanishing weights are then set to exactly 0.
    Eigen::VectorXd vanishing = Eigen::VectorXd::Zero(m);
    double eta = 1.0, prevGrowth = std::numeric_limits<double>::infinity();
    Eigen::VectorXd prevDirection;  // log(F(beta)_j / beta_j) of the last step (empty: none yet)
    bool first = true;
    double prevStep = 1.0;
    while (info.iterations < s.maxIterations) {
      if (s.mu == 1.0 && info.iterations >= kHandOver && haveSol) {
        // l1-MKL whose multiplicative steps and Newton attempts have not settled (at small C on a real cohort of
        // ~19 subjects, 15 of 175 warm-started fits would run to the 500-iteration cap). There the SVM's solution changes its
        // active set within the iterates' range: c_j jumps with the weights and the steps oscillate around a kink that
        // Newton's equations (equal c_j on the support) cannot express. SimpleMKL's descent on J, certified by the duality
        // gap, has the same optimum and does not need c to be smooth: it goes on from here.
        const double total = beta.sum();
        Model handed = FitSimpleMklFrom(train, F.Stack(), solver, kHandOverGap, s.maxIterations - info.iterations, beta / total, sol.alpha, options);
        handed.info.iterations += info.iterations;
        handed.info.innerSolves += info.innerSolves;
        handed.info.innerIterations += info.innerIterations;
        handed.info.seconds = clock.Seconds();
        return handed;
      }
      ++info.iterations;
      if (!F.Solve(beta, sol, haveSol, objective, std::min(kLoosest, kLooseFactor * prevStep))) {
        info.status = FitStatus::Converged;
        break;
      }
      haveSol = true;
      const Eigen::VectorXd next = F.Update(beta);
      const Eigen::VectorXd from = beta / beta.sum(), to = next / next.sum();
      double growth = -1, change = 0;
      vanishing.setZero();
      for (Eigen::Index j = 0; j < m; ++j) {
        if (from[j] <= 0) continue;
        const double ratio = to[j] / from[j];
        growth = std::max(growth, ratio - 1.0);
        if (ratio < 1.0 - kRatioTolerance && to[j] < kVanishingWeight) vanishing[j] = 1;
        else change = std::max(change, std::abs(to[j] - from[j]));
      }
      const double objChange = first ? 1.0 : std::abs(objective - prevObjective) / std::max(std::abs(objective), 1e-300);
      first = false;
      prevObjective = objective;
      info.gap = change;
      Eigen::VectorXd kept = next;
      for (Eigen::Index j = 0; j < m; ++j)
        if (vanishing[j] > 0) kept[j] = 0.0;
      const bool small = growth <= kRatioTolerance && change < s.betaTolerance && objChange < s.objectiveTolerance;
      prevStep = std::max(change, growth);
      // A solution with no free variable is also handed to Newton at once (mu = 1): its frozen optimum is known (SolveOnSupport).
      const bool frozen = s.mu == 1.0 && solver.Frozen(sol);
      if (small || (newtonAvailable && info.iterations >= newtonAfter && (growth <= newtonStartL1 || frozen))) {
        Eigen::VectorXd b = kept / kept.sum() * next.sum();
        const auto r = polish(b);
        if (r == EnmklMap::Newton::Converged) {
          beta = b;
          info.status = FitStatus::Converged;
          break;
        }
        if (small && !newtonAvailable) {
          beta = kept;
          info.status = FitStatus::Converged;
          break;
        }
        if (r == EnmklMap::Newton::SupportChanged) {
          // A kernel outside the support wants in: revive every zero weight a little and go on.
          const double share = 0.01 * b.sum() / static_cast<double>(active.size());
          beta = b;
          for (auto j : active) beta[j] += share;
          first = true;
          prevGrowth = std::numeric_limits<double>::infinity();
          prevDirection.resize(0);
          eta = 1.0;
          continue;
        }
      }
      // eta halves when the last step overshot: it turned back (its log-ratios at an obtuse angle to the previous
      // step's) or the largest growth rose by more than kGrowthRise; else it grows. The step's size alone is no sign of
      // overshoot: on a large support the steps grow for tens of iterations while the weights concentrate (mu = 1 fits at
      // n = 192, m = 116: 17-25 iterations with this rule, 27-48 with "halve when the step grew").
      Eigen::VectorXd direction = Eigen::VectorXd::Zero(m);
      for (Eigen::Index j = 0; j < m; ++j)
        if (from[j] > 0 && to[j] > 0) direction[j] = std::log(to[j] / from[j]);
      const bool turnedBack = prevDirection.size() == m && direction.dot(prevDirection) < 0;
      const bool overshot = turnedBack || growth > kGrowthRise * prevGrowth;
      eta = overshot ? std::max(1.0, eta * 0.5) : std::min(kMaxExponent, eta * 1.25);
      prevDirection = direction;
      prevGrowth = growth;
      Eigen::VectorXd stepped = Eigen::VectorXd::Zero(m);
      for (Eigen::Index j = 0; j < m; ++j)
        if (from[j] > 0 && to[j] > 0) stepped[j] = from[j] * std::pow(to[j] / from[j], eta);
      beta = stepped.sum() > 0 ? Eigen::VectorXd(stepped * (next.sum() / stepped.sum())) : next;
      // Vanishing weights leave the active set (the certification brings back any kernel that must enter).
      if (newtonAvailable)
        for (Eigen::Index j = 0; j < m; ++j)
          if (vanishing[j] > 0) beta[j] = 0.0;
    }
  }
  // Subnormal weights (e.g. 4.9e-324 left by an underflowing multiplicative step) are exactly 0.
  {
    const double total = beta.sum();
    for (Eigen::Index j = 0; j < m; ++j)
      if (!(beta[j] / total >= std::numeric_limits<double>::min())) beta[j] = 0.0;
  }
  // Return a matched pair: the solution trained with exactly the weights returned.
  sol = solver.Solve(F.Stack().Combine(beta), haveSol ? &sol : nullptr);
  ++info.innerSolves;
  info.innerIterations += sol.iterations;
  if (!sol.converged) info.status = FitStatus::MaxIterReached;
  // Normalise sum(beta) = 1; scaling coef by the same factor leaves the decision function unchanged.
  const double sum = beta.sum();
  model.beta = beta / sum;
  for (Eigen::Index j = 0; j < m; ++j)
    if (!(model.beta[j] >= std::numeric_limits<double>::min())) model.beta[j] = 0.0;
  StoreSolution(sol, sum, model);
  model.alpha = sol.alpha * sum;
  model.solverState = sol.alpha;
  info.objective = objective;  // primal objective of ENMKL's Definition 4
  info.seconds = clock.Seconds();
  return model;
}

namespace {

EnmklSettings Settings(const ParamMap& p) {
  return {p.at("mu"), static_cast<int>(p.at("max_iterations")), p.at("tolerance"), p.at("objective_tolerance")};
}

class EnmklSvm final : public Learner {
 public:
  explicit EnmklSvm(const ParamMap& p)
      : c_(p.at("c")), svmTol_(p.at("svm_tolerance")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInputExceptValues(Name(), train, t, o);
    if (t.task == Task::Regression)
      throw InputError("learners:TaskUnsupported", "learner enmkl_svm", "enmkl_svm is a classifier; for regression use enmkl_krr");
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    // Multiclass: one beta for all one-vs-rest SVMs (docs/learners.md, "Multiclass").
    return FitEnmkl(Name(), train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, svc) : svc(t.y)), settings_, o);
  }
  std::string_view Name() const override { return "enmkl_svm"; }

 private:
  double c_, svmTol_;
  EnmklSettings settings_;
};

class EnmklKrr final : public Learner {
 public:
  explicit EnmklKrr(const ParamMap& p) : lambda_(p.at("lambda")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInputExceptValues(Name(), train, t, o);
    auto krr = [&](const Eigen::VectorXd& y) { return MakeKrrSolver(y, lambda_, t.sampleWeights); };
    return FitEnmkl(Name(), train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, krr) : krr(t.y)), settings_, o);
  }
  std::string_view Name() const override { return "enmkl_krr"; }

 private:
  double lambda_;
  EnmklSettings settings_;
};

}  // namespace

std::unique_ptr<Learner> MakeEnmklSvm(const ParamMap& p) { return std::make_unique<EnmklSvm>(p); }
std::unique_ptr<Learner> MakeEnmklKrr(const ParamMap& p) { return std::make_unique<EnmklKrr>(p); }

}  // namespace neuromkl::learners
