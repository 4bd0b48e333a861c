#pragma once
// How stable a learner's voxel maps are over its outer folds (and repeats): per voxel the ratio of the mean weight
// to its spread, and whether the folds agree on the weight's sign (Gomez-Verdejo, Parrado-Hernandez & Tohka 2019);
// per atlas region the mean agreement over its voxels.
#include <cstddef>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::weights {

/// Per voxel over K fold maps w_1..w_K (K >= 2):
/// - `meanOverSd`: mean(w) / sd(w), the sample SD (K - 1); NaN where sd = 0 (every fold the same value);
/// - `signBalance`: |#{k: w_k > 0} - #{k: w_k < 0}|, or -1 where every fold is 0 (no model uses the voxel).
/// The sign consistency of a voxel is signBalance / K in [0, 1]: 1 when every fold has the same sign, 0 when as many
/// folds are positive as negative.
struct MapStability {
  int folds = 0;
  std::vector<float> meanOverSd;
  std::vector<int> signBalance;
  /// signBalance / folds per voxel, NaN where undefined (the map that is written).
  std::vector<float> SignConsistency() const;
};
/// Empty result when there are fewer than two maps: one fold has no spread to measure.
MapStability FoldMapStability(const std::vector<std::vector<float>>& foldMaps);

/// The expected sign consistency of one voxel whose K fold signs are independent fair coin flips (no consistent sign):
/// E|2B - K| / K with B ~ Binomial(K, 1/2). The level a region's value is read against (0.375 for K = 5).
double ChanceSignConsistency(int folds);

/// Per kernel j in [first, first + count): the mean sign consistency over the voxels of the region with
/// label kernels[j].label, skipping voxels where it is undefined; NaN for a kernel with no such region or voxel.
/// Entries outside [first, first + count) are left as they are in `perKernel` (sized to kernels.size()).
void RegionSignConsistency(const MapStability& stability, const atlas::RegionIndex& regions, const std::vector<kernels::KernelInfo>& kernels,
                           std::size_t first, std::size_t count, std::vector<double>& perKernel);

}  // namespace neuromkl::weights
