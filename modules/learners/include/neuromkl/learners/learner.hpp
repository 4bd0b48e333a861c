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
  double objective = 0;      ///< final objective: the dual value (SVM, KRR, SimpleMKL), the primal of seed 004 Def. 4 (ENMKL)
  double gap = 0;            ///< relative duality gap (SimpleMKL), max |delta beta| (ENMKL), KKT violation (SVM)
  double seconds = 0;
};

using KernelList = std::vector<Eigen::MatrixXd>;

/// Test-vs-train blocks handed over one at a time instead of held together (nested CV prepares a fold's
/// blocks from the study's kernels when a model needs them: issue 17). `block(j)` gives block j (rows x
/// training subjects); the reference stays valid until the next call. Only the blocks a model uses are asked for.
struct TestBlocks {
  Eigen::Index count = 0;  ///< kernels
  Eigen::Index rows = 0;   ///< test subjects
  std::function<const Eigen::MatrixXd&(Eigen::Index)> block;
  /// Optional, for blocks held elsewhere (kernels held by several owners): the products block(j) x C for each j in
  /// `which`, computed where the blocks are, so that only the products travel. `form`: how a decision multiplies
  /// (TestProduct), so the values are those of the blocks' own product bit for bit.
  std::function<std::vector<Eigen::MatrixXd>(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form)> products;
};
/// How a decision multiplies a test block by coefficients: a vector (one column), a matrix (every class at once), or
/// column by column (per-class kernel weights).
enum TestProductForm : int { kProductVector = 0, kProductMatrix = 1, kProductColumns = 2 };
/// block x C in `form` (m x C.cols()): the one arithmetic of every decision, wherever the block is held.
Eigen::MatrixXd TestProduct(const Eigen::MatrixXd& block, const Eigen::MatrixXd& C, int form);
/// Blocks that are held in a list (`testVsTrain` must outlive the result).
TestBlocks HeldBlocks(const KernelList& testVsTrain);

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
  Eigen::VectorXd Decision(const TestBlocks& test) const;
  Eigen::MatrixXd Scores(const TestBlocks& test) const;
  bool Multiclass() const { return coefs.cols() > 0; }
  // Primal weights of linear kernels (voxel maps) are recovered from beta and coef with the fold's
  // preprocessing by weights::SubjectWeights.
};

/// Training kernels that are read where they are instead of passed as matrices (issue 17: nested CV
/// prepares a fold's kernels from the study's kernels entry by entry, so a learner of kernel weights
/// needs no copy of them). The kernels are symmetric; a learner reads their upper triangles only.
class KernelColumns {
 public:
  virtual ~KernelColumns() = default;
  virtual Eigen::Index Count() const = 0;  ///< kernels
  virtual Eigen::Index Size() const = 0;   ///< subjects (each kernel is Size() x Size())
  /// Rows 0..j of column j of kernel k, the values the kernel matrix would hold: j + 1 values into `out`.
  virtual void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const = 0;
};

/// Prepared training kernels held in float32 (the compact store's precision, kernels/compact_kernels.hpp)
/// as KernelColumns: each value is widened to double as it is read, so a fit on them is the fit on their
/// values as float64 matrices, bit for bit. From kViewFrom subjects the stack's combination and quadratics
/// read the float32 columns in place, moving half the bytes (issue 17: the refit at n = 2,000 is bound by
/// memory traffic). `kernels` must outlive it.
class Float32Columns final : public KernelColumns {
 public:
  explicit Float32Columns(const std::vector<Eigen::MatrixXf>& kernels) : kernels_(kernels) {}
  explicit Float32Columns(std::vector<Eigen::MatrixXf>&&) = delete;  // it keeps a reference
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(kernels_.size()); }
  Eigen::Index Size() const override { return kernels_.empty() ? 0 : kernels_[0].rows(); }
  void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const override;
  const std::vector<Eigen::MatrixXf>& Kernels() const { return kernels_; }

 private:
  const std::vector<Eigen::MatrixXf>& kernels_;
};

/// Training kernels held by several owners (the MPI ranks of a study whose kernels do not fit one rank: issue 17,
/// docs/batch.md, "Kernels that do not fit one rank"), given as FitOptions::columns to a learner of kernel weights.
/// Its stack operations run where the kernels are and only their results travel: a combined kernel per solve, a few
/// quadratics, product columns. Every owner computes with OwnedStack, the arithmetic of the stack of a fit on all the
/// kernels in one process, so quadratics, products and bounds are those values bit for bit; the combination is the
/// sum of the owners' partial sums, added in owner order (equal to the one-process sum with one owner, within its
/// rounding with several). UpperColumn is not available (std::logic_error): a learner never reads these entry by entry.
class DistributedColumns : public KernelColumns {
 public:
  void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const final;
  /// sum_j w_j K_j (n x n, symmetric): only the kernels with w_j != 0 are read.
  virtual void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const = 0;
  /// a'K_j a summed over the columns of A (clipped at 0) for each j in `which`: `perKernel` as a one-process fit
  /// evaluates a kernel at a time (KernelStack::Quadratic, the screened norms), else as it evaluates all of them for
  /// one vector (KernelStack::Quadratics, one product on a packed stack).
  virtual Eigen::VectorXd Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const = 0;
  /// The columns K_j v for j in `which`.
  virtual Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const = 0;
  /// KernelStack::RootSpectralBound of each kernel in `which`.
  virtual Eigen::VectorXd RootSpectralBounds(const std::vector<Eigen::Index>& which) const = 0;
  /// The first kernel with a NaN or infinite entry in its upper triangle, or -1 (ValidateFitInput's check).
  virtual Eigen::Index FirstNonFinite() const = 0;
  /// The kernels that are not identically zero (ActiveKernels).
  virtual std::vector<Eigen::Index> NonZero() const = 0;
};

class KernelStack;
/// One owner's share of DistributedColumns: the stack of its kernels (given as columns, e.g. a fold of its share
/// of the study's kernels), answering the owner's part of each operation with the arithmetic of the stack of a
/// one-process fit (packed below kPackedStackBelow subjects, read in place from it). `columns` must outlive it.
class OwnedStack {
 public:
  explicit OwnedStack(const KernelColumns& columns);
  /// The same over matrices (`kernels` must outlive it), read in place from kPackedStackBelow subjects.
  explicit OwnedStack(const KernelList& kernels);
  ~OwnedStack();
  OwnedStack(const OwnedStack&) = delete;
  OwnedStack& operator=(const OwnedStack&) = delete;
  /// sum_j w_j K_j over these kernels (n x n, symmetric); the caller adds the owners' sums.
  void Combine(const Eigen::VectorXd& weights, Eigen::MatrixXd& out) const;
  /// DistributedColumns::Quadratics for these kernels.
  Eigen::VectorXd Quadratics(const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& A, bool perKernel) const;
  Eigen::MatrixXd Products(const std::vector<Eigen::Index>& which, const Eigen::VectorXd& v) const;
  double RootSpectralBound(Eigen::Index k) const;
  /// Per kernel, whether its upper triangle is finite (ValidateFitInput's check) and whether it is not identically
  /// zero (ActiveKernels), from one pass over each kernel's upper triangle (on a packed stack, over the packed store).
  void Facts(std::vector<char>& finite, std::vector<char>& nonzero) const;

 private:
  std::unique_ptr<KernelStack> stack_;
};

struct FitOptions;
/// Training subjects from which the learners of kernel weights read their kernels in place (a view
/// KernelStack); below it they pack the kernels' upper triangles into one store (n(n + 1) / 2 per kernel).
inline constexpr Eigen::Index kPackedStackBelow = 1024;

/// Work that depends on the training kernels only, done once and reused by every fit on the same
/// kernels (a grid search, several learners on one fold; issue 17): the kernels' finiteness check, the
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
  friend void MarkChecked(TrainingKernelCache*);
  friend const KernelStack& SharedStack(TrainingKernelCache*, const KernelList&, std::unique_ptr<KernelStack>&);
  friend const Eigen::MatrixXd& SharedSum(TrainingKernelCache*, const KernelList&, Eigen::MatrixXd&);
  friend bool CheckedBefore(TrainingKernelCache*, const KernelColumns&);
  friend std::vector<Eigen::Index> ActiveKernels(const KernelList&, const FitOptions&);
  friend const KernelStack& SharedStack(TrainingKernelCache*, const KernelColumns&, std::unique_ptr<KernelStack>&);
  bool Bind(const KernelList& kernels);  ///< true if `kernels` is the list already bound
  bool Bind(const KernelColumns& columns);  ///< the same for columns (recognised by address and shape)
  bool BindKey(std::vector<std::pair<const void*, Eigen::Index>> key);  ///< Bind for a key: drops the work of another
  /// The stack of `kernels` (a KernelList or KernelColumns), built on first use.
  template <typename Kernels>
  const KernelStack& Stack(const Kernels& kernels);
  std::vector<std::pair<const void*, Eigen::Index>> key_;
  bool checked_ = false;
  std::unique_ptr<KernelStack> stack_;
  Eigen::MatrixXd sum_;  ///< empty until built
  std::vector<Eigen::Index> active_;  ///< the kernels that are not identically zero, once activeKnown_
  bool activeKnown_ = false;
  long checksRun_ = 0, stacksBuilt_ = 0, sumsBuilt_ = 0;
};

/// Optional help for a fit. `warmStart`: a model fitted on the same training kernels with
/// neighbouring parameters (a grid search) to start from; it changes the path, not the optimum.
/// `cache`: work shared with other fits on the same kernels; it changes neither path nor result.
/// `columns`: the training kernels as KernelColumns, `train` being empty; only learners whose
/// LearnerInfo::readsColumns is set accept it (the learners of kernel weights). A fit on columns
/// equals the fit on the matrices they describe bit for bit.
struct FitOptions {
  const Model* warmStart = nullptr;
  TrainingKernelCache* cache = nullptr;
  const KernelColumns* columns = nullptr;
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
  bool readsColumns = false;  ///< fits training kernels given as FitOptions::columns
};

using ParamMap = std::map<std::string, double>;

const std::vector<LearnerInfo>& LearnerCatalog();
/// nullptr if unknown.
const LearnerInfo* FindLearner(std::string_view name);
/// The grid searched by nested CV when a study neither fixes nor grids this parameter (seed 004's
/// grids: c and lambda in 10^-3..10^3, mu in 0.1..1.0); empty for parameters that are not searched.
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
