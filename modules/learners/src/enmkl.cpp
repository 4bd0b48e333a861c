// Elastic-net MKL (seed 004, Algorithms 1 and 2), with the reference system's defects fixed
// (ALGORITHMS.md section 3): scale-free stopping rule, iteration cap, warm starts, a matched
// (alpha, beta) pair, the LIBSVM bias rule, and no absolute thresholds on ||w_j||.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kMinDamping = 1.0 / 256;   ///< smallest water-filling step
constexpr int kWaterFillIterations = 100;   ///< then the multiplicative update takes over
constexpr double kMaxExponent = 16.0;       ///< largest exponent of the multiplicative step (mu = 1, or the fallback)
constexpr double kRatioTolerance = 1e-3;  ///< |F(beta)_j / beta_j - 1| that counts as settled
constexpr double kVanishingWeight = 1e-3;  ///< normalised weight below which a decaying weight may be set to 0

struct EnmklSettings {
  double mu;
  int maxIterations;
  double betaTolerance;       ///< on max |delta beta| of sum-normalised weights
  double objectiveTolerance;  ///< on the relative change of the primal objective (seed 004, Definition 4)
};

/// The exact minimiser of the weight step with the inner solution frozen (mu < 1): with
/// c_j = sqrt(a'K_j a), the fixed-point equations beta_j (mu S + (1 - mu) c_j beta_j) = c_j beta_j,
/// S = sum_k c_k beta_k, have the water-filling solution beta_j = (c_j - mu S) / ((1 - mu) c_j) on
/// the support A = {j : c_j > mu S}, S = sum_A c_j / (1 - mu + mu |A|), and 0 elsewhere.
/// (Seed 004's update is one multiplicative step towards it.)
Eigen::VectorXd WaterFill(const Eigen::VectorXd& c, double mu) {
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
  return beta;
}

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
    c_ = stack_.Quadratics(sol).cwiseSqrt();  // one-vs-rest (shared weights): summed over the classes
    const Eigen::VectorXd norms = beta.cwiseProduct(c_);
    const double total = norms.sum();
    objective = 0.5 * mu_ * total * total + 0.5 * (1.0 - mu_) * norms.squaredNorm() + solver_.SolutionLoss(K, sol);
    if (!(total > 0)) return false;
    next = Eigen::VectorXd::Zero(beta.size());
    for (Eigen::Index j = 0; j < beta.size(); ++j)
      if (norms[j] > 0) next[j] = norms[j] / (mu_ * total + (1.0 - mu_) * norms[j]);
    return true;
  }
  const KernelStack& Stack() const { return stack_; }
  const Eigen::VectorXd& Norms() const { return c_; }  ///< sqrt(a'K_j a) of the last solution

 private:
  Eigen::VectorXd c_;
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
  double prevObjective = 0, objective = 0;
  Eigen::VectorXd next;
  bool done = false;
  if (s.mu < 1.0) {
    // Phase 1, damped water-filling: beta <- (1 - w) beta + w WaterFill(c(beta)). Same fixed points
    // as seed 004's update (the optimum), usually reached in tens of steps instead of thousands: the
    // plain update contracts at a rate near 1, the water-filling step only waits for the inner
    // solution to settle. w halves when a step is larger than the previous one and grows back
    // otherwise. Stop when the water-filled weights differ from the current ones by less than
    // `tolerance` (normalised to sum 1) and the primal objective changed by less than
    // `objective_tolerance`; the water-filled weights (exact zeros included) are returned.
    double omega = 1.0, prevChange = std::numeric_limits<double>::infinity();
    const int phaseOne = std::min(s.maxIterations, kWaterFillIterations);
    for (int it = 1; it <= phaseOne && !done; ++it) {
      info.iterations = it;
      if (!F.Apply(beta, sol, haveSol, next, objective)) {  // the solution uses no kernel (e.g. constant targets)
        done = true;
        break;
      }
      haveSol = true;
      const Eigen::VectorXd target = WaterFill(F.Norms(), s.mu);
      if (!(target.sum() > 0)) {
        done = true;
        break;
      }
      const double change = (target / target.sum() - beta / beta.sum()).cwiseAbs().maxCoeff();
      const double objChange = it == 1 ? 1.0 : std::abs(objective - prevObjective) / std::max(std::abs(objective), 1e-300);
      prevObjective = objective;
      info.gap = change;
      if (change < s.betaTolerance && objChange < s.objectiveTolerance) {
        beta = target;
        done = true;
        break;
      }
      omega = change > prevChange ? std::max(omega * 0.5, kMinDamping) : std::min(1.0, omega * 1.25);
      prevChange = change;
      beta = (1.0 - omega) * beta + omega * target;
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
    // Seed 004's multiplicative update (the only option for mu = 1, where the frozen problem is
    // degenerate: all weight on the largest c_j), raised to an adaptive power eta: beta_j <- beta_j
    // (F(beta)_j / beta_j)^eta, eta = 1 being the published step; same fixed points, faster
    // contraction; eta grows while steps shrink and falls back towards 1 when a step grows.
    // Stopping rule (scale-free): no weight may still grow (ratio F(beta)_j / beta_j <= 1 + 1e-3: a
    // fixed point exists for every support set; only the one no excluded kernel wants back into is
    // optimal); the other weights moved less than `tolerance`, ignoring weights that are clearly
    // vanishing (ratio < 1 - 1e-3 and below 1e-3), which are set to exactly 0 at the end; and the
    // primal objective changed by less than `objective_tolerance`.
    Eigen::VectorXd vanishing = Eigen::VectorXd::Zero(m);
    double eta = 1.0, prevChange = std::numeric_limits<double>::infinity();
    bool first = true;
    while (info.iterations < s.maxIterations) {
      ++info.iterations;
      if (!F.Apply(beta, sol, haveSol, next, objective)) {
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
      const double objChange = first ? 1.0 : std::abs(objective - prevObjective) / std::max(std::abs(objective), 1e-300);
      first = false;
      prevObjective = objective;
      info.gap = change;
      if (growth <= kRatioTolerance && change < s.betaTolerance && objChange < s.objectiveTolerance) {
        beta = next;
        for (Eigen::Index j = 0; j < m; ++j)
          if (vanishing[j] > 0) beta[j] = 0.0;
        info.status = FitStatus::Converged;
        break;
      }
      eta = change > prevChange ? std::max(1.0, eta * 0.5) : std::min(kMaxExponent, eta * 1.25);
      prevChange = change;
      Eigen::VectorXd stepped = Eigen::VectorXd::Zero(m);
      for (Eigen::Index j = 0; j < m; ++j)
        if (from[j] > 0 && to[j] > 0) stepped[j] = from[j] * std::pow(to[j] / from[j], eta);
      beta = stepped.sum() > 0 ? Eigen::VectorXd(stepped * (next.sum() / stepped.sum())) : next;
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
  StoreSolution(sol, sum, model);
  model.alpha = sol.alpha * sum;
  model.solverState = sol.alpha;
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
    if (t.task == Task::Regression)
      throw InputError("learners:TaskUnsupported", "learner enmkl_svm", "enmkl_svm is a classifier; for regression use enmkl_krr");
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    // Multiclass: one beta for all one-vs-rest SVMs (docs/learners.md, "Multiclass").
    return FitEnmkl(train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, svc) : svc(t.y)), settings_, o);
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
    auto krr = [&](const Eigen::VectorXd& y) { return MakeKrrSolver(y, lambda_, t.sampleWeights); };
    return FitEnmkl(train, *(t.task == Task::Multiclass ? MakeOneVsRestSolver(t, krr) : krr(t.y)), settings_, o);
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
