// MKL-BP (Qi, Liang & Xu 2018): MKL with kernel weights u >= 0 constrained by
//     g(u) = v sum_j u_j + (1 - v) sum_j u_j^p <= 1,      p > 1, 0 <= v <= 1,
// p = 2 being GMKL (Yang et al.). J(u) = max_a SVM dual on sum_j u_j K_j is convex in u with
// dJ/du_j = -1/2 s_j, s_j = (y o a)' K_j (y o a). With a fixed, the paper's closed form (its eq. 10)
//     u_j = max(0, (s_j / lambda - v) / (p (1 - v)))^(1/(p-1)),  lambda such that g(u) = 1,
// is the exact minimiser of that linearisation over the constraint set: the linear minimisation
// oracle of a Frank-Wolfe method. The paper alternates SVM solve and closed form outright (step 1),
// which can cycle between kernels; we take the step u <- u + eta (u_lmo - u) with eta = 1 first and
// halve it whenever J would increase (backtracking), which keeps J monotone and gives the
// Frank-Wolfe duality gap 1/2 s'(u_lmo - u) >= J(u) - J* as a certified stopping rule. The
// paper's Taylor expansion + CVX step (its section 4) is not needed: the closed form is exact.
// Frank-Wolfe converges sublinearly; Newton's steps on the optimality conditions (NewtonPoint) take over
// where they lower J, and v = 1 (l1-MKL, where the oracle's vertices make Frank-Wolfe zig-zag) is fitted by
// ENMKL's machinery at mu = 1 (docs/learners.md, "MKL-BP").
#include <algorithm>
#include <cmath>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kMinStep = 1.0 / 1024;
constexpr int kNewtonRetry = 3;  ///< iterations to wait after a rejected Newton step

class MklBp final : public Learner {
 public:
  explicit MklBp(const ParamMap& p)
      : c_(p.at("c")), p_(p.at("p")), v_(p.at("v")), gapTol_(p.at("gap_tolerance")), maxIter_(static_cast<int>(p.at("max_iterations"))),
        svmTol_(p.at("svm_tolerance")) {}

  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInputExceptValues(Name(), train, t, options);
    if (t.task == Task::Regression)
      throw InputError("learners:TaskUnsupported", "learner mkl_bp",
                       "mkl_bp is a classifier (MKL-BP, Qi, Liang & Xu 2018); for regression use mkelm, enmkl_krr or simplemkl");
    Stopwatch clock;
    const Eigen::Index m = KernelCount(train, options);
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    // Multiclass: one u for all one-vs-rest SVMs; J and s are sums over the classes.
    const auto solver = t.task == Task::Multiclass ? MakeOneVsRestSolver(t, svc) : svc(t.y);
    if (v_ == 1.0) {
      // v = 1 is l1-MKL (sum u <= 1): the oracle returns simplex vertices, and Frank-Wolfe zig-zags between them (it
      // stalled at gaps of 2e-3 with 59 kernels where the optimum has 10, Newton's steps on its dense support being
      // rejected). ENMKL's fit at mu = 1 has the same optimum and certifies it (Newton's step below 100 x svm_tolerance,
      // the precision the inner solves allow, checked over every kernel).
      Model model = FitEnmkl(Name(), train, *solver, {1.0, maxIter_, 100.0 * svmTol_, 100.0 * svmTol_}, options);
      model.info.seconds = clock.Seconds();
      return model;
    }
    const Eigen::Index stateSize = t.task == Task::Multiclass ? t.y.size() * t.classes : t.y.size();
    std::unique_ptr<gram::KernelStack> ownStack;
    const gram::KernelStack& stack = CheckedStack(Name(), train, options, ownStack);  // first: it checks the kernels' values
    const auto active = ActiveKernels(train, options);
    if (active.empty()) throw InputError("learners:AllZeroKernels", "learner mkl_bp", "every training kernel is identically zero: nothing to learn from");
    std::vector<bool> isActive(static_cast<std::size_t>(m), false);
    for (auto j : active) isActive[static_cast<std::size_t>(j)] = true;

    // Start: the paper's uniform point on the constraint surface, or the neighbour's weights.
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
    int newtonAfter = 0;  // iteration before which Newton is not tried again (after a rejected step)
    bool newtonAvailable = true;
    for (int it = 1; it <= maxIter_; ++it) {
      info.iterations = it;
      const Eigen::VectorXd s = Quadratics(stack, sol);
      const Eigen::VectorXd target = Oracle(s, isActive, u);
      const double gap = 0.5 * s.dot(target - u);
      info.gap = gap / std::max(std::abs(sol.dual), 1e-300);
      if (info.gap <= gapTol_) {
        info.status = FitStatus::Converged;
        break;
      }
      // Once no kernel outside the support of u wants in (the oracle's support is inside it), a Newton step on the
      // optimality conditions, then half of it; a step is taken only if it lowers J, so the Frank-Wolfe gap stays the
      // certificate (Frank-Wolfe alone converges sublinearly: stopped at a gap of 1e-3, its weights can be 3e-3 from the
      // optimum). A rejected step is not tried again for kNewtonRetry iterations.
      if (newtonAvailable && it >= newtonAfter) {
        bool inside = true;
        for (Eigen::Index j = 0; j < m && inside; ++j) inside = !(target[j] > 0) || u[j] > 0;
        Eigen::VectorXd uN;
        if (inside && NewtonPoint(stack, *solver, u, sol, s, uN, newtonAvailable)) {
          bool taken = false;
          for (const double fraction : {1.0, 0.5}) {
            const Eigen::VectorXd trial = fraction == 1.0 ? uN : OntoSurface(u + fraction * (uN - u));
            InnerSolution next = sol;
            solve(trial, next);
            if (next.dual < sol.dual) {
              u = trial;
              sol = std::move(next);
              taken = true;
              break;
            }
          }
          if (taken) continue;
        }
        newtonAfter = it + kNewtonRetry;
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

  /// A Newton step for the optimality conditions on the support A of u: s_j = lambda w_j, w_j = dg/du_j =
  /// v + p (1 - v) u_j^(p-1) for j in A, and g(u) = 1 (the multiplier lambda is the oracle's; at such a point
  /// the oracle returns u itself and the gap is 0). The inner solver's sensitivity gives ds_j/du_k = -2 H_jk
  /// (InnerSolver::Curvature). `out` is the step's point with the kernels it sends below 0 at 0, scaled onto
  /// g = 1. False when the step is not usable; `available` is cleared when the solver has no sensitivity.
  bool NewtonPoint(const gram::KernelStack& stack, const InnerSolver& solver, const Eigen::VectorXd& u, const InnerSolution& sol,
                   const Eigen::VectorXd& s, Eigen::VectorXd& out, bool& available) const {
    std::vector<Eigen::Index> A;
    for (Eigen::Index j = 0; j < u.size(); ++j)
      if (u[j] > 0) A.push_back(j);
    const auto a = static_cast<Eigen::Index>(A.size());
    if (a < 2) return false;
    Eigen::VectorXd w(a), sA(a), uA(a);
    for (Eigen::Index i = 0; i < a; ++i) {
      const auto j = A[static_cast<std::size_t>(i)];
      uA[i] = u[j];
      sA[i] = s[j];
      w[i] = v_ + p_ * (1.0 - v_) * std::pow(u[j], p_ - 1.0);
    }
    Eigen::MatrixXd H;
    const auto gradients = [&](const Eigen::VectorXd& coef) { return stack.Products(A, coef); };
    if (!solver.Curvature(stack.Combine(u), sol, gradients, H)) {
      available = false;
      return false;
    }
    const double lambda = sA.dot(w) / w.squaredNorm();  // the least-squares multiplier of s = lambda w
    Eigen::MatrixXd J = Eigen::MatrixXd::Zero(a + 1, a + 1);
    J.topLeftCorner(a, a) = -2.0 * H;
    for (Eigen::Index i = 0; i < a; ++i) J(i, i) -= lambda * p_ * (p_ - 1.0) * (1.0 - v_) * std::pow(uA[i], p_ - 2.0);
    J.topRightCorner(a, 1) = -w;
    J.bottomLeftCorner(1, a) = w.transpose();
    Eigen::VectorXd F(a + 1);
    F.head(a) = sA - lambda * w;
    F[a] = Constraint(u) - 1.0;
    const Eigen::VectorXd delta = SolveNewtonSystem(J, -F);
    if (!delta.allFinite()) return false;
    out = Eigen::VectorXd::Zero(u.size());
    for (Eigen::Index i = 0; i < a; ++i) out[A[static_cast<std::size_t>(i)]] = std::max(0.0, uA[i] + delta[i]);
    if (!(out.maxCoeff() > 0)) return false;
    out = OntoSurface(out);
    return true;
  }

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

  /// argmax_u s'u subject to g(u) <= 1, u >= 0 (Qi, Liang & Xu 2018, eq. 10, with lambda found by bisection).
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
