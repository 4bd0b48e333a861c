// Kernel ELM (Huang et al. 2012) and multiple kernel ELM (MK-ELM, Liu et al. 2015, Algorithm 1 and
// its lp generalisation). The radius-incorporated variant of MK-ELM is not implemented: it needs
// the minimum enclosing ball of every combined kernel inside each update (a QP per iteration) and
// the paper gives no update rule we could check; see docs/learners.md.
#include "elm.hpp"

#include <cmath>

#include <Eigen/Cholesky>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

ElmOutputs MakeElmOutputs(const Targets& t, bool bias) {
  ElmOutputs out;
  for (Eigen::Index i = 0; i < t.y.size(); ++i)
    if (!std::isnan(t.y[i])) out.rows.push_back(i);
  const auto l = static_cast<Eigen::Index>(out.rows.size());
  const Eigen::Index cols = t.task == Task::Multiclass ? t.classes : 1;
  out.T.resize(l, cols);
  for (Eigen::Index r = 0; r < l; ++r) {
    const double v = t.y[out.rows[static_cast<std::size_t>(r)]];
    if (t.task == Task::Multiclass) {
      out.T.row(r).setConstant(-1.0);
      out.T(r, static_cast<Eigen::Index>(v)) = 1.0;
    } else {
      out.T(r, 0) = v;
    }
  }
  if (EffectiveWeights(t.sampleWeights).size() > 0) {
    out.weights.resize(l);
    for (Eigen::Index r = 0; r < l; ++r) out.weights[r] = t.sampleWeights[out.rows[static_cast<std::size_t>(r)]];
  }
  out.offset = Eigen::VectorXd::Zero(cols);
  if (bias) {
    // Class weights: the weighted column means (the offset of the weighted least-squares fit).
    out.offset = out.weights.size() > 0 ? Eigen::VectorXd(out.T.transpose() * out.weights / out.weights.sum()) : Eigen::VectorXd(out.T.colwise().mean().transpose());
    out.T.rowwise() -= out.offset.transpose();
  }
  return out;
}

Eigen::MatrixXd SolveElm(const Eigen::MatrixXd& K, const Eigen::MatrixXd& T, double C, const Eigen::VectorXd& weights) {
  Eigen::MatrixXd A = K;
  if (weights.size() > 0) A.diagonal().array() += 1.0 / (C * weights.array());
  else A.diagonal().array() += 1.0 / C;
  Eigen::LLT<Eigen::MatrixXd> llt(A);
  if (llt.info() == Eigen::Success) return llt.solve(T);
  return A.ldlt().solve(T);
}

void SetElmOutputs(Model& model, const Eigen::MatrixXd& alpha, const Eigen::VectorXd& offset, Task task, double scale) {
  if (task == Task::Multiclass) {
    model.coefs = alpha * scale;
    model.biases = offset;
    model.coef.resize(0);
    model.bias = 0;
  } else {
    model.coef = alpha.col(0) * scale;
    model.bias = offset[0];
  }
  model.alpha = alpha.col(0);
}

double ElmObjective(const Eigen::MatrixXd& T, const Eigen::MatrixXd& alpha) { return 0.5 * T.cwiseProduct(alpha).sum(); }

Model SummedKernelElmModel(Eigen::Index kernels, const Eigen::MatrixXd& coefs, const ElmOutputs& out, const Eigen::MatrixXd& alpha, Task task) {
  Model model;
  model.beta = Eigen::VectorXd::Constant(kernels, 1.0 / static_cast<double>(kernels));
  SetElmOutputs(model, coefs, out.offset, task, static_cast<double>(kernels));  // beta_j = 1/m: coefficients x m
  model.info.iterations = 1;
  model.info.innerSolves = 1;
  model.info.objective = ElmObjective(out.T, alpha);
  return model;
}

namespace {

class Kelm final : public Learner {
 public:
  explicit Kelm(const ParamMap& p) : c_(p.at("c")), bias_(p.at("bias") != 0) {}
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInput(Name(), train, t, options);
    Stopwatch clock;
    const auto m = static_cast<Eigen::Index>(train.size());
    const ElmOutputs out = MakeElmOutputs(t, bias_);
    Eigen::MatrixXd summed;
    const Eigen::MatrixXd alpha = SolveElm(SharedSum(options.cache, train, summed), out.T, c_, out.weights);
    Model model = SummedKernelElmModel(m, alpha, out, alpha, t.task);
    model.info.seconds = clock.Seconds();
    return model;
  }
  std::string_view Name() const override { return "kelm"; }

 private:
  double c_;
  bool bias_;
};

/// MK-ELM: alpha = (K_gamma + I/C)^-1 T and the closed-form weight step
///   ||beta_p|| = gamma_p sqrt(sum_t alpha_t' K_p alpha_t),
///   norm 1 (Liu et al. 2015, eq. 16): gamma_p = ||beta_p|| / sum_q ||beta_q|| (l1-MKL: fitted by FitEnmkl at mu = 1, below),
///   norm r > 1 (Liu et al. 2015, section 3.2, Kloft et al.'s closed form):
///     gamma_p = ||beta_p||^(2/(r+1)) / (sum_q ||beta_q||^(2r/(r+1)))^(1/r),
///     alternated until max |delta gamma| < tolerance. Each step minimises the jointly convex objective of Liu
///     et al. 2015, eq. 9, in gamma with alpha fixed, so the objective 1/2 tr(T' alpha) never increases.
class Mkelm final : public Learner {
 public:
  explicit Mkelm(const ParamMap& p)
      : c_(p.at("c")), norm_(p.at("norm")), tol_(p.at("tolerance")), maxIter_(static_cast<int>(p.at("max_iterations"))), bias_(p.at("bias") != 0) {}

  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInputExceptValues(Name(), train, t, options);
    Stopwatch clock;
    const Eigen::Index m = KernelCount(train, options);
    if (norm_ == 1.0) {
      // Sparse MK-ELM is l1-MKL with the kernel ELM inner problem: alpha = (K_gamma + (C W)^-1)^-1 (T - offset) is kernel
      // ridge regression with lambda = 1/C (the offset its bias), and MK-ELM's step gamma_p = ||beta_p|| / sum ||beta_q||
      // is ENMKL's update at mu = 1, with the same fixed point. Iterated as published it stops on max |delta gamma| < 1e-4
      // up to 1.2e-2 from that point, with tens of kernels at small weights the optimum has at 0 (docs/learners.md,
      // "MK-ELM"); ENMKL's exponentiated steps on an active set and Newton's method certified over every kernel reach it.
      const auto ridge = [&](const Eigen::VectorXd& y) { return MakeKrrSolver(y, 1.0 / c_, t.sampleWeights, bias_); };
      const auto solver = t.task == Task::Multiclass ? MakeOneVsRestSolver(t, ridge) : ridge(t.y);
      Model model = FitEnmkl(Name(), train, *solver, {1.0, maxIter_, tol_, tol_}, options);
      model.info.seconds = clock.Seconds();
      return model;
    }
    std::unique_ptr<gram::KernelStack> ownStack;
    const gram::KernelStack& stack = CheckedStack(Name(), train, options, ownStack);  // first: it checks the kernels' values
    const auto active = ActiveKernels(train, options);
    if (active.empty()) throw InputError("learners:AllZeroKernels", "learner mkelm", "every training kernel is identically zero: nothing to learn from");
    const ElmOutputs out = MakeElmOutputs(t, bias_);
    Eigen::VectorXd gamma = Eigen::VectorXd::Zero(m);
    for (auto j : active) gamma[j] = 1.0;
    if (const Model* w = options.warmStart; w && w->beta.size() == m && w->beta.sum() > 0) {
      const Eigen::VectorXd uniform = gamma / static_cast<double>(active.size());
      for (auto j : active) gamma[j] = 0.9 * w->beta[j] / w->beta.sum() + 0.1 * uniform[j];  // a zero weight can come back
    }
    gamma = Normalise(gamma);
    Model model;
    FitInfo& info = model.info;
    info.status = FitStatus::MaxIterReached;
    Eigen::MatrixXd alpha;
    for (int it = 1; it <= maxIter_; ++it) {
      alpha = SolveElm(stack.Combine(gamma), out.T, c_, out.weights);
      ++info.innerSolves;
      info.iterations = it;
      Eigen::VectorXd q = Eigen::VectorXd::Zero(m);
      for (Eigen::Index c = 0; c < alpha.cols(); ++c) q += stack.Quadratics(alpha.col(c));
      const Eigen::VectorXd norms = gamma.cwiseProduct(q.cwiseSqrt());
      if (!(norms.sum() > 0)) {  // no kernel explains anything (e.g. constant targets): keep gamma
        info.status = FitStatus::Converged;
        break;
      }
      Eigen::VectorXd next(m);
      if (norm_ == 1.0) {
        next = norms / norms.sum();
      } else {
        const double denom = std::pow(norms.array().pow(2.0 * norm_ / (norm_ + 1.0)).sum(), 1.0 / norm_);
        next = norms.array().pow(2.0 / (norm_ + 1.0)) / denom;
      }
      info.gap = (next - gamma).cwiseAbs().maxCoeff();
      gamma = next;
      if (info.gap < tol_) {
        info.status = FitStatus::Converged;
        break;
      }
    }
    // The model pairs the final gamma with its own alpha.
    alpha = SolveElm(stack.Combine(gamma), out.T, c_, out.weights);
    ++info.innerSolves;
    info.objective = ElmObjective(out.T, alpha);
    const double total = gamma.sum();
    model.beta = gamma / total;
    SetElmOutputs(model, alpha, out.offset, t.task, total);
    info.seconds = clock.Seconds();
    return model;
  }
  std::string_view Name() const override { return "mkelm"; }

 private:
  /// Onto the constraint surface: sum gamma = 1 (norm 1) or sum gamma^r = 1.
  Eigen::VectorXd Normalise(const Eigen::VectorXd& g) const {
    if (norm_ == 1.0) return g / g.sum();
    return g / std::pow(g.array().pow(norm_).sum(), 1.0 / norm_);
  }
  double c_, norm_, tol_;
  int maxIter_;
  bool bias_;
};

}  // namespace

std::unique_ptr<Learner> MakeKelm(const ParamMap& p) { return std::make_unique<Kelm>(p); }
std::unique_ptr<Learner> MakeMkelm(const ParamMap& p) { return std::make_unique<Mkelm>(p); }

}  // namespace neuromkl::learners
