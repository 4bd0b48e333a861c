#pragma once
// `neuromkl predict MODEL_DIR TABLE|STUDY.json`: an exported model (model_export.hpp) applied to new
// subjects (docs/predict.md).
#include <map>
#include <utility>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/export/model.hpp"
#include "neuromkl/io/volume.hpp"
#include "neuromkl/gram/preprocess.hpp"

namespace neuromkl::pipeline {

/// A precomputed kernel's rows of the new subjects, read from a table (predict --kernel-rows): per new subject (by id)
/// its self-similarity and its values against training subjects (by id).
struct KernelRowTable {
  std::string file;
  std::map<std::string, std::size_t> rowOf;     ///< new subject id -> row
  std::map<std::string, Eigen::Index> columnOf;  ///< training subject id -> column
  Eigen::MatrixXd values;                               ///< new subjects x training subjects
  Eigen::VectorXd self;                                 ///< new subjects' self-similarities
};
/// Reads such a table: the first column holds the new subjects' ids, a column "self" their self-similarities, every other
/// column is headed by a training subject's id. InputError naming the file for a repeated id or a non-finite value.
KernelRowTable ReadKernelRowTable(const std::string& file);

/// New subjects as predict reads them: ids, per image source (by name, "" for a single-source model)
/// the image paths, and every table cell by column (covariates, tabular features, the target).
struct NewSubjects {
  std::string where;  ///< the table (for messages)
  std::vector<std::string> ids;
  std::map<std::string, std::vector<std::string>> images;
  std::map<std::string, std::vector<std::string>> cells;  ///< column -> one cell per subject
  /// Images already in memory (the Python package's nibabel images), per source: used instead of reading
  /// `images` for that source (whose entries then only name the images in messages).
  std::map<std::string, std::vector<io::Volume>> volumes;
  /// Per source the model imputes (missing_source "impute"), the subjects without its data (empty image path or
  /// matrix cell): scored with the training mean of the subjects having it, as the folds imputed such subjects.
  std::map<std::string, std::vector<std::string>> lacking;
  /// Kernel rows of precomputed (and connectivity) kernels, by kernel name (the Python package): each
  /// kernel's training block (training subjects in the model's order), the new subjects' rows against the
  /// training subjects and their self-similarities. `predict` from a table has none and refuses such models.
  std::map<std::string, gram::FoldKernel> kernels;
  /// The same from tables (predict --kernel-rows), by kernel name: each model takes the columns of its own training
  /// subjects and its stored training block.
  std::map<std::string, KernelRowTable> kernelTables;
  /// A categorical covariate level the model was not trained with (e.g. a site absent from its training): refused
  /// (InputError predict:UnknownLevel, the default), coded as the model's reference level (its first: every dummy 0),
  /// or estimated from the new subjects of that level (Estimate: coded as the reference level, then the level's own
  /// mean is removed from its subjects' prepared images and connections, so that their mean is the training subjects'
  /// mean; at least newSiteMinimum of them, of newSiteReference's group when given). Each such subject or level is named
  /// in the warnings. Never decided silently.
  enum class UnseenLevels { Refuse, Reference, Estimate };
  UnseenLevels unseenLevels = UnseenLevels::Refuse;
  /// A harmonised model applied to subjects of a site it was not trained on: that site's ComBat effects are estimated
  /// from its own subjects (at least newSiteMinimum of them; with newSiteReference {column, value} only those of that
  /// group, e.g. its controls), each such site named in the warnings; or refused (InputError predict:UnknownSite).
  enum class NewSites { Estimate, Refuse };
  NewSites newSites = NewSites::Estimate;
  int newSiteMinimum = 10;
  std::pair<std::string, std::string> newSiteReference;
};

/// Reads a subjects table (image paths resolved against its folder) or a study file (its table or BIDS
/// dataset) for the sources of `model`. InputError naming the file and column for a missing id, image,
/// covariate or feature column, or a subject without an image.
NewSubjects ReadNewSubjects(const std::string& input, const exporting::ExportedModel& model);

/// Class scores (subjects x C; C = 1 for binary and regression: the decision value) of the new
/// subjects under each model, every image read once. Images must lie on the model's grid
/// (GeometryMismatch naming the file, the expected and the found grid); `warnings` collects non-finite
/// voxels replaced by the training mean. With `parts`, per model each subject's decision value split over the
/// model's kernels (subjects x kernels, bias + a row's sum = the score; 0 x 0 for a multiclass model).
std::vector<Eigen::MatrixXd> ModelScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects,
                                         std::vector<std::string>& warnings, std::vector<Eigen::MatrixXd>* parts = nullptr);

struct PredictOptions {
  std::string modelDir, input, outDir;
  bool force = false;
  NewSubjects::UnseenLevels unseenLevels = NewSubjects::UnseenLevels::Refuse;
  NewSubjects::NewSites newSites = NewSubjects::NewSites::Estimate;
  int newSiteMinimum = 10;
  std::pair<std::string, std::string> newSiteReference;  ///< column, value (empty: every subject of a new site)
  std::map<std::string, std::string> kernelRows;         ///< precomputed kernel name -> its table of the new subjects' rows
};
struct PredictOutcome {
  std::string outputDir;
  std::vector<std::string> lines;  ///< for the terminal
};
/// Reads the model(s), scores the subjects and writes predictions.tsv and summary.json into the
/// output folder atomically (no partial output on any error).
PredictOutcome Predict(const PredictOptions& options);

}  // namespace neuromkl::pipeline
