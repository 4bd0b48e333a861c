// Multiclass for every classification learner (docs/learners.md, "Multiclass"): native class scores
// for the KELM family, one kernel weight vector shared by all one-vs-rest problems for the MKL
// learners (Zien & Ong 2007: the sum of the binary objectives with one beta), and one-vs-rest
// binary fits for the others (or, on request, per-class kernel weights).
#include <algorithm>
#include <cmath>
#include <string>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

Eigen::VectorXd OneVsRestLabels(const Eigen::VectorXd& y, int c) {
  Eigen::VectorXd out(y.size());
  for (Eigen::Index i = 0; i < y.size(); ++i) out[i] = std::isnan(y[i]) ? y[i] : (y[i] == c ? 1.0 : -1.0);
  return out;
}

Eigen::VectorXd Quadratics(const gram::KernelStack& stack, const InnerSolution& sol) {
  if (sol.coefs.cols() == 0) return stack.Quadratics(sol.coef);
  Eigen::VectorXd q = stack.Quadratics(Eigen::VectorXd(sol.coefs.col(0)));
  for (Eigen::Index c = 1; c < sol.coefs.cols(); ++c) q += stack.Quadratics(Eigen::VectorXd(sol.coefs.col(c)));
  return q;
}

void StoreSolution(const InnerSolution& sol, double scale, Model& model) {
  if (sol.coefs.cols() > 0) {
    model.coefs = sol.coefs * scale;
    model.biases = sol.biases;
    model.coef.resize(0);
    model.bias = 0;
  } else {
    model.coef = sol.coef * scale;
    model.bias = sol.bias;
  }
}

namespace {

class OneVsRestSolver final : public InnerSolver {
 public:
  OneVsRestSolver(const Targets& t, const std::function<std::unique_ptr<InnerSolver>(const Eigen::VectorXd&)>& binary) : n_(t.y.size()) {
    for (int c = 0; c < t.classes; ++c) {
      const Eigen::VectorXd y = OneVsRestLabels(t.y, c);
      const bool present = (y.array() == 1.0).any();
      solvers_.push_back(present ? binary(y) : nullptr);
    }
  }
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const override { return SolveLoosely(K, warm, 0.0); }
  bool Exact() const override {
    return std::all_of(solvers_.begin(), solvers_.end(), [](const auto& s) { return !s || s->Exact(); });
  }
  InnerSolution SolveLoosely(const Eigen::MatrixXd& K, const InnerSolution* warm, double tolerance) const override {
    const auto T = static_cast<Eigen::Index>(solvers_.size());
    InnerSolution s;
    s.alpha = Eigen::VectorXd::Zero(n_ * T);
    s.coefs = Eigen::MatrixXd::Zero(n_, T);
    s.biases = Eigen::VectorXd::Constant(T, -1.0);
    const bool useWarm = warm && warm->alpha.size() == n_ * T;
    for (Eigen::Index c = 0; c < T; ++c) {
      const auto& solver = solvers_[static_cast<std::size_t>(c)];
      if (!solver) continue;  // class absent from the training set: score = -1 for everyone
      InnerSolution w;
      if (useWarm) w.alpha = warm->alpha.segment(c * n_, n_);
      const InnerSolution r = solver->SolveLoosely(K, useWarm ? &w : nullptr, tolerance);
      s.alpha.segment(c * n_, n_) = r.alpha.head(std::min(n_, r.alpha.size()));
      s.coefs.col(c) = r.coef;
      s.biases[c] = r.bias;
      s.dual += r.dual;
      s.iterations += r.iterations;
      s.converged = s.converged && r.converged;
      s.violation = std::max(s.violation, r.violation);
    }
    return s;
  }
  double Loss(const Eigen::VectorXd&) const override {
    throw InputError("learners:OneVsRestLoss", "one-vs-rest", "internal: the one-vs-rest loss needs the solution (SolutionLoss)");
  }
  // (No dcoef: the classes' coefficient columns would each need their own.)
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    if (dcoef) dcoef->resize(0, 0);
    bool first = true;
    for (std::size_t c = 0; c < solvers_.size(); ++c) {
      if (!solvers_[c]) continue;
      const auto col = static_cast<Eigen::Index>(c);
      InnerSolution one;
      one.alpha = sol.alpha.segment(col * n_, n_);
      one.coef = sol.coefs.col(col);
      Eigen::MatrixXd Hc;
      if (!solvers_[c]->Curvature(K, one, gradients, Hc)) return false;
      if (first) H = Hc;
      else H += Hc;
      first = false;
    }
    return !first;
  }
  bool Frozen(const InnerSolution& sol) const override {
    return EveryClass(sol, [](const InnerSolver& s, const InnerSolution& one) { return s.Frozen(one); });
  }
  bool BoxInactive(const InnerSolution& sol) const override {
    return EveryClass(sol, [](const InnerSolver& s, const InnerSolution& one) { return s.BoxInactive(one); });
  }
  double SolutionLoss(const Eigen::MatrixXd& K, const InnerSolution& sol) const override {
    double loss = 0;
    for (std::size_t c = 0; c < solvers_.size(); ++c) {
      if (!solvers_[c]) continue;
      const auto col = static_cast<Eigen::Index>(c);
      Eigen::VectorXd f = K * sol.coefs.col(col);
      f.array() += sol.biases[col];
      loss += solvers_[c]->Loss(f);
    }
    return loss;
  }

 private:
  /// Whether `holds` is true of every present class's solver and its variables (its segment of sol.alpha).
  template <typename Holds>
  bool EveryClass(const InnerSolution& sol, const Holds& holds) const {
    for (std::size_t c = 0; c < solvers_.size(); ++c) {
      if (!solvers_[c]) continue;
      InnerSolution one;
      one.alpha = sol.alpha.segment(static_cast<Eigen::Index>(c) * n_, n_);
      if (!holds(*solvers_[c], one)) return false;
    }
    return true;
  }
  Eigen::Index n_;
  std::vector<std::unique_ptr<InnerSolver>> solvers_;
};

bool NativeMulticlass(std::string_view name) { return name == "kelm" || name == "mkelm" || name == "dkelm"; }
bool SharedWeightMkl(std::string_view name) { return name == "enmkl_svm" || name == "enmkl_krr" || name == "simplemkl" || name == "mkl_bp"; }

/// Forwards binary and regression fits; multiclass fits go to the learner itself (native or shared
/// weights) or to one binary fit per class (one-vs-rest).
class MulticlassAdapter final : public Learner {
 public:
  MulticlassAdapter(std::unique_ptr<Learner> inner, const LearnerInfo& info, MulticlassWeights mode)
      : inner_(std::move(inner)), info_(info), mode_(mode) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& o) const override {
    if (t.task != Task::Multiclass) return inner_->Fit(train, t, o);
    const bool perClass = mode_ == MulticlassWeights::PerClass && info_.multipleKernels;
    if (!perClass && (NativeMulticlass(info_.name) || SharedWeightMkl(info_.name))) return inner_->Fit(train, t, o);
    ValidateFitInput(Name(), train, t, o);
    return OneVsRest(train, t, perClass, o);
  }
  std::string_view Name() const override { return inner_->Name(); }

 private:
  Model OneVsRest(const KernelList& train, const Targets& t, bool perClass, const FitOptions& options) const {
    const Eigen::Index n = t.y.size(), T = t.classes, m = KernelCount(train, options);
    Model model;
    model.coefs = Eigen::MatrixXd::Zero(n, T);
    model.biases = Eigen::VectorXd::Constant(T, -1.0);
    Eigen::MatrixXd betas = Eigen::MatrixXd::Constant(m, T, 1.0 / static_cast<double>(m));
    model.info.iterations = 0;
    bool first = true, solvesLargerC = true;
    for (Eigen::Index c = 0; c < T; ++c) {
      const Targets binary{Task::Classification, OneVsRestLabels(t.y, static_cast<int>(c)), 0, t.sampleWeights};  // class weights of the subjects' own classes
      if (!(binary.y.array() == 1.0).any()) continue;  // class absent from the training set: score = -1 for everyone
      const Model mc = inner_->Fit(train, binary, FitOptions{nullptr, options.cache, options.kernels});  // the classes share the kernels' work
      model.coefs.col(c) = mc.coef;
      model.biases[c] = mc.bias;
      betas.col(c) = mc.beta;
      if (first) model.beta = mc.beta;
      first = false;
      // The worst status of the classes; counts summed; the largest gap.
      if (mc.info.status != FitStatus::Converged && model.info.status == FitStatus::Converged) model.info.status = mc.info.status;
      if (mc.info.status == FitStatus::MaxIterReached) model.info.status = FitStatus::MaxIterReached;
      model.info.iterations += mc.info.iterations;
      model.info.innerSolves += mc.info.innerSolves;
      model.info.innerIterations += mc.info.innerIterations;
      model.info.objective += mc.info.objective;
      model.info.gap = std::max(model.info.gap, mc.info.gap);
      model.info.seconds += mc.info.seconds;
      solvesLargerC = solvesLargerC && mc.info.solvesLargerC;
    }
    model.info.solvesLargerC = !first && solvesLargerC;
    if (perClass) {
      model.betas = betas;
      model.beta = betas.rowwise().mean();  // the mean of the classes' weights (sum 1)
    }
    return model;
  }

  std::unique_ptr<Learner> inner_;
  const LearnerInfo& info_;
  MulticlassWeights mode_;
};

}  // namespace

std::unique_ptr<InnerSolver> MakeOneVsRestSolver(const Targets& targets, const std::function<std::unique_ptr<InnerSolver>(const Eigen::VectorXd&)>& binary) {
  return std::make_unique<OneVsRestSolver>(targets, binary);
}

std::unique_ptr<Learner> WithMulticlass(std::unique_ptr<Learner> learner, std::string_view name, MulticlassWeights mode) {
  const LearnerInfo* info = FindLearner(name);
  if (!info || !info->classification) return learner;
  return std::make_unique<MulticlassAdapter>(std::move(learner), *info, mode);
}

}  // namespace neuromkl::learners
