#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::kernels {

/// What one kernel (region, feature group or precomputed source) is made of.
struct KernelInfo {
  std::string name;
  std::int64_t label = 0;            ///< atlas label (0 for non-atlas kernels)
  std::int64_t features = 0;         ///< voxels (or columns) that enter the kernel
  std::int64_t atlasVoxels = 0;      ///< voxels of the label on the image grid, before mask/NaN rule
  std::int64_t nonFiniteVoxels = 0;  ///< voxels dropped (drop_voxel rule) or holding a zeroed value (zero rule)
  std::int64_t zeroedValues = 0;     ///< individual non-finite values set to 0 (zero rule)
};

struct ExcludedKernel {
  KernelInfo info;
  std::string reason;
};

/// One n x n kernel per region over all subjects (raw Gram matrices, not centred).
struct KernelSet {
  std::vector<std::string> subjects;      ///< row/column order of every kernel
  std::vector<KernelInfo> info;           ///< one per kernel
  std::vector<Eigen::MatrixXd> kernels;   ///< one per kernel
  std::vector<ExcludedKernel> excluded;   ///< regions left out, with the reason
  std::vector<double> intensityScale;     ///< per subject: what its image was divided by (empty: no scaling)
  /// Image kernels: finite non-zero voxel values inside / outside the atlas regions, summed over
  /// subjects (-1: not images). A large outside share means the atlas misses part of the data.
  std::int64_t nonZeroInsideAtlas = -1, nonZeroOutsideAtlas = -1;
  std::size_t Size() const { return kernels.size(); }
};

/// Moves kernels whose matrix is entirely zero into `excluded` (they cannot be normalised,
/// and MKL would give them 0/0 weights). Returns the names excluded.
std::vector<std::string> ExcludeZeroKernels(KernelSet& set);
/// InputError naming the kernel and entry if the kernel is not finite, not square n x n, or not symmetric.
void CheckKernel(const Eigen::MatrixXd& K, const std::string& name, Eigen::Index n, const std::string& where);
/// CheckKernel for every kernel of the set (n = its subjects).
void CheckKernelSet(const KernelSet& set, const std::string& where);

}  // namespace neuromkl::kernels
