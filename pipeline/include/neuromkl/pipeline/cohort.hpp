#pragma once
// The subjects table turned into a cohort: ids, image paths, targets, and who is excluded and why.
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/table.hpp"

namespace neuromkl::pipeline {

struct Cohort {
  std::string idColumn;                 ///< the table's id column (SubjectIdColumn)
  std::string sidecar;                  ///< participants.json beside the table, if present
  std::vector<std::string> ids;         ///< every row of the table, in table order
  std::vector<std::string> images;      ///< resolved image paths (image source), same order
  std::vector<bool> labelled;           ///< target present
  std::vector<std::string> rawTargets;  ///< the target cell as written
  std::vector<std::pair<std::string, std::string>> excluded;  ///< id, reason (not used for supervised training)
  // Labelled subjects only:
  std::vector<int> labelledRows;        ///< row indices into ids
  Eigen::VectorXd y;                    ///< +-1 (classification), 0..k-1 (multiclass: index into classNames) or values (regression)
  std::string positiveClass, negativeClass;
  std::vector<std::string> classNames;  ///< multiclass: the class of label 0, 1, ... (numeric order if every class is a number, else lexical)
  std::vector<std::pair<std::string, int>> classCounts;  ///< classification: class, count (sorted)
  std::vector<std::string> groups;       ///< labelled subjects' values of the CV group column (if any scheme uses one)
  std::vector<std::string> customFolds;  ///< labelled subjects' values of the custom fold column (if used)
  std::map<std::string, std::string> classDescriptions;  ///< class -> description, from participants.json "Levels"
  std::vector<std::string> imageSpaces;  ///< distinct BIDS "space-" entities of the image names (may be empty)
  std::vector<std::string> warnings;     ///< once per study: Analyze orientation convention, atlas space mismatch
  /// Every row's cell of each covariate column and of the covariates.fit_on column (checked to exist).
  std::map<std::string, std::vector<std::string>> covariateCells;
  /// kernels.missing_source "drop": subjects left out because a source lacks their data (id, what is missing),
  /// and for every kept subject its data row in the table (precomputed kernels are indexed by it).
  std::vector<std::pair<std::string, std::string>> dropped;
  std::vector<std::size_t> tableRows;
  /// kernels.missing_source "impute": per source lacking some subjects, each such subject (id, what it lacks); they stay
  /// in the study, and every fold imputes their rows of that source's kernels from its training subjects.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> imputedSources;
  std::size_t tableRowCount = 0;  ///< data rows of the table, dropped subjects included
};

/// The id column of the study's subjects table: /subjects/id_column when given; otherwise participant_id
/// (BIDS), or "subject" when the table has such a column and no participant_id column.
std::string SubjectIdColumn(const config::SubjectsSpec& subjects, const DelimitedTable& table);

/// Reads the subjects table named by the study, and participants.json beside it (BIDS: the "Levels" of the
/// target column must declare every class; ConfigError naming the sidecar when it is malformed).
/// InputError (file, line, subject id) for: missing
/// id/target/image column, empty or duplicate ids, missing image files, a classification target
/// with one class or more than two, an unknown positive_class, non-numeric regression targets,
/// fewer than 2 labelled subjects, an empty group or fold cell for a labelled subject.
/// `drop`: subjects (id -> reason) left out as if absent from the table (kernels.missing_source "drop").
Cohort LoadCohort(const config::StudyConfig& study, const std::map<std::string, std::string>& drop = {});

/// A BIDS file name split into entities: "sub-01_space-MNI_desc-x_T1w.nii.gz" -> {sub: 01, space: MNI,
/// desc: x}, suffix "T1w", extension ".nii.gz". Empty `suffix` when the name is not BIDS-like.
struct BidsName {
  std::map<std::string, std::string> entities;
  std::string suffix, extension;
};
BidsName ParseBidsName(const std::string& fileName);

/// With /subjects/bids: each participant's image found by entities under the dataset (or its
/// derivatives folder). `ids` may carry a "sub-" prefix or not. InputError [subjects:BidsMatch]
/// listing every participant with no match or several matches, and what was found.
/// With `unmatched`, participants without a match get an empty path and are listed there instead.
std::vector<std::string> FindBidsImages(const config::BidsSpec& bids, const std::vector<std::string>& ids,
                                        std::vector<std::string>* unmatched = nullptr);

/// Image paths in the table resolve against the table's folder (as BIDS does).
std::string ResolveImagePath(const std::string& tablePath, const std::string& cell);

/// Each subject id's data row in a table whose ids are in `idColumn` ("#row": the data rows, numbered from 1).
/// InputError naming `role` when the column is missing.
std::map<std::string, std::size_t> RowsById(const DelimitedTable& table, const std::string& idColumn, const std::string& role);

/// The order of class labels and categorical levels: numeric labels numerically ("2" < "10"), others lexically.
bool LabelLess(const std::string& a, const std::string& b);

}  // namespace neuromkl::pipeline
