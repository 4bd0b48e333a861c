#pragma once
// The kernel stage of a study: images + atlas (+ mask), precomputed kernel files, or tabular
// feature groups -> a KernelSet over every subject of the table, cached by content hash.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/sources.hpp"

namespace neuromkl::ranks {
class RankOwners;
}
namespace neuromkl::pipeline {

struct KernelStageResult {
  kernels::KernelSet set;
  /// kernels.representation chose features: the voxels of the kept regions, one row per subject of `set` (set.featureForm:
  /// `set` lists the region kernels, holds their diagonals and no matrix). Null on the kernel path; its only owner (the
  /// study keeps the rows its learners see in place).
  std::shared_ptr<gram::FeatureMatrix> features;
  std::string representationNote;  ///< how the representation was chosen (RepresentationChoice::why)
  gram::FeatureStorage featureStorage = gram::FeatureStorage::Float32;  ///< features: how they hold their values ...
  std::string featureStorageNote;  ///< ... and why (FeatureStorageChoice::why)
  std::string featureHeld;         ///< features: where the values are ("in memory", or the mapped cache file)
  /// Kernels that do not fit one rank under mpirun (set.distributed): the ranks hold them, this is rank 0's handle.
  std::shared_ptr<ranks::RankOwners> owners;
  std::string heldNote;  ///< ... how they came to the ranks when rank 0 handed them out (results.json)
  kernels::RegionKernelReport report;
  std::string key;        ///< content hash of everything the kernels depend on
  bool cacheHit = false;
  std::string cachePath;  ///< folder of the cached store (empty when caching is off)
  std::vector<std::string> warnings;
  std::optional<atlas::RegionIndex> regions;  ///< image source: each region's voxels on the image grid
  /// kernels.sources: each source's name, kernel count (in kernel order) and whether it came from the cache.
  std::vector<std::string> sourceNames;
  std::vector<std::size_t> sourceKernelCounts;
  std::vector<bool> sourceCacheHits;
  /// kernels.sources with missing_source "impute": per source, which subjects (rows of the table) it has data for; empty =
  /// every subject. The rows of the others are zero in `set` and imputed in every fold.
  std::vector<std::vector<char>> sourcePresent;
  /// kernels.sources: what the voxel maps of each image source need (its kernels are the columns
  /// [firstKernel, firstKernel + kernelCount) of `set`; images per row of the subjects table).
  struct ImageSource {
    std::string name;
    std::size_t firstKernel = 0, kernelCount = 0;
    atlas::RegionIndex regions;
    std::vector<std::string> images;
    kernels::NanPolicy nanPolicy = kernels::NanPolicy::DropVoxel;
    std::vector<double> intensityScale;  ///< the source's intensity scaling per subject (empty = none)
  };
  std::vector<ImageSource> imageSources;
};

/// The study's atlas (built-in or custom; the first image of several), read and checked.
atlas::Atlas LoadStudyAtlas(const config::StudyConfig& study);
/// Every atlas image of the study (several with /atlas/images), probabilistic ones as 4-D.
std::vector<atlas::Atlas> LoadStudyAtlases(const config::StudyConfig& study);
/// Content hash of the kernel inputs (file bytes, options, subject order); reads no image data beyond bytes.
std::string KernelCacheKey(const config::StudyConfig& study, const Cohort& cohort);
/// The atlas (or atlases, combined) on the cohort's image grid, after the mask; notes go to `warnings`.
atlas::RegionIndex StudyRegions(const config::StudyConfig& study, const Cohort& cohort, std::vector<std::string>& warnings);
/// kernels.intensity's reference voxels on the grid of `index` (region names or a label image).
/// ConfigError at /kernels/intensity/scaling/reference_region for an unknown region; InputError for
/// a reference image without a non-zero voxel on the grid.
std::vector<std::int64_t> ReferenceVoxels(const config::StudyConfig& study, const atlas::RegionIndex& index);
/// The options of ComputeRegionKernels for an images study (budget, NaN rule, intensity scaling, threads).
kernels::RegionKernelOptions RegionKernelOptionsOf(const config::StudyConfig& study, const atlas::RegionIndex& index, const std::string& scratchDir);
/// `sourceIndex`: the study is source `sourceIndex` of kernels.sources (-1: the study itself); under
/// mpirun the other ranks rebuild the same source from it (mpi_kernels.hpp).
/// The number of kernels the kernel stage forms for `study`, before exclusions (an empty region, a zero kernel), from
/// its inputs' headers and tables: the atlas's regions on the image grid, the precomputed files, the tabular groups,
/// the connectivity plan (which reads the matrices: they are small), summed over kernels.sources.
std::size_t PlannedKernelCount(const config::StudyConfig& study, const Cohort& cohort);
/// The memory the study's kernels take (`kernelCount`, PlannedKernelCount, x subjects^2 x 8 bytes, 4 with "precision":
/// "float32"), checked by `run` before its kernel stage and by `validate`: `ranks` share them (under mpirun, when they
/// hold them), and a share larger than this machine's memory is InputError kernels:TooLarge, which says what would fit
/// (float32, ranks under mpirun). Returns the bytes.
std::uint64_t CheckKernelsFitMemory(const config::StudyConfig& study, std::size_t subjects, std::size_t kernelCount, int ranks = 1);
/// Writes the kernel store of `res` into `dir`: from the kernels in memory, or each by the rank that holds it.
/// `moved`: the set's float64 kernels when they were moved out of it (into the study's kernels), else null.
void SaveStageKernels(const std::string& dir, const KernelStageResult& res, const std::string& description, const std::vector<Eigen::MatrixXd>* moved = nullptr);
/// One note per excluded kernel in res.warnings, made from the kernel set itself so that a cache hit reports the same.
void AddExclusionWarnings(KernelStageResult& res);
/// The regions of the atlas with no voxel on the image grid (or inside the mask) as excluded kernels of `set`.
void ExcludeRegionsWithoutVoxels(const config::StudyConfig& study, const atlas::RegionIndex& index, kernels::KernelSet& set);
/// How a study's features hold their voxel values: integer codes (uint8 or int16) with one scale per subject when every
/// image stores integers of that width with no intercept and the atlas does not weight its voxels (exact: value =
/// slope x code / intensity divisor), else float32. Reads every image's header (io::ReadStoredForm).
struct FeatureStorageChoice {
  gram::FeatureStorage storage = gram::FeatureStorage::Float32;
  std::vector<double> slope;  ///< compact storage: each image's slope (1 when unscaled)
  std::string why;            ///< a sentence for validate and results.json
};
FeatureStorageChoice ChooseFeatureStorage(const Cohort& cohort, const atlas::RegionIndex& regions);
/// kernels.representation resolved for a study: kernels or features, with both footprints (validate prints them).
struct RepresentationChoice {
  config::KernelRepresentation chosen = config::KernelRepresentation::Kernel;  ///< Kernel or Features
  std::uint64_t kernelBytes = 0;   ///< `kernelCount` x subjects^2 x 8 (4 in float32)
  std::uint64_t featureBytes = 0;  ///< subjects x voxels x bytes per value; 0 when the study has no feature form (config::WhyNoFeatureForm)
  FeatureStorageChoice storage;    ///< how the features would hold their values, and why
  std::string why;                 ///< a sentence: the option, or auto's reason
};
/// "kernel" and "features" as given; "auto": features when the study has a feature form, its kernels (a share of
/// `ranks` under mpirun) take more than half of this machine's memory, and the features take less than the kernels and
/// at most half of the memory (the matrix may be copied once: a subset of rows, a region left out); else kernels.
RepresentationChoice ChooseRepresentation(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount, int ranks = 1);
/// subjects x voxels x BytesPerValue(storage): the feature matrix.
std::uint64_t FeatureBytes(std::size_t subjects, std::int64_t voxels, gram::FeatureStorage storage);
/// InputError kernels:TooLarge when the feature matrix does not fit this machine's memory.
void CheckFeaturesFitMemory(const config::StudyConfig& study, const RepresentationChoice& choice);
/// The kernel stage on features: every image read once into the FeatureMatrix (RegionKernelOptionsOf's masking, NaN
/// rule and scaling), regions without a voxel left or with a zero kernel excluded as the kernel path does, the values held
/// as `storage` says (ChooseRepresentation's choice, made from the same cohort and regions). With kernels.cache, the
/// matrix is kept in the cache folder under FeatureCacheKey (exporting::SaveFeatureStore) and a later run with the same
/// inputs reads it from there instead of the images.
KernelStageResult FormFeatureStage(const config::StudyConfig& study, const Cohort& cohort, const FeatureStorageChoice& storage, const std::string& scratchDir);
/// The cache key of a study's features: KernelCacheKey's inputs without the kernels' precision.
std::string FeatureCacheKey(const config::StudyConfig& study, const Cohort& cohort);
/// The study's kernel stage: kernels, or features as ChooseRepresentation decides.
KernelStageResult RunKernelStage(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir, int sourceIndex = -1);

}  // namespace neuromkl::pipeline
