#pragma once
// Single-kernel solvers shared by the single- and multiple-kernel learners.
#include <functional>
#include <memory>

#include <Eigen/Core>

#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

struct InnerSolution {
  Eigen::VectorXd alpha;  ///< solver variables (warm start of the next solve)
  Eigen::VectorXd coef;   ///< decision-function coefficients
  double bias = 0;
  double dual = 0;        ///< optimal value of the (maximised) dual J = L - 1/2 coef'K coef
  long iterations = 0;
  bool converged = true;
  double violation = 0;
  /// One-vs-rest with shared kernel weights (MakeOneVsRestSolver): one column of coefficients and
  /// one bias per class (coef and bias are then unused); alpha holds the classes' variables end to
  /// end, dual the sum of the classes' duals.
  Eigen::MatrixXd coefs;
  Eigen::VectorXd biases;
};

class InnerSolver {
 public:
  virtual ~InnerSolver() = default;
  virtual InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution* warm) const = 0;
  /// The data term of the primal objective for training decision values f (hinge x C, epsilon-
  /// insensitive x C, or squared / (2 lambda)): with the block penalty it gives ENMKL's objective.
  virtual double Loss(const Eigen::VectorXd& f) const = 0;
  /// The data term at a solution on kernel K: Loss(K coef + bias); the one-vs-rest solver sums it over classes.
  virtual double SolutionLoss(const Eigen::MatrixXd& K, const InnerSolution& sol) const {
    Eigen::VectorXd f = K * sol.coef;
    f.array() += sol.bias;
    return Loss(f);
  }
};

/// Class weights as a solver uses them: empty when none or all exactly 1, so that unit weights give the
/// unweighted computation bit for bit.
inline Eigen::VectorXd EffectiveWeights(const Eigen::VectorXd& w) { return w.size() > 0 && (w.array() == 1.0).all() ? Eigen::VectorXd() : w; }

/// C-SVC (labels +-1); `weights` (class weights per subject, empty = all 1) bound alpha_i by C w_i.
std::unique_ptr<InnerSolver> MakeSvcSolver(const Eigen::VectorXd& y, double C, double tolerance, long maxIterations, const Eigen::VectorXd& weights = {});
/// epsilon-SVR on targets centred to their mean (the mean is added back into the bias).
std::unique_ptr<InnerSolver> MakeSvrSolver(const Eigen::VectorXd& z, double C, double epsilon, double tolerance, long maxIterations);
/// Kernel ridge regression with a bias: coef = (K + lambda I)^-1 (y - mean y), bias = mean y; with
/// `weights` (class weights per subject) coef = (K + lambda W^-1)^-1 (y - m_w), bias = m_w the weighted mean.
std::unique_ptr<InnerSolver> MakeKrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights = {});
/// Multiclass targets (labels 0..T-1) as T one-vs-rest binary problems (+1 = the class, -1 = the rest)
/// on the same kernel: `binary` makes each class's solver from its +-1 labels. The solution has one
/// column of `coefs` per class; a class absent from the training set gets coefficients 0 and bias -1
/// (the constant fit to its all -1 labels). Shared-weight MKL sums the classes' quadratic terms
/// (Quadratics(stack, sol)), duals and losses.
std::unique_ptr<InnerSolver> MakeOneVsRestSolver(const Targets& targets, const std::function<std::unique_ptr<InnerSolver>(const Eigen::VectorXd&)>& binary);
/// +-1 labels of class c against the rest (NaN stays NaN).
Eigen::VectorXd OneVsRestLabels(const Eigen::VectorXd& y, int c);

/// The kernels' upper triangles stacked as the columns of one matrix, so that the two operations
/// every MKL iteration needs are single matrix-vector products over half the memory:
/// sum_j w_j K_j (Combine) and q_j = a' K_j a for all j (Quadratics). Built once per fit.
class KernelStack {
 public:
  explicit KernelStack(const KernelList& kernels);
  Eigen::MatrixXd Combine(const Eigen::VectorXd& weights) const;
  Eigen::VectorXd Quadratics(const Eigen::VectorXd& a) const;
  /// q_j = a'K_j a of a solution; summed over the classes of a one-vs-rest solution (shared weights).
  Eigen::VectorXd Quadratics(const InnerSolution& sol) const;

 private:
  Eigen::Index n_;
  Eigen::MatrixXd packed_;  ///< n(n+1)/2 x m
};

/// sum_j w_j K_j
Eigen::MatrixXd CombineKernels(const KernelList& kernels, const Eigen::VectorXd& weights);
/// Indices of kernels that are not identically zero.
std::vector<Eigen::Index> ActiveKernels(const KernelList& kernels);
/// Copies a solution's decision function into a model, coefficients scaled by `scale`
/// (binary: coef, bias; one-vs-rest: coefs, biases).
void StoreSolution(const InnerSolution& sol, double scale, Model& model);

}  // namespace neuromkl::learners
