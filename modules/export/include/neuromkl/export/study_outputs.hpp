#pragma once
// The files of a study's output folder, written from its RunRecord: the tables (subjects, regions,
// metrics, predictions, folds, region rankings, null distribution), the voxel weight maps, and the
// report and results.json. The caller writes into a folder that is committed as a whole.
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/export/run_record.hpp"
#include "neuromkl/weights/stability.hpp"

namespace neuromkl::exporting {

/// Voxel weight maps on the image grid, per learner: one per successful outer fold, and their mean.
struct WeightMaps {
  std::vector<std::vector<std::vector<float>>> folds;  ///< [learner][successful fold] -> voxels
  std::vector<std::vector<float>> mean;                ///< [learner] -> voxels (empty: no map)
  std::vector<weights::MapStability> stability;         ///< [learner]: of the fold maps (empty: fewer than two folds)
  /// activation patterns (Haufe et al. 2014; binary and regression): as folds/mean
  std::vector<std::vector<std::vector<float>>> patternFolds;
  std::vector<std::vector<float>> patternMean;
  /// multiclass: [learner][class] -> mean over the successful folds of class t's map (coefficients and weights of class t)
  std::vector<std::vector<std::vector<float>>> classMean;
  int classFolds = 0;                                   ///< folds in each class mean
  /// kernels.sources: the maps of each image source on its own grid (then `folds`/`mean` are empty);
  /// written to weights/<source>/ with the single-source file names.
  struct Source {
    std::string name;
    const atlas::RegionIndex* regions = nullptr;  ///< the source's grid and regions
    std::vector<std::vector<std::vector<float>>> folds;
    std::vector<std::vector<float>> mean;
    std::vector<weights::MapStability> stability;            ///< [learner]
    std::vector<std::vector<std::vector<float>>> classMean;  ///< multiclass: [learner][class]
    std::vector<std::vector<std::vector<float>>> patternFolds;
    std::vector<std::vector<float>> patternMean;
  };
  std::vector<Source> sources;
  /// Connectivity sources: edge weights (node x node, symmetric, zero diagonal) per learner, per
  /// successful fold and their mean; written to weights/<source>/.
  struct Edges {
    std::string name;
    std::vector<std::string> nodes, networks;
    std::vector<std::vector<Eigen::MatrixXd>> folds;  ///< [learner][successful fold]
    std::vector<Eigen::MatrixXd> mean;                ///< [learner] (empty: no weights)
  };
  std::vector<Edges> edges;
};

/// subjects.tsv, regions.tsv, metrics.tsv, predictions.tsv, folds.tsv, regions_<learner>.tsv/.json,
/// weights/*.nii.gz (when `regions`, the study's atlas on the image grid, is given and the learner has maps; the
/// maps' relative paths are recorded in `record`), the atlas painted with the region tables' shares and p-values,
/// and null_distribution.tsv (when permutations ran). IoError on a failed write.
void WriteStudyTables(const std::string& dir, RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions);

/// report.html and results.json (written last: the record's timings are complete by then).
void WriteStudyRecord(const std::string& dir, const RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions);

}  // namespace neuromkl::exporting
