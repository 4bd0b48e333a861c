// Baseline single-kernel learners on the unweighted sum of kernels (the "SVM"/"KRR" baselines of Mourao-Miranda et al.'s ENMKL tables).
#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

/// Solves on K = sum_j K_j and reports beta_j = 1/m with coef scaled by m (same decision function).
Model FitOnSum(const KernelList& train, const InnerSolver& solver, const FitOptions& options) {
  Stopwatch clock;
  const auto m = static_cast<Eigen::Index>(train.size());
  // One kernel (the usual baseline on a precombined kernel) is used in place: no n x n copy.
  Eigen::MatrixXd combined;
  const Eigen::MatrixXd& K = m == 1 ? train[0] : SharedSum(options.cache, train, combined);
  InnerSolution warm;
  const bool haveWarm = options.warmStart && options.warmStart->solverState.size() > 0;
  if (haveWarm) warm.alpha = options.warmStart->solverState;
  const InnerSolution s = solver.Solve(K, haveWarm ? &warm : nullptr);
  Model model;
  model.beta = Eigen::VectorXd::Constant(m, 1.0 / static_cast<double>(m));
  model.coef = s.coef * static_cast<double>(m);
  model.alpha = s.alpha;
  model.solverState = s.alpha;
  model.bias = s.bias;
  model.info.status = s.converged ? FitStatus::Converged : FitStatus::MaxIterReached;
  model.info.iterations = static_cast<int>(s.iterations);
  model.info.innerSolves = 1;
  model.info.innerIterations = s.iterations;
  model.info.objective = s.dual;
  model.info.gap = s.violation;
  model.info.seconds = clock.Seconds();
  model.info.solvesLargerC = s.converged && solver.BoxInactive(s);
  return model;
}

class Svm final : public Learner {
 public:
  explicit Svm(const ParamMap& p) : c_(p.at("c")), tol_(p.at("tolerance")), maxIter_(static_cast<long>(p.at("max_iterations"))) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInput(Name(), train, t, o);
    if (t.task == Task::Classification) return FitOnSum(train, *MakeSvcSolver(t.y, c_, tol_, maxIter_, t.sampleWeights), o);
    throw InputError("learners:TaskUnsupported", "learner svm", "svm is a classifier; for regression use krr, enmkl_krr or simplemkl");
  }
  std::string_view Name() const override { return "svm"; }

 private:
  double c_, tol_;
  long maxIter_;
};

class Krr final : public Learner {
 public:
  explicit Krr(const ParamMap& p) : lambda_(p.at("lambda")) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    ValidateFitInput(Name(), train, t, o);
    return FitOnSum(train, *MakeKrrSolver(t.y, lambda_, t.sampleWeights), o);
  }
  std::string_view Name() const override { return "krr"; }

 private:
  double lambda_;
};

}  // namespace

std::unique_ptr<Learner> MakeSvm(const ParamMap& p) { return std::make_unique<Svm>(p); }
std::unique_ptr<Learner> MakeKrr(const ParamMap& p) { return std::make_unique<Krr>(p); }

}  // namespace neuromkl::learners
