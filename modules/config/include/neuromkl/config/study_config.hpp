#pragma once
// The study file, as plain structs. Defaults live here (and in configs/study.schema.json; a
// test checks that both agree). JSON keys are snake_case versions of the field names.
// A StudyConfig comes from the JSON reader (ParseStudyConfig, LoadStudyConfig) or from code (batch
// expansion, bindings, tests); CheckStudyConfig refuses an invalid one whatever its producer, with
// the JSON pointer the value has (or would have) in a study file.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "neuromkl/cv/splits.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::config {

/// Images found in a BIDS dataset by entities instead of an image column.
struct BidsSpec {
  std::string root;                  ///< resolved; empty = no BIDS search
  std::string derivatives;           ///< resolved (relative paths against root); empty = search the whole root
  /// Entities every image must carry, e.g. {"space", "MNI152NLin2009cAsym"}, {"label", "GM"}; "suffix"
  /// (the last name part, e.g. "probseg") and "extension" (".nii.gz") are matched too. Sorted by key.
  std::vector<std::pair<std::string, std::string>> entities;
};

struct SubjectsSpec {
  std::string table;                 ///< participants.tsv / .csv, resolved path (default with bids: <root>/participants.tsv)
  /// BIDS' participant_id by default; when id_column is not given (`idColumnGiven` false) and the table
  /// has no participant_id column but a "subject" column, "subject": decided where the table is read
  /// (pipeline::LoadCohort). "#row": subjects are numbered by data row from 1 (tables without ids).
  std::string idColumn = "participant_id";
  bool idColumnGiven = false;        ///< /subjects/id_column was given: no fallback to "subject"
  std::string imageColumn = "image";
  BidsSpec bids;
};

/// covariates: confounds regressed out of every kernel inside every fold (training subjects only).
struct CovariateSpec {
  std::vector<std::string> columns;      ///< numeric columns of the subjects table
  std::vector<std::string> categorical;  ///< categorical columns (one-hot, first level in sorted order left out)
  std::string fitOnColumn, fitOnValue;   ///< fit_on {column, value}: coefficients fitted on those training subjects; empty = all
  /// impute: "none" (a missing value is an error) or "median": inside every fold, a missing numeric value becomes the
  /// median of the fold's training subjects and a missing category their most frequent level.
  bool imputeMedian = false;
  bool listForm = false;                 ///< given as a plain list of numeric columns (JSON pointers /covariates/<i>)
  std::string pointer = "/covariates";   ///< where the section is in the study file
  std::string fitOnPointer = "/covariates/fit_on";
  bool Active() const { return !columns.empty() || !categorical.empty(); }
  /// JSON pointer of numeric column i.
  std::string ColumnPointer(std::size_t i) const { return pointer + (listForm ? "/" : "/columns/") + std::to_string(i); }
  std::string CategoricalPointer(std::size_t i) const { return pointer + "/categorical/" + std::to_string(i); }
};

struct TargetSpec {
  std::string column;                ///< required
  learners::Task task = learners::Task::Classification;  ///< required in the file
  std::string positiveClass;         ///< classification; empty = the last class in sorted order
  /// multiclass: kernel weights of the MKL learners shared by all classes, or one set per class
  learners::MulticlassWeights multiclassWeights = learners::MulticlassWeights::Shared;
  /// regression: "linear" brain-age bias correction per outer fold (prediction = a target + b fitted on
  /// the training set's inner-CV out-of-fold predictions; corrected = (prediction - b) / a); false = none
  bool biasCorrection = false;
  /// regression: confounds of the target itself (e.g. age for a clinical score), regressed out of the target inside every
  /// fold: least squares on the training subjects (or the fit_on group), applied to its test subjects; the learners
  /// predict, and the metrics score, what the confounds leave of the target. Empty = none.
  CovariateSpec confounds;
  TargetSpec() {
    confounds.pointer = "/target/confounds";
    confounds.fitOnPointer = "/target/confounds/fit_on";
  }
};

/// One atlas image with its table; several in one study are combined (names prefixed).
struct AtlasPart {
  std::string image;                 ///< resolved path
  std::string labels;                ///< resolved path of its table (dseg.tsv, FSL XML, FreeSurfer LUT, AAL text)
  std::string prefix;                ///< prepended to region names ("<prefix>_<name>"); empty = none
  bool probabilistic = false;        ///< a 4-D image, one probability volume per region
  double threshold = 0;              ///< probabilistic: voxels with p > threshold belong to the region
};

struct AtlasSpec {
  std::string builtin = "aal";       ///< built-in atlas name, or empty when image/labels are given
  std::string image;                 ///< resolved path of a custom label image (= parts[0].image)
  std::string labels;                ///< resolved path of its label table (= parts[0].labels)
  std::vector<AtlasPart> parts;      ///< custom atlases: one per image ("image"/"labels", or "images")
  std::string space;                 ///< template space, e.g. "MNI152NLin2009cAsym" (recorded; checked against space- entities)
};

struct PrecomputedKernelSpec {
  std::string name;
  std::string file;                  ///< .npy or delimited text, n x n in subjects-table order
};

/// A kernel function applied to each feature group; one kernel per listed parameter value.
struct TabularFunction {
  enum class Type { Linear, Gaussian, Polynomial };
  Type type = Type::Linear;
  std::vector<double> values;        ///< Gaussian widths sigma (exp(-|x - z|^2 / (2 sigma^2))) or polynomial degrees
  double offset = 1;                 ///< polynomial (x'z + offset)^d
};

struct TabularSpec {
  std::string table;                 ///< resolved path
  std::string idColumn = "subject";  ///< "#row": subjects are the table's data rows, numbered from 1
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  ///< kernel name -> columns
  /// Instead of explicit groups: "each_column", "all_columns" or "each_and_all" over every column
  /// except the id column, the study's target column and `excludeColumns`.
  std::string groupsPreset;
  std::vector<std::string> excludeColumns;
  std::vector<TabularFunction> functions = {TabularFunction{}};  ///< default: one linear kernel per group
  /// z-score each column with the mean and SD of every fold's training subjects (the folds form the tabular kernels;
  /// the kernel stage's own kernels, cached and written with the results, use every subject's).
  bool standardise = false;
  /// "median": a missing value (an empty or NA cell) takes the median of the fold's training subjects; false: an error.
  bool imputeMedian = false;
  /// Whether the folds form this source's kernels from its columns (standardise or impute).
  bool InFold() const { return standardise || imputeMedian; }
};

/// Sources: several named kernel sources in one study (kernels.sources); each is one of the others.
/// Connectivity exists only as a kind of kernels.sources.
enum class KernelSource { Images, Precomputed, Tabular, Sources, Connectivity };

/// A connectivity source: one symmetric node x node matrix per subject (.npy or delimited text); the
/// features of a kernel are connections (edges i < j, the diagonal ignored).
struct ConnectivitySpec {
  enum class Kernels {
    Node,     ///< one kernel per node: the node's connections to every other node
    Network,  ///< one kernel per network (node table "network" column): every connection with an end in the network
    Whole,    ///< one kernel over every connection
  };
  std::string column;                ///< column of the subjects table with each subject's matrix file
  Kernels kernels = Kernels::Node;
  std::string nodes;                 ///< resolved path of a node table (columns "name" and optionally "network"), one row per node in matrix order; empty = node1, node2, ...
};

/// kernels.intensity: per-image intensity scaling before the kernels (PET).
struct IntensitySpec {
  kernels::IntensityScaling scaling = kernels::IntensityScaling::None;
  std::string pointer = "/kernels/intensity";  ///< where it was given (errors about its regions name it)
  std::vector<std::string> referenceRegions;  ///< region names (scaling = ReferenceRegions), or
  std::string referenceImage;                 ///< a label image whose non-zero voxels are the reference (resolved path)
};

/// One named source of kernels.sources. Kernel names carry the source ("pet:Hippocampus_L").
struct SourceSpec {
  std::string name;                  ///< letters, digits, '_', '-', '.'; unique in the study
  KernelSource kind = KernelSource::Images;
  std::string imageColumn;           ///< images: column of the subjects table with this source's image paths
  std::string mask;                  ///< images: resolved mask path; empty = the study's /mask
  kernels::NanPolicy nanPolicy = kernels::NanPolicy::DropVoxel;  ///< images (default: /kernels/nan_policy)
  std::vector<PrecomputedKernelSpec> precomputed;  ///< precomputed
  TabularSpec tabular;               ///< tabular
  ConnectivitySpec connectivity;     ///< connectivity
  /// images: the source's own atlas (default: the study's /atlas), BIDS entities (with /subjects/bids;
  /// default: the study's) and intensity scaling.
  bool ownAtlas = false;
  AtlasSpec atlas;
  std::vector<std::pair<std::string, std::string>> bidsEntities;
  IntensitySpec intensity;
  std::string pointer;               ///< "/kernels/sources/<i>"
};

/// How the kernels of several sources are scaled before learning (inside every fold, training subjects only).
enum class SourceWeighting {
  None,   ///< as computed (after centring and normalisation every kernel has the same trace, so a source with more kernels has more total trace)
  Equal,  ///< each source's kernels scaled so that every source has the same total training trace
};

/// A subject that lacks a source's data (no image path, no matrix file, no table row).
enum class MissingSource {
  Error,  ///< an error listing every such subject
  Drop,   ///< such subjects are left out of the study and listed in the warnings
  /// Such subjects are kept: in every fold, the kernels of a source they lack treat them as at the mean of that fold's
  /// training subjects having it (in feature space), so that after centring their rows of those kernels are zero.
  Impute,
};

/// How the study holds its kernels after the kernel stage (docs/batch.md, "The compact kernel store").
enum class KernelPrecision {
  Float64,  ///< full double kernels
  Float32,  ///< the compact store: float32, half the memory; fold arithmetic stays double
};

/// How the study holds its region kernels (docs/learners.md, "Learners on features").
enum class KernelRepresentation {
  Auto,      ///< features when the study has a feature form and its kernels would not fit this machine's memory, else kernels
  Kernel,    ///< one n x n kernel per region
  Features,  ///< the masked voxels (K_r = X_r X_r', never formed): linear learners with a feature form only
};

struct KernelSpec {
  KernelSource source = KernelSource::Images;
  bool centre = true;                ///< per fold, training statistics only
  bool normalise = true;             ///< cosine normalisation, per fold
  kernels::NanPolicy nanPolicy = kernels::NanPolicy::DropVoxel;
  double memoryBudgetMb = 0;         ///< 0 = 25 % of physical memory
  bool cache = true;
  KernelPrecision precision = KernelPrecision::Float64;
  KernelRepresentation representation = KernelRepresentation::Auto;
  IntensitySpec intensity;
  std::vector<PrecomputedKernelSpec> precomputed;
  TabularSpec tabular;
  ConnectivitySpec connectivity;     ///< source == Connectivity (the study of one connectivity source)
  std::vector<SourceSpec> sources;   ///< source == Sources: the named sources, in order
  SourceWeighting sourceWeighting = SourceWeighting::None;  ///< kernels.sources only
  MissingSource missingSource = MissingSource::Error;       ///< kernels.sources only
};

using CvScheme = cv::Scheme;

struct CvSchemeSpec {
  CvScheme scheme = CvScheme::StratifiedKFold;
  int k = 5;
  int repeats = 1;
  std::string groupColumn;           ///< leave_one_group_out, group_kfold
  std::string foldColumn;            ///< custom
};

struct CvSpec {
  CvSchemeSpec outer;
  CvSchemeSpec inner;                ///< scheme defaults to stratified/k-fold with k = 5
  std::uint64_t seed = 0;            ///< set from the study seed unless given
  bool seedGiven = false;
  std::string criterion;             ///< inner-CV selection criterion; empty = the task's default (cv::InnerCriteria)
};

struct LearnerSpec {
  std::string name;                  ///< catalogue name, e.g. "enmkl_svm"
  std::string label;                 ///< display name (default: name), unique in a study
  learners::ParamMap params;         ///< resolved: defaults filled in
  std::map<std::string, std::vector<double>> grid;  ///< hyper-parameter grid for nested CV; c, lambda and mu not
                                                    ///< fixed in params get the ENMKL grids (Mourao-Miranda et al.) by default
  /// class_weight (classification): "balanced" (n / (k n_c) per training set), or a weight per class name
  /// (classes not listed weigh 1; the names are checked against the target's classes when the subjects
  /// table is read). Neither = no class weights.
  bool classWeightBalanced = false;
  std::vector<std::pair<std::string, double>> classWeights;
  std::size_t GridSize() const;
};

struct PermutationSpec {
  int count = 0;
};

struct OutputSpec {
  std::string dir;                   ///< resolved; default "<config folder>/results/<name>"
  std::string cacheDir;              ///< resolved; default "<config folder>/.neuromkl_cache"
  bool saveKernels = true;
  bool weightMaps = true;            ///< voxel weight maps (image source): one extra pass over the images
  bool weightMapUnitNorm = false;    ///< scale each fold's map to unit L2 norm before averaging (as PRoNTo)
  int minSubjectsWithSignal = 5;     ///< regions where fewer subjects have non-zero data are flagged (lesion maps)
  bool model = true;                 ///< model/: the final model (refitted on every labelled subject) and each outer fold's model
};

/// harmonisation: ComBat (Johnson et al. 2007; Fortin et al. 2017, 2018) of the image sources' voxels inside every fold,
/// fitted on the fold's training subjects only (or their reference group) and applied to its test subjects
/// (docs/harmonisation.md).
struct HarmonisationSpec {
  std::string siteColumn;            ///< the batch variable: a column of the subjects table; empty = no harmonisation
  /// Biological covariates whose effects ComBat preserves (pointer /harmonisation/covariates); fitOnColumn/fitOnValue:
  /// /harmonisation/fit_on, the reference group the estimates are fitted on (e.g. the controls); empty = every subject.
  CovariateSpec preserve;
  bool empiricalBayes = true;
  /// Image and tabular sources harmonised (kernels.sources); empty = every image source, or in a study without image
  /// sources every tabular source (a tabular study: its columns).
  std::vector<std::string> sources;
  bool Active() const { return !siteColumn.empty(); }
  HarmonisationSpec() {
    preserve.pointer = "/harmonisation/covariates";
    preserve.fitOnPointer = "/harmonisation/fit_on";
  }
};

/// Resampling counts of the statistics beside the metrics (docs/statistics.md).
struct StatisticsSpec {
  int bootstrapResamples = 2000;  ///< subject bootstrap of every pooled metric's interval
  int pairedSwaps = 9999;         ///< paired permutation test of two learners (or a model and its ablation)
  bool operator==(const StatisticsSpec&) const = default;
};

/// Opt-in analyses on the study's kernels after its nested CV (docs/statistics.md), each with one of the study's
/// learners (by label; empty = not asked for): every kernel alone through the same nested CV (region_scan), and the
/// learner refitted without each source and each of its top regions, compared with the full model (ablation).
struct RegionScanSpec {
  std::string learner;
};
struct AblationSpec {
  std::string learner;
  int topRegions = 0;  ///< also leave out each of the learner's first top_regions regions (its region table's order)
};

struct StudyConfig {
  std::string path;                  ///< the study file
  std::string baseDir;               ///< relative paths resolve against this (the file's folder)
  std::string name;
  std::string description;
  SubjectsSpec subjects;
  TargetSpec target;
  AtlasSpec atlas;
  std::string mask;                  ///< resolved path or empty
  KernelSpec kernels;
  CovariateSpec covariates;
  HarmonisationSpec harmonisation;
  CvSpec cv;
  std::vector<LearnerSpec> learners;
  PermutationSpec permutations;
  StatisticsSpec statistics;
  RegionScanSpec regionScan;
  AblationSpec ablation;
  OutputSpec output;
  std::uint64_t seed = 42;
  int threads = 0;                   ///< 0 = all cores
};

/// Reads and checks a study file (ReadStudyConfig, then CheckStudyConfig). ConfigError naming the file and
/// JSON pointer for unknown keys (with a did-you-mean hint), wrong types and invalid values.
StudyConfig LoadStudyConfig(const std::string& path);
/// Same from text; `baseDir` resolves relative paths, `sourceName` names the text in errors.
StudyConfig ParseStudyConfig(const std::string& text, const std::string& baseDir, const std::string& sourceName);
/// The study text as a StudyConfig, without CheckStudyConfig: ConfigError only for what is wrong with the
/// document itself (syntax, unknown keys, types, missing keys, values outside a key's choices, numbers
/// outside their range, keys and learners that do not apply with the others given). Nothing but the text
/// is read: the subjects table and participants.json are read with the cohort (pipeline::LoadCohort).
StudyConfig ReadStudyConfig(const std::string& text, const std::string& baseDir, const std::string& sourceName);
/// Every rule a study's values must satisfy, whoever made the StudyConfig: ranges, names, duplicates and the
/// rules across fields (learners vs task, CV schemes vs columns, sources vs the study's sections, ...).
/// ConfigError naming `config.path` (empty for a study made in code) and the JSON pointer of the value in a
/// study file, e.g. "/learners/0/params/c".
void CheckStudyConfig(const StudyConfig& config);
/// Why the study cannot hold its kernels as features (KernelRepresentation::Features), as the JSON pointer of the value
/// that prevents it and a sentence; both empty when it can: one images source (no kernels.sources), binary classification
/// or regression, learners with a feature form (svm, krr, enmkl_svm, enmkl_krr; simplemkl for classification), no
/// covariates regressed out of the kernels, no harmonisation. CheckStudyConfig raises it for "representation": "features";
/// "auto" falls back to kernels.
struct FeatureFormObstacle {
  std::string pointer, reason;
  bool Empty() const { return pointer.empty(); }
};
FeatureFormObstacle WhyNoFeatureForm(const StudyConfig& config);
/// The resolved configuration (every default filled in) as pretty JSON. `forHash`: without the keys that
/// change no result (/output/model), for the input hash and the permutation checkpoint key.
std::string ResolvedConfigJson(const StudyConfig& config, bool forHash = false);

std::string ToString(CvScheme s);
std::string ToString(KernelSource s);
std::string ToString(KernelRepresentation r);
std::string ToString(learners::Task t);

}  // namespace neuromkl::config
