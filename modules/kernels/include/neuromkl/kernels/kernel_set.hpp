#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/compact.hpp"

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
  std::vector<Eigen::MatrixXd> kernels;   ///< one per kernel (empty when the set holds its kernels compact)
  /// Float32 studies: the kernels as the compact store instead, each rounded as soon as it was formed
  /// (so the float64 kernels are never all held), and each kernel's float64 diagonal before rounding (which
  /// subjects have signal: a centred store's diagonal cannot tell). Empty for a float64 set.
  gram::CompactKernelList compact;
  std::vector<Eigen::VectorXd> rawDiagonals;
  std::vector<ExcludedKernel> excluded;   ///< regions left out, with the reason
  std::vector<double> intensityScale;     ///< per subject: what its image was divided by (empty: no scaling)
  /// Image kernels: finite non-zero voxel values inside / outside the atlas regions, summed over
  /// subjects (-1: not images). A large outside share means the atlas misses part of the data.
  std::int64_t nonZeroInsideAtlas = -1, nonZeroOutsideAtlas = -1;
  /// The kernels are held by MPI ranks (a study whose kernels do not fit one rank; pipeline's
  /// KernelStageResult::owners): `kernels` and `compact.kernels` are empty, `info` lists them, `rawDiagonals` holds each
  /// one's float64 diagonal, `ownedCompact` says whether the ranks hold them as the compact store (centred as
  /// `compact.centred` says).
  bool distributed = false;
  bool ownedCompact = false;
  /// The kernels are held as features (kernels.representation "features"; pipeline's KernelStageResult::features): no
  /// matrix is formed, `info` lists the region kernels and `rawDiagonals` holds each one's diagonal (row norms^2).
  bool featureForm = false;
  std::size_t Size() const { return distributed || featureForm ? info.size() : compact.empty() ? kernels.size() : compact.size(); }
  bool Compact() const { return distributed ? ownedCompact : !compact.empty(); }
};

/// Moves kernels whose matrix is entirely zero into `excluded` (they cannot be normalised,
/// and MKL would give them 0/0 weights). Returns the names excluded. In a compact set a zero kernel is one the
/// stage did not round (an empty matrix: its float64 kernel was zero; a centred store cannot tell).
std::vector<std::string> ExcludeZeroKernels(KernelSet& set);
/// Rounds the set's float64 kernels into its compact store (gram::CompactKernelsReleasing: each float64 kernel
/// freed once rounded), keeping their diagonals; `where` prefixes the kernel's name in an error. No-op for a set
/// that is compact already.
void CompactKernelSet(KernelSet& set, bool centre, const std::string& where);
/// Removes kernel r (its matrix, compact or not, its diagonal and its info).
void EraseKernel(KernelSet& set, std::size_t r);

/// InputError naming the kernel and entry if the kernel is not finite [kernels:NonFinite], not square n x n
/// [kernels:Shape], not symmetric [kernels:NotSymmetric], or not positive semi-definite beyond rounding (an eigenvalue
/// below -1e-6 n max|K_ij|) [kernels:NotPsd].
void CheckKernel(const Eigen::MatrixXd& K, const std::string& name, Eigen::Index n, const std::string& where);
/// CheckKernel for every kernel of the set (n = its subjects).
void CheckKernelSet(const KernelSet& set, const std::string& where);

}  // namespace neuromkl::kernels
