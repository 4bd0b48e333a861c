// MKL-BP (seed 002, Qi, Liang & Xu 2017): MKL with kernel weights u >= 0 constrained by
//     g(u) = v sum_j u_j + (1 - v) sum_j u_j^p <= 1,      p > 1, 0 <= v <= 1,
// p = 2 being GMKL (Yang et al.). J(u) = max_a SVM dual on sum_j u_j K_j is convex in u with
// dJ/du_j = -1/2 s_j, s_j = (y o a)' K_j (y o a). With a fixed, the seed's closed form (its eq. 10)
//     u_j = max(0, (s_j / lambda - v) / (p (1 - v)))^(1/(p-1)),  lambda such that g(u) = 1,
// is the exact minimiser of that linearisation over the constraint set: the linear minimisation
// oracle of a Frank-Wolfe method. The seed alternates SVM solve and closed form outright (step 1),
// which can cycle between kernels; we take the step u <- u + eta (u_lmo - u) with eta = 1 first and
// halve it whenever J would increase (backtracking), which keeps J monotone and gives the
// Frank-Wolfe duality gap 1/2 s'(u_lmo - u) >= J(u) - J* as a certified stopping rule. The
// seed's Taylor expansion + CVX step (its section 4) is not needed: the closed form is exact.
#include <algorithm>
#include <cmath>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kMinStep = 1.0 / 1024;

class MklBp final : public Learner {
 public:
  explicit MklBp(const ParamMap& p)
      : c_(p.at("c")), p_(p.at("p")), v_(p.at("v")), gapTol_(p.at("gap_tolerance")), maxIter_(static_cast<int>(p.at("max_iterations"))),
        svmTol_(p.at("svm_tolerance")) {}

  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInput(Name(), train, t, options);
    if (t.task == Task::Regression)
      throw InputError("learners:TaskUnsupported", "learner mkl_bp", "mkl_bp is a classifier (seed 002); for regression use mkelm, enmkl_krr or simplemkl");
    Stopwatch clock;
    const Eigen::Index m = KernelCount(train, options);
    const auto active = ActiveKernels(train, options);
    if (active.empty()) throw InputError("learners:AllZeroKernels", "learner mkl_bp", "every training kernel is identically zero: nothing to learn from");
    std::vector<bool> isActive(static_cast<std::size_t>(m), false);
    for (auto j : active) isActive[static_cast<std::size_t>(j)] = true;
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    // Multiclass: one u for all one-vs-rest SVMs; J and s are sums over the classes.
    const auto solver = t.task == Task::Multiclass ? MakeOneVsRestSolver(t, svc) : svc(t.y);
    const Eigen::Index stateSize = t.task == Task::Multiclass ? t.y.size() * t.classes : t.y.size();
    std::unique_ptr<KernelStack> ownStack;
    const KernelStack& stack = SharedStack(train, options, ownStack);

    // Start: the seed's uniform point on the constraint surface, or the neighbour's weights.
    Eigen::VectorXd u = Eigen::VectorXd::Zero(m);
    for (auto j : active) u[j] = 1.0;
    if (const Model* w = options.warmStart; w && w->beta.size() == m && w->beta.sum() > 0)
      for (auto j : active) u[j] = 0.9 * w->beta[j] / w->beta.sum() + 0.1 / static_cast<double>(active.size());
    u = OntoSurface(u);

    Model model;
    FitInfo& info = model.info;
    info.status = FitStatus::MaxIterReached;
    InnerSolution sol;
    if (options.warmStart && options.warmStart->solverState.size() == stateSize) sol.alpha = options.warmStart->solverState;
    auto solve = [&](const Eigen::VectorXd& weights, InnerSolution& s) {
      s = solver->Solve(stack.Combine(weights), s.alpha.size() > 0 ? &s : nullptr);
      ++info.innerSolves;
      info.innerIterations += s.iterations;
    };
    solve(u, sol);
    double step = 1.0;
    for (int it = 1; it <= maxIter_; ++it) {
      info.iterations = it;
      const Eigen::VectorXd s = stack.Quadratics(sol);
      const Eigen::VectorXd target = Oracle(s, isActive, u);
      const double gap = 0.5 * s.dot(target - u);
      info.gap = gap / std::max(std::abs(sol.dual), 1e-300);
      if (info.gap <= gapTol_) {
        info.status = FitStatus::Converged;
        break;
      }
      // Backtracking along u -> target: accept the first step that does not increase J.
      bool moved = false;
      while (step >= kMinStep) {
        const Eigen::VectorXd trial = u + step * (target - u);
        InnerSolution next = sol;
        solve(trial, next);
        if (next.dual <= sol.dual + svmTol_ * std::abs(sol.dual)) {  // J's accuracy is the SMO tolerance
          u = trial;
          sol = std::move(next);
          moved = true;
          step = std::min(1.0, 2.0 * step);
          break;
        }
        step *= 0.5;
      }
      if (!moved) {  // no descent along the Frank-Wolfe direction at the SVM tolerance
        info.status = FitStatus::Stalled;
        break;
      }
    }
    info.objective = sol.dual;
    const double total = u.sum();
    model.beta = u / total;
    StoreSolution(sol, total, model);
    model.alpha = sol.alpha;
    model.solverState = sol.alpha;
    info.seconds = clock.Seconds();
    return model;
  }
  std::string_view Name() const override { return "mkl_bp"; }

 private:
  double Constraint(const Eigen::VectorXd& u) const { return v_ * u.sum() + (1.0 - v_) * u.array().pow(p_).sum(); }

  /// Scales u (>= 0, not all 0) onto g(u) = 1 (g is increasing along the ray).
  Eigen::VectorXd OntoSurface(const Eigen::VectorXd& u) const {
    if (!(u.maxCoeff() > 0)) return u;
    double lo = 0, hi = 1;
    while (Constraint(hi * u) < 1) hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (Constraint(mid * u) < 1 ? lo : hi) = mid;
    }
    return hi * u;
  }

  /// argmax_u s'u subject to g(u) <= 1, u >= 0 (seed 002 eq. 10 with lambda found by bisection).
  Eigen::VectorXd Oracle(const Eigen::VectorXd& s, const std::vector<bool>& isActive, const Eigen::VectorXd& current) const {
    const auto m = s.size();
    double smax = 0;
    Eigen::Index jmax = -1;
    for (Eigen::Index j = 0; j < m; ++j)
      if (isActive[static_cast<std::size_t>(j)] && s[j] > smax) smax = s[j], jmax = j;
    if (jmax < 0) return current;  // a = 0: every direction is flat
    Eigen::VectorXd u = Eigen::VectorXd::Zero(m);
    if (v_ == 1.0) {  // l1: the best vertex of the simplex
      u[jmax] = 1.0;
      return u;
    }
    const double expo = 1.0 / (p_ - 1.0);
    auto at = [&](double lambda) {
      Eigen::VectorXd w = Eigen::VectorXd::Zero(m);
      for (Eigen::Index j = 0; j < m; ++j)
        if (isActive[static_cast<std::size_t>(j)] && s[j] > lambda * v_)
          w[j] = std::pow((s[j] / lambda - v_) / (p_ * (1.0 - v_)), expo);
      return w;
    };
    // g(u(lambda)) decreases from infinity (lambda -> 0) to 0 (lambda = smax / v): bisect on log lambda.
    double hi = v_ > 0 ? smax / v_ : smax, lo = hi;
    while (Constraint(at(hi)) > 1) hi *= 2;
    while (Constraint(at(lo)) < 1) lo *= 0.5;
    for (int i = 0; i < 200 && hi - lo > 1e-14 * hi; ++i) {
      const double mid = std::sqrt(lo * hi);
      (Constraint(at(mid)) > 1 ? lo : hi) = mid;
    }
    const Eigen::VectorXd w = at(hi);
    return OntoSurface(w.maxCoeff() > 0 ? w : at(lo));  // removes the last bisection error
  }

  double c_, p_, v_, gapTol_;
  int maxIter_;
  double svmTol_;
};

}  // namespace

std::unique_ptr<Learner> MakeMklBp(const ParamMap& p) { return std::make_unique<MklBp>(p); }

}  // namespace neuromkl::learners
