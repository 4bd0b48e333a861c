#pragma once
// The learner interface (STYLE.md 3.3). Every learner fits on a list of n x n training kernels
// and targets and returns a Model whose decision function is
//     f(x) = sum_j beta_j sum_i coef_i K_j(x, x_i) + bias.
// Learners hold validated parameters only, and Fit is const: learners are thread-safe.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/stack.hpp"

namespace neuromkl::learners {

/// Multiclass: every classification learner (MakeLearner): native class scores for KELM, MK-ELM and
/// DKELM, shared kernel weights over one-vs-rest problems for the MKL learners, one-vs-rest otherwise.
enum class Task { Classification, Regression, Multiclass };

/// Kernel weights of multiple-kernel learners in multiclass fits: one beta for all classes (the sum of
/// the one-vs-rest objectives, Zien & Ong 2007) or one beta per class (independent one-vs-rest fits).
enum class MulticlassWeights { Shared, PerClass };

/// Targets: classification labels are -1 / +1 (+1 = the positive class); regression values are
/// real; multiclass labels are 0 .. classes - 1. Semi-supervised learners accept NaN targets: those
/// subjects are unlabelled (they shape the model but carry no target).
struct Targets {
  Task task = Task::Classification;
  Eigen::VectorXd y;
  int classes = 0;  ///< multiclass only
  /// Class weights as per-subject loss weights (classification only; empty = all 1): subject i's
  /// C becomes C w_i in the SVM-type learners (0 <= alpha_i <= C w_i) and its squared error is
  /// weighted by w_i in the least-squares ones (KELM, MK-ELM, DKELM, KRR). ClassSampleWeights makes them.
  Eigen::VectorXd sampleWeights{};
};

/// A study's class weights for one learner: none, "balanced", or a weight per class label.
struct ClassWeights {
  bool balanced = false;           ///< w_c = n / (k n_c) from the training set's class counts (sklearn's rule)
  std::map<double, double> given;  ///< label (-1 / +1, or 0 .. classes - 1) -> weight; classes not listed weigh 1
  bool Active() const { return balanced || !given.empty(); }
};
/// Per-subject weights of one training set: w_i = the weight of subject i's class. "balanced": n / (k n_c)
/// with n the labelled subjects of this training set, k the classes present in it and n_c the count of
/// class c in it (so a balanced weighting never looks at test subjects). Unlabelled subjects (NaN) weigh 1.
/// Empty when `weights` is not active.
Eigen::VectorXd ClassSampleWeights(const ClassWeights& weights, const Targets& targets);

enum class FitStatus {
  Converged,        ///< stopping rule met
  MaxIterReached,   ///< iteration cap reached first: the model is usable but not at the optimum
  Stalled,          ///< no further descent at the inner solver's accuracy before the stopping rule: usable, not certified
};
std::string_view ToString(FitStatus s);

/// How a fit went (OSQP's "info"): non-convergence is reported here, never thrown.
struct FitInfo {
  FitStatus status = FitStatus::Converged;
  int iterations = 0;        ///< outer iterations (MKL) or SMO iterations (SVM)
  int innerSolves = 0;       ///< single-kernel solves (MKL)
  long innerIterations = 0;  ///< SMO iterations summed over inner solves
  double objective = 0;      ///< final objective: the dual value (SVM, KRR, SimpleMKL), the primal of ENMKL's Def. 4 (Mourao-Miranda et al.)
  double gap = 0;            ///< relative duality gap (SimpleMKL), max |delta beta| (ENMKL), KKT violation (SVM)
  double seconds = 0;
  /// No dual variable at the upper bound of its box (learners on the C-SVC or epsilon-SVR dual: svm, enmkl_svm,
  /// simplemkl, mkl_bp at v = 1): the solution satisfies, to the same tolerance, the optimality conditions of every
  /// larger C as well, so it is also that fit (nested CV reuses it along a grid of C).
  bool solvesLargerC = false;
};

using KernelList = gram::KernelList;

struct Model {
  Eigen::VectorXd beta;   ///< kernel weights, one per kernel, sum 1 (single-kernel learners: uniform sum, 1 each)
  Eigen::VectorXd coef;   ///< coefficients of the decision function (SVM: y_i alpha_i; KRR: alpha_i)
  Eigen::VectorXd alpha;  ///< the solver's dual variables (SVM: 0 <= alpha <= C; KRR: = coef)
  double bias = 0;
  Eigen::MatrixXd coefs;   ///< multiclass only: one column of coefficients per class (coef is then empty)
  Eigen::VectorXd biases;  ///< multiclass only: one bias per class
  Eigen::MatrixXd betas;   ///< per-class weights only (MulticlassWeights::PerClass): one column of kernel weights per class; beta is their mean
  FitInfo info;
  Eigen::VectorXd solverState;  ///< the inner solver's variables as it left them (warm starts only)

  /// Decision values for test-vs-train blocks (each m x n, one per kernel, in training order).
  /// InputError with the shapes if they do not match the model.
  Eigen::VectorXd Decision(const KernelList& testVsTrain) const;
  /// Class scores (m x classes) of a multiclass model; the prediction is the arg max of a row.
  Eigen::MatrixXd Scores(const KernelList& testVsTrain) const;
  /// The same from blocks handed over one at a time, bit for bit.
  Eigen::VectorXd Decision(const gram::TestBlocks& test) const;
  Eigen::MatrixXd Scores(const gram::TestBlocks& test) const;
  /// Each kernel's part of the decision values (m x kernels): column j = beta_j K~_j(test, train) coef, 0 where
  /// beta_j = 0, so that bias + the sum of a row over the kernels is the subject's decision value (up to rounding:
  /// Decision adds the same parts in the same order, fused). Binary and regression models only.
  Eigen::MatrixXd DecisionParts(const gram::TestBlocks& test) const;
  bool Multiclass() const { return coefs.cols() > 0; }
  // Primal weights of linear kernels (voxel maps) are recovered from beta and coef with the fold's
  // preprocessing by gram::KernelStore::SubjectWeights.
};

struct FitOptions;

/// Work that depends on the training kernels only, done once and reused by every fit on the same
/// kernels (a grid search, several learners on one fold): the kernels' finiteness check, the
/// list of kernels that are not identically zero, the kernel stack of the multiple-kernel learners and
/// the summed kernel of the others. A cache is bound to one kernel list at a time, recognised by its
/// kernels' addresses and shapes (another list rebinds it); the caller must not change the kernels'
/// values while passing the same cache. Not thread-safe: one cache per thread (nested CV keeps one per
/// fold task).
class TrainingKernelCache {
 public:
  TrainingKernelCache();
  ~TrainingKernelCache();
  TrainingKernelCache(const TrainingKernelCache&) = delete;
  TrainingKernelCache& operator=(const TrainingKernelCache&) = delete;
  long checksRun() const { return checksRun_; }    ///< kernel-list checks done (tests, benchmarks)
  long stacksBuilt() const { return stacksBuilt_; }  ///< kernel stacks built
  long sumsBuilt() const { return sumsBuilt_; }      ///< summed kernels built

 private:
  friend bool CheckedBefore(TrainingKernelCache*, const KernelList&);
  friend bool CheckedBefore(TrainingKernelCache*, const gram::TrainingKernels&);
  friend void MarkChecked(TrainingKernelCache*);
  friend const gram::KernelStack& SharedStack(TrainingKernelCache*, const KernelList&, std::unique_ptr<gram::KernelStack>&);
  friend const gram::KernelStack& SharedStack(TrainingKernelCache*, const gram::TrainingKernels&, std::unique_ptr<gram::KernelStack>&);
  friend const Eigen::MatrixXd& SharedSum(TrainingKernelCache*, const KernelList&, Eigen::MatrixXd&);
  friend std::vector<Eigen::Index> ActiveKernels(const KernelList&, const FitOptions&);
  bool Bind(const KernelList& kernels);  ///< true if `kernels` is the list already bound
  bool Bind(const gram::TrainingKernels& kernels);  ///< the same for kernels given in place (recognised by address and shape)
  bool BindKey(std::vector<std::pair<const void*, Eigen::Index>> key);  ///< Bind for a key: drops the work of another
  std::vector<std::pair<const void*, Eigen::Index>> key_;
  bool checked_ = false;
  std::unique_ptr<gram::KernelStack> stack_;
  Eigen::MatrixXd sum_;  ///< empty until built
  std::vector<Eigen::Index> active_;  ///< the kernels that are not identically zero, once activeKnown_
  bool activeKnown_ = false;
  long checksRun_ = 0, stacksBuilt_ = 0, sumsBuilt_ = 0;
};

/// Optional help for a fit. `warmStart`: a model fitted on the same training kernels with
/// neighbouring parameters (a grid search) to start from; it changes the path, not the optimum.
/// `cache`: work shared with other fits on the same kernels; it changes neither path nor result.
/// `kernels`: the training kernels given in place of matrices (gram::TrainingKernels: a fold's kernels
/// read from the study's kernels, float32 copies, or kernels held by several owners), `train` being
/// empty; only learners whose LearnerInfo::kernelsInPlace is set accept it (the learners of kernel
/// weights). A fit on them equals the fit on the matrices they describe bit for bit.
struct FitOptions {
  const Model* warmStart = nullptr;
  TrainingKernelCache* cache = nullptr;
  const gram::TrainingKernels* kernels = nullptr;
};

class Learner {
 public:
  virtual ~Learner() = default;
  /// Fits on training kernels (each n x n) and targets (size n). Throws InputError on bad input
  /// (shapes, non-finite values, a single class); never throws for non-convergence.
  virtual Model Fit(const KernelList& train, const Targets& targets, const FitOptions& options) const = 0;
  Model Fit(const KernelList& train, const Targets& targets) const { return Fit(train, targets, FitOptions{}); }
  virtual std::string_view Name() const = 0;
};

// ---- parameters: one table per learner, validated in one place ----

struct ParamSpec {
  std::string name;
  double defaultValue;
  double lo, hi;          ///< bounds
  bool loOpen, hiOpen;    ///< open (exclusive) bounds
  bool integer;
  std::string doc;
};

struct LearnerInfo {
  std::string name;
  std::string description;
  bool classification;
  bool regression;
  bool multipleKernels;  ///< learns kernel weights
  std::vector<ParamSpec> params;
  bool multiclass;       ///< accepts Task::Multiclass (every classification learner; natively: kelm, mkelm, dkelm)
  bool semiSupervised;   ///< uses subjects without a target (NaN) as unlabelled data
  bool kernelsInPlace = false;  ///< fits training kernels given as FitOptions::kernels
};

using ParamMap = std::map<std::string, double>;

const std::vector<LearnerInfo>& LearnerCatalog();
/// nullptr if unknown.
const LearnerInfo* FindLearner(std::string_view name);
/// The grid searched by nested CV when a study neither fixes nor grids this parameter (the grids of
/// ENMKL, Mourao-Miranda et al.: c and lambda in 10^-3..10^3, mu in 0.1..1.0); empty for parameters that are not searched.
std::vector<double> DefaultGrid(std::string_view param);
/// Checks one value against its spec; the error message (empty if fine) names the bound and the value.
std::string CheckParam(const ParamSpec& spec, double value);
/// Defaults filled in, every value checked. InvalidParameter for unknown names (with a hint) or values out of range.
ParamMap ResolveParams(std::string_view learner, const ParamMap& given);
/// Creates a learner; parameters are resolved (and validated) here. Classification learners fit
/// Task::Multiclass targets too (`weights`: shared or per-class kernel weights of MKL learners).
std::unique_ptr<Learner> MakeLearner(std::string_view learner, const ParamMap& params, MulticlassWeights weights = MulticlassWeights::Shared);

/// Shared input checks of every learner's Fit (the contract).
/// Unlabelled (NaN) targets are accepted only with `allowUnlabelled`; the class checks then apply
/// to the labelled subjects.
void ValidateFitInput(std::string_view learner, const KernelList& train, const Targets& targets, bool allowUnlabelled = false);
/// The same; the kernels' check (O(m n^2)) is skipped when `options.cache` has already checked these kernels.
void ValidateFitInput(std::string_view learner, const KernelList& train, const Targets& targets, const FitOptions& options,
                      bool allowUnlabelled = false);

}  // namespace neuromkl::learners
