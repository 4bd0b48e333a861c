#pragma once
// What the stages of one study share after its inputs are read: the cohort, the outer folds, the
// kernels (over labelled subjects, then unlabelled ones for semi-supervised learners) and the
// learner plans. Used by RunStudy and by batch workers that compute a study's permutation blocks.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/store.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/covariates.hpp"
#include "neuromkl/pipeline/harmonisation.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl {
class Progress;
}

namespace neuromkl::pipeline {

/// Permutations are computed, checkpointed and distributed in blocks of this size.
inline constexpr int kPermutationBlock = 10;

/// One block of permutations: pooled[p][l] is learner l's pooled metrics on the block's permutation p, shares[p][l][j]
/// its mean weight share (percent) of kernel j there, the statistic its region table ranks by (empty when no outer
/// fold succeeded).
struct PooledBlock {
  std::vector<std::vector<std::map<std::string, double>>> pooled;
  std::vector<std::vector<std::vector<double>>> shares;
};

/// Caps the threads of everything run while it lives (TBB's global limit); 0 = no cap.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);

 private:
  std::shared_ptr<void> control_;  // a tbb::global_control, kept out of this header
};

struct StudyContext {
  config::StudyConfig study;
  Cohort cohort;
  int n = 0;                         ///< labelled subjects
  std::vector<cv::Fold> outer;
  std::vector<cv::LearnerPlan> plans;
  /// /covariates over the kernels' rows (labelled, then unlabelled); null without covariates.
  std::shared_ptr<const CovariateDesign> covariates;
  /// /target/confounds over the labelled subjects (rows as cohort.y); null without. The nested CV regresses them out of
  /// the target in every training set (cv::NestedCvOptions::targetConfounds).
  std::shared_ptr<const CovariateDesign> targetConfounds;
  /// /harmonisation's ComBat design over the kernels' rows (sites, preserved covariates, reference group); null without.
  std::shared_ptr<const gram::Harmonisation> harmonisation;
  /// After AttachKernels, with /harmonisation: the sources harmonised inside the folds and the voxels they hold, and the
  /// store (also `kernels`) whose voxels the maps of harmonised sources are made from.
  std::vector<HarmonisedSourceNote> harmonisedSources;
  std::shared_ptr<const gram::FoldFormedKernels> foldFormedKernels;
  // after AttachKernels:
  KernelStageResult ks;
  std::vector<int> kernelRows;       ///< cohort rows of the kernels' rows: labelled, then unlabelled
  int unlabelledCount = 0;
  /// The kernels the learners see, over kernelRows: in this process (float64, or with /kernels/precision "float32"
  /// the compact store), or held by the MPI ranks (ks.owners). Every stage reads them through this one interface.
  std::shared_ptr<const gram::KernelStore> kernels;
  /// kernelRows is every subject in order: the stage's float64 kernels (ks.set.kernels) were moved into `kernels`,
  /// and `movedKernels` refers to them there (to write them with the results).
  const learners::KernelList* movedKernels = nullptr;
  /// Per kernel: subjects whose data are not all zero there (raw K_ii > 0), counted before any rounding.
  std::vector<int> subjectsWithSignal;
  cv::NestedCvOptions nestedOptions;

  /// The inner-CV splitter; it refers to this context, which must outlive it.
  cv::InnerSplitter Inner() const;
  /// The inner-CV splitter of the final model (the same scheme over every labelled subject, its own seed).
  cv::InnerSplitter FinalInner() const;
  std::uint64_t PermutationSeed() const;
  /// Hash of everything the permutation results depend on (inputs and resolved config, not the
  /// output location or thread count): checkpoints are reused only under the same key.
  std::string PermutationKey() const;
  std::vector<std::string> LearnerLabels() const;
  /// The study's task and class count with targets y (the cohort's, or permuted ones).
  learners::Targets TargetsOf(const Eigen::VectorXd& y) const;
  std::size_t KernelCount() const { return kernels ? kernels->Count() : 0; }
  /// The kernels' operations with the study's fold preprocessing (nestedOptions.preprocessing): a fold, its source
  /// scales, subject weights of a fold model, and per kernel the largest centred training self-similarity over rows
  /// `train` (the exported model's floors).
  std::unique_ptr<gram::PreparedFold> OpenFold(const std::vector<int>& train, const std::vector<int>& test) const;
  Eigen::VectorXd FoldScales(const std::vector<int>& train, const std::vector<int>& test) const;
  Eigen::MatrixXd SubjectWeights(const gram::FoldModel& model) const;
  Eigen::VectorXd LargestTrainingSelfSimilarity(const std::vector<int>& train) const;
  /// kernels.sources with missing_source "impute": per kernel row, whether source `name` has data for it (ks.sourcePresent
  /// over kernelRows); every row 1 for a source every subject has.
  std::vector<char> SourceRowsPresent(const std::string& name) const;
};

/// Stage 1: reads the subjects table and plans the outer folds (cheap; config and input errors surface here).
StudyContext LoadStudyInputs(const config::StudyConfig& study);
/// Stage 2: runs (or loads from the cache) the kernel stage and builds the kernels the learners see.
void AttachKernels(StudyContext& ctx, const std::string& scratchDir);

/// Learner l's pooled metrics and kernel shares on permutation first + p (the whole nested CV on
/// permuted targets, same outer folds). Permutation p uses seed DeriveSeed(PermutationSeed(), p),
/// so a block's result does not depend on who computes it or with how many threads.
/// `progress` (optional) advances after every permutation, so slow fits still show progress.
PooledBlock ComputePermutationBlock(const StudyContext& ctx, int first, int count, Progress* progress = nullptr);

/// A learner's weight per kernel in one successful outer fold, the numbers its region table ranks (region_weights.cpp):
/// the kernel weights beta (times the fold's source scales under equal source weighting, renormalised) for learners
/// of kernel weights, else ||w_r|| = beta_r sqrt(coef' K~_r coef) with the fold's preprocessed training kernels
/// (`modelQuadratics`: those quadratics when already computed). Multiclass: the classes' parts stacked; with
/// `perClass`, also one vector per class.
struct FoldKernelWeights {
  Eigen::VectorXd shared;
  std::vector<Eigen::VectorXd> perClass;
};
FoldKernelWeights KernelWeightsOfFold(const StudyContext& ctx, const cv::OuterFoldResult& fold, bool multipleKernels, bool perClass,
                                      const Eigen::VectorXd* modelQuadratics = nullptr);

/// A learner's mean share (percent) of every kernel over its successful outer folds, in kernel order: the statistic
/// of its region table (meanPercent) and of the region permutation test. Empty when no fold succeeded.
std::vector<double> MeanKernelShares(const StudyContext& ctx, const cv::LearnerOutcome& outcome);

/// Where the permutation blocks of a study are checkpointed when the caller does not say.
std::string DefaultCheckpointDir(const config::StudyConfig& study);
std::string PermutationBlockPath(const std::string& checkpointDir, int block);

}  // namespace neuromkl::pipeline
