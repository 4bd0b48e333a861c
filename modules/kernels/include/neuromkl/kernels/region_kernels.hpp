#pragma once
// The kernel stage: read each subject image once, accumulate K_r = X_r X_r^T for every region r.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/core/system.hpp"

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
  /// Float32 studies: in memory (one subject block), each region's kernel is rounded into the set's
  /// compact store (gram::CompactKernel, centred with the cohort mean when `compactCentre`) as soon as it is
  /// formed, so at most one float64 kernel per thread is held, never all of them. Out of core the float64
  /// kernels are formed from block pairs and rounded at the end (CompactKernelSet). Errors name the kernel
  /// after `compactWhere`.
  bool compact = false;
  bool compactCentre = false;
  std::string compactWhere = "kernels";
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
  int ranks = 1;                      ///< MPI ranks that read the subjects and formed the kernel blocks (1: this process alone)
  std::uint64_t rankBudgetBytes = 0;  ///< ranks > 1: the per-rank budget for subject data that called for distribution
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

// ---- The pieces of ComputeRegionKernels, for a kernel stage whose subjects are spread over
// processes (pipeline/src/mpi_kernels.cpp): each process reads its own subjects, the non-finite
// rule and the reference row are agreed by all, and blocks of subjects multiply pair by pair with
// the same arithmetic as ComputeRegionKernels. ----

/// The data rows of some subjects as ComputeRegionKernels' read pass makes them: the region columns
/// in RegionColumnOffsets order, non-finite values as 0, probabilistic weights and intensity scaling applied.
struct SubjectRows {
  std::int64_t columns = 0;
  std::vector<float> data;                   ///< subjects x columns, row-major
  std::vector<std::int32_t> nonFiniteCount;  ///< per column: how many of these subjects have a non-finite value there
  std::vector<double> intensityScale;        ///< per subject: its divisor (empty without intensity scaling)
  std::int64_t nonZeroInsideAtlas = 0, nonZeroOutsideAtlas = 0;
};
/// Reads and decodes each image once (same errors as ComputeRegionKernels).
SubjectRows ReadSubjectRows(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                            const RegionKernelOptions& options);
/// The same into `rows` (subjects x RegionColumnOffsets(regions).back() floats, row-major; the caller's, so that a
/// matrix of another owner is filled without a copy); the result's `data` is empty.
SubjectRows ReadSubjectRowsInto(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                const RegionKernelOptions& options, float* rows);
/// The same, handing each subject's row to store(subject, row, its intensity divisor (1 without scaling)) instead of
/// keeping it: `row` is the reading thread's buffer, valid during the call (a caller that keeps the rows in another form).
SubjectRows ReadSubjectRowsWith(const std::vector<std::string>& subjectIds, const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                const RegionKernelOptions& options, const std::function<void(std::int64_t, const float*, double)>& store);
/// The R + 1 column offsets of the regions in a row.
std::vector<std::int64_t> RegionColumnOffsets(const atlas::RegionIndex& regions);
/// The non-finite rule from the cohort's per-column counts of non-finite values: a kernel set (no
/// kernels yet) with each region's name, label, voxels, non-finite voxels, zeroed values and
/// features; `droppedColumns` gets the columns nan_policy drop_voxel sets to 0 in every row.
KernelSet RegionKernelHeader(const std::vector<std::string>& subjectIds, const atlas::RegionIndex& regions, const std::vector<std::int32_t>& nonFiniteCount,
                             NanPolicy nanPolicy, std::vector<std::int64_t>& droppedColumns);
/// out[r] = X_a,r X_b,r' for every region r (na x nb; `same`: xa == xb, a diagonal block), from rows
/// of `columns` floats, with the reference row of ComputeRegionKernels (subject 0 after the non-finite rule).
void RegionKernelBlocks(const float* xa, std::int64_t na, const float* xb, std::int64_t nb, std::int64_t columns, const float* reference,
                        const std::vector<std::int64_t>& offsets, bool same, std::vector<Eigen::MatrixXd>& out);
/// The end of the kernel stage: regions with no voxel left and all-zero kernels excluded (warnings in `rep`).
void ExcludeEmptyRegions(KernelSet& set, RegionKernelReport& rep);

}  // namespace neuromkl::kernels
