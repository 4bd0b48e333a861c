// svm, krr, enmkl_svm, enmkl_krr and simplemkl on a fold's features (feature_learners.hpp).
#include "neuromkl/learners/feature_learners.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/QR>

#include "enmkl_map.hpp"
#include "feature_solvers.hpp"
#include "neuromkl/core/errors.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kKrrTolerance = 1e-10;     ///< conjugate gradients' relative residual (the kernel path solves KRR exactly)
constexpr double kDropWeight = 1e-4;        ///< weight (relative to the largest) below which a region the water-filling excludes is dropped

constexpr std::size_t kStallWindow = 25;    ///< iterations over which V must fall by kStallFraction x objective_tolerance (relative) ...
constexpr double kStallFraction = 1e-3;     ///< ... else the fit has stalled
constexpr std::size_t kAndersonDepth = 5;    ///< pairs the acceleration fits over
constexpr double kEnterWeight = 1e-3;       ///< weight (relative to the largest) a region enters with
constexpr double kEnterMargin = 1e-9;       ///< relative margin of the entering condition (rounding)
constexpr int kWaterFillIterations = 100;   ///< water-filling steps before the coordinate steps take over
constexpr double kMinDamping = 1.0 / 256;   ///< smallest water-filling step
constexpr double kNewtonStart = 0.1;        ///< distance of the weights' steps (normalised) below which Newton's method is tried
constexpr int kNewtonSteps = 12;            ///< Newton steps on one support before an attempt fails
constexpr int kNewtonRounds = 4;            ///< support changes inside one attempt
constexpr int kNewtonRetry = 3;             ///< weight steps after a failed attempt before the next
constexpr double kCheckedInWeight = 1e-3;   ///< weight (relative to the sum) with which Newton's full check brings a region in
constexpr double kCarriedWeight = 1e-3;     ///< weight (relative to the sum) Newton's start gives a region the steps still carry ...
constexpr double kCarriedMargin = 0.1;      ///< ... when its c_r is within this fraction below the water level mu S
constexpr double kSlowestRate = 0.9999;     ///< slowest contraction RemainingDistance takes (mu = 1 without Newton)

bool IsSvm(std::string_view learner) { return learner == "svm" || learner == "enmkl_svm" || learner == "simplemkl"; }
bool IsEnmkl(std::string_view learner) { return learner == "enmkl_svm" || learner == "enmkl_krr"; }
/// The learners that fit kernel weights: ENMKL, and SimpleMKL as ENMKL at mu = 1 (below).
bool FitsWeights(std::string_view learner) { return IsEnmkl(learner) || learner == "simplemkl"; }

/// The regions whose prepared kernel is not identically zero (the others never get weight, as on the kernel path).
Eigen::VectorXd Usable(const gram::FoldFeatures& fold) {
  Eigen::VectorXd usable = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(fold.Regions()));
  for (std::size_t r = 0; r < fold.Regions(); ++r)
    for (Eigen::Index i = 0; i < fold.TrainingRows(); ++i)
      if (fold.SquaredNorm(i, r) > 0) {
        usable[static_cast<Eigen::Index>(r)] = 1;
        break;
      }
  return usable;
}

void CheckTargets(std::string_view learner, const gram::FoldFeatures& fold, const Targets& targets) {
  const auto fail = [&](const std::string& message) { throw InputError("features:Targets", std::string(learner), message); };
  if (targets.task == Task::Multiclass) fail("expected binary or regression targets on features; found a multiclass target");
  if (targets.y.size() != fold.TrainingRows())
    fail("expected one target per training subject (" + std::to_string(fold.TrainingRows()) + "); found " + std::to_string(targets.y.size()));
  if (!targets.y.allFinite()) fail("expected finite targets; found one that is not");
  if (targets.sampleWeights.size() > 0 && targets.sampleWeights.size() != targets.y.size())
    fail("expected one class weight per training subject; found " + std::to_string(targets.sampleWeights.size()));
  if (IsSvm(learner)) {
    if (targets.task != Task::Classification) fail("expected a classification target (a classifier); found a regression target");
    if (!(targets.y.array() == 1.0 || targets.y.array() == -1.0).all()) fail("expected labels -1 / +1");
    if ((targets.y.array() > 0).all() || (targets.y.array() < 0).all()) fail("expected two classes; the training subjects have a single class");
  }
}

std::unique_ptr<FeatureSolver> MakeSolver(std::string_view learner, const ParamMap& p, const gram::FoldFeatures& fold, const Targets& targets) {
  if (IsSvm(learner)) {
    const double tolerance = learner == "svm" ? p.at("tolerance") : p.at("svm_tolerance");
    const long epochs = learner == "svm" ? static_cast<long>(std::min(p.at("max_iterations"), 1e9)) : 1000000L;
    return MakeFeatureSvc(fold, targets.y, p.at("c"), targets.sampleWeights, tolerance, epochs);
  }
  return MakeFeatureKrr(fold, targets.y, p.at("lambda"), targets.sampleWeights, kKrrTolerance);
}

/// ENMKL's kernel weights from its variational form (Mourao-Miranda et al.): with theta on the simplex,
///   mu/2 (sum_r ||w_r||)^2 + (1 - mu)/2 sum_r ||w_r||^2 = min_theta 1/2 sum_r ||w_r||^2 / beta_r,
///   beta_r = theta_r / (mu + (1 - mu) theta_r),
/// so the objective V(theta) = min_w 1/2 sum_r ||w_r||^2 / beta_r + loss is convex in theta, and for a solution w the
/// minimising theta is proportional to ||w_r||: ENMKL's published update is block coordinate descent on V.
Eigen::VectorXd Weights(const Eigen::VectorXd& theta, double mu) {
  return (theta.array() > 0).select(theta.array() / (mu + (1.0 - mu) * theta.array()), 0.0);
}

/// V at the solver's last solution for `beta`: 1/2 sum_r beta_r c_r^2 + loss (||w_r|| = beta_r c_r), the primal value of
/// that solution, an upper bound of V(theta) that meets it at the inner optimum.
double Value(const Eigen::VectorXd& beta, const FeatureSolver& solver) { return 0.5 * beta.dot(solver.RegionNorms2()) + solver.Loss(); }

/// ENMKL's primal objective (Definition 4) at the last solution.
double Objective(const Eigen::VectorXd& beta, const FeatureSolver& solver, double mu) {
  const Eigen::VectorXd norms = beta.cwiseProduct(solver.RegionNorms2().cwiseSqrt());
  return 0.5 * mu * norms.sum() * norms.sum() + 0.5 * (1.0 - mu) * norms.squaredNorm() + solver.Loss();
}

/// The level of the optimality conditions on the simplex: dV/dtheta_r = -c_r^2 / (2 mu) at theta_r = 0, against
/// -mu c_k^2 (beta_k / theta_k)^2 / 2 for a region k with weight, so a region belongs at 0 exactly when c_r is at most
/// mu c_k beta_k / theta_k (equal for every region with weight at the optimum; their largest here).
double EntryLevel(const Eigen::VectorXd& theta, const Eigen::VectorXd& beta, const Eigen::VectorXd& c, double mu) {
  double level = 0;
  for (Eigen::Index r = 0; r < theta.size(); ++r)
    if (theta[r] > 0) level = std::max(level, mu * c[r] * beta[r] / theta[r]);
  return level;
}

/// A region at theta_r = 0 stays there under the coordinate step (its ||w_r|| is 0): one above the entry level enters
/// the step at a small weight.
void EnterViolators(const Eigen::VectorXd& theta, const Eigen::VectorXd& c, const Eigen::VectorXd& usable, double level, Eigen::VectorXd& step) {
  bool entered = false;
  for (Eigen::Index r = 0; r < theta.size(); ++r)
    if (theta[r] == 0 && usable[r] > 0 && c[r] > level * (1.0 + kEnterMargin)) {
      step[r] = kEnterWeight * step.maxCoeff();
      entered = true;
    }
  if (entered) step /= step.sum();
}

/// Regions below the entry level dropped once small (the optimum has them at exactly 0, which the multiplicative step
/// only approaches), the rest clipped at 0 and put back on the simplex.
Eigen::VectorXd Pruned(Eigen::VectorXd theta, const Eigen::VectorXd& c, double level) {
  theta = theta.cwiseMax(0.0);
  const double largest = theta.maxCoeff();
  for (Eigen::Index r = 0; r < theta.size(); ++r)
    if (theta[r] < kDropWeight * largest && c[r] < level) theta[r] = 0;
  return theta / theta.sum();
}

/// Anderson acceleration (Anderson 1965; Walker & Ni 2011) of a fixed-point map G: from the last pairs (x_i, G(x_i)),
/// x = G(x_k) - dG gamma with gamma the least-squares fit of the residual f_k = G(x_k) - x_k by the residual
/// differences dF. Returns false while fewer than two pairs are held.
class Anderson {
 public:
  explicit Anderson(std::size_t depth) : depth_(depth) {}
  void Push(const Eigen::VectorXd& x, const Eigen::VectorXd& g) {
    xs_.push_back(x);
    gs_.push_back(g);
    if (xs_.size() > depth_ + 1) {
      xs_.erase(xs_.begin());
      gs_.erase(gs_.begin());
    }
  }
  void Restart() {
    if (xs_.empty()) return;
    xs_.erase(xs_.begin(), xs_.end() - 1);
    gs_.erase(gs_.begin(), gs_.end() - 1);
  }
  /// With `damping` w < 1 the damped mixing x = xbar + w (gbar - xbar), xbar = x_k - dX gamma, gbar = G(x_k) - dG gamma.
  bool Next(Eigen::VectorXd& out, double damping = 1.0) const {
    if (xs_.size() < 2) return false;
    const auto k = static_cast<Eigen::Index>(xs_.size()) - 1;
    const Eigen::Index size = xs_.back().size();
    Eigen::MatrixXd dF(size, k), dG(size, k), dX(size, k);
    for (Eigen::Index i = 0; i < k; ++i) {
      const auto a = static_cast<std::size_t>(i), b = a + 1;
      dF.col(i) = (gs_[b] - xs_[b]) - (gs_[a] - xs_[a]);
      dG.col(i) = gs_[b] - gs_[a];
      dX.col(i) = xs_[b] - xs_[a];
    }
    const Eigen::VectorXd gamma = dF.completeOrthogonalDecomposition().solve(gs_.back() - xs_.back());
    if (!gamma.allFinite()) return false;
    const Eigen::VectorXd gbar = gs_.back() - dG * gamma;
    out = damping >= 1.0 ? gbar : Eigen::VectorXd(xs_.back() - dX * gamma + damping * (gbar - (xs_.back() - dX * gamma)));
    return true;
  }

 private:
  std::size_t depth_;
  std::vector<Eigen::VectorXd> xs_, gs_;
};

/// How far beta is from ENMKL's fixed point, normalised by sum(beta): for mu < 1 the distance to the water-filling
/// minimiser of the weight step at the current solution (WaterFill; beta is in its scale: at the optimum the two agree),
/// which estimates the distance to the optimum where the coordinate step, contracting at a rate near 1, moves little;
/// at mu = 1 (no water-filling) the coordinate step itself.
double Distance(const Eigen::VectorXd& beta, const Eigen::VectorXd& stepBeta, const Eigen::VectorXd& c, double mu) {
  if (mu < 1) return (WaterFill(c, mu) - beta).cwiseAbs().maxCoeff() / beta.sum();
  return (stepBeta / stepBeta.sum() - beta / beta.sum()).cwiseAbs().maxCoeff();
}

/// The theta on the simplex whose Weights are `beta` up to their scale (theta_r = mu beta_r / (1 - (1 - mu) beta_r)):
/// Newton's weights for the steps on theta. At mu = 0 every weight with theta_r > 0 is 1 and theta is the step's
/// (proportional to ||w_r|| = beta_r c_r, from the norms `c` of the last solve).
Eigen::VectorXd ThetaOf(const Eigen::VectorXd& beta, double mu, const Eigen::VectorXd& c) {
  Eigen::VectorXd theta = beta.cwiseProduct(c);
  if (mu > 0 && ((1.0 - mu) * beta.array() < 1.0).all())
    theta = (beta.array() > 0).select(mu * beta.array() / (1.0 - (1.0 - mu) * beta.array()), 0.0);
  return theta / theta.sum();
}

// Newton's method on ENMKL's fixed-point equations restricted to the support of the weights, as on the kernel path
// (EnmklMap::SolveOnSupport, with the same step, EnmklNewtonStep): the weights' steps contract at a rate near 1 as mu
// nears 1 (0.998 per step seen at mu = 1), so their step size says little about the distance to the fixed point and
// their stall test stops short of it (weights 5e-4 from the kernel path's certified optimum at mu = 1). Newton's steps
// converge quadratically once the support is right, and only a fully solved step below `tolerance` whose full check
// over every region passes (mu < 1: the water-filling of every region's exact c has this support; mu = 1: no
// c_j outside it above S / sum beta, the l1-MKL condition) certifies the fit. The curvature comes from the Gram
// matrix of the solver's free rows over the support's voxels (FeatureSolver::Curvature); where that is beyond its
// limits the fit goes on without Newton.
class FeatureNewton {
 public:
  enum class Result { Converged, SupportChanged, Failed };
  FeatureNewton(double mu, double tolerance, int cap, double full, const Eigen::VectorXd& usable)
      : mu_(mu), tolerance_(tolerance), cap_(cap), full_(full), usable_(usable) {}
  /// Whether an attempt is due at this iteration with the steps at `distance` from their target.
  bool Due(int iteration, double distance) const { return iteration >= after_ && distance < kNewtonStart; }
  /// Whether the last attempt found the curvature within its limits (before any attempt: assumed so).
  bool Available() const { return affordable_; }
  bool LastFailed() const { return after_ > 0; }
  /// An attempt from `beta` (weights in the scale of Weights, regions at 0 out of the support). Converged: `beta` is the
  /// certified fixed point, the solver's last solve is at it (full tolerance) and the model's status says whether that
  /// solve converged; SupportChanged: `beta` is the last
  /// iterate, with the entering regions in, after kNewtonRounds support changes; Failed: `beta` is the last iterate and
  /// `solved` and `objective` are left as they were (the caller's steps go on from their own iterate).
  Result Run(FeatureSolver& solver, Eigen::VectorXd& beta, bool& solved, double& objective, Model& model) {
    affordable_ = solver.CurvatureWithinLimits(Support(beta));
    if (!affordable_) {
      after_ = model.info.iterations + kNewtonRetry;
      return Result::Failed;
    }
    Result r = Result::SupportChanged;
    bool lastSolved = solved;
    double lastObjective = objective;
    for (int round = 0; round < kNewtonRounds && r == Result::SupportChanged; ++round) r = OnSupport(solver, beta, lastSolved, lastObjective, model);
    if (r == Result::Failed) {
      after_ = model.info.iterations + kNewtonRetry;
      return r;
    }
    solved = lastSolved;
    objective = lastObjective;
    if (r == Result::Converged) {
      solver.SetTolerance(full_);
      solved = solver.Solve(beta);  // a matched pair: the solution of exactly the weights returned
      objective = Objective(beta, solver, mu_);
      model.info.status = solved ? FitStatus::Converged : FitStatus::Stalled;
    }
    return r;
  }

 private:
  Result OnSupport(FeatureSolver& solver, Eigen::VectorXd& beta, bool& solved, double& objective, Model& model) {
    double lastStep = 1.0;
    for (int k = 0; k < kNewtonSteps; ++k) {
      if (model.info.iterations >= cap_) return Result::Failed;
      ++model.info.iterations;
      // The next step is ~ the last one squared: the solve needs only that precision (a hundredth of it).
      const double asked = std::min(kLoosest, kLooseFactor * lastStep * lastStep);
      solver.SetTolerance(std::max(full_, asked));
      solved = solver.Solve(beta);
      objective = Objective(beta, solver, mu_);
      const Eigen::VectorXd all = solver.RegionNorms2().cwiseSqrt().cwiseProduct(usable_);
      const std::vector<Eigen::Index> A = Support(beta);
      const auto a = static_cast<Eigen::Index>(A.size());
      if (a == 0) return Result::Failed;
      Eigen::VectorXd c(a), b(a);
      for (Eigen::Index i = 0; i < a; ++i) {
        c[i] = all[A[static_cast<std::size_t>(i)]];
        b[i] = beta[A[static_cast<std::size_t>(i)]];
      }
      if (!(c.minCoeff() > 0)) return Result::Failed;
      Eigen::MatrixXd H;
      if (!solver.Curvature(beta, A, H)) {
        affordable_ = solver.CurvatureWithinLimits(A);
        return Result::Failed;
      }
      const EnmklNewton e = EnmklNewtonStep(c, b, H, mu_);
      if (!e.delta.allFinite()) return Result::Failed;
      const double sum = b.sum();
      const double step = e.delta.cwiseAbs().maxCoeff() / sum;
      model.info.gap = step;
      if (!e.Usable(tolerance_, step)) return Result::Failed;
      Eigen::VectorXd moved = beta;
      bool leaves = false;
      for (Eigen::Index i = 0; i < a; ++i) {
        const auto r = A[static_cast<std::size_t>(i)];
        moved[r] = b[i] + e.delta[i];
        if (!(moved[r] > 0)) {
          moved[r] = 0;  // this region leaves the support
          leaves = true;
        }
      }
      if (step < tolerance_ && !leaves && asked <= kLooseFactor * tolerance_) {
        if (Enter(all, A, e.S, sum, beta)) return Result::SupportChanged;
        beta = moved;
        return Result::Converged;
      }
      if (!(moved.sum() > 0)) return Result::Failed;
      beta = moved;
      lastStep = step;
    }
    return Result::Failed;
  }

  /// The full optimality check over every region at the last solve: true, with the regions that must enter in `beta`
  /// (at a small weight beside Newton's weights, or the water-filled weights when only regions at the threshold leave).
  bool Enter(const Eigen::VectorXd& all, const std::vector<Eigen::Index>& A, double S, double sum, Eigen::VectorXd& beta) const {
    bool entered = false;
    if (mu_ < 1) {
      const Eigen::VectorXd target = WaterFill(all, mu_);
      if (Support(target) == A) return false;
      for (Eigen::Index r = 0; r < beta.size(); ++r)
        if (target[r] > 0 && !(beta[r] > 0)) {
          beta[r] = kCheckedInWeight * sum;
          entered = true;
        }
      if (!entered) beta = target;
      return true;
    }
    const double level = S / sum * (1.0 + tolerance_);
    for (Eigen::Index r = 0; r < beta.size(); ++r)
      if (!(beta[r] > 0) && usable_[r] > 0 && all[r] > level) {
        beta[r] = kCheckedInWeight * sum;
        entered = true;
      }
    return entered;
  }

  double mu_, tolerance_;
  int cap_;
  double full_;
  const Eigen::VectorXd& usable_;
  bool affordable_ = true;
  int after_ = 0;  ///< iteration before which no attempt is made (after a failed one)
};

/// The distance still to go of steps that contract linearly, region by region: a region whose weight moved by d in this
/// step and by p in the last one in the same direction goes on by |d| rho / (1 - rho), rho = |d| / |p| (at most
/// kSlowestRate); one that turned or just started to move, by |d|. The largest over the regions. The largest step alone
/// misses a small weight decaying slowly: at mu = 1 one of 2.5e-4 decaying by 0.1 % per step moves by 2.5e-7.
double RemainingDistance(const Eigen::VectorXd& delta, const Eigen::VectorXd& previous) {
  if (previous.size() != delta.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (Eigen::Index r = 0; r < delta.size(); ++r) {
    const double d = std::abs(delta[r]), p = std::abs(previous[r]);
    if (d == 0) continue;
    if (p == 0 || (delta[r] > 0) != (previous[r] > 0)) {
      worst = std::max(worst, d);
      continue;
    }
    const double rho = std::min(kSlowestRate, d / p);
    worst = std::max(worst, d * rho / (1.0 - rho));
  }
  return worst;
}

/// The model of an ENMKL fit at `beta` (its theta) and the solver's solution there.
void FinishEnmkl(const Eigen::VectorXd& theta, const Eigen::VectorXd& beta, double objective, double change, const FeatureSolver& solver, Model& model) {
  // The decision function is unchanged by beta's scale: report beta with sum 1 and coef scaled by the sum.
  const double total = beta.sum();
  model.beta = beta / total;
  model.coef = solver.Coef() * total;
  model.alpha = solver.Alpha() * total;
  model.info.objective = objective;
  model.info.gap = change;
  model.solverState.resize(solver.State().size() + theta.size());
  model.solverState << solver.State(), theta;
}

/// The target of a water-filling step on the simplex: theta_r = beta_r c_r / S with beta = WaterFill(c) (WaterFill's
/// scale is that of Weights: at the fixed point sum_r beta_r c_r = S, so theta sums to 1), and in `distance` the
/// distance of `beta` from WaterFill(c) (Distance at mu < 1); empty when no region is used.
Eigen::VectorXd WaterFilledTheta(const Eigen::VectorXd& c, double mu, const Eigen::VectorXd& beta, double& distance) {
  double level = 0;
  const Eigen::VectorXd filled = WaterFill(c, mu, &level);
  distance = (filled - beta).cwiseAbs().maxCoeff() / beta.sum();
  if (!(level > 0)) return {};
  const Eigen::VectorXd theta = filled.cwiseProduct(c) / level;
  return theta / theta.sum();
}

// Damped water-filling (mu < 1), as on the kernel path (EnmklFit::WaterFillingPhase): theta <- (1 - w) theta + w T(c),
// T the minimiser of the weight step with the solution's dual coefficients frozen (WaterFilledTheta). Same fixed point
// as the coordinate step, which contracts at a rate near 1 (hundreds of steps, each a solve over all rows, where
// this takes tens). Every region is looked at in every step (the solver's norms are exact for all of them), so a
// region that must enter does so through T. w halves when the distance to T grew since the last step and grows back
// otherwise; a region T drops leaves once its damped weight is small. The steps are mixed by Anderson acceleration
// (damped by w, clipped at 0), restarted when the distance grew or T's support changed: the damped map alternates
// around its fixed point where T overshoots, which the mixing cancels (half the steps on cohorts where most regions
// are kept). While the weights still move a lot the solves are inexact (their tolerance follows the distance, never
// below the solver's own `full`); convergence (Distance below `tolerance`, the objective settled) is declared only on
// two solves at the full tolerance. Once the distance is below kNewtonStart, Newton's method on the support
// (FeatureNewton) is tried, and its certificate ends the phase too. True when it converged; otherwise the coordinate
// steps go on from its theta.
bool WaterFillingPhase(double tolerance, double objectiveTolerance, int cap, double full, const Eigen::VectorXd& usable, double mu,
                       FeatureNewton& newton, FeatureSolver& solver, Eigen::VectorXd& theta, Eigen::VectorXd& beta, bool& solved, double& objective,
                       double& change, Model& model) {
  double omega = 1.0, prevChange = std::numeric_limits<double>::infinity();
  bool tight = solver.Tolerance() <= full;  // whether the solve the current norms come from was at the full tolerance
  Anderson anderson(kAndersonDepth);
  Eigen::ArrayXi lastSupport;  // of the last target: the acceleration restarts when it changes
  bool resume = false;         // Newton's next attempt starts from beta (its own last iterate)
  const int phaseOne = std::min(cap, kWaterFillIterations);
  while (model.info.iterations < phaseOne) {
    ++model.info.iterations;
    const Eigen::VectorXd c = solver.RegionNorms2().cwiseSqrt().cwiseProduct(usable);
    const Eigen::VectorXd target = WaterFilledTheta(c, mu, beta, change);
    if (target.size() == 0) break;  // the solution uses no region: the coordinate loop ends the fit
    if (newton.Due(model.info.iterations, resume ? 0.0 : change)) {
      // From the water-filled weights and, at a small weight, the regions the damped iterate still carries but the
      // target drops (while the damping is small the target's support swings from step to step): Newton's first step
      // drops those that do not belong.
      double level = 0;
      Eigen::VectorXd b = resume ? beta : WaterFill(c, mu, &level);
      const double carried = kCarriedWeight * b.sum();
      if (!resume && !newton.LastFailed())
        for (Eigen::Index r = 0; r < b.size(); ++r)
          if (theta[r] > 0 && !(b[r] > 0) && c[r] > (1.0 - kCarriedMargin) * mu * level) b[r] = carried;
      resume = false;
      const FeatureNewton::Result r = newton.Run(solver, b, solved, objective, model);
      if (r == FeatureNewton::Result::Converged) {
        beta = b;
        theta = ThetaOf(beta, mu, c);
        change = model.info.gap;
        return true;
      }
      if (r == FeatureNewton::Result::SupportChanged) {
        // The next attempt goes on from Newton's iterate (its weights kept: the entering regions are in it).
        beta = b;
        theta = ThetaOf(b, mu, c);
        solver.SetTolerance(full);
        tight = true;
        solved = solver.Solve(beta);
        objective = Objective(beta, solver, mu);
        anderson.Restart();
        prevChange = std::numeric_limits<double>::infinity();
        resume = true;
        continue;
      }
    }
    const bool grew = change > prevChange;
    omega = grew ? std::max(omega * 0.5, kMinDamping) : std::min(1.0, omega * 1.25);
    prevChange = change;
    const Eigen::ArrayXi support = (target.array() > 0).cast<int>();
    if (grew || lastSupport.size() != support.size() || (support != lastSupport).any()) anderson.Restart();
    lastSupport = support;
    anderson.Push(theta, target);
    Eigen::VectorXd mixed;
    const bool accelerated = anderson.Next(mixed, omega) && mixed.allFinite() && mixed.cwiseMax(0.0).sum() > 0;
    theta = accelerated ? Eigen::VectorXd(mixed.cwiseMax(0.0)) : Eigen::VectorXd((1.0 - omega) * theta + omega * target);
    const double largest = theta.maxCoeff();
    for (Eigen::Index r = 0; r < theta.size(); ++r)
      if (target[r] == 0 && theta[r] < kDropWeight * largest) theta[r] = 0;
    theta /= theta.sum();
    beta = Weights(theta, mu);
    const bool normsTight = tight;
    solver.SetTolerance(change < tolerance ? full : std::max(full, std::min(kLoosest, kLooseFactor * change)));
    tight = solver.Tolerance() <= full;
    solved = solver.Solve(beta);
    const double next = Objective(beta, solver, mu);
    const bool settled = std::abs(next - objective) <= objectiveTolerance * std::max(std::abs(next), 1e-300);
    objective = next;
    if (change < tolerance && settled && normsTight && tight) {
      model.info.status = solved ? FitStatus::Converged : FitStatus::Stalled;
      return true;
    }
  }
  return false;
}

// Block coordinate descent on V (every step lowers it), accelerated: each iteration first tries the Anderson point
// of the last steps and keeps it only if V drops; otherwise it takes the plain step and the acceleration restarts.
// Stops when beta is within `tolerance` of the fixed point (Distance, normalised) and ENMKL's objective changed by less
// than `objective_tolerance` relative; with `gapTolerance` > 0 (SimpleMKL: mu = 1, an SVM) instead when SimpleMKL's
// relative duality gap (max_r q_r - beta'q) / (2 J), J = sum alpha - beta'q / 2 the SVM dual, is below it. Newton's
// method (FeatureNewton) is tried here too (not for SimpleMKL); at mu = 1 only its certificate ends the fit while its
// curvature is within limits, and beyond them the step-size rule says Converged or Stalled (RemainingDistance).
void FitEnmkl(const ParamMap& p, const Eigen::VectorXd& usable, const Eigen::VectorXd* startTheta, FeatureSolver& solver, Model& model,
              double gapTolerance = 0) {
  const double mu = p.at("mu"), tolerance = p.at("tolerance"), objectiveTolerance = p.at("objective_tolerance");
  const int cap = static_cast<int>(p.at("max_iterations"));
  // theta lives on the simplex whatever mu, so a neighbour's theta is a start for any mu.
  Eigen::VectorXd theta = startTheta ? (startTheta->cwiseProduct(usable) / startTheta->cwiseProduct(usable).sum()).eval() : (usable / usable.sum()).eval();
  Eigen::VectorXd beta = Weights(theta, mu);
  const bool waterFill = gapTolerance == 0 && mu < 1;
  const double full = solver.Tolerance();
  FeatureNewton newton(mu, tolerance, cap, full, usable);
  if (waterFill) solver.SetTolerance(std::max(full, kLoosest));
  bool solved = solver.Solve(beta);
  double objective = Objective(beta, solver, mu), change = 0;
  if (waterFill) {
    if (WaterFillingPhase(tolerance, objectiveTolerance, cap, full, usable, mu, newton, solver, theta, beta, solved, objective, change, model)) {
      FinishEnmkl(theta, beta, objective, change, solver, model);
      return;
    }
    // The coordinate steps compare V between solves: at the full tolerance from here on.
    solver.SetTolerance(full);
    solved = solver.Solve(beta);
    objective = Objective(beta, solver, mu);
  }
  double value = Value(beta, solver);
  std::vector<double> values = {value};  // V after each iteration: the stall test looks kStallWindow back
  Eigen::VectorXd delta, lastDelta;       // the plain step's move of the weights (normalised), this iteration's and the last
  Anderson anderson(kAndersonDepth);
  model.info.status = FitStatus::MaxIterReached;
  while (model.info.iterations < cap) {
    ++model.info.iterations;
    const Eigen::VectorXd c = solver.RegionNorms2().cwiseSqrt().cwiseProduct(usable);
    if (gapTolerance > 0) {
      const Eigen::VectorXd q = c.cwiseAbs2();
      const double dual = solver.Alpha().sum() - 0.5 * beta.dot(q);
      change = dual > 0 ? (q.maxCoeff() - beta.dot(q)) / (2.0 * dual) : 0.0;
      if (change < gapTolerance) {
        model.info.status = solved ? FitStatus::Converged : FitStatus::Stalled;
        --model.info.iterations;  // no step was taken
        break;
      }
    }
    const Eigen::VectorXd norms = beta.cwiseProduct(c);
    if (!(norms.sum() > 0)) break;  // the solution uses no region (e.g. constant targets)
    Eigen::VectorXd step = norms / norms.sum();
    const double level = EntryLevel(theta, beta, c, mu);
    EnterViolators(theta, c, usable, level, step);
    const Eigen::VectorXd plainBeta = Weights(step, mu);
    if (gapTolerance == 0) change = Distance(beta, plainBeta, c, mu);
    lastDelta = std::move(delta);
    delta = plainBeta / plainBeta.sum() - beta / beta.sum();
    if (gapTolerance == 0 && newton.Due(model.info.iterations, change)) {
      // From the step's weights, the regions below the entry level dropped once small (Pruned).
      Eigen::VectorXd b = Weights(Pruned(step, c, level), mu);
      const FeatureNewton::Result r = newton.Run(solver, b, solved, objective, model);
      if (r == FeatureNewton::Result::Converged) {
        beta = b;
        theta = ThetaOf(beta, mu, c);
        change = model.info.gap;
        break;
      }
      if (r == FeatureNewton::Result::SupportChanged) {
        theta = ThetaOf(b, mu, c);
        beta = Weights(theta, mu);
        solver.SetTolerance(full);
        solved = solver.Solve(beta);
        value = Value(beta, solver);
        objective = Objective(beta, solver, mu);
        values.assign(1, value);
        anderson = Anderson(kAndersonDepth);
        continue;
      }
      solver.SetTolerance(full);  // Failed: the steps go on from their own iterate, solved fully
    }
    anderson.Push(theta, step);
    Eigen::VectorXd trial;
    bool accepted = false;
    if (anderson.Next(trial)) {
      trial = Pruned(trial, c, level);
      const Eigen::VectorXd trialBeta = Weights(trial, mu);
      solved = solver.Solve(trialBeta);
      const double trialValue = Value(trialBeta, solver);
      if (trialValue < value) {
        theta = trial;
        beta = trialBeta;
        value = trialValue;
        accepted = true;
      } else {
        anderson.Restart();
      }
    }
    if (!accepted) {
      theta = Pruned(step, c, level);
      beta = Weights(theta, mu);
      solved = solver.Solve(beta);
      value = Value(beta, solver);
    }
    const double next = Objective(beta, solver, mu);
    const bool settled = std::abs(next - objective) <= objectiveTolerance * std::max(std::abs(next), 1e-300);
    objective = next;
    // At mu = 1 the steps contract at a rate near 1 and a small step is no certificate: while Newton's method is
    // available only its full check ends the fit. Without it the fit ends here (more steps would cost as many solves
    // again and still certify nothing), Converged only when the distance the remaining steps would still go at the rate
    // the last ones contracted (RemainingDistance) is below the tolerance too, else Stalled: usable, not certified.
    if (gapTolerance == 0 && change < tolerance && settled && (mu < 1 || !newton.Available())) {
      const bool certified = mu < 1 || RemainingDistance(delta, lastDelta) < tolerance;
      model.info.status = solved && certified ? FitStatus::Converged : FitStatus::Stalled;
      break;
    }
    // The distance can stay above the tolerance once V no longer falls at the inner solver's accuracy (a region at the
    // edge of the support creeping towards 0): that fit is usable but not certified.
    values.push_back(value);
    if (values.size() > kStallWindow && values[values.size() - 1 - kStallWindow] - value <= kStallFraction * objectiveTolerance * std::abs(value)) {
      model.info.status = FitStatus::Stalled;
      break;
    }
  }
  FinishEnmkl(theta, beta, objective, change, solver, model);
}

}  // namespace

bool HasFeatureForm(std::string_view learner) { return learner == "svm" || learner == "krr" || FitsWeights(learner); }

Model FitFeatures(std::string_view learner, const ParamMap& params, const gram::FoldFeatures& fold, const Targets& targets, const Model* warmStart) {
  return FitFeaturesWithCurvature(learner, params, fold, targets, warmStart, kCurvatureMacs);
}

Model FitFeaturesWithCurvature(std::string_view learner, const ParamMap& params, const gram::FoldFeatures& fold, const Targets& targets,
                               const Model* warmStart, double curvatureMacs) {
  if (!HasFeatureForm(learner))
    throw InvalidParameter("features:NoFeatureForm", "learner", "learner '" + std::string(learner) + "' has no feature form; expected svm, krr, enmkl_svm, enmkl_krr or simplemkl");
  const ParamMap p = ResolveParams(learner, params);
  CheckTargets(learner, fold, targets);
  const auto start = std::chrono::steady_clock::now();
  const Eigen::VectorXd usable = Usable(fold);
  const auto regions = static_cast<Eigen::Index>(fold.Regions());
  const auto solver = MakeSolver(learner, p, fold, targets);
  solver->LimitCurvature(curvatureMacs);
  // A warm start: the neighbour's solver state (and, for ENMKL, its theta after it); one that does not fit is ignored.
  const Eigen::VectorXd* state = warmStart && warmStart->solverState.size() > 0 ? &warmStart->solverState : nullptr;
  Eigen::VectorXd startTheta;
  if (state) {
    const Eigen::Index own = FitsWeights(learner) ? state->size() - regions : state->size();
    const bool started = own > 0 && solver->Start(state->head(own));
    if (started && FitsWeights(learner) && (state->tail(regions).array() >= 0).all() && state->tail(regions).cwiseProduct(usable).sum() > 0)
      startTheta = state->tail(regions);
  }
  Model model;
  if (learner == "simplemkl" && usable.sum() > 0) {
    // SimpleMKL's problem, min over beta on the simplex of the SVM dual optimum J(beta) (Rakotomamonjy et al. 2008), is
    // l1-MKL: ENMKL at mu = 1 (the same optimum, beta on the simplex). Its feature form is that descent, stopped by
    // SimpleMKL's duality gap; the kernel path's reduced-gradient steps each take a line search of SVM solves.
    // The gap tolerance also scales the stall test: V falling by less than 1e-3 of it (relative) over 25 steps.
    ParamMap enmkl = {{"mu", 1.0}, {"max_iterations", p.at("max_iterations")}, {"tolerance", 0.0}, {"objective_tolerance", p.at("gap_tolerance")}};
    FitEnmkl(enmkl, usable, startTheta.size() > 0 ? &startTheta : nullptr, *solver, model, p.at("gap_tolerance"));
  } else if (IsEnmkl(learner) && usable.sum() > 0) {
    FitEnmkl(p, usable, startTheta.size() > 0 ? &startTheta : nullptr, *solver, model);
  } else {
    // The single-kernel learners fit the unweighted sum of the kernels; the model says so as the kernel path's does,
    // with uniform weights 1/R and the coefficients times R.
    const bool solved = solver->Solve(FitsWeights(learner) ? Eigen::VectorXd::Zero(regions) : Eigen::VectorXd::Ones(regions));
    model.beta = Eigen::VectorXd::Constant(regions, 1.0 / static_cast<double>(regions));
    model.coef = solver->Coef() * static_cast<double>(regions);
    model.alpha = solver->Alpha();
    model.info.status = solved ? FitStatus::Converged : FitStatus::MaxIterReached;
    model.info.iterations = static_cast<int>(std::min<long>(solver->Iterations(), std::numeric_limits<int>::max()));
    model.info.gap = solver->Violation();
    model.solverState = solver->State();
  }
  model.bias = solver->Bias();
  model.info.innerIterations = solver->Iterations();
  model.info.solvesLargerC = model.info.status == FitStatus::Converged && solver->BoxInactive();
  model.info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Eigen::VectorXd FeatureDecision(const Model& model, const gram::FoldFeatures& fold) {
  if (model.coef.size() != fold.TrainingRows() || model.beta.size() != static_cast<Eigen::Index>(fold.Regions()))
    throw InputError("features:ModelShape", "model", "the model has " + std::to_string(model.coef.size()) + " coefficients and " + std::to_string(model.beta.size()) +
                     " kernel weights; the fold has " + std::to_string(fold.TrainingRows()) + " training subjects and " +
                     std::to_string(fold.Regions()) + " regions");
  return (fold.Times(fold.TrainingTransposeTimes(model.coef), model.beta, true).array() + model.bias).matrix();
}

Eigen::VectorXd FeatureVoxelWeights(const Model& model, const gram::FoldFeatures& fold) {
  Eigen::VectorXd w = fold.Dense(fold.TrainingTransposeTimes(model.coef));
  const auto& start = fold.Matrix().regionStart;
  for (std::size_t r = 0; r < fold.Regions(); ++r) w.segment(start[r], start[r + 1] - start[r]) *= model.beta[static_cast<Eigen::Index>(r)];
  return w;
}

}  // namespace neuromkl::learners
