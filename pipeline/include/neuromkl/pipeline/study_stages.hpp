#pragma once
// The stages of a study after its inputs are loaded (study_context.hpp): nested CV, permutation
// test, region weights, the run record, and the outputs. Each takes the context and the previous
// stages' results and returns its own; RunStudy (study_run.cpp) calls them in order, and batch
// workers call the same functions for the parts they distribute.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "neuromkl/export/run_record.hpp"
#include "neuromkl/export/study_outputs.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline {

/// Stage 3: nested CV of every learner on the labelled subjects.
struct CrossValidationResult {
  std::vector<exporting::LearnerRecord> learners;  ///< outcome, summary and searched parameters per learner
  std::vector<std::string> warnings;               ///< one per failed outer fold
};
CrossValidationResult RunCrossValidation(const StudyContext& ctx);

/// Stage 4: the whole nested CV on permuted targets (same outer folds), in checkpointed blocks.
struct PermutationResult {
  std::vector<exporting::PermutationRecord> learners;  ///< parallel to the learners; empty without permutations
  int blocksReused = 0;                                ///< blocks taken from a checkpoint instead of computed
};
PermutationResult RunPermutationTest(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& observed,
                                     const std::string& checkpointDir);

/// One permutation block, from its checkpoint when a valid one exists (sets *reused), else
/// computed and checkpointed (a checkpoint that cannot be written is a warning: the result stands).
PooledBlock LoadOrComputePermutationBlock(const StudyContext& ctx, const std::string& checkpointDir, int block, bool* reused = nullptr,
                                          Progress* progress = nullptr);

/// Which regions and sources carry more weight than the permutations give them: each region's mean share (the region
/// table's statistic) against the shares of the permuted runs (PermutationRecord::shareNull), with family-wise (maximum
/// statistic) and Benjamini-Hochberg corrections; the same per source. Needs the learner's region table; nothing
/// without permutations.
void TestKernelShares(exporting::LearnerRecord& lr, const std::vector<std::size_t>& sourceKernelCounts);

/// Every pair of learners compared on the same outer folds and subjects (two or more learners; docs/statistics.md):
/// the corrected resampled t-test of the per-fold metric, and on the first repeat's out-of-fold predictions
/// McNemar's exact test and DeLong's AUC test (classification) and a paired permutation test of the pooled metric
/// (ComparisonSeed, swaps in RunRecord::comparisonSwaps).
std::vector<exporting::ComparisonRecord> CompareLearners(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners);
std::uint64_t ComparisonSeed(const StudyContext& ctx);
/// The metric the paired tests compare, a region scan ranks by and an ablation reports: the inner CV's default
/// criterion of the task (balanced accuracy; MSE for regression).
std::string PairedMetric(learners::Task task);
/// The tests of CompareLearners for one pair of outcomes on the same outer folds (A = a, B = b).
std::vector<exporting::ComparisonRecord> ComparePair(const StudyContext& ctx, const cv::LearnerOutcome& a, const cv::LearnerOutcome& b);
/// What the paired tests need besides the two outcomes: every subject's target as the learners code it (+-1, the class
/// index, the value), indexed as the outcomes' train and test subjects, the paired permutation test's swaps, and the
/// seed each pair's stream derives from (with the two outcomes' labels).
struct PairedTestSettings {
  learners::Task task;
  const Eigen::VectorXd& y;
  int swaps;
  std::uint64_t seed;
};
std::vector<exporting::ComparisonRecord> ComparePair(const PairedTestSettings& settings, const cv::LearnerOutcome& a, const cv::LearnerOutcome& b);

/// Opt-in analyses on the study's kernels, without another pass over the images (docs/statistics.md). The region scan
/// runs the learner study.region_scan names on each kernel alone through the study's nested CV (same outer and inner
/// folds, seeds and preprocessing); empty record when not asked for.
exporting::RegionScanRecord RunRegionScan(const StudyContext& ctx);
/// The ablation refits the learner study.ablation names without each source (two or more) and without each of its
/// first top_regions regions (`regions`: that learner's ranked table), on the same folds, and compares each refit with
/// the learner's study outcome (`learners`, ComparePair); empty record when not asked for.
exporting::AblationRecord RunAblation(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners,
                                      const std::vector<std::vector<weights::RegionRow>>& regions);
/// The paired permutation test's swaps per pair (/statistics/paired_swaps).
int ComparisonSwaps(const StudyContext& ctx);

/// Multiclass metric keys with class names instead of label indices: recall_<class>, precision_<class>, auc_<class>,
/// confusion_<true>_<predicted> (the names the study's outputs use).
void NameClasses(cv::Summary& s, const std::vector<std::string>& names);

/// Confidence intervals of a learner's pooled metrics (docs/statistics.md): percentile intervals of a subject
/// bootstrap (BootstrapResamples resamples, stratified by class, seeded by BootstrapSeed and the learner's index;
/// repeated CV: each resample's metric is the mean over repeats, as the pooled one), and DeLong's interval of the
/// binary AUC on the first repeat.
void AddMetricIntervals(const StudyContext& ctx, exporting::LearnerRecord& lr, std::size_t learnerIndex);
int BootstrapResamples(const StudyContext& ctx);  ///< /statistics/bootstrap_resamples
std::uint64_t BootstrapSeed(const StudyContext& ctx);

/// Stage 5: which regions carry the prediction: voxel weight maps (image kernels) and ranked
/// region tables per learner.
struct RegionWeightsResult {
  exporting::WeightMaps maps;
  std::vector<std::vector<weights::RegionRow>> tables;  ///< per learner
  std::vector<std::string> sources;                     ///< per learner: what its region weights are
  std::vector<std::vector<std::vector<weights::RegionRow>>> classTables;  ///< per learner, per class (multiclass, per_class weights only)
  /// per learner: regions ranked by the norm of their part of the activation pattern (binary and regression)
  std::vector<std::vector<weights::RegionRow>> patternTables;
  /// per learner and outer fold (outcome.folds order): each test subject's decision value split over the kernels
  /// (test x kernels; learners::Model::DecisionParts); empty for a failed fold and in multiclass studies
  std::vector<std::vector<Eigen::MatrixXd>> attributions;
  std::vector<std::string> warnings;
};
RegionWeightsResult RunRegionWeights(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners);

/// Stage 6: everything the outputs report, assembled from the context and the stages' results.
exporting::RunRecord DescribeRun(const StudyContext& ctx, CrossValidationResult cv, PermutationResult permutations,
                                 const RegionWeightsResult& weights, std::map<std::string, double> seconds);

/// Stage 7: the output folder's files (into `dir`, committed by the caller). `seconds["total"]` is
/// measured from `start` after the tables and maps, just before the report and results.json.
struct OutputRequest {
  std::string dir;
  std::map<std::string, std::string> extraFiles;  ///< name -> content
};
void WriteStudyOutputs(StudyContext& ctx, exporting::RunRecord& record, const RegionWeightsResult& weights, const OutputRequest& request,
                       std::chrono::steady_clock::time_point start);

/// One line per learner with its main metrics, for the terminal.
std::vector<std::string> SummaryLines(const exporting::RunRecord& record, std::size_t outerFolds);

}  // namespace neuromkl::pipeline
