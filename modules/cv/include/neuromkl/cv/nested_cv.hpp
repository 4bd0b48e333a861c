#pragma once

// Nested cross-validation: per outer fold, an inner CV on the outer training subjects picks each
// learner's hyper-parameters, then the learner is refitted on the whole outer training set and
// predicts the outer test subjects. Kernels are prepared in every fold (outer and inner) with that
// fold's training subjects only (gram::KernelStore, wherever the kernels are held). Parallel over
// folds and grid points; every result lands in its own slot, so results are identical for any
// thread count.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/cv/splits.hpp"
#include "neuromkl/gram/store.hpp"
#include "neuromkl/learners/learner.hpp"
#include "neuromkl/metrics/calibration.hpp"

namespace neuromkl::cv {

/// Expands fixed parameters and a grid into complete parameter sets. Grid values are ordered from
/// the most regularised model to the least (c ascending, lambda descending, mu descending: mu = 1 is
/// the sparsest), other parameters as given; parameters vary in alphabetical order, the last fastest.
/// Tie rule of the inner search: the first best point in this order, i.e. the most regularised.
std::vector<learners::ParamMap> ExpandGrid(const learners::ParamMap& fixed, const std::map<std::string, std::vector<double>>& grid);

struct LearnerPlan {
  std::string label, name;
  std::vector<learners::ParamMap> grid;  ///< size 1: fixed parameters, no inner search
  /// Class weights (classification): per-subject weights computed from each training set (inner and
  /// outer) by learners::ClassSampleWeights, so "balanced" uses that training set's class counts only.
  learners::ClassWeights classWeights{};
};

/// Splits a training set (indices into the subjects) for the inner CV; returns folds whose indices
/// are positions within that training set.
using InnerSplitter = std::function<std::vector<Fold>(std::size_t outerFold, const std::vector<int>& train, const Eigen::VectorXd& yTrain)>;

struct OuterFoldResult {
  int index = 0, repeat = 0;
  std::vector<int> train, test;
  std::vector<int> unlabelled;       ///< semi-supervised learners: unlabelled subjects appended to the training set
  Eigen::VectorXd decision;          ///< on the test subjects (multiclass: the predicted class, 0..classes-1)
  Eigen::MatrixXd scores;            ///< multiclass only: class scores of the test subjects (test x classes)
  std::size_t chosen = 0;            ///< index into the plan's grid
  std::vector<double> innerScores;   ///< mean inner score per grid point (the inner criterion, e.g. balanced accuracy, or MSE)
  learners::Model model;
  std::string error;                 ///< non-empty if the refit failed
  /// Binary classification with NestedCvOptions::probabilities: Platt scaling fitted on the inner-CV
  /// out-of-fold decision values of the chosen parameters (this fold's training subjects only), and
  /// P(y = +1) of the test subjects (NaN where not fitted: no inner folds, one class, a failed fit).
  metrics::PlattScaling platt{};
  Eigen::VectorXd probability;       ///< on the test subjects; empty when probabilities are off
  /// Regression with NestedCvOptions::biasCorrection: prediction = slope x target + offset fitted on the
  /// inner-CV out-of-fold predictions of the chosen parameters; corrected = (decision - offset) / slope.
  metrics::BiasCorrection bias{};
  Eigen::VectorXd corrected;         ///< on the test subjects; empty when bias correction is off
  /// With NestedCvOptions::targetConfounds: the test subjects' targets adjusted with this training set's coefficients,
  /// what `decision` predicts and the metrics score (HeldOutTargets); empty otherwise.
  Eigen::VectorXd target;
};

struct LearnerOutcome {
  std::string label, name;
  std::vector<learners::ParamMap> grid;
  std::vector<OuterFoldResult> folds;
  long fits = 0;  ///< learner fits, inner and outer
  long innerFits = 0;          ///< inner-CV fits that returned a model
  long innerNotConverged = 0;  ///< ... of which did not converge (capped or stalled): grid points compared short of their optimum
  long innerCapped = 0;        ///< ... of those, the fits that ran to their iteration cap (the others stalled)
  long innerIterations = 0;    ///< learners::FitInfo::iterations summed over the inner fits (deterministic: benchmarks compare it)
  long innerSolverIterations = 0;  ///< learners::FitInfo::innerIterations (SMO iterations of the MKL learners) summed the same way
  long innerReused = 0;  ///< inner fits that are a smaller C's fit of the same fold (its solution meets the larger C's conditions)
};

enum class ColumnsInPlace { Auto, Always, Never };

struct NestedCvOptions {
  gram::Preprocessing preprocessing;
  /// Subjects without a target, as the last rows/columns of the kernels (indices n .. n + u - 1).
  /// Semi-supervised learners get them appended to every training set (outer and inner) with NaN
  /// targets; they are never test subjects, and the other learners never see them.
  int unlabelled = 0;
  /// Multiclass: shared or per-class kernel weights of the MKL learners.
  learners::MulticlassWeights multiclassWeights = learners::MulticlassWeights::Shared;
  /// Inner criterion (a metric name of PermutationMetrics' kind, larger is better); empty = balanced
  /// accuracy (classification, macro for multiclass) or MSE (regression).
  std::string criterion;
  /// Binary classification: Platt-scaled probabilities per outer fold (OuterFoldResult::platt). The
  /// inner CV then also runs for learners with fixed parameters (one grid point), for their out-of-fold
  /// decision values; if such a training set cannot be split, that fold has no probabilities.
  bool probabilities = false;
  /// Regression: linear bias correction per outer fold (OuterFoldResult::bias), fitted like Platt scaling.
  bool biasCorrection = false;
  /// Regression: confounds of the target (design rows indexed as the targets; intercept first), regressed out of the
  /// target in every training set, inner and outer: the fits see y - c b and the held-out subjects are scored against
  /// y - c b, with b fitted on that training set's (fit) rows only (AdjustedTargets). Null = the targets as given.
  std::shared_ptr<const gram::Covariates> targetConfounds;
  /// Fits on one fold's kernels share their check, packed stack and sum (learners::TrainingKernelCache).
  /// Results are identical either way; false only to measure what the sharing saves (bench_nested_cv).
  bool shareFoldWork = true;
  /// An inner fit at a C larger than that of a fit on the same fold (other parameters equal) whose solution has no dual
  /// variable at its bound is that fit (learners::FitInfo::solvesLargerC: the same optimality conditions hold), and is
  /// not refitted. False only to fit every grid point anyway (benchmarks, tests: same optimum, within the tolerances).
  bool reuseLargerC = true;
  /// Learners of the summed kernel (no kernel weights) get the fold's summed kernel (gram::PreparedFold::Summed)
  /// instead of a copy of every kernel. Their fits are identical either way (test decisions agree to
  /// rounding: another order of sums); false only to measure what it saves (bench_nested_cv).
  bool sumKernelsInPlace = true;
  /// Whether learners of kernel weights read each fold's training kernels from the study's kernels in place
  /// (gram::TrainingForm::InPlace; test blocks are prepared one kernel at a time for decisions: peak memory ~1.03x
  /// the kernels instead of ~2.6x) or get a copy of every kernel. In place, every entry is prepared again at each
  /// read: a fit takes ~2.3x as long (bench_nested_cv memory-mkl) from gram::kPackedStackBelow training subjects.
  /// Below it every fit packs the fold's kernels into one store anyway, so in place the copies are simply not
  /// made: the training kernels are packed from the study's kernels and the test blocks (m x l each, small there)
  /// are prepared once per fold task. Auto (the default) reads in place when every training set is below
  /// kPackedStackBelow, or when not even one fold task's copies fit the memory budget (memoryBudgetBytes), for
  /// the inner and the outer folds separately.
  /// Never with covariates (residualising mixes rows: those folds are copied). Results are identical bit
  /// for bit either way.
  ColumnsInPlace columnsInPlace = ColumnsInPlace::Auto;
  /// On a compact store held in this process (gram::MemoryKernels over gram::CompactKernelList) where the learners
  /// of kernel weights get copies (columnsInPlace: unless they are read in place): the copies of the training kernels
  /// are float32 (gram::TrainingForm::Float32Copies) instead of float64. Half the bytes for the copies, and fits from
  /// gram::kPackedStackBelow subjects read them in place at half the memory traffic; the price is a second rounding (of the prepared values), so results are within float32 rounding
  /// of the float64 copies (decisions ~1e-7 relative), not equal bit for bit. Test blocks stay float64.
  /// Used only when every learner of kernel weights reads columns. Ignored for float64 kernels.
  bool float32FoldCopies = true;
  /// Bytes the fold kernels of the folds in flight may take together; 0 = the memory the system reports
  /// available when the run starts. Each fold task copies its training and test kernels (with 116
  /// regions at n = 2,000, 1.9 GB for an inner fold, 3 GB for an outer one); when a thread per fold
  /// would not fit, fewer folds run at once (each fit still uses every thread). Results do not depend on it.
  std::uint64_t memoryBudgetBytes = 0;
};

/// How many fold tasks of `bytesPerTask` each may run at once within `budgetBytes`: at least 1 (one fold
/// must run; if even that does not fit, the run goes on and the system decides), at most `threads`.
std::size_t FoldsInFlight(std::uint64_t bytesPerTask, std::uint64_t budgetBytes, std::size_t threads);

/// The threads a parallel loop started here may use: the current task arena's, capped by a
/// tbb::global_control limit (a study's `threads`). Nested CV and permutation tests size their memory shares by it.
std::size_t ActiveThreads();

/// `kernels`: raw (n + unlabelled) x (n + unlabelled) kernels, wherever they are held; `targets`: n values. InputError for
/// folds that cannot be used (e.g. an inner split impossible on a small training set), and for a preprocessing the
/// kernels cannot be prepared with (gram::KernelStore::CheckPreprocessing).
std::vector<LearnerOutcome> RunNestedCv(const gram::KernelStore& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options);
/// The same on float64 kernels held by the caller (gram::MemoryKernels over them).
std::vector<LearnerOutcome> RunNestedCv(const learners::KernelList& kernels, const learners::Targets& targets, const std::vector<Fold>& outer,
                                        const InnerSplitter& inner, const std::vector<LearnerPlan>& plans, const NestedCvOptions& options);

/// The targets of `rows` with the confounds regressed out by least squares on training rows `train` only (their fit rows,
/// missing values imputed from them: gram::MakeFoldResidualiser): y_i - c_i b, b = (C_Q'C_Q)^+ C_Q' y_Q. Rows past the
/// end of y (unlabelled subjects) stay NaN. `where` names the training set in errors.
Eigen::VectorXd AdjustedTargets(const Eigen::VectorXd& y, const gram::Covariates& confounds, const std::vector<int>& train,
                                const std::vector<int>& rows, const char* where = "fold");
/// The coefficients b of AdjustedTargets (intercept first), as an exported model keeps them.
Eigen::VectorXd TargetConfoundCoefficients(const Eigen::VectorXd& y, const gram::Covariates& confounds, const std::vector<int>& train,
                                           const char* where = "fold");
/// What an outer fold's decision values are scored against: its adjusted targets (OuterFoldResult::target) when the
/// nested CV adjusted them, else the study's targets y of its test subjects.
Eigen::VectorXd HeldOutTargets(const OuterFoldResult& fold, const Eigen::VectorXd& y);

/// A model fitted on a fold's summed kernel (gram::PreparedFold::Summed) as the same model over `kernels` kernels
/// (beta_j = 1 / kernels and coefficients times kernels, the form the summed-kernel learners report): same decision
/// function.
learners::Model ExpandSummedModel(learners::Model model, Eigen::Index kernels);

/// How an outer fold's refit ended: "failed" (no model) or the learner's status ("converged", ...).
std::string FoldStatus(const OuterFoldResult& fold);
/// FoldStatus counted over a learner's outer folds.
std::map<std::string, int> FoldStatusCounts(const LearnerOutcome& outcome);

/// Metrics of one learner: pooled over out-of-fold predictions (averaged over repeats) and the
/// mean and SD over outer folds (NaN values, e.g. AUC of a one-class fold, are left out).
struct Summary {
  std::map<std::string, double> pooled, foldMean, foldSd;
};
/// An outer fold whose fit failed (an error, or a decision value that is not a number).
bool FoldFailed(const OuterFoldResult& fold);
/// Pooled metrics over the out-of-fold predictions of the successful folds only (a failed fold's
/// subjects are never scored), with "failed_folds" (outer folds whose fit failed, over all repeats) and
/// "scored_subjects" (subjects scored per repeat); fold mean and SD over the successful folds.
Summary Summarise(const LearnerOutcome& outcome, const learners::Targets& targets);

/// Metrics of out-of-fold predictions: `decision` for binary and regression, `scores` (rows x classes) for multiclass.
std::map<std::string, double> Metrics(const learners::Targets& targets, const Eigen::VectorXd& y, const Eigen::VectorXd& decision,
                                      const Eigen::MatrixXd& scores);
/// The inner criteria a study may choose for a task (the first is the default).
std::vector<std::string> InnerCriteria(learners::Task task);

/// The metrics a permutation test reports, with their direction (true = larger is better).
std::vector<std::pair<std::string, bool>> PermutationMetrics(learners::Task task);

}  // namespace neuromkl::cv
