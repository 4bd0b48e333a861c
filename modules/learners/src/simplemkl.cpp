// SimpleMKL (Rakotomamonjy, Bach, Canu & Grandvalet, JMLR 2008): l1-MKL by reduced-gradient
// descent on the simplex, with the "descend until the objective stops decreasing" step, a
// golden-section line search, warm-started SVM solves and the relative duality-gap stop.
#include <cmath>
#include <limits>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kFinestLineSearch = 1e-10;

struct SimpleMklSettings {
  double gapTolerance;
  int maxIterations;
  double lineSearchTolerance;  ///< golden-section interval, relative to the largest feasible step
};

class SimpleMklFit {
 public:
  SimpleMklFit(const KernelList& train, const InnerSolver& solver, const SimpleMklSettings& s, FitInfo& info)
      : K_(train), stack_(train), solver_(solver), s_(s), info_(info), m_(static_cast<Eigen::Index>(train.size())) {}

  InnerSolution Evaluate(const Eigen::VectorXd& d, const InnerSolution* warm) {
    InnerSolution sol = solver_.Solve(stack_.Combine(d), warm);
    ++info_.innerSolves;
    info_.innerIterations += sol.iterations;
    return sol;
  }

  /// Summed over the classes of a one-vs-rest solution: the gradient of the summed duals with one beta.
  Eigen::VectorXd Quadratics(const InnerSolution& sol) const { return stack_.Quadratics(sol); }

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

  Model Run(const FitOptions& options) {
    Stopwatch clock;
    const auto active = ActiveKernels(K_);
    if (active.empty())
      throw InputError("learners:AllZeroKernels", "learner simplemkl", "every training kernel is identically zero: nothing to learn from");
    Eigen::VectorXd d = Eigen::VectorXd::Zero(m_);
    for (auto j : active) d[j] = 1.0 / static_cast<double>(active.size());
    InnerSolution warm;
    const Model* w = options.warmStart;
    if (w && w->beta.size() == m_ && w->beta.sum() > 0) {
      const Eigen::VectorXd uniform = d;
      for (auto j : active) d[j] = 0.9 * w->beta[j] / w->beta.sum() + 0.1 * uniform[j];
      d /= d.sum();
      warm.alpha = w->solverState;
    }
    InnerSolution sol = Evaluate(d, warm.alpha.size() > 0 ? &warm : nullptr);
    info_.status = FitStatus::MaxIterReached;
    double lineTolerance = s_.lineSearchTolerance;
    for (int it = 0;; ++it) {
      const Eigen::VectorXd q = Quadratics(sol);
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
      const Eigen::VectorXd grad = -0.5 * q;
      Eigen::VectorXd D = Direction(d, grad, active);
      if (D.cwiseAbs().maxCoeff() <= 0) {
        info_.status = FitStatus::Converged;
        break;
      }
      // Follow D to the boundary while that keeps decreasing J.
      Eigen::VectorXd dCur = d;
      InnerSolution solCur = sol;
      double stepMax = 0;
      Eigen::VectorXd dEnd;
      InnerSolution solEnd;
      while (true) {
        stepMax = std::numeric_limits<double>::infinity();
        Eigen::Index hit = -1;
        for (auto j : active)
          if (D[j] < 0 && -dCur[j] / D[j] < stepMax) {
            stepMax = -dCur[j] / D[j];
            hit = j;
          }
        if (hit < 0) break;
        dEnd = (dCur + stepMax * D).cwiseMax(0.0);
        dEnd[hit] = 0;
        dEnd /= dEnd.sum();
        solEnd = Evaluate(dEnd, &solCur);
        if (solEnd.dual < solCur.dual) {
          dCur = dEnd;
          solCur = solEnd;
          D = Direction(dCur, grad, active);
          if (D.cwiseAbs().maxCoeff() <= 0) break;
          continue;
        }
        break;
      }
      // Golden-section search for the step on [0, stepMax] along D from dCur.
      if (std::isfinite(stepMax) && stepMax > 0 && dEnd.size() == m_) {
        const double ratio = (std::sqrt(5.0) - 1.0) / 2.0;
        double lo = 0, hi = stepMax;
        auto point = [&](double g) {
          Eigen::VectorXd x = (dCur + g * D).cwiseMax(0.0);
          return Eigen::VectorXd(x / x.sum());
        };
        double x1 = hi - ratio * (hi - lo), x2 = lo + ratio * (hi - lo);
        InnerSolution s1 = Evaluate(point(x1), &solCur), s2 = Evaluate(point(x2), &solCur);
        InnerSolution best = solCur;
        Eigen::VectorXd bestD = dCur;
        auto consider = [&](const InnerSolution& s, double g) {
          if (s.dual < best.dual) {
            best = s;
            bestD = point(g);
          }
        };
        consider(s1, x1);
        consider(s2, x2);
        while (hi - lo > lineTolerance * stepMax) {
          if (s1.dual < s2.dual) {
            hi = x2;
            x2 = x1;
            s2 = s1;
            x1 = hi - ratio * (hi - lo);
            s1 = Evaluate(point(x1), &best);
            consider(s1, x1);
          } else {
            lo = x1;
            x1 = x2;
            s1 = s2;
            x2 = lo + ratio * (hi - lo);
            s2 = Evaluate(point(x2), &best);
            consider(s2, x2);
          }
        }
        dCur = bestD;
        solCur = best;
      }
      if ((dCur - d).cwiseAbs().maxCoeff() == 0) {
        // No step improved J at this line-search resolution although the gap is still open: the
        // minimum lies closer to d. Refine the search and try again; give up only when the
        // resolution reaches rounding level (reported as not converged, never as converged).
        if (lineTolerance * 1e-2 < kFinestLineSearch) break;
        lineTolerance *= 1e-2;
        continue;
      }
      lineTolerance = s_.lineSearchTolerance;
      d = dCur;
      sol = solCur;
    }
    Model model;
    model.beta = d;
    StoreSolution(sol, 1.0, model);
    model.alpha = sol.alpha;
    model.solverState = sol.alpha;
    info_.objective = sol.dual;
    info_.seconds = clock.Seconds();
    model.info = info_;
    return model;
  }

 private:
  const KernelList& K_;
  const KernelStack stack_;
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
    ValidateFitInput(Name(), train, t);
    auto svc = [&](const Eigen::VectorXd& y) { return MakeSvcSolver(y, c_, svmTol_, 10'000'000, t.sampleWeights); };
    auto solver = t.task == Task::Classification ? svc(t.y)
                  : t.task == Task::Multiclass   ? MakeOneVsRestSolver(t, svc)  // one beta for all one-vs-rest SVMs
                                                 : MakeSvrSolver(t.y, c_, epsilon_, svmTol_, 10'000'000);
    FitInfo info;
    return SimpleMklFit(train, *solver, settings_, info).Run(o);
  }
  std::string_view Name() const override { return "simplemkl"; }

 private:
  double c_, epsilon_, svmTol_;
  SimpleMklSettings settings_;
};

}  // namespace

std::unique_ptr<Learner> MakeSimpleMkl(const ParamMap& p) { return std::make_unique<SimpleMkl>(p); }

}  // namespace neuromkl::learners
