#pragma once
// Everything a study run reports, as plain structs: the writers of this module turn it into the
// output folder (results.json, documented in configs/results.schema.json, and the tables).
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/export/comparison_record.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/learners/learner.hpp"
#include "neuromkl/metrics/family_wise.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::exporting {

struct PermutationRecord {
  int count = 0;
  std::uint64_t seed = 0;
  std::string exchangeability;                         ///< "all subjects" or the group column
  std::map<std::string, double> pValues;               ///< metric -> (count(null at least as good) + 1) / (N + 1)
  std::map<std::string, std::vector<double>> null;     ///< metric -> value per permutation
  /// Per permutation, the learner's mean share (percent) of every kernel, in kernel order (empty: no outer fold succeeded).
  std::vector<std::vector<double>> shareNull;
  /// The region table's shares tested against shareNull: per kernel (kernel order), and per source (kernels.sources
  /// with more than one source: the sum of the source's kernels' shares). Empty without permutations.
  metrics::FamilyPValues regions, sources;
};

struct LearnerRecord {
  cv::LearnerOutcome outcome;
  cv::Summary summary;
  PermutationRecord permutations;
  std::vector<std::string> searched;        ///< parameters chosen by the inner CV (the grid's keys)
  std::string classWeight;                  ///< the learner's class_weight as given ("balanced", "AD = 3, CN = 1"); empty = none
  /// Percentile bootstrap 95 % interval (low, high) of pooled metrics (RunRecord::bootstrap*), and DeLong's interval of
  /// the binary AUC (NaN when not computed).
  std::map<std::string, std::pair<double, double>> pooledInterval;
  std::pair<double, double> aucDeLongInterval{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  std::vector<weights::RegionRow> regions;  ///< ranked region table
  /// Per outer fold (outcome.folds order): each test subject's decision value split over the kernels (test x kernels),
  /// bias + a row's sum = its decision value; empty for a failed fold and for multiclass models.
  std::vector<Eigen::MatrixXd> attributions;
  std::string regionSource;                 ///< what the region weights are (kernel weights or a voxel-map summary)
  std::vector<std::string> foldMaps;        ///< voxel weight map per outer fold (relative paths), if written
  std::string meanMap;                      ///< mean voxel weight map (relative path), if written
  /// multiclass with per-class weights: one ranked region table per class (RunRecord::classNames order)
  std::vector<std::vector<weights::RegionRow>> classRegions;
  std::vector<weights::RegionRow> patternRegions;  ///< regions ranked by their share of the activation pattern (empty: none)
  std::vector<std::string> patternFolds;           ///< activation pattern maps (relative paths), if written
  std::string patternMean;
  /// Over the fold maps (relative paths, empty: not written): mean / SD per voxel and the folds' sign consistency.
  struct StabilityMaps {
    std::string meanOverSd;
    std::string signConsistency;
  } stabilityMaps;
  struct SourceMaps {
    std::string source;
    std::vector<std::string> folds;
    std::string mean;
    std::vector<std::string> patternFolds;
    std::string patternMean;
    StabilityMaps stability;
  };
  std::vector<SourceMaps> sourceMaps;       ///< kernels.sources: the maps of each image source, if written
  /// The atlas painted with each region's table values (relative paths): its mean share and, with permutations,
  /// -log10 of its family-wise p. `source` names the image source (kernels.sources), empty for the study's atlas.
  struct RegionMaps {
    std::string source;
    std::string share;
    std::string logPFwe;
  };
  std::vector<RegionMaps> regionMaps;
  /// Connectivity sources: source -> its edge files (the ranked edge table and the mean weight matrix).
  std::vector<std::pair<std::string, std::vector<std::string>>> edgeWeights;
  /// /output/model: the final model (refitted on every labelled subject); empty folder = not exported
  struct FinalModel {
    std::string folder;                  ///< relative to the output folder, e.g. "model/EnmklSvm"
    std::map<std::string, double> params;
    std::string status;                  ///< fit status, or "failed"
    std::vector<double> innerScores;     ///< inner-CV score per grid point (empty: fixed parameters)
  } finalModel;
};

/// One row of the subjects table as the run used it.
struct SubjectRow {
  std::string id;
  std::string used;    ///< "yes", "no", or "unlabelled" (used only by semi-supervised learners)
  std::string target;  ///< the target cell as written
  std::string reason;  ///< why it is not used (empty when used)
};


/// One kernel alone through the study's nested CV (region_scan): its pooled metrics and their SD over outer folds.
struct RegionScanRow {
  std::size_t kernel = 0;
  std::map<std::string, double> pooled, foldSd;
};
/// The region scan of one learner (empty `learner`: not asked for), rows ranked by `metric`, best first.
struct RegionScanRecord {
  std::string learner;
  std::string metric;
  bool higherIsBetter = true;
  std::vector<RegionScanRow> rows;
  std::vector<std::string> maps;  ///< the atlas (or each image source's) painted with the metric (relative paths)
};
/// The learner refitted without a source or a region (ablation), compared with the full model on the same folds.
struct AblationRow {
  std::string removed;                   ///< the source's or the kernel's name
  std::string kind;                      ///< "source" or "region"
  std::size_t kernelsRemoved = 0;
  std::map<std::string, double> pooled;  ///< the refitted model's pooled metrics
  std::vector<ComparisonRecord> tests;   ///< the full model (A) against the refitted one (B)
};
struct AblationRecord {
  std::string learner;  ///< empty: not asked for
  std::string metric;
  std::map<std::string, double> full;  ///< the full model's pooled metrics
  std::vector<AblationRow> rows;
};

/// What the decision value of test subject i of `fold` is scored against: its target adjusted for /target/confounds with
/// the fold's coefficients when the study has them (cv::OuterFoldResult::target), else the subject's target.
inline double ScoredTarget(const std::vector<double>& targets, const cv::OuterFoldResult& fold, std::size_t i) {
  return fold.target.size() > 0 ? fold.target[static_cast<Eigen::Index>(i)] : targets[static_cast<std::size_t>(fold.test[i])];
}

struct RunRecord {
  std::string study, version, configPath, inputHash, task, targetColumn, positiveClass, negativeClass;
  std::vector<std::string> classNames;  ///< multiclass: the class of label 0, 1, ...
  std::string multiclassWeights;        ///< multiclass: "shared" or "per_class"
  std::string innerCriterion;           ///< the inner-CV criterion if the study chose one (empty = the task's default)
  std::uint64_t seed = 0, cvSeed = 0;
  std::string outerScheme, innerScheme;
  std::vector<std::string> labelledSubjects;
  std::vector<double> targets;      ///< +-1 (classification) or values, per labelled subject
  std::vector<std::string> rawTargets;  ///< the target cell as written, per labelled subject
  std::vector<SubjectRow> subjectTable; ///< every row of the subjects table
  std::vector<std::pair<std::string, std::string>> excludedSubjects;  ///< id, reason
  std::vector<kernels::KernelInfo> kernels;
  std::vector<kernels::ExcludedKernel> excludedKernels;
  std::string kernelSource, kernelCache;
  /// kernels.representation as run: "kernel" or "features", why (the option or auto's reason), the feature matrix's bytes.
  std::string representation = "kernel", representationNote;
  std::string featureStorage, featureStorageNote;  ///< features: "float32", "uint8" or "int16", and why (empty on the kernel path)
  std::string featureHeld;  ///< features: "in memory", or the kernel cache file they are mapped from
  std::uint64_t featureBytes = 0;
  /// kernels.precision "float32": the compact store's bytes and whether it was centred (0: float64, nothing recorded)
  std::uint64_t compactBytes = 0;
  bool compactCentred = false;
  int kernelRanks = 1;                  ///< MPI ranks of the kernel stage (1: one process; > 1 recorded in results.json)
  double kernelRankBudgetMb = 0;        ///< kernelRanks > 1: the per-rank budget for subject data (kernels.memory_budget_mb or 25 % of RAM)
  bool kernelsHeldByRanks = false;      ///< kernelRanks > 1: the kernels stayed on the ranks (each holds every kernelRanks-th)
  std::string kernelsHeldNote;          ///< ... how they came to the ranks, when not by the images stage or the cache
  std::string intensityScaling;              ///< empty: none; "global_mean" or "reference_region: names"
  std::vector<double> intensityScale;        ///< per labelled (then unlabelled) subject: the image's divisor
  std::vector<int> subjectsWithSignal;       ///< per kernel: used subjects with non-zero data there
  int minSubjectsWithSignal = 0;             ///< below it a region is flagged as poorly covered
  double outsideAtlasShare = -1;             ///< share of non-zero voxel values outside the atlas regions (-1: not images)
  /// kernels.sources: each source's name, kind, kernel count (kernels are in source order) and cache use; empty = one source
  std::vector<std::string> sourceNames, sourceKinds, sourceCache;
  std::vector<std::size_t> sourceKernelCounts;
  std::string sourceWeighting;               ///< "none" or "equal" (kernels.sources)
  std::vector<std::pair<std::string, std::string>> droppedSubjects;  ///< missing_source "drop": id, what a source lacks
  /// missing_source "impute": per source, the subjects kept without it (id, what it lacks)
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> imputedSources;
  /// covariates (confounds regressed out inside every fold): empty = none
  std::vector<std::string> covariateColumns;  ///< design columns after the intercept (dummies as "column=level")
  std::string covariateFitOn;                 ///< "all" or "column = value"
  double covariateTargetR2 = -1;              ///< in-sample R^2 of target ~ covariates over the labelled subjects
  /// /covariates/impute "median": per covariate column with missing values, how many subjects lack it; per outer fold,
  /// how many of its training and test subjects have a value imputed (from that fold's training subjects).
  bool covariateImpute = false;
  std::vector<std::pair<std::string, int>> covariateMissing;
  std::vector<std::pair<int, int>> covariateImputedPerFold;
  /// /target/confounds (regressed out of the target inside every fold): empty columns = none. Per outer fold, the
  /// coefficients fitted on its training subjects (intercept first).
  struct TargetConfounds {
    std::vector<std::string> columns;  ///< design columns after the intercept (dummies as "column=level")
    std::string fitOn;                 ///< "all" or "column = value"
    double r2 = -1;                    ///< in-sample R^2 of the target on them over the labelled subjects
    bool impute = false;
    std::vector<std::pair<std::string, int>> missing;  ///< per column with missing values: subjects lacking it
    std::vector<std::vector<double>> foldCoefficients;
  };
  TargetConfounds targetConfounds;
  /// harmonisation (ComBat inside every fold): empty siteColumn = none
  struct Harmonisation {
    std::string siteColumn;
    std::vector<std::string> sites;          ///< site labels, in label order
    std::vector<int> siteCounts;             ///< subjects per site (the kernels' rows)
    std::vector<std::string> designColumns;  ///< preserved covariates (dummies as "column=level")
    std::string fitOn;                       ///< "all" or "column = value"
    bool empiricalBayes = true;
    std::vector<std::string> sources;        ///< sources harmonised
    std::vector<std::string> sourceKinds;    ///< per source: "images" or "tabular"
    std::vector<std::int64_t> sourceVoxels;  ///< per source: voxels (tabular: columns) per subject held for the folds
    std::uint64_t bytes = 0;                 ///< voxels held (float32), every source
    std::vector<std::pair<std::string, int>> missing;  ///< preserved covariates imputed in the folds: subjects lacking each
  };
  Harmonisation harmonisation;
  /// Tabular sources standardised or imputed inside the folds (each fold forms their kernels): empty = none.
  struct TabularFolds {
    std::string source;  ///< "" for /kernels/tabular
    bool standardise = false, impute = false, harmonise = false;
    std::vector<std::pair<std::string, int>> missing;  ///< per column with missing values: subjects lacking it
    std::vector<std::pair<int, int>> imputedPerFold;   ///< per outer fold: training and test subjects with a value imputed
  };
  std::vector<TabularFolds> tabularFolds;
  std::map<std::string, double> seconds;  ///< per stage
  std::vector<LearnerRecord> learners;
  /// Every pair of learners compared (two or more learners); the paired permutation test's swaps and their seed.
  std::vector<ComparisonRecord> comparisons;
  int comparisonSwaps = 0;
  std::uint64_t comparisonSeed = 0;
  RegionScanRecord regionScan;  ///< each kernel alone (region_scan)
  AblationRecord ablation;      ///< what is lost without each source and top region (ablation)
  /// Subject bootstrap of the pooled metrics: resamples and seed (0 resamples: none).
  int bootstrapResamples = 0;
  std::uint64_t bootstrapSeed = 0;
  int permutations = 0;             ///< permutations run per learner (0: no permutation test)
  std::vector<std::string> warnings;
  std::map<std::string, std::string> versions;
  bool centre = true, normalise = true;
  int threads = 0;
  std::string description, atlas, mask, date;
  std::string atlasSpace;  ///< template space of the atlas (atlas.space), if given
  std::string builtinAtlas;     ///< the built-in atlas used ("aal"), empty for an atlas from files
  std::string bidsRoot;         ///< absolute BIDS root the images came from (subjects.bids.root), empty otherwise
  std::string bidsDerivatives;  ///< absolute derivatives folder searched within it, if given
  bool weightMapUnitNorm = false;  ///< each fold's voxel map scaled to unit Euclidean norm (output.weight_maps_unit_norm)
  std::string nanPolicy;        ///< "drop_voxel" or "zero" (kernels.nan_policy)
};

/// Whether a kernel rests on fewer subjects with non-zero data than the study's minimum.
bool LowCoverage(const RunRecord& record, std::size_t kernel);

/// The kind of source a kernel comes from ("images", "tabular", "connectivity" or "precomputed"): with
/// kernels.sources the kind of the source its name starts with ("pet:Hippocampus_L"), otherwise the study's.
std::string KernelKind(const RunRecord& record, const std::string& kernelName);
/// What a kernel of a source kind is made of, as the tables name its size column: "voxels" (images),
/// "connections" (connectivity), "columns" (tabular); empty for precomputed kernels, which come as matrices.
std::string FeatureName(const std::string& kind);

std::string RunRecordJson(const RunRecord& record);

/// metrics[key], NaN when the metric is not there.
double MetricOrNaN(const std::map<std::string, double>& metrics, const std::string& key);

/// Whether any learner's out-of-fold decision values were split over the kernels (attributions.tsv is written).
bool HasAttributions(const RunRecord& record);

}  // namespace neuromkl::exporting
