// Elastic-net MKL (seed 004, Algorithms 1 and 2), with the reference system's defects fixed
// (ALGORITHMS.md section 3): scale-free stopping rule, iteration cap, warm starts, a matched
// (alpha, beta) pair, the LIBSVM bias rule, and no absolute thresholds on ||w_j||.
#include <algorithm>
#include <cmath>
#include <limits>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kRatioTolerance = 1e-3;  ///< |F(beta)_j / beta_j - 1| that counts as settled
constexpr double kVanishingWeight = 1e-3;  ///< normalised weight below which a decaying weight may be set to 0

struct EnmklSettings {
  double mu;
  int maxIterations;
  double betaTolerance;       ///< on max |delta beta| of sum-normalised weights
  double objectiveTolerance;  ///< on the relative change of the inner objective
};

/// One ENMKL update (seed 004): solve the single-kernel problem on sum_j beta_j K_j (warm-started),
/// then beta_j <- 1 / (sqrt(mu)/lambda_j + 1 - mu), lambda_j = ||w_j|| / (sqrt(mu) sum_k ||w_k||),
/// ||w_j|| = beta_j sqrt(a'K_j a); written as ||w_j|| / (mu sum||w|| + (1 - mu)||w_j||), finite at
/// mu = 0 and for ||w_j|| = 0.
class EnmklMap {
 public:
  EnmklMap(const KernelList& train, const InnerSolver& solver, double mu, FitInfo& info)
      : stack_(train), solver_(solver), mu_(mu), info_(info) {}
  /// F(beta); `sol` is the warm start in and the solution for `beta` out; `objective` receives the
  /// primal objective of seed 004's Definition 4 at the w this solution gives for `beta`:
  /// mu/2 (sum_j ||w_j||)^2 + (1 - mu)/2 sum_j ||w_j||^2 + loss, ||w_j|| = beta_j sqrt(a'K_j a).
  /// Returns false when the solution uses no kernel at all (e.g. constant targets).
  bool Apply(const Eigen::VectorXd& beta, InnerSolution& sol, bool warm, Eigen::VectorXd& next, double& objective) {
    const Eigen::MatrixXd K = stack_.Combine(beta);
    sol = solver_.Solve(K, warm ? &sol : nullptr);
    ++info_.innerSolves;
    info_.innerIterations += sol.iterations;
    const Eigen::VectorXd norms = beta.cwiseProduct(stack_.Quadratics(sol.coef).cwiseSqrt());
    const double total = norms.sum();
    Eigen::VectorXd f = K * sol.coef;
    f.array() += sol.bias;
    objective = 0.5 * mu_ * total * total + 0.5 * (1.0 - mu_) * norms.squaredNorm() + solver_.Loss(f);
    if (!(total > 0)) return false;
    next = Eigen::VectorXd::Zero(beta.size());
    for (Eigen::Index j = 0; j < beta.size(); ++j)
      if (norms[j] > 0) next[j] = norms[j] / (mu_ * total + (1.0 - mu_) * norms[j]);
    return true;
  }
  const KernelStack& Stack() const { return stack_; }

 private:
  const KernelStack stack_;
  const InnerSolver& solver_;
  double mu_;
  FitInfo& info_;
};

Model FitEnmkl(const KernelList& train, const InnerSolver& solver, const EnmklSettings& s, const FitOptions& options) {
  Stopwatch clock;
  const auto m = static_cast<Eigen::Index>(train.size());
  const auto active = ActiveKernels(train);
  Model model;
  if (active.empty())
    throw InputError("learners:AllZeroKernels", "learner enmkl", "every training kernel is identically zero: nothing to learn from");
  Eigen::VectorXd beta = Eigen::VectorXd::Zero(m);
  for (auto j : active) beta[j] = 1.0 / static_cast<double>(active.size());
  InnerSolution sol;
  bool haveSol = false;
  if (const Model* w = options.warmStart; w && w->beta.size() == m && w->beta.sum() > 0) {
    // Mostly the neighbour's weights, 10 % uniform: a weight it had at 0 can come back.
    const Eigen::VectorXd uniform = beta;
    for (auto j : active) beta[j] = 0.9 * w->beta[j] / w->beta.sum() + 0.1 * uniform[j];
    if (w->solverState.size() > 0) {
      sol.alpha = w->solverState;
      haveSol = true;
    }
  }
  FitInfo& info = model.info;
  info.status = FitStatus::MaxIterReached;
  EnmklMap F(train, solver, s.mu, info);
  // Stopping rule (scale-free). At the optimum every weight is either positive with growth ratio
  // F(beta)_j / beta_j = 1, or exactly 0 because its ratio stays below 1 (the elastic-net optimum
  // is sparse). The plain update reaches the zeros only geometrically (rate often ~0.99), so:
  //  - no weight may still grow: ratio <= 1 + 1e-3 for all j (a fixed point exists for every
  //    support set; only the one where no excluded kernel wants back in is optimal);
  //  - the other weights moved less than `tolerance` (normalised to sum 1), ignoring weights that
  //    are clearly vanishing (ratio < 1 - 1e-3 and below 1e-3): they are set to exactly 0 at the end;
  //  - the primal objective (which every step lowers) changed by less than `objective_tolerance`.
  // Accelerations were measured and rejected: Anderson and SQUAREM with a residual safeguard
  // converged to different points from cold and warm starts; SQUAREM with an objective safeguard
  // was consistent but not faster on 116 region kernels (docs/learners.md).
  double prevObjective = 0, objective = 0;
  Eigen::VectorXd next;
  Eigen::VectorXd vanishing = Eigen::VectorXd::Zero(m);
  for (int it = 1; it <= s.maxIterations; ++it) {
    info.iterations = it;
    if (!F.Apply(beta, sol, haveSol, next, objective)) {  // the solution uses no kernel (e.g. constant targets)
      info.status = FitStatus::Converged;
      break;
    }
    haveSol = true;
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
    const double objChange = it == 1 ? 1.0 : std::abs(objective - prevObjective) / std::max(std::abs(objective), 1e-300);
    prevObjective = objective;
    info.gap = change;
    beta = next;
    if (growth <= kRatioTolerance && change < s.betaTolerance && objChange < s.objectiveTolerance) {
      for (Eigen::Index j = 0; j < m; ++j)
        if (vanishing[j] > 0) beta[j] = 0.0;
      info.status = FitStatus::Converged;
      break;
    }
  }
  // Return a matched pair: the solution trained with exactly the weights returned.
  sol = solver.Solve(F.Stack().Combine(beta), haveSol ? &sol : nullptr);
  ++info.innerSolves;
  info.innerIterations += sol.iterations;
  if (!sol.converged) info.status = FitStatus::MaxIterReached;
  // Normalise sum(beta) = 1; scaling coef by the same factor leaves the decision function unchanged.
  const double sum = beta.sum();
  model.beta = beta / sum;
  model.coef = sol.coef * sum;
  model.alpha = sol.alpha * sum;
  model.solverState = sol.alpha;
  model.bias = sol.bias;
  info.objective = objective;  // primal objective of seed 004's Definition 4
  info.seconds = clock.Seconds();
  return model;
}

EnmklSettings Settings(const ParamMap& p) {
  return {p.at("mu"), static_cast<int>(p.at("max_iterations")), p.at("tolerance"), p.at("objective_tolerance")};
}

class EnmklSvm final : public Learner {
 public:
  explicit EnmklSvm(const ParamMap& p)
      : c_(p.at("c")), svmTol_(p.at("svm_tolerance")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInput(Name(), train, t);
    if (t.task != Task::Classification)
      throw InputError("learners:TaskUnsupported", "learner enmkl_svm", "enmkl_svm is a classifier; for regression use enmkl_krr");
    return FitEnmkl(train, *MakeSvcSolver(t.y, c_, svmTol_, 10'000'000), settings_, o);
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
    ValidateFitInput(Name(), train, t);
    return FitEnmkl(train, *MakeKrrSolver(t.y, lambda_), settings_, o);
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
