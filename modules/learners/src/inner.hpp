#pragma once
// Single-kernel solvers shared by the single- and multiple-kernel learners.
#include <functional>
#include <memory>
#include <vector>

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
  /// The same with a stopping tolerance of at least `tolerance` (an iterative solver may stop earlier;
  /// a direct one ignores it): the early outer iterations of MKL do not need a tight inner solve.
  virtual InnerSolution SolveLoosely(const Eigen::MatrixXd& K, const InnerSolution* warm, double /*tolerance*/) const { return Solve(K, warm); }
  /// Whether every solve is exact whatever the tolerance asked (a direct solver: SolveLoosely is Solve).
  virtual bool Exact() const { return false; }
  /// The data term of the primal objective for training decision values f (hinge x C, epsilon-
  /// insensitive x C, or squared / (2 lambda)): with the block penalty it gives ENMKL's objective.
  virtual double Loss(const Eigen::VectorXd& f) const = 0;
  /// The data term at a solution on kernel K: Loss(K coef + bias); the one-vs-rest solver sums it over classes.
  virtual double SolutionLoss(const Eigen::MatrixXd& K, const InnerSolution& sol) const {
    Eigen::VectorXd f = K * sol.coef;
    f.array() += sol.bias;
    return Loss(f);
  }
  /// Sensitivity of the solution to the kernel weights (ENMKL's Newton step on a fixed support).
  /// With K = sum_j beta_j K_j and the solver's active constraints held fixed, the coefficients move
  /// as d coef / d beta_k = -P (K_k coef) for a symmetric operator P (the inverse of the KKT system
  /// on the free variables). `gradients(coef)` returns the columns K_k coef of the kernels of
  /// interest; H receives G'PG (summed over the classes of a one-vs-rest solution), so that
  /// d (coef'K_j coef) / d beta_k = -2 H_jk. Returns false when the solver has no such operator.
  /// With `dcoef`, the SVM solvers also return the columns d coef / d beta_k = -P (K_k coef) (n x kernels), for
  /// Shift; the others leave it empty.
  virtual bool Curvature(const Eigen::MatrixXd& /*K*/, const InnerSolution& /*sol*/,
                         const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& /*gradients*/, Eigen::MatrixXd& /*H*/,
                         Eigen::MatrixXd* /*dcoef*/ = nullptr) const {
    return false;
  }
  /// Moves the solution's variables by the coefficient change `dcoef` (a first-order prediction of the solution at
  /// new weights, from Curvature's d coef / d beta), projected back onto the feasible set where it leaves it: the warm
  /// start of the next solve. Returns false (and leaves `sol` alone) for a solver without warm starts or such a map.
  virtual bool Shift(InnerSolution& /*sol*/, const Eigen::VectorXd& /*dcoef*/) const { return false; }
  /// Whether the solution has no free variable (every SVM variable at a bound of its box): with the active
  /// constraints held it does not move with the kernel weights, so Curvature would give H = 0.
  virtual bool Frozen(const InnerSolution& /*sol*/) const { return false; }
  /// Whether no variable is at the upper bound of its box (C-SVC, epsilon-SVR): the box constraints are then inactive,
  /// and with a larger C the same solution meets the same optimality conditions (the same free and zero variables,
  /// the same bias) - the solution of every larger C. False for solvers without a box.
  virtual bool BoxInactive(const InnerSolution& /*sol*/) const { return false; }
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
/// Without `bias`: coef = (K + lambda W^-1)^-1 y and bias 0 (kernel ELM's form without an offset, `bias` 0).
std::unique_ptr<InnerSolver> MakeKrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights = {}, bool bias = true);
/// Multiclass targets (labels 0..T-1) as T one-vs-rest binary problems (+1 = the class, -1 = the rest)
/// on the same kernel: `binary` makes each class's solver from its +-1 labels. The solution has one
/// column of `coefs` per class; a class absent from the training set gets coefficients 0 and bias -1
/// (the constant fit to its all -1 labels). Shared-weight MKL sums the classes' quadratic terms
/// (Quadratics(stack, sol)), duals and losses.
std::unique_ptr<InnerSolver> MakeOneVsRestSolver(const Targets& targets, const std::function<std::unique_ptr<InnerSolver>(const Eigen::VectorXd&)>& binary);
/// +-1 labels of class c against the rest (NaN stays NaN).
Eigen::VectorXd OneVsRestLabels(const Eigen::VectorXd& y, int c);

/// Elastic-net MKL's settings (Mourao-Miranda et al.; enmkl.cpp, docs/learners.md "ENMKL").
struct EnmklSettings {
  double mu;
  int maxIterations;
  double betaTolerance;       ///< distance of the sum-normalised weights from the fixed point (Newton's step)
  double objectiveTolerance;  ///< on the relative change of the primal objective (only for a solver without Curvature)
};
/// Elastic-net MKL on any inner solver: water-filling (mu < 1) or exponentiated steps (mu = 1) on an active set,
/// Newton's method on the support, certified over every kernel. ENMKL-SVM and ENMKL-KRR fit with it, and MK-ELM's
/// sparse form (norm 1), which is l1-MKL with the kernel ELM (ridge) inner problem, and MKL-BP at v = 1. The training
/// kernels' values are checked here (CheckedStack: call ValidateFitInputExceptValues first); `learner` names errors.
Model FitEnmkl(std::string_view learner, const KernelList& train, const InnerSolver& solver, const EnmklSettings& s, const FitOptions& options);
/// SimpleMKL's fit (reduced gradient, line search on J, Newton steps; certified by the relative duality gap) on any
/// inner solver and the caller's (checked) stack of the training kernels, from the weights `start` (sum 1) and the inner
/// solver's variables there (empty: a cold solve).
Model FitSimpleMklFrom(const KernelList& train, const gram::KernelStack& stack, const InnerSolver& solver, double gapTolerance, int maxIterations,
                       const Eigen::VectorXd& start, const Eigen::VectorXd& startState, const FitOptions& options);

/// Active-set quadratics: c_j = sqrt(q_j) exactly for the kernels the caller asks for
/// (those in use), and for the others only when a safe upper bound says they might matter.
/// Every bound comes from the last exact evaluation of that kernel at coefficients b:
/// sqrt(a'K_j a) <= sqrt(b'K_j b) + sqrt(lambda_max(K_j)) ||a - b||_F (triangle inequality for the
/// seminorm ||K_j^{1/2} .||; a and b stack the classes' coefficient columns).
class ScreenedNorms {
 public:
  explicit ScreenedNorms(const gram::KernelStack& stack);
  /// Starts a new solution: afterwards Exact(j) and Bound(j) refer to it.
  void Begin(const InnerSolution& sol);
  /// sqrt(a'K_j a) at the current solution (computed once, then remembered as the bound's anchor).
  double Exact(Eigen::Index j);
  /// A value >= sqrt(a'K_j a) at the current solution (exact if already computed).
  double Bound(Eigen::Index j) const;
  bool Known(Eigen::Index j) const { return known_[static_cast<std::size_t>(j)] != 0; }
  /// Computes the exact values of the kernels in `which` that are not yet known (side by side, or in one
  /// request, where the stack's quadratic form gains by it). Same values as Exact.
  void Evaluate(const std::vector<Eigen::Index>& which);
  /// Evaluate for a solution with one coefficient vector a (not one-vs-rest), through the columns
  /// K_j a (j in `which`, in that order) written to `products`: a'K_j a is read off them, so a caller
  /// that needs those columns anyway (Newton's curvature) pays one pass over the kernels, not two.
  /// Returns false, computing nothing, for a one-vs-rest solution.
  bool EvaluateWithProducts(const std::vector<Eigen::Index>& which, Eigen::MatrixXd& products);
  /// All kernels exactly (the full optimality check).
  Eigen::VectorXd All();
  long exactEvaluations = 0;  ///< kernel quadratics computed (for the benchmarks)

 private:
  void Record(Eigen::Index j, double value);  ///< an exact value at the current solution, and the bound's new anchor
  const gram::KernelStack& stack_;
  Eigen::MatrixXd current_;       ///< the current coefficients (classes as columns)
  std::unique_ptr<gram::QuadraticForm> form_;  ///< the stack's quadratics of current_
  Eigen::VectorXd value_;         ///< exact values at the current solution where known_
  std::vector<char> known_;
  Eigen::VectorXd anchorValue_;   ///< last exact value of each kernel ...
  std::vector<Eigen::MatrixXd> anchors_;  ///< ... and the coefficients it was computed at (empty: never)
};

/// Training-kernel cache (learner.hpp): whether `kernels` were checked before through `cache` (false
/// without a cache; binds the cache to `kernels`), and recording a successful check.
bool CheckedBefore(TrainingKernelCache* cache, const KernelList& kernels);
bool CheckedBefore(TrainingKernelCache* cache, const gram::TrainingKernels& kernels);
void MarkChecked(TrainingKernelCache* cache);
/// The packed stack of `kernels`: the cache's (built on first use) or, without a cache, one built into `local`.
const gram::KernelStack& SharedStack(TrainingKernelCache* cache, const KernelList& kernels, std::unique_ptr<gram::KernelStack>& local);
/// For the learners of kernel weights, which read their kernels through a stack: ValidateFitInput without its pass
/// over the matrices' values, which CheckedStack makes while packing them (a second pass over every matrix costs ~15 % of
/// a cold ENMKL-SVM fit at n = 200 with 116 kernels).
void ValidateFitInputExceptValues(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options,
                                  bool allowUnlabelled = false);
/// SharedStack of the training kernels (matrices, or options.kernels) with ValidateFitInput's check of the matrices'
/// values (unless the cache made it before): the same InputError for the first kernel with a NaN or infinite entry.
const gram::KernelStack& CheckedStack(std::string_view learner, const KernelList& train, const FitOptions& options,
                                      std::unique_ptr<gram::KernelStack>& local);
const gram::KernelStack& SharedStack(TrainingKernelCache* cache, const gram::TrainingKernels& kernels, std::unique_ptr<gram::KernelStack>& local);
/// q_j = a'K_j a of a solution; summed over the classes of a one-vs-rest solution (shared weights).
Eigen::VectorXd Quadratics(const gram::KernelStack& stack, const InnerSolution& sol);
/// The training kernels of a fit of a learner of kernel weights: `train`, or options.kernels when given.
/// Their number, and ActiveKernels of them (CheckedStack gives their stack).
Eigen::Index KernelCount(const KernelList& train, const FitOptions& options);
std::vector<Eigen::Index> ActiveKernels(const KernelList& train, const FitOptions& options);
/// sum_j K_j: the cache's (built on first use) or, without a cache, computed into `local`.
const Eigen::MatrixXd& SharedSum(TrainingKernelCache* cache, const KernelList& kernels, Eigen::MatrixXd& local);

/// The SVM's sensitivity on its free set F (FreeSetCurvature in svm.cpp) from the pieces: K_FF (f x f) and RF, the
/// columns (K_j coef)_F of the kernels differentiated (f x kernels): H = RF' x with [K_FF 1; 1' 0] [x; t] = [RF; 0].
/// With `dcoef`: the columns d coef / d beta_k (`rows` x kernels), -x on F and 0 elsewhere.
bool BorderedCurvature(const Eigen::MatrixXd& KFF, Eigen::MatrixXd RF, const std::vector<Eigen::Index>& free, Eigen::Index rows, Eigen::MatrixXd& H,
                       Eigen::MatrixXd* dcoef);

/// The step of a Newton method on kernel weights: J delta = rhs by LU, or the minimum-norm solution
/// when J is singular or nearly so (estimated reciprocal condition below 1e-12).
Eigen::VectorXd SolveNewtonSystem(const Eigen::MatrixXd& J, const Eigen::VectorXd& rhs);

/// sum_j w_j K_j
Eigen::MatrixXd CombineKernels(const KernelList& kernels, const Eigen::VectorXd& weights);
/// Indices of kernels that are not identically zero.
std::vector<Eigen::Index> ActiveKernels(const KernelList& kernels);
/// Copies a solution's decision function into a model, coefficients scaled by `scale`
/// (binary: coef, bias; one-vs-rest: coefs, biases).
void StoreSolution(const InnerSolution& sol, double scale, Model& model);

}  // namespace neuromkl::learners
