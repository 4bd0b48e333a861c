#pragma once
// The kernel stage: read each subject image once, accumulate K_r = X_r X_r^T for every region r.
#include <cstdint>
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/kernels/kernel_set.hpp"

namespace neuromkl::kernels {

enum class NanPolicy {
  DropVoxel,  ///< default: a voxel non-finite in ANY subject is removed from its region for everyone
  Zero,       ///< PRoNTo's rule: each non-finite value is replaced by 0
};

/// Per-image intensity scaling before the kernels (PET): each image is divided by its own mean over
/// the atlas voxels (global mean) or over the voxels of reference regions. Per subject, so no
/// information crosses subjects or folds.
enum class IntensityScaling { None, GlobalMean, ReferenceRegions };

struct RegionKernelOptions {
  NanPolicy nanPolicy = NanPolicy::DropVoxel;
  std::uint64_t memoryBudgetBytes = 0;  ///< budget for the subjects x voxels matrix; 0 = 25 % of RAM
  int threads = 0;                      ///< 0 = all cores
  std::string scratchDir;               ///< where the out-of-core data file goes (default: system temp)
  IntensityScaling intensity = IntensityScaling::None;
  std::vector<std::int64_t> referenceVoxels;  ///< ReferenceRegions: linear voxel indices on the image grid
};

struct RegionKernelReport {
  double readSeconds = 0;     ///< reading and decoding the images (wall)
  double productSeconds = 0;  ///< Gram products (wall)
  double totalSeconds = 0;
  std::size_t subjectBlocks = 1;      ///< 1 = everything in memory
  std::uint64_t dataBytes = 0;        ///< n x V x 4
  std::uint64_t peakDataBytes = 0;    ///< largest amount of subject data held at once
  std::int64_t droppedVoxels = 0;
  std::vector<std::string> warnings;
};

/// Computes every region kernel in one pass over the subjects (each image decoded exactly once).
/// Errors: unreadable/corrupt/4-D image [io:*], an image on another grid than the region index
/// [input:GridMismatch, names the subject and the difference], an image with no finite value in
/// the atlas [input:AllNonFinite], an empty cohort [input:EmptyCohort], a non-positive mean for
/// intensity scaling [input:IntensityScale]. With scaling, set.intensityScale holds each subject's divisor.
KernelSet ComputeRegionKernels(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths,
                               const atlas::RegionIndex& regions, const RegionKernelOptions& options,
                               RegionKernelReport* report = nullptr);

/// The product pass of ComputeRegionKernels on subject rows already in memory (the benchmark and the
/// precision tests call it directly): kernel r = X[:, offsets[r]..offsets[r+1]) X[:, same]', with X the
/// n x ldx row-major float32 rows at `x` and subject 0's row as the reference of the differences.
/// Regions in parallel (TBB), single-threaded BLAS in each: the result does not depend on the thread count.
std::vector<Eigen::MatrixXd> RegionProducts(const float* x, std::int64_t n, std::int64_t ldx, const std::vector<std::int64_t>& offsets);

/// Total physical memory in bytes (for the default budget).
std::uint64_t PhysicalMemoryBytes();

}  // namespace neuromkl::kernels
