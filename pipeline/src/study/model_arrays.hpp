#pragma once
// The parts of the model export its files share: the models being exported and the arrays of their image and
// connectivity sources (primal weights, training means and covariate coefficients over voxels or connections).
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/export/model.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline::modelexport {

/// One model to export: a learner's final model or one of its outer folds' models, with its folder under model/.
struct ModelEntry {
  std::size_t learner;
  const cv::OuterFoldResult* fold;
  bool final;
  std::string folder;
  exporting::ExportedModel model;
};

Eigen::VectorXi Indices(const std::vector<int>& v);
/// The model's training rows (positions in the kernels' rows): the training set, then unlabelled subjects.
std::vector<int> TrainingRows(const cv::OuterFoldResult& fold);
/// The distinct values of a categorical column over cohort rows `rows` (null: the kernels' rows), sorted (the first is the
/// reference level).
std::vector<std::string> CategoricalLevels(const StudyContext& ctx, const std::string& column, const std::vector<int>* rows = nullptr);

/// Per (kernel, voxel) entry of a layout: its column among the harmonised source's voxel columns and that column's scale.
/// The columns are the regions' voxels times sqrt(p) (probabilistic atlases); ComBat is equivariant to that scale, so per
/// voxel alpha, sigma and beta are a column's divided by sqrt(p) and gamma*, delta* are the column's.
struct EntryColumns {
  std::vector<Eigen::Index> voxel;  ///< the entry's row among the model's voxels
  std::vector<Eigen::Index> column;
  std::vector<double> scale;
};

/// A ComBat fit of the model's training subjects `rows` over U voxels (or columns), entry by entry (`columns`), with the
/// preserved covariates' levels and imputation values.
exporting::ModelHarmonisation HarmonisationOf(const StudyContext& ctx, const gram::ComBatModel& fit, const std::vector<int>& rows, Eigen::Index U,
                                              const EntryColumns& columns);

/// Every entry's arrays of its image sources (one pass over each source's images; harmonised sources from the voxels
/// their ComBat fit harmonised) and of its connectivity sources (the matrices read again).
void AddModelArrays(const StudyContext& ctx, std::vector<ModelEntry>& entries);

}  // namespace neuromkl::pipeline::modelexport
