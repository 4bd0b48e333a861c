// Elastic-net MKL (seed 004, Algorithms 1 and 2), with the reference system's defects fixed
// (ALGORITHMS.md section 3): scale-free stopping rule, iteration cap, warm starts, a matched
// (alpha, beta) pair, the LIBSVM bias rule, and no absolute thresholds on ||w_j||.
#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/QR>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

/// Anderson acceleration (type II, memory 5) of the fixed-point map beta -> F(beta).
/// The plain ENMKL update contracts slowly: the elastic-net optimum is sparse (kernels with
/// sqrt(a'K_j a) < mu sum||w|| have beta_j = 0), and such weights decay geometrically at a rate
/// close to 1, hundreds of iterations with |delta beta| per step far below the distance to the
/// fixed point. In beta itself that decay is x -> r x, which the extrapolation solves (a secant
/// step to 0); an extrapolated value <= 0 for a weight the plain step also shrinks means its fixed
/// point is 0, and it is set to exactly 0 (no absolute threshold, nothing scale-dependent).
/// Safeguards: memory cleared when the support changes or the residual grows; a weight the plain
/// step grows is never zeroed; no weight moves by more than a factor 10 in one step.
class AndersonStep {
 public:
  Eigen::VectorXd Step(const Eigen::VectorXd& beta, const Eigen::VectorXd& next) {
    std::vector<Eigen::Index> support;
    for (Eigen::Index j = 0; j < next.size(); ++j)
      if (next[j] > 0 && beta[j] > 0) support.push_back(j);
    const auto k = static_cast<Eigen::Index>(support.size());
    if (support != support_ || k == 0) Reset(support);
    Eigen::VectorXd x(k), g(k);
    for (Eigen::Index i = 0; i < k; ++i) {
      x[i] = beta[support[static_cast<std::size_t>(i)]];
      g[i] = next[support[static_cast<std::size_t>(i)]];
    }
    const Eigen::VectorXd f = g - x;
    if (havePrev_ && f.norm() > 2.0 * prevF_.norm()) Reset(support);  // diverging: restart from the plain step
    if (havePrev_) {
      dF_.push_back(f - prevF_);
      dG_.push_back(g - prevG_);
      if (dF_.size() > kMemory) {
        dF_.erase(dF_.begin());
        dG_.erase(dG_.begin());
      }
    }
    prevF_ = f;
    prevG_ = g;
    havePrev_ = true;
    Eigen::VectorXd result = next;  // the plain step unless the extrapolation is usable
    if (dF_.empty()) return result;
    Eigen::MatrixXd DF(k, static_cast<Eigen::Index>(dF_.size())), DG(k, static_cast<Eigen::Index>(dG_.size()));
    for (std::size_t c = 0; c < dF_.size(); ++c) {
      DF.col(static_cast<Eigen::Index>(c)) = dF_[c];
      DG.col(static_cast<Eigen::Index>(c)) = dG_[c];
    }
    const Eigen::VectorXd gamma = DF.colPivHouseholderQr().solve(f);
    const Eigen::VectorXd xa = g - DG * gamma;
    if (!xa.allFinite()) {
      Reset(support);
      return result;
    }
    bool zeroed = false;
    for (Eigen::Index i = 0; i < k; ++i) {
      const auto j = support[static_cast<std::size_t>(i)];
      const bool shrinking = next[j] < beta[j];
      if (xa[i] <= 0) {
        if (shrinking) {
          result[j] = 0.0;
          zeroed = true;
        }
      } else {
        result[j] = std::clamp(xa[i], next[j] / 10.0, next[j] * 10.0);
      }
    }
    if (zeroed) Reset({});
    return result;
  }

 private:
  static constexpr std::size_t kMemory = 5;
  void Reset(const std::vector<Eigen::Index>& support) {
    support_ = support;
    dF_.clear();
    dG_.clear();
    havePrev_ = false;
  }
  std::vector<Eigen::Index> support_;
  std::vector<Eigen::VectorXd> dF_, dG_;
  Eigen::VectorXd prevF_, prevG_;
  bool havePrev_ = false;
};

struct EnmklSettings {
  double mu;
  int maxIterations;
  double betaTolerance;       ///< on max |delta beta| of sum-normalised weights
  double objectiveTolerance;  ///< on the relative change of the inner objective
};

Model FitEnmkl(const KernelList& train, const InnerSolver& solver, const EnmklSettings& s) {
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
  double prevObjective = 0;
  const double sqrtMu = std::sqrt(s.mu);
  FitInfo& info = model.info;
  info.status = FitStatus::MaxIterReached;
  const KernelStack stack(train);
  AndersonStep accelerator;
  for (int it = 1; it <= s.maxIterations; ++it) {
    sol = solver.Solve(stack.Combine(beta), haveSol ? &sol : nullptr);
    haveSol = true;
    ++info.innerSolves;
    info.innerIterations += sol.iterations;
    info.iterations = it;
    // ||w_j|| = beta_j sqrt(a' K_j a)
    const Eigen::VectorXd norms = beta.cwiseProduct(stack.Quadratics(sol.coef).cwiseSqrt());
    const double total = norms.sum();
    if (!(total > 0)) {  // the solution does not use any kernel (e.g. constant targets): weights stay
      info.status = FitStatus::Converged;
      break;
    }
    // beta_j = 1 / (sqrt(mu)/lambda_j + 1 - mu) with lambda_j = ||w_j|| / (sqrt(mu) sum ||w||),
    // written as ||w_j|| / (mu sum||w|| + (1 - mu)||w_j||): finite at mu = 0 and for ||w_j|| = 0.
    Eigen::VectorXd next = Eigen::VectorXd::Zero(m);
    for (auto j : active)
      if (norms[j] > 0) next[j] = norms[j] / (sqrtMu * sqrtMu * total + (1.0 - s.mu) * norms[j]);
    const double change = (next / next.sum() - beta / beta.sum()).cwiseAbs().maxCoeff();
    const double objChange = it == 1 ? 1.0 : std::abs(sol.dual - prevObjective) / std::max(std::abs(sol.dual), 1e-300);
    prevObjective = sol.dual;
    info.gap = change;
    if (change < s.betaTolerance && objChange < s.objectiveTolerance) {
      beta = next;
      info.status = FitStatus::Converged;
      break;
    }
    beta = accelerator.Step(beta, next);
  }
  // Return a matched pair: the solution trained with exactly the weights returned.
  sol = solver.Solve(stack.Combine(beta), &sol);
  ++info.innerSolves;
  info.innerIterations += sol.iterations;
  if (!sol.converged) info.status = FitStatus::MaxIterReached;
  // Normalise sum(beta) = 1; scaling coef by the same factor leaves the decision function unchanged.
  const double sum = beta.sum();
  model.beta = beta / sum;
  model.coef = sol.coef * sum;
  model.alpha = sol.alpha * sum;
  model.bias = sol.bias;
  info.objective = sol.dual;
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
  Model Fit(const KernelList& train, const Targets& t) const override {
    ValidateFitInput(Name(), train, t);
    if (t.task != Task::Classification)
      throw InputError("learners:TaskUnsupported", "learner enmkl_svm", "enmkl_svm is a classifier; for regression use enmkl_krr");
    return FitEnmkl(train, *MakeSvcSolver(t.y, c_, svmTol_, 10'000'000), settings_);
  }
  std::string_view Name() const override { return "enmkl_svm"; }

 private:
  double c_, svmTol_;
  EnmklSettings settings_;
};

class EnmklKrr final : public Learner {
 public:
  explicit EnmklKrr(const ParamMap& p) : lambda_(p.at("lambda")), settings_(Settings(p)) {}
  Model Fit(const KernelList& train, const Targets& t) const override {
    ValidateFitInput(Name(), train, t);
    return FitEnmkl(train, *MakeKrrSolver(t.y, lambda_), settings_);
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
