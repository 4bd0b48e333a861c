#pragma once
// Which regions carry the prediction (ALGORITHMS.md section 8): region tables from kernel weights
// per outer fold, and voxel weight maps w = sum_i coef_i x~_i for linear kernels.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/kernels/region_kernels.hpp"

namespace neuromkl::weights {

/// Ranks with rank 1 = the largest value; tied values share the average of their ranks.
Eigen::VectorXd Ranks(const Eigen::VectorXd& values);

struct RegionRow {
  std::size_t kernel = 0;             ///< index into the kernel set
  std::vector<double> foldPercent;    ///< weight per outer fold, percent of that fold's total
  double meanPercent = 0, sdPercent = 0;
  int foldsSelected = 0;              ///< folds with weight > 0
  double expectedRank = 0;            ///< mean over folds of the rank (1 = largest, ties averaged)
  /// mean over the region's voxels of the fold maps' sign consistency (stability.hpp); NaN without voxel maps
  double signConsistency = std::numeric_limits<double>::quiet_NaN();
};

/// The fraction of outer folds whose weight is > 0 (foldsSelected over the folds; NaN without folds).
double SelectionFrequency(const RegionRow& row);

/// One row per kernel, sorted by mean weight (descending; ties by expected rank, then kernel order).
/// `foldWeights`: one non-negative vector per outer fold (e.g. MKL betas, or a region summary).
std::vector<RegionRow> RegionTable(const std::vector<Eigen::VectorXd>& foldWeights);

/// A kernel source's part of a ranked region table (kernels.sources: each source's kernels form one consecutive block).
struct SourceShare {
  std::vector<double> foldPercent;  ///< per outer fold, the sum of its kernels' percentages (empty: no row of the source)
  double meanPercent = 0;           ///< the sum of its kernels' mean percentages (the mean over folds of foldPercent)
};
/// One share per source: `kernelsPerSource[s]` kernels, in kernel order (source s holds the kernels after those
/// of sources 0..s-1). A source with more kernels tends to collect more weight, so compare per kernel as well.
std::vector<SourceShare> SourceShares(const std::vector<RegionRow>& table, const std::vector<std::size_t>& kernelsPerSource);

/// Voxel maps on the image grid, one per (model) entry of `subjectWeights`, computed in one pass
/// over the images (each decoded once). Kernel j's weights go to the voxels of the region with
/// label kernels[j].label. Voxels outside every kernel's region, and (drop_voxel rule) voxels that
/// are non-finite in any subject, are 0. Deterministic for any thread count.
std::vector<std::vector<float>> VoxelMaps(const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                          const std::vector<kernels::KernelInfo>& kernels, const std::vector<Eigen::MatrixXd>& subjectWeights,
                                          kernels::NanPolicy nanPolicy);

/// What a model's image arrays are evaluated on (ModelImages): the voxels of the kernels' regions.
struct ModelImageLayout {
  std::vector<std::int64_t> voxels;     ///< union of the kernels' region voxels (ascending), NaN-dropped voxels removed
  std::vector<std::int64_t> allVoxels;  ///< the same union before the NaN rule (the global mean of intensity scaling)
  std::vector<std::size_t> entryKernel; ///< per (kernel, voxel) entry: the kernel
  std::vector<std::size_t> entryVoxel;  ///< its row in `voxels`
  std::vector<double> entryWeight;      ///< its probabilistic weight p (1 for label atlases)
};
/// One model's linear combinations of the images: `voxelWeights` (n x S) evaluated on every layout
/// voxel, and per class c the subject weights `kernelWeights[c]` (n x kernels, as gram::KernelStore::SubjectWeights)
/// evaluated on each kernel's own voxels times p (the region's primal weights, even where regions overlap).
struct ModelImageRequest {
  Eigen::MatrixXd voxelWeights;
  std::vector<Eigen::MatrixXd> kernelWeights;
};
struct ModelImageArrays {
  Eigen::MatrixXd atVoxels;   ///< voxels x S
  Eigen::MatrixXd atEntries;  ///< entries x classes
};
/// Every request in one pass over the images (each decoded once, accumulated in subject order: the
/// sums do not depend on the thread count). Non-finite values contribute 0; with drop_voxel, voxels
/// non-finite in any image are removed from the layout. GeometryMismatch if an image left the grid.
std::vector<ModelImageArrays> ModelImages(const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                          const std::vector<kernels::KernelInfo>& kernels, const std::vector<ModelImageRequest>& requests,
                                          kernels::NanPolicy nanPolicy, ModelImageLayout& layout);

/// Each kernel's part of a fitted model: ||w_r|| = beta_r sqrt(coef' K~_r coef), where K~_r is the
/// fold's training kernel as the learner saw it (centred/normalised with training statistics). For a
/// linear kernel w_r is the region's part of the voxel weight vector (the map restricted to the
/// region), so this is the region's share of the model; for l1-MKL at its optimum it is
/// proportional to the kernel weights (docs/learners.md). Used for learners without kernel weights.
Eigen::VectorXd ModelNorms(const std::vector<Eigen::MatrixXd>& trainKernels, const Eigen::VectorXd& coef, const Eigen::VectorXd& beta);
/// One kernel's ||w_r|| = beta_r sqrt(coef' K~_r coef).
double ModelNorm(const Eigen::MatrixXd& trainKernel, const Eigen::VectorXd& coef, double beta);
/// The same from the quadratic coef' K~_r coef computed elsewhere (e.g. from the full kernel in place).
double ModelNorm(double quadratic, double beta);

}  // namespace neuromkl::weights
