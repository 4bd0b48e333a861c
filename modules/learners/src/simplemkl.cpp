// SimpleMKL (Rakotomamonjy, Bach, Canu & Grandvalet, JMLR 2008): l1-MKL by reduced-gradient
// descent on the simplex, with the "descend until the objective stops decreasing" step, a
// line search (parabolic interpolation in place of the paper's golden section), warm-started SVM solves,
// Newton steps on the support and the relative duality-gap stop.
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/QR>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kFinestLineSearch = 1e-10;
constexpr int kNewtonRetry = 3;      ///< reduced-gradient steps after a rejected Newton step

struct SimpleMklSettings {
  double gapTolerance;
  int maxIterations;
  double lineSearchTolerance;  ///< line-search bracket, relative to the largest feasible step
};

class SimpleMklFit {
 public:
  SimpleMklFit(std::string_view learner, const KernelList& train, const FitOptions& options, const InnerSolver& solver, const SimpleMklSettings& s,
               FitInfo& info)
      : K_(train), stack_(CheckedStack(learner, train, options, ownStack_)), screen_(stack_), solver_(solver), s_(s), info_(info), m_(KernelCount(train, options)) {}
  /// The same on the stack of these kernels that the caller holds (ENMKL's hand-over: no second copy, no second check).
  SimpleMklFit(const KernelList& train, const gram::KernelStack& stack, const FitOptions& options, const InnerSolver& solver, const SimpleMklSettings& s,
               FitInfo& info)
      : K_(train), stack_(stack), screen_(stack_), solver_(solver), s_(s), info_(info), m_(KernelCount(train, options)) {}

  InnerSolution Evaluate(const Eigen::VectorXd& d, const InnerSolution* warm) { return Evaluate(stack_.Combine(d), warm); }
  InnerSolution Evaluate(const Eigen::MatrixXd& K, const InnerSolution* warm) {
    InnerSolution sol = solver_.Solve(K, warm);
    ++info_.innerSolves;
    info_.innerIterations += sol.iterations;
    return sol;
  }

  /// q_j = a'K_j a, summed over the classes of a one-vs-rest solution (the gradient of the summed
  /// duals with one beta). Active set (few kernels keep a weight): exact for the kernels with d_j > 0; a kernel with
  /// d_j = 0 only matters if q_j >= q_top (it would get a positive direction) or q_j > max over the
  /// others (the gap), so it is computed only when its screening bound reaches q_top; otherwise it
  /// gets its bound's lower stand-in 0 (it stays out of the direction and of the gap's maximum).
  Eigen::VectorXd Quadratics(const InnerSolution& sol, const Eigen::VectorXd& d, const std::vector<Eigen::Index>& active) {
    screen_.Begin(sol);
    Eigen::VectorXd q = Eigen::VectorXd::Zero(m_);
    Eigen::Index top = active[0];
    for (auto j : active)
      if (d[j] > d[top]) top = j;
    std::vector<Eigen::Index> support, entering;
    for (auto j : active)
      if (d[j] > 0) support.push_back(j);
    screen_.Evaluate(support);
    for (auto j : support) q[j] = Square(screen_.Exact(j));
    const double level = std::sqrt(q[top]);
    for (auto j : active)
      if (!(d[j] > 0) && screen_.Bound(j) >= level) entering.push_back(j);
    screen_.Evaluate(entering);
    for (auto j : entering) q[j] = Square(screen_.Exact(j));
    return q;
  }
  static double Square(double x) { return x * x; }

  /// A Newton step for the l1-MKL optimality conditions on the support A of d: c_j = S for
  /// j in A, S = sum_A d_k c_k (which implies sum d = 1), c_j = sqrt(q_j); the inner solver's
  /// sensitivity gives the Jacobian (ENMKL's Newton step with mu = 1). `q` holds the exact q_j on A.
  /// False when the solver has no sensitivity or the step is not usable.
  bool NewtonPoint(const Eigen::VectorXd& d, const InnerSolution& sol, const Eigen::VectorXd& q, Eigen::VectorXd& out) {
    std::vector<Eigen::Index> A;
    for (Eigen::Index j = 0; j < m_; ++j)
      if (d[j] > 0) A.push_back(j);
    const auto a = static_cast<Eigen::Index>(A.size());
    if (a < 2) return false;
    Eigen::VectorXd c(a), b(a);
    for (Eigen::Index i = 0; i < a; ++i) {
      c[i] = std::sqrt(q[A[static_cast<std::size_t>(i)]]);
      b[i] = d[A[static_cast<std::size_t>(i)]];
    }
    if (!(c.minCoeff() > 0)) return false;
    Eigen::MatrixXd H;
    const auto gradients = [&](const Eigen::VectorXd& coef) { return stack_.Products(A, coef); };
    if (!solver_.Curvature(stack_.Combine(d), sol, gradients, H)) {
      noCurvature_ = true;
      return false;
    }
    const double S = b.dot(c);
    const Eigen::VectorXd R = Eigen::VectorXd::Constant(a, S) - c;
    const Eigen::MatrixXd Dc = -(c.cwiseInverse().asDiagonal() * H);  // d c_j / d d_k
    Eigen::MatrixXd J = -Dc;
    J.rowwise() += (c + Dc.transpose() * b).transpose();
    const Eigen::VectorXd delta = SolveNewtonSystem(J, -R);
    if (!delta.allFinite()) return false;
    out = Eigen::VectorXd::Zero(m_);
    for (Eigen::Index i = 0; i < a; ++i) out[A[static_cast<std::size_t>(i)]] = std::max(0.0, b[i] + delta[i]);
    if (!(out.sum() > 0)) return false;
    out /= out.sum();
    return true;
  }

  /// Reduced gradient descent direction on the simplex for gradient g = -q/2.
  Eigen::VectorXd Direction(const Eigen::VectorXd& d, const Eigen::VectorXd& grad, const std::vector<Eigen::Index>& active) const {
    Eigen::Index top = active[0];
    for (auto j : active)
      if (d[j] > d[top]) top = j;
    Eigen::VectorXd D = Eigen::VectorXd::Zero(m_);
    double sum = 0;
    for (auto j : active) {
      if (j == top) continue;
      const double diff = grad[j] - grad[top];
      D[j] = (d[j] <= 0 && diff > 0) ? 0.0 : -diff;
      sum += D[j];
    }
    D[top] = -sum;
    return D;
  }

  /// `start` (weights of sum 1 over non-zero kernels, and the inner solver's variables there): an iterate of another
  /// l1-MKL fit to go on from, taken as is (FitSimpleMklFrom).
  Model Run(const FitOptions& options, const Eigen::VectorXd* start = nullptr, const Eigen::VectorXd* startState = nullptr) {
    Stopwatch clock;
    const auto active = ActiveKernels(K_, options);
    if (active.empty())
      throw InputError("learners:AllZeroKernels", "learner simplemkl", "every training kernel is identically zero: nothing to learn from");
    InnerSolution warm;
    Eigen::VectorXd d = StartingWeights(options, active, start, startState, warm);
    InnerSolution sol = Evaluate(d, warm.alpha.size() > 0 ? &warm : nullptr);
    int newtonAfter = 0;
    info_.status = FitStatus::MaxIterReached;
    double lineTolerance = s_.lineSearchTolerance;
    for (int it = 0;; ++it) {
      const Eigen::VectorXd q = Quadratics(sol, d, active);
      double qMax = 0;
      for (auto j : active) qMax = std::max(qMax, q[j]);
      // Relative duality gap: (J(d) - [L - max_m q_m/2]) / J(d) = (max_m q_m - d'q) / (2 J).
      info_.gap = sol.dual > 0 ? (qMax - d.dot(q)) / (2.0 * sol.dual) : 0.0;
      info_.iterations = it;
      if (info_.gap < s_.gapTolerance) {
        info_.status = FitStatus::Converged;
        break;
      }
      if (it >= s_.maxIterations) break;
      // With no kernel outside the support wanting in, try a Newton step on the support, then half of it;
      // a step is taken only if it lowers J (the duality gap stays the only stopping rule). Tried from the
      // first iteration, not only near the optimum: a taken step saves reduced-gradient iterations of ~10
      // solves each, a rejected one costs two solves and is not tried again for kNewtonRetry iterations.
      if (!noCurvature_ && it >= newtonAfter) {
        if (TakeNewtonStep(d, sol, q, active)) continue;
        newtonAfter = it + kNewtonRetry;
      }
      const Eigen::VectorXd grad = -0.5 * q;
      Descent step;
      step.D = Direction(d, grad, active);
      if (step.D.cwiseAbs().maxCoeff() <= 0) {
        info_.status = FitStatus::Converged;
        break;
      }
      step.d = d;
      step.sol = sol;
      FollowToTheBoundary(step, grad, active);
      LineSearch(step, lineTolerance);
      if ((step.d - d).cwiseAbs().maxCoeff() == 0) {
        // No step improved J at this line-search resolution although the gap is still open: the
        // minimum lies closer to d. Refine the search and try again; give up only when the
        // resolution reaches rounding level (reported as not converged, never as converged).
        if (lineTolerance * 1e-2 < kFinestLineSearch) break;
        lineTolerance *= 1e-2;
        continue;
      }
      lineTolerance = s_.lineSearchTolerance;
      d = step.d;
      sol = step.sol;
    }
    Model model;
    model.beta = d;
    StoreSolution(sol, 1.0, model);
    model.alpha = sol.alpha;
    model.solverState = sol.alpha;
    info_.objective = sol.dual;
    info_.seconds = clock.Seconds();
    model.info = info_;
    // The duality gap and the weights' optimality conditions read the solution only (its quadratics and dual), which
    // every larger C's conditions also accept.
    model.info.solvesLargerC = model.info.status == FitStatus::Converged && sol.converged && solver_.BoxInactive(sol);
    return model;
  }

 private:
  /// One reduced-gradient step in progress: the point reached along the direction D, and where the last move along
  /// it ended (the boundary of the simplex, where a weight reached 0).
  struct Descent {
    Eigen::VectorXd d;    ///< the current point (weights of sum 1) ...
    InnerSolution sol;    ///< ... and its inner solution
    Eigen::VectorXd D;    ///< the reduced-gradient direction at d
    double stepMax = 0;   ///< the largest feasible step along D (infinite: none) ...
    Eigen::VectorXd dEnd;  ///< ... the point it reaches (empty: no move yet) ...
    InnerSolution solEnd;  ///< ... and its inner solution
  };

  /// Uniform weights on the active kernels, the caller's `start` (taken as is), or the warm start's weights mixed with
  /// 10 % of uniform weight (a weight at 0 can come back); `warm` receives the inner solver's variables to start from.
  Eigen::VectorXd StartingWeights(const FitOptions& options, const std::vector<Eigen::Index>& active, const Eigen::VectorXd* start,
                                  const Eigen::VectorXd* startState, InnerSolution& warm) const {
    Eigen::VectorXd d = Eigen::VectorXd::Zero(m_);
    for (auto j : active) d[j] = 1.0 / static_cast<double>(active.size());
    const Model* w = options.warmStart;
    if (start) {
      d = *start / start->sum();
      if (startState) warm.alpha = *startState;
    } else if (w && w->beta.size() == m_ && w->beta.sum() > 0) {
      const Eigen::VectorXd uniform = d;
      for (auto j : active) d[j] = 0.9 * w->beta[j] / w->beta.sum() + 0.1 * uniform[j];
      d /= d.sum();
      warm.alpha = w->solverState;
    }
    return d;
  }

  /// When no kernel outside the support wants in (q_j of the kernels at 0 below the support's largest), the Newton
  /// point of the support, else half the step to it, replaces (d, sol) if it lowers J. Whether a step was taken.
  bool TakeNewtonStep(Eigen::VectorXd& d, InnerSolution& sol, const Eigen::VectorXd& q, const std::vector<Eigen::Index>& active) {
    double qTop = 0, qOut = 0;
    for (auto j : active) (d[j] > 0 ? qTop : qOut) = std::max(d[j] > 0 ? qTop : qOut, q[j]);
    Eigen::VectorXd dN;
    if (!(qOut <= qTop && NewtonPoint(d, sol, q, dN))) return false;
    InnerSolution sN = Evaluate(dN, &sol);
    if (sN.dual < sol.dual) {
      d = dN;
      sol = sN;
      return true;
    }
    const Eigen::VectorXd dHalf = 0.5 * (d + dN);  // half the step (on the simplex: both ends are)
    InnerSolution sHalf = Evaluate(dHalf, &sol);
    if (sHalf.dual < sol.dual) {
      d = dHalf;
      sol = sHalf;
      return true;
    }
    return false;
  }

  /// Follows D to the boundary while that keeps decreasing J: each move ends where a weight reaches 0, and the
  /// direction is recomputed there. `step` is left at the last point that lowered J, with the move that did not.
  void FollowToTheBoundary(Descent& step, const Eigen::VectorXd& grad, const std::vector<Eigen::Index>& active) {
    while (true) {
      step.stepMax = std::numeric_limits<double>::infinity();
      Eigen::Index hit = -1;
      for (auto j : active)
        if (step.D[j] < 0 && -step.d[j] / step.D[j] < step.stepMax) {
          step.stepMax = -step.d[j] / step.D[j];
          hit = j;
        }
      if (hit < 0) break;
      step.dEnd = (step.d + step.stepMax * step.D).cwiseMax(0.0);
      step.dEnd[hit] = 0;
      step.dEnd /= step.dEnd.sum();
      step.solEnd = Evaluate(step.dEnd, &step.sol);
      if (step.solEnd.dual < step.sol.dual) {
        step.d = step.dEnd;
        step.sol = step.solEnd;
        step.D = Direction(step.d, grad, active);
        if (step.D.cwiseAbs().maxCoeff() <= 0) break;
        continue;
      }
      break;
    }
  }

  /// Line search for the step on [0, stepMax] along D from step.d, where J is convex and J(stepMax) >= J(0):
  /// successive parabolic interpolation in a bracket (a < x < b, J(x) below J(a) and J(b)), with a golden-section
  /// point where the parabola is unusable, until the bracket or the parabola's predicted move is below the
  /// tolerance (golden section alone needs ~10 solves per search at the default 1e-2). Moves `step` to the best point.
  void LineSearch(Descent& step, double lineTolerance) {
    if (!(std::isfinite(step.stepMax) && step.stepMax > 0 && step.dEnd.size() == m_)) return;
    const double ratio = (std::sqrt(5.0) - 1.0) / 2.0;
    const double tol = lineTolerance * step.stepMax;
    // Inside (0, stepMax) the points d + g D stay >= 0 with sum 1 (sum D = 0), so their
    // combined kernels are K(d) + g K(D): two combinations per line search, not one per point.
    const Eigen::MatrixXd Kcur = stack_.Combine(step.d), Kdir = stack_.Combine(step.D);
    InnerSolution best = step.sol;
    double bestStep = 0;
    const auto J = [&](double g) {
      InnerSolution s = Evaluate(Eigen::MatrixXd(Kcur + g * Kdir), &best);
      const double value = s.dual;
      if (value < best.dual) {
        best = std::move(s);
        bestStep = g;
      }
      return value;
    };
    double a = 0, b = step.stepMax, Ja = step.sol.dual, Jb = step.solEnd.dual;
    double x = a + (1.0 - ratio) * (b - a), Jx = J(x);
    while (!(Jx < Ja) && b - a > tol) {  // no decrease yet: the minimum is closer to d
      b = x;
      Jb = Jx;
      x = a + (1.0 - ratio) * (b - a);
      Jx = J(x);
    }
    while (Jx < Ja && b - a > tol) {
      const double p = (x - a) * (Jx - Jb), r = (x - b) * (Jx - Ja);
      const double den = p - r;
      double u = den != 0 ? x - 0.5 * ((x - a) * p - (x - b) * r) / den : std::numeric_limits<double>::quiet_NaN();
      if (!(u > a + 0.5 * tol && u < b - 0.5 * tol)) u = x - a > b - x ? x - (1.0 - ratio) * (x - a) : x + (1.0 - ratio) * (b - x);
      if (std::abs(u - x) < 0.5 * tol) break;  // the parabola puts the minimum within the tolerance of x
      const double Ju = J(u);
      if (Ju < Jx) {
        (u < x ? b : a) = x;
        (u < x ? Jb : Ja) = Jx;
        x = u;
        Jx = Ju;
      } else {
        (u < x ? a : b) = u;
        (u < x ? Ja : Jb) = Ju;
      }
    }
    if (bestStep > 0) {
      const Eigen::VectorXd moved = (step.d + bestStep * step.D).cwiseMax(0.0);
      step.d = moved / moved.sum();
      step.sol = std::move(best);
    }
  }

  const KernelList& K_;
  std::unique_ptr<gram::KernelStack> ownStack_;  ///< without a cache: this fit's own stack
  const gram::KernelStack& stack_;
  ScreenedNorms screen_;
  bool noCurvature_ = false;
  const InnerSolver& solver_;
  SimpleMklSettings s_;
  FitInfo& info_;
  Eigen::Index m_;
};

class SimpleMkl final : public Learner {
 public:
  explicit SimpleMkl(const ParamMap& p)
      : c_(p.at("c")),
        epsilon_(p.at("epsilon")),
        svmTol_(p.at("svm_tolerance")),
        settings_{p.at("gap_tolerance"), static_cast<int>(p.at("max_iterations")), p.at("line_search_tolerance")} {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInputExceptValues(Name(), train, t, o);
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    auto solver = t.task == Task::Classification ? svc(t.y)
                  : t.task == Task::Multiclass   ? MakeOneVsRestSolver(t, svc)  // one beta for all one-vs-rest SVMs
                                                 : MakeSvrSolver(t.y, c_, epsilon_, svmTol_, 10'000'000);
    FitInfo info;
    return SimpleMklFit(Name(), train, o, *solver, settings_, info).Run(o);
  }
  std::string_view Name() const override { return "simplemkl"; }

 private:
  double c_, epsilon_, svmTol_;
  SimpleMklSettings settings_;
};

}  // namespace

Model FitSimpleMklFrom(const KernelList& train, const gram::KernelStack& stack, const InnerSolver& solver, double gapTolerance, int maxIterations,
                       const Eigen::VectorXd& start, const Eigen::VectorXd& startState, const FitOptions& options) {
  FitInfo info;
  const SimpleMklSettings settings{gapTolerance, maxIterations, 0.01};  // the learner's default line search
  return SimpleMklFit(train, stack, options, solver, settings, info).Run(options, &start, startState.size() > 0 ? &startState : nullptr);
}

std::unique_ptr<Learner> MakeSimpleMkl(const ParamMap& p) { return std::make_unique<SimpleMkl>(p); }

}  // namespace neuromkl::learners
