#pragma once
// The parts of `neuromkl predict` its files share: the new subjects' covariate rows, the harmonised sources' ComBat and the
// image sources' scores.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/model.hpp"
#include "neuromkl/gram/combat.hpp"
#include "neuromkl/gram/tabular.hpp"
#include "neuromkl/pipeline/predict.hpp"

namespace neuromkl::pipeline::predicting {

/// A finite number, or InputError predict:NotNumeric naming `where` and `what`.
double ParseFinite(const std::string& cell, const std::string& where, const std::string& what);

/// Covariate columns as a model keeps them: numeric columns, then categorical ones with their training levels (first =
/// reference, no column), after `first` leading columns (1: the intercept); `fill`: per design column the value of a
/// missing cell (empty: a missing cell is an error).
struct CovariateColumns {
  std::string what;  ///< "covariate", or "harmonisation covariate", for messages
  Eigen::Index first = 1;
  const std::vector<std::string>& numeric;
  const std::vector<std::pair<std::string, std::vector<std::string>>>& categorical;
  const Eigen::RowVectorXd& fill;
};
/// The new subjects' rows of such columns: a level the model was not trained with as `s.unseenLevels` says (each such
/// subject and column named in `warnings`; with Estimate, coded as the reference level and named in `unseen`, per
/// subject "column = level" of each such column); a missing value imputed with the model's fill (named in `warnings`).
Eigen::MatrixXd NewCovariateRows(const CovariateColumns& columns, const NewSubjects& s, std::vector<std::string>& warnings,
                                 std::vector<std::vector<std::string>>* unseen = nullptr);

/// A tabular kernel of a source the model imputes: over the training rows `Xt` and the new rows `Xn`, with the rows lacking
/// the source (`trainingHas`, `newHas`) imputed from the training rows having it (gram::ImputeLackingRows), as the folds
/// imputed them.
gram::FoldKernel ImputedFeatureKernel(const gram::FeatureKernel& function, const Eigen::MatrixXd& Xt, const Eigen::MatrixXd& Xn,
                                      const std::vector<char>& trainingHas, const std::vector<char>& newHas);

/// The subjects-table columns a model's target confounds read (numeric, then categorical).
std::vector<std::string> TargetConfoundColumns(const exporting::ModelTargetConfounds& t);
/// Model m's known targets `y` adjusted for its target confounds: y - c b, c a subject's confound row coded as in training
/// (NewCovariateRows). Subjects without a target stay without; when the table lacks a confound column, every subject (with
/// a warning in `warnings` and on the console: no gaps, no metrics).
std::vector<std::optional<double>> AdjustedTargets(const exporting::ExportedModel& m, const NewSubjects& s, const std::vector<std::optional<double>>& y,
                                                   std::vector<std::string>& warnings);

/// New subjects grouped by the covariate levels the model was not trained with (UnseenLevels::Estimate): each group's
/// effect is estimated from its `fitting` subjects. `of`: per subject its group, or -1.
struct LevelGroups {
  std::vector<int> of;
  std::vector<std::string> names;                ///< per group, its levels ("site = D")
  std::vector<std::vector<std::size_t>> fitting; ///< per group, the subjects its mean is taken over
  bool Any() const { return !names.empty(); }
};

/// The groups of model m's new subjects by their levels the model was not trained with (`unseen`, per subject, from
/// NewCovariateRows), each estimated from its subjects (of NewSubjects::newSiteReference's group when given).
/// InputError predict:NewLevelTooSmall below NewSubjects::newSiteMinimum, predict:EstimateLevel for a model with
/// kernel-space sources (no images to take the mean of).
LevelGroups GroupUnseenLevels(const exporting::ExportedModel& m, const NewSubjects& s, const std::vector<std::vector<std::string>>& unseen);

/// Per group, the mean of its fitting subjects' prepared vectors (`prepared(i)`: subject i's centred voxels or
/// connections), which each subject of the group then has removed.
template <typename Prepared>
std::vector<Eigen::VectorXd> LevelMeans(const LevelGroups& groups, const Prepared& prepared) {
  std::vector<Eigen::VectorXd> means;
  for (const auto& fitting : groups.fitting) {
    Eigen::VectorXd sum = prepared(fitting.front());
    for (std::size_t j = 1; j < fitting.size(); ++j) sum += prepared(fitting[j]);
    means.push_back(sum / static_cast<double>(fitting.size()));
  }
  return means;
}

/// Appends the notes not already in `warnings` (models of one study say the same of each subject, site and level).
void AddOnce(const std::vector<std::string>& notes, std::vector<std::string>& warnings);

/// A harmonised source of one model as it applies to the new subjects: the model's ComBat fit with the effects of the
/// new sites added, each subject's row of the fit's site matrices and its preserved covariates.
struct SubjectHarmonisation {
  gram::ComBatModel fit;
  std::vector<int> siteRow;
  Eigen::MatrixXd covariates;  ///< subjects x preserved design columns (no intercept)
};

/// x harmonised at feature u (a voxel, a column) as subject i's site and covariates say, with the arithmetic of
/// gram::ApplyComBat.
double Harmonised(const SubjectHarmonisation& h, Eigen::Index u, Eigen::Index i, double x);
/// The rows a new site's effects are estimated from: its subjects `fitting`, over the fit's features, as the model's
/// training data were before harmonising (`h`: the fit and the subjects' preserved covariates).
using NewSiteRows = std::function<Eigen::MatrixXd(const std::vector<std::size_t>& fitting, const SubjectHarmonisation& h)>;
/// The harmonisation of a model's source (`source` names it in messages) for the new subjects: each subject's site among
/// the training sites, and the sites the model was not trained on estimated from their own subjects (at least
/// NewSubjects::newSiteMinimum, of NewSubjects::newSiteReference's group when given), each named in `notes`; or refused
/// as NewSubjects::newSites says. InputError predict:MissingSite, predict:UnknownSite, predict:NewSiteTooSmall,
/// predict:NoSuchColumn.
std::unique_ptr<SubjectHarmonisation> PrepareHarmonisation(const exporting::ModelHarmonisation& model, const std::string& source, const NewSubjects& s,
                                                           const NewSiteRows& newSiteRows, std::vector<std::string>& notes);

/// Every image source's part of the models' scores (and `parts`), each image read once: harmonised sources first
/// estimate the effects of sites their models were not trained on (NewSubjects::newSites), then every image is
/// harmonised, residualised, centred and projected as the model's training images were.
void AddImageScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, const std::vector<Eigen::MatrixXd>& designs,
                    const std::vector<LevelGroups>& groups, std::vector<Eigen::MatrixXd>& scores, std::vector<Eigen::MatrixXd>* parts,
                    std::vector<std::string>& warnings);

/// Kernel `kernel`'s rows of model m for the new subjects from a table: the columns of the model's training subjects, in
/// its order, and its stored training block. InputError naming the file for a new subject without a row or a training
/// subject without a column.
gram::FoldKernel KernelFromTable(const exporting::ExportedModel& m, std::size_t kernel, const KernelRowTable& t, const NewSubjects& s);

/// Every connectivity source's part of the models' scores (and `parts`): each subject's matrix (the file in the source's
/// column) read once, checked as the study checked its matrices and against the model's nodes, scored in primal form.
void AddConnectivityScores(const std::vector<exporting::ExportedModel>& models, const NewSubjects& subjects, const std::vector<Eigen::MatrixXd>& designs,
                           const std::vector<LevelGroups>& groups, std::vector<Eigen::MatrixXd>& scores, std::vector<Eigen::MatrixXd>* parts);

}  // namespace neuromkl::pipeline::predicting
