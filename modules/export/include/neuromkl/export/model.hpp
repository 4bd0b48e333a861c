#pragma once
// An exported model (docs/predict.md): the model card (model.json) and the arrays `neuromkl predict`
// needs to score new subjects without the training data. One folder per model: the final model of a
// learner (model/<Learner>/) and each outer fold's model (model/<Learner>/folds/<k>/), same format.
//
// Decision function (one column per class for multiclass; one column otherwise):
//   f_c(t) = bias_c + sum over image kernels r of s_r(t) <m_rc, x~_t - xbar>_r
//                   + sum over kernel-space kernels j of beta_jc sum_i coef_ic k^_j(t, i)
// (connectivity kernels are linear: scored as image kernels, their connections taking the voxels' part)
// with x~_t the subject's voxels after intensity scaling, ComBat (harmonised sources) and covariate residualisation (x - c_t G),
// xbar the training mean of the residualised images, s_r(t) = 1 / ||x~_t - xbar||_r (cosine
// normalisation; 1 without), m_rc the primal weights of region r (kernel weight, coefficients and
// training scales included), and k^ a tabular kernel row preprocessed as in the folds.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/io/volume.hpp"

namespace neuromkl::exporting {

/// The ComBat estimates of a harmonised image source (docs/harmonisation.md), fitted on the model's training subjects:
/// what turns a new image into the harmonised image the model was trained on,
///   x* = sigma (z - gamma*_s) / delta*_s + alpha + c beta,  z = (x - alpha - c beta) / sigma,
/// per voxel of ModelImageSource::voxels, with the subject's site s and preserved covariates c (no intercept).
struct ModelHarmonisation {
  std::string siteColumn;
  std::vector<std::string> sites;                  ///< the training sites: rows of gammaStar and delta2Star
  std::vector<std::int64_t> siteCounts;            ///< fitting subjects per site
  bool empiricalBayes = true;
  std::string fitOn = "all";                       ///< "all" or "column = value" (the reference group of the fit)
  std::vector<std::string> covariateNumeric;       ///< preserved covariates: numeric columns
  std::vector<std::pair<std::string, std::vector<std::string>>> covariateCategorical;  ///< column, levels (first = reference)
  Eigen::RowVectorXd covariateFill;                ///< per preserved design column: a missing value's fill (empty: an error)
  /// U x (3 + q): alpha, sigma, pass-through flag (1: constant over the fit, left unchanged), beta per preserved column.
  Eigen::MatrixXd voxels;
  Eigen::MatrixXd gammaStar, delta2Star;           ///< sites x U
  Eigen::Index Columns() const { return voxels.cols() - 3; }
  /// The table columns the harmonisation reads for a new subject: the site column, then the preserved covariates.
  std::vector<std::string> TableColumns() const {
    std::vector<std::string> out = {siteColumn};
    out.insert(out.end(), covariateNumeric.begin(), covariateNumeric.end());
    for (const auto& [column, levels] : covariateCategorical) out.push_back(column);
    return out;
  }
};

/// An image source of a model: what scores a new image of that source.
struct ModelImageSource {
  std::string name;         ///< source name ("" for a single-source study)
  std::string imageColumn;  ///< column of the subjects table holding its images
  io::Geometry grid;        ///< the training images' grid: new images must be on it
  std::string space;        ///< atlas.space (may be empty)
  std::string nanPolicy;    ///< "drop_voxel" or "zero"
  std::string intensityScaling = "none";  ///< "none", "global_mean", "reference_region"
  /// U x (2 + p): linear voxel index on the grid, training mean (of the residualised images), and the p
  /// covariate coefficient images G (intercept first; p = 0 without covariates). Voxels dropped by the
  /// NaN rule are absent.
  Eigen::MatrixXd voxels;
  /// E x (3 + C): model kernel index, row in `voxels`, probabilistic weight p (1 for label atlases),
  /// primal weight per class. One row per (kernel, voxel) pair.
  Eigen::MatrixXd weights;
  std::vector<std::int64_t> scaleVoxels;  ///< intensity scaling: voxels whose finite mean divides the image
  /// missing_source "impute": per row of `voxels`, the voxels of a subject lacking the source, the mean of the training
  /// subjects having it (intensity scaled as theirs), as the folds imputed them; empty: the source was never imputed.
  Eigen::VectorXd imputed;
  /// Harmonised sources: the images are harmonised (after intensity scaling) before the covariates and the mean.
  std::optional<ModelHarmonisation> harmonisation;
};

/// A connectivity source: linear kernels of connections, scored in primal form as image sources are, the connections
/// taking the voxels' part (x~_t: the subject's connections after covariate residualisation).
struct ModelConnectivitySource {
  std::string name;                ///< source name ("" for a single-source study)
  std::string column;              ///< column of the subjects table with each subject's matrix file
  std::vector<std::string> nodes;  ///< node names, in matrix order
  /// U x (2 + p): connection (a, b), a < b, as its index in the upper triangle read row by row, the training mean and
  /// the p covariate coefficients (intercept first).
  Eigen::MatrixXd edges;
  /// E x (3 + C): model kernel, row in `edges`, 1 (the connections are unweighted), primal weight per class.
  Eigen::MatrixXd weights;
  /// missing_source "impute": per row of `edges`, the connections of a subject lacking a matrix, the mean of the training
  /// subjects having one; empty: the source was never imputed.
  Eigen::VectorXd imputed;
};

/// A tabular source: the training rows its kernels are computed against.
struct ModelTabularKernel {
  std::size_t kernel = 0;            ///< model kernel index
  std::vector<std::string> columns;  ///< feature columns of its group
  std::string function = "linear";   ///< "linear", "polynomial", "gaussian"
  double value = 0, offset = 0;      ///< degree or width; polynomial offset
};
struct ModelTabularSource {
  std::string name;
  std::string idColumn;                 ///< id column of the feature table ("#row": row numbers)
  bool standardise = false;
  std::vector<std::string> columns;     ///< every feature column used, in `rows` order
  /// Column statistics of the model's training subjects applied to new rows (standardise; else 0 and 1).
  Eigen::VectorXd mean, sd;
  /// With impute "median": per column the training subjects' median, which a new subject's missing value takes before
  /// standardising; empty: a missing value is an error.
  Eigen::VectorXd fill;
  Eigen::MatrixXd rows;                 ///< training rows (l x columns), imputed, harmonised and standardised as in training
  /// missing_source "impute": per training row, whether that subject has the source's row (a lacking row of `rows` is 0:
  /// its kernel values are the means over the rows having it, as in the folds); empty = every training subject has it.
  std::vector<char> trainingHas;
  std::vector<ModelTabularKernel> kernels;
  /// Harmonised sources: the model's ComBat fit over the columns ("voxels" = columns), applied after the fill and before
  /// standardising.
  std::optional<ModelHarmonisation> harmonisation;
};

/// A precomputed kernel: its raw block over the training subjects (l x l, training.subjects order), against which a new
/// subject's kernel row (given to predict) is residualised, centred and normalised as in the folds.
struct ModelPrecomputedKernel {
  std::size_t kernel = 0;  ///< model kernel index
  Eigen::MatrixXd train;
};

/// /target/confounds of a regression model: it predicts the target minus c b (c: intercept, numeric columns, dummies of
/// the categorical ones, as the study coded them over its training subjects); predict scores a new subject's known
/// target adjusted the same way.
struct ModelTargetConfounds {
  std::vector<std::string> numeric;
  std::vector<std::pair<std::string, std::vector<std::string>>> categorical;  ///< column, levels (first = reference)
  Eigen::RowVectorXd fill;       ///< impute "median": per design column, the training subjects' value; empty: missing is an error
  Eigen::VectorXd coefficients;  ///< b, intercept first
};

struct ExportedModel {
  // ---- card ----
  std::string study, learner, learnerName, task;  ///< task: classification, regression, multiclass
  std::string which;                              ///< "final", or "outer fold k" (repeat r)
  int fold = -1, repeat = 0;                      ///< -1: final model
  std::map<std::string, double> params;           ///< chosen parameters
  std::string targetColumn, positiveClass, negativeClass;
  std::vector<std::string> classNames;            ///< multiclass: class of column c
  std::string idColumn = "participant_id";        ///< id column of the subjects table
  std::string version;
  std::uint64_t seed = 0;
  std::string fitStatus;
  /// Extra card entries (strings), e.g. atlas, atlas hash, mask hash, selection procedure.
  std::map<std::string, std::string> info;
  std::map<std::string, double> expected, expectedSd;  ///< nested-CV performance (pooled; SD over folds)
  std::map<std::string, double> trainingSummary;        ///< n, per-class counts ("n_<class>"), target min/max/mean
  // ---- what prediction needs ----
  bool centre = true, normalise = true;
  std::vector<std::string> kernelNames, kernelSources, kernelKinds;  ///< kinds: images, tabular, precomputed
  Eigen::MatrixXd beta;     ///< kernels x C
  Eigen::VectorXd bias;     ///< C
  Eigen::VectorXd floors;   ///< per kernel: 1e-12 x the largest centred training self-similarity (zero-norm rule)
  std::vector<std::string> trainingIds;  ///< the training rows (labelled, then unlabelled for semi-supervised learners)
  /// Per training row, the XXH3-128 of its image files over the image sources in order (empty without image sources):
  /// predict tells a training subject from another cohort's subject of the same id by it.
  std::vector<std::string> trainingImageHashes;
  Eigen::MatrixXd coef;     ///< l x C (needed by kernel-space sources)
  // covariates (empty design: none)
  std::vector<std::string> covariateNumeric;                          ///< numeric columns
  std::vector<std::pair<std::string, std::vector<std::string>>> covariateCategorical;  ///< column, levels (first = reference)
  std::string covariateFitOn = "all";
  Eigen::MatrixXd design;        ///< l x p: the training rows' design (intercept first), missing values imputed
  /// With /covariates/impute "median": per design column, the value a new subject's missing covariate takes (the training
  /// rows' median; a categorical column's dummies of its most frequent level). Empty: a missing value is an error.
  Eigen::RowVectorXd covariateFill;
  std::vector<char> fitRows;     ///< l: 1 = fitted the coefficients
  std::vector<ModelImageSource> imageSources;
  std::vector<ModelTabularSource> tabularSources;
  std::vector<ModelConnectivitySource> connectivitySources;
  std::vector<std::string> precomputedSources;  ///< names: prediction needs test-vs-training kernel rows
  std::vector<ModelPrecomputedKernel> precomputedKernels;
  // ---- optional post-processing ----
  std::optional<std::pair<double, double>> calibration;     ///< Platt (A, B): P(positive) = 1 / (1 + exp(A f + B))
  std::optional<std::pair<double, double>> biasCorrection;  ///< (slope, intercept): corrected = (f - intercept) / slope
  std::optional<ModelTargetConfounds> targetConfounds;

  int Classes() const { return static_cast<int>(beta.cols()); }
};

/// Writes model.json and the arrays into `dir` (created). IoError on failure; callers write into an
/// atomic output folder, so a failure leaves no partial model.
void WriteModel(const std::string& dir, const ExportedModel& model);
/// Reads a model folder. InputError [model:Missing] for a missing model.json or array file,
/// [model:Corrupt] for unparsable JSON, a missing key, or arrays whose shapes disagree with the card
/// (naming the file and what was expected).
ExportedModel ReadModel(const std::string& dir);

/// model/model.json: the index of a study's models (learner label -> folder), written beside the folders.
void WriteModelIndex(const std::string& modelDir, const std::vector<std::pair<std::string, std::string>>& learnerFolders, const std::string& study);
/// The model folders listed by an index (absolute), or {dir} itself when `dir` holds one model. InputError
/// [model:Missing] when neither.
std::vector<std::string> ModelFolders(const std::string& dir);

/// predictions.tsv / summary.json of `neuromkl predict`.
struct PredictionRows {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
/// A header and rows as a tab-separated file (predictions.tsv, attributions.tsv).
void WriteTsv(const std::string& path, const PredictionRows& rows);
void WritePredictionOutputs(const std::string& dir, const PredictionRows& rows, const std::map<std::string, std::string>& summaryText,
                            const std::map<std::string, std::map<std::string, double>>& performance, const std::vector<std::string>& warnings);

}  // namespace neuromkl::exporting
