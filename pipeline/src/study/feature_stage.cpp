// The kernel stage of a study on features (kernels.representation): the images read once into one FeatureMatrix (the
// masked voxels, subject-major, grouped by region), with the kernel stage's masking, non-finite rule and intensity
// scaling, kept in the kernel cache (exporting::SaveFeatureStore) so that a later run reads no image, and the choice
// between features and kernels that "auto" makes from the two footprints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/mapped_file.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/export/feature_cache.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/output_dir.hpp"

namespace neuromkl::pipeline {

namespace {

namespace fs = std::filesystem;
using Representation = config::KernelRepresentation;

double Gib(std::uint64_t bytes) { return static_cast<double>(bytes) / 1073741824.0; }
std::string Size(std::uint64_t bytes) {
  return bytes < (std::uint64_t{1} << 30) ? fmt::format("{:.1f} MiB", static_cast<double>(bytes) / 1048576.0) : fmt::format("{:.1f} GiB", Gib(bytes));
}

std::int64_t RegionVoxelCount(const atlas::RegionIndex& regions) {
  std::int64_t voxels = 0;
  for (const auto& r : regions.regions) voxels += static_cast<std::int64_t>(r.voxels.size());
  return voxels;
}

/// The images read into integer codes: each row as the float32 read pass makes it (masking, intensity scaling), then
/// divided by its scale, the image's slope over its intensity divisor, which gives back the stored integers exactly (a
/// code below 2^15 is off by at most 2^15 x 3 float32 roundings, far below 1/2).
kernels::SubjectRows ReadCodes(const Cohort& cohort, const atlas::RegionIndex& index, const kernels::RegionKernelOptions& options,
                               const FeatureStorageChoice& storage, gram::FeatureMatrix& x) {
  const Eigen::Index columns = x.Voxels();
  return kernels::ReadSubjectRowsWith(cohort.ids, cohort.images, index, options, [&](std::int64_t s, const float* row, double divisor) {
    const double scale = storage.slope[static_cast<std::size_t>(s)] / divisor;
    x.rowScale[s] = scale;
    auto code = [&](Eigen::Index c, double lowest, double highest) {
      const double q = std::round(static_cast<double>(row[c]) / scale);
      if (!(std::abs(static_cast<double>(row[c]) / scale - q) < 1e-2) || q < lowest || q > highest)
        throw InputError("features:NotCodes", "subject " + cohort.ids[static_cast<std::size_t>(s)] + " (" + cohort.images[static_cast<std::size_t>(s)] + ")",
                         fmt::format("expected the integer codes its header announces (value = {} x code); found {} in column {} (was the file changed while it was read?)",
                                     scale, row[c], c));
      return q;
    };
    void* to = x.MutableRow(s);
    if (x.storage == gram::FeatureStorage::UInt8)
      for (Eigen::Index c = 0; c < columns; ++c) static_cast<std::uint8_t*>(to)[c] = static_cast<std::uint8_t>(code(c, 0, 255));
    else
      for (Eigen::Index c = 0; c < columns; ++c) static_cast<std::int16_t*>(to)[c] = static_cast<std::int16_t>(code(c, -32768, 32767));
  });
}

}  // namespace

std::uint64_t FeatureBytes(std::size_t subjects, std::int64_t voxels, gram::FeatureStorage storage) {
  return static_cast<std::uint64_t>(subjects) * static_cast<std::uint64_t>(std::max<std::int64_t>(voxels, 0)) * gram::BytesPerValue(storage);
}

FeatureStorageChoice ChooseFeatureStorage(const Cohort& cohort, const atlas::RegionIndex& regions) {
  FeatureStorageChoice choice;
  for (const auto& r : regions.regions)
    if (!r.weights.empty()) {
      choice.why = "float32: the atlas weights its voxels by probability (region " + r.name + ")";
      return choice;
    }
  // The narrowest codes every image's datatype fits, while each image stores integers with no intercept (a voxel's value
  // is then its code times the image's own slope, and 0 stays 0).
  std::vector<io::StoredForm> forms(cohort.images.size());
  tbb::parallel_for(std::size_t{0}, forms.size(), [&](std::size_t i) { forms[i] = io::ReadStoredForm(cohort.images[i]); });
  auto storage = gram::FeatureStorage::UInt8;
  choice.slope.resize(cohort.images.size());
  for (std::size_t i = 0; i < cohort.images.size(); ++i) {
    const io::StoredForm& form = forms[i];
    const std::string where = "subject " + cohort.ids[i] + " (" + cohort.images[i] + ")";
    if (!form.integer || form.inter != 0.0 || form.lowest < std::numeric_limits<std::int16_t>::lowest() || form.highest > std::numeric_limits<std::int16_t>::max()) {
      choice.slope.clear();
      const char* why = !form.integer ? "" : form.inter != 0.0 ? " with an intercept (scl_inter)" : " (codes beyond int16's range)";
      choice.why = fmt::format("float32: {} stores {}{}", where, form.datatype, why);
      return choice;
    }
    if (form.lowest < 0 || form.highest > 255) storage = gram::FeatureStorage::Int16;
    choice.slope[i] = form.slope;
  }
  choice.storage = cohort.images.empty() ? gram::FeatureStorage::Float32 : storage;
  choice.why = fmt::format("{}: every image stores integers of at most {} bits with no intercept, kept as its codes and one scale per subject (exact)",
                           gram::ToString(choice.storage), storage == gram::FeatureStorage::UInt8 ? 8 : 16);
  return choice;
}

RepresentationChoice ChooseRepresentation(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount, int ranks) {
  RepresentationChoice choice;
  const auto n = static_cast<std::uint64_t>(cohort.ids.size());
  const bool float32 = study.kernels.precision == config::KernelPrecision::Float32;
  choice.kernelBytes = static_cast<std::uint64_t>(kernelCount) * n * n * (float32 ? 4 : 8);
  const config::FeatureFormObstacle obstacle = config::WhyNoFeatureForm(study);
  if (obstacle.Empty()) {
    std::vector<std::string> warnings;
    const atlas::RegionIndex regions = StudyRegions(study, cohort, warnings);
    choice.storage = ChooseFeatureStorage(cohort, regions);
    choice.featureBytes = FeatureBytes(cohort.ids.size(), RegionVoxelCount(regions), choice.storage.storage);
  }
  const std::uint64_t memory = PhysicalMemoryBytes();
  const std::uint64_t share = choice.kernelBytes / static_cast<std::uint64_t>(std::max(ranks, 1));
  switch (study.kernels.representation) {
    case Representation::Kernel:
      choice.chosen = Representation::Kernel;
      choice.why = "kernels.representation \"kernel\"";
      break;
    case Representation::Features:
      choice.chosen = Representation::Features;
      choice.why = "kernels.representation \"features\"";
      break;
    case Representation::Auto:
      // The kernel path runs a study with its kernels and about as much again in fold copies and the final model's
      // work (measured peaks: 2.1-2.7x the kernels), so kernels over half the memory go to features when they can.
      if (!obstacle.Empty()) {
        choice.chosen = Representation::Kernel;
        choice.why = "auto: kernels, as the study has no feature form (" + obstacle.pointer + ": " + obstacle.reason + ")";
      } else if (memory > 0 && 2 * share > memory && choice.featureBytes < share && (2 * choice.featureBytes <= memory || study.kernels.cache)) {
        // Features beyond half the memory are paged from the kernel cache folder (out of core).
        choice.chosen = Representation::Features;
        choice.why = 2 * choice.featureBytes <= memory
                         ? fmt::format("auto: features, as the kernels ({}{}) take more than half of this machine's {:.1f} GiB and the features ({}) less",
                                       Size(share), ranks > 1 ? fmt::format(", a share of {} ranks", ranks) : "", Gib(memory), Size(choice.featureBytes))
                         : fmt::format("auto: features, paged from the kernel cache folder, as the kernels ({}{}) take more than half of this machine's {:.1f} "
                                       "GiB and the features ({}) less than the kernels",
                                       Size(share), ranks > 1 ? fmt::format(", a share of {} ranks", ranks) : "", Gib(memory), Size(choice.featureBytes));
      } else if (memory > 0 && 2 * share > memory) {
        choice.chosen = Representation::Kernel;
        choice.why = fmt::format("auto: kernels, as the features ({}) would take more than the kernels ({}) or half of this machine's {:.1f} GiB",
                                 Size(choice.featureBytes), Size(share), Gib(memory));
      } else if (memory == 0) {
        choice.chosen = Representation::Kernel;
        choice.why = "auto: kernels, as this machine's memory is unknown";
      } else {
        choice.chosen = Representation::Kernel;
        choice.why = fmt::format("auto: kernels, as they ({}) fit in half of this machine's {:.1f} GiB (faster at this size)", Size(share), Gib(memory));
      }
      break;
  }
  return choice;
}

void CheckFeaturesFitMemory(const config::StudyConfig& study, const RepresentationChoice& choice) {
  const std::uint64_t memory = PhysicalMemoryBytes();
  if (memory == 0 || choice.featureBytes <= memory) return;
  if (study.kernels.cache) {
    // Out of core: the features live in the cache folder and the system pages them in; the disk must hold them.
    std::error_code ec;
    const fs::space_info space = fs::space(NearestExistingFolder(study.output.cacheDir), ec);
    if (ec || space.available >= choice.featureBytes) return;
    throw InputError("kernels:TooLarge", study.path,
                     fmt::format("the study's voxels as features need {:.1f} GiB (subjects x voxels x {} bytes), more than this machine's {:.1f} GiB of "
                                 "memory, so they are kept in the kernel cache folder {}; its disk has {:.1f} GiB free: nothing was computed. Free disk "
                                 "space, choose another /output/cache_dir, or use a coarser grid (3 mm), a mask, fewer regions, or images that store uint8 / int16",
                                 Gib(choice.featureBytes), gram::BytesPerValue(choice.storage.storage), Gib(memory), study.output.cacheDir, Gib(space.available)));
  }
  throw InputError("kernels:TooLarge", study.path,
                   fmt::format("the study's voxels as features need {:.1f} GiB of memory (subjects x voxels x {} bytes), more than this machine's {:.1f} "
                               "GiB, and kernels.cache is off: nothing was computed. Turn kernels.cache on (the features are then kept in the cache folder "
                               "and paged from the disk), or use a coarser grid (3 mm), a mask, fewer regions, or images that store uint8 / int16",
                               Gib(choice.featureBytes), gram::BytesPerValue(choice.storage.storage), Gib(memory)));
}

namespace {

/// The images read into the matrix with the kernel path's masking, non-finite rule, intensity scaling and region
/// exclusions: `res` gains the features, the kernel set's header and the read figures. With `file` (a writable
/// mapping of a .npy file of the matrix's shape, from byte `offset`: FeatureFileIn) the values are written there, not
/// held in memory.
void ReadFeatures(const config::StudyConfig& study, const Cohort& cohort, const FeatureStorageChoice& storage, const std::string& scratchDir,
                  std::chrono::steady_clock::time_point start, std::shared_ptr<MappedFile> file, std::uint64_t offset, KernelStageResult& res) {
  const atlas::RegionIndex& index = *res.regions;
  kernels::RegionKernelOptions options = RegionKernelOptionsOf(study, index, scratchDir);
  options.compact = false;
  const std::vector<std::int64_t> offsets = kernels::RegionColumnOffsets(index);
  auto x = std::make_shared<gram::FeatureMatrix>();
  const auto n = static_cast<Eigen::Index>(cohort.ids.size());
  if (file)
    x->MapRows(storage.storage, std::move(file), offset, n, static_cast<Eigen::Index>(offsets.back()));
  else
    x->Resize(storage.storage, n, static_cast<Eigen::Index>(offsets.back()));
  x->regionStart.assign(offsets.begin(), offsets.end());
  const kernels::SubjectRows facts = storage.storage == gram::FeatureStorage::Float32
                                         ? kernels::ReadSubjectRowsInto(cohort.ids, cohort.images, index, options, n > 0 ? static_cast<float*>(x->MutableRow(0)) : nullptr)
                                         : ReadCodes(cohort, index, options, storage, *x);
  res.report.readSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::int64_t> dropped;
  kernels::KernelSet set = kernels::RegionKernelHeader(cohort.ids, index, facts.nonFiniteCount, study.kernels.nanPolicy, dropped);
  if (x->storage == gram::FeatureStorage::Float32 && !dropped.empty())  // integer codes are finite: nothing to drop
    for (Eigen::Index i = 0; i < n; ++i) {
      auto* row = static_cast<float*>(x->MutableRow(i));
      for (const std::int64_t c : dropped) row[c] = 0.0f;  // nan_policy drop_voxel: 0 in every row
    }
  set.intensityScale = facts.intensityScale;
  set.nonZeroInsideAtlas = facts.nonZeroInsideAtlas;
  set.nonZeroOutsideAtlas = facts.nonZeroOutsideAtlas;
  // Each region's kernel diagonal, ||x_ir||^2 (which subjects have signal there), summed in double by subject.
  const std::size_t R = x->Regions();
  Eigen::MatrixXd norms(n, static_cast<Eigen::Index>(R));
  tbb::parallel_for(Eigen::Index{0}, n, [&](Eigen::Index i) {
    x->WithRow(i, [&](const auto* row, double scale) {
      for (std::size_t r = 0; r < R; ++r) {
        double sum = 0;
        for (Eigen::Index c = x->regionStart[r]; c < x->regionStart[r + 1]; ++c) sum += static_cast<double>(row[c]) * static_cast<double>(row[c]);
        norms(i, static_cast<Eigen::Index>(r)) = scale * scale * sum;
      }
    });
  });
  // The kernel path's exclusions, with its reasons and in its order (kernels::ExcludeEmptyRegions): no voxel left after
  // the non-finite rule, then a zero kernel (every value 0), each from the last region to the first.
  std::vector<char> excluded(R, 0);
  kernels::KernelSet kept = set;
  kept.info.clear();
  for (std::size_t r = R; r-- > 0;)
    if (set.info[r].features == 0) {
      kept.excluded.push_back({set.info[r], "no voxel left: every voxel is non-finite in at least one subject"});
      excluded[r] = 1;
    }
  for (std::size_t r = R; r-- > 0;)
    if (!excluded[r] && norms.col(static_cast<Eigen::Index>(r)).maxCoeff() == 0.0) {
      kept.excluded.push_back({set.info[r], "zero kernel (every subject's values are 0 in this region)"});
      excluded[r] = 1;
    }
  std::vector<std::size_t> keep;
  for (std::size_t r = 0; r < R; ++r)
    if (!excluded[r]) {
      keep.push_back(r);
      kept.info.push_back(set.info[r]);
      kept.rawDiagonals.push_back(norms.col(static_cast<Eigen::Index>(r)));
    }
  x->KeepRegions(keep);
  ExcludeRegionsWithoutVoxels(study, index, kept);
  kept.featureForm = true;
  res.set = std::move(kept);
  for (const auto& e : res.set.excluded) spdlog::warn("region {} excluded: {}", e.info.name, e.reason);
  AddExclusionWarnings(res);
  if (res.set.Size() == 0) throw InputError("kernels:NoneLeft", study.path, "no usable kernel is left (every region was excluded; see the warnings above)");
  res.report.peakDataBytes = FeatureBytes(cohort.ids.size(), offsets.back(), x->storage);
  res.report.droppedVoxels = static_cast<std::int64_t>(dropped.size());
  res.features = std::move(x);
}

/// The cache entry at res.cachePath when it holds this study's features in the chosen storage (true: `res` has them). A
/// damaged or foreign entry is a miss, said in a warning, never used.
bool LoadCachedFeatures(const Cohort& cohort, const FeatureStorageChoice& storage, const std::string& key, KernelStageResult& res) {
  std::error_code ec;
  if (!fs::exists(res.cachePath + "/index.json", ec)) return false;
  try {
    std::string found;
    exporting::FeatureEntry entry = exporting::LoadFeatureStore(res.cachePath, &found);
    if (found != key || entry.set.subjects != cohort.ids || entry.features->storage != storage.storage) return false;
    res.set = std::move(entry.set);
    res.features = std::move(entry.features);
    res.report.droppedVoxels = entry.droppedVoxels;
    res.report.peakDataBytes = FeatureBytes(cohort.ids.size(), res.features->Voxels(), res.features->storage);
    res.cacheHit = true;
    return true;
  } catch (const Error& e) {
    spdlog::warn("kernels: ignoring an unreadable feature cache entry {} (reading the images again): {}", res.cachePath, e.what());
    res.warnings.push_back(std::string("feature cache entry ignored and recomputed: ") + e.what());
    return false;
  }
}

/// A writable mapping of `folder`/features.npy for `subjects` x `voxels` values of `storage`, its .npy header written
/// (`offset`: where the values begin); null, with a warning in `res`, when the disk cannot hold it.
std::shared_ptr<MappedFile> FeatureFileIn(const std::string& folder, Eigen::Index subjects, Eigen::Index voxels, gram::FeatureStorage storage, std::uint64_t& offset,
                                          KernelStageResult& res) {
  const std::string prefix = NpyRowsPrefix(subjects, voxels, gram::NpyTypeOf(storage));
  offset = prefix.size();
  try {
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) throw IoError("store:Mkdir", folder, "cannot create the feature folder: " + ec.message());
    std::shared_ptr<MappedFile> file = MappedFile::Create(folder + "/features.npy", offset + FeatureBytes(static_cast<std::size_t>(subjects), voxels, storage));
    std::memcpy(file->MutableData(), prefix.data(), prefix.size());
    return file;
  } catch (const Error& e) {
    spdlog::warn("kernels: the features are read into memory, not into the cache folder (the next run reads the images): {}", e.what());
    res.warnings.push_back(std::string("feature cache not written: ") + e.what());
    return nullptr;
  }
}

/// The images read straight into a new cache entry at res.cachePath (the features file mapped while it is written: the
/// values are never held in the process, so a store larger than the memory can be made), which is then landed as
/// LandCacheEntry lands one. False, with a warning, when the entry's file cannot be made (then nothing is read).
bool ReadFeaturesIntoCache(const config::StudyConfig& study, const Cohort& cohort, const FeatureStorageChoice& storage, const std::string& scratchDir,
                           std::chrono::steady_clock::time_point start, const std::string& key, KernelStageResult& res) {
  const std::string folder = CacheStagingFolder(res.cachePath);
  std::uint64_t offset = 0;
  std::shared_ptr<MappedFile> file =
      FeatureFileIn(folder, static_cast<Eigen::Index>(cohort.ids.size()), kernels::RegionColumnOffsets(*res.regions).back(), storage.storage, offset, res);
  if (!file) {
    std::error_code ec;
    fs::remove_all(folder, ec);
    return false;
  }
  try {
    ReadFeatures(study, cohort, storage, scratchDir, start, std::move(file), offset, res);
  } catch (...) {
    res.features.reset();
    std::error_code ec;
    fs::remove_all(folder, ec);
    throw;  // a bad image is the study's error, not the cache's
  }
  try {
    exporting::SaveFeatureStore(folder, {res.features, res.set, res.report.droppedVoxels}, key, "feature cache entry");
    LandStagedCacheEntry(folder, res.cachePath);  // the mapping follows its file
  } catch (const Error& e) {
    // The features are in hand (mapped from the unlinked file while the process runs): the study goes on without the entry.
    std::error_code ec;
    fs::remove_all(folder, ec);
    res.featureHeld = "mapped from a file of the cache folder that could not be kept as an entry (removed; the next run reads the images)";
    spdlog::warn("kernels: feature cache entry not written (the results are not affected; the next run reads the images): {}", e.what());
    res.warnings.push_back(std::string("feature cache not written: ") + e.what());
  }
  return true;
}

/// The feature entry's key from the kernel key of the study in float64.
std::string FeatureKeyOf(const std::string& float64KernelKey) {
  Hasher h;
  h.Update(std::string_view("neuromkl-features-v1")).Update(float64KernelKey);
  return h.Hex();
}
}  // namespace

std::string FeatureCacheKey(const config::StudyConfig& study, const Cohort& cohort) {
  // The features do not depend on the kernels' precision: float32 and float64 studies share the entry.
  config::StudyConfig wide = study;
  wide.kernels.precision = config::KernelPrecision::Float64;
  return FeatureKeyOf(KernelCacheKey(wide, cohort));
}

KernelStageResult FormFeatureStage(const config::StudyConfig& study, const Cohort& cohort, const FeatureStorageChoice& storage, const std::string& scratchDir) {
  const auto start = std::chrono::steady_clock::now();
  KernelStageResult res;
  res.key = KernelCacheKey(study, cohort);  // the inputs' hash (results.json's input hash)
  for (const auto& w : cohort.warnings) {
    spdlog::warn("{}", w);
    res.warnings.push_back(w);
  }
  res.regions = StudyRegions(study, cohort, res.warnings);
  // (In float64 the kernel key is the float64 one: the images are hashed once.)
  const std::string key = !study.kernels.cache                                         ? std::string()
                          : study.kernels.precision == config::KernelPrecision::Float64 ? FeatureKeyOf(res.key)
                                                                                        : FeatureCacheKey(study, cohort);
  if (study.kernels.cache) {
    RemoveDeadTemporaries(study.output.cacheDir, "kernel cache entry");  // entries a killed process was writing
    res.cachePath = study.output.cacheDir + "/" + key;
  }
  if (study.kernels.cache && LoadCachedFeatures(cohort, storage, key, res)) {
    spdlog::info("kernels: cache hit ({}), {} regions held as features, no image read", res.cachePath, res.set.Size());
    AddExclusionWarnings(res);  // the notes of the run that read them, kept on every hit
  } else if (!study.kernels.cache || !ReadFeaturesIntoCache(study, cohort, storage, scratchDir, start, key, res)) {
    ReadFeatures(study, cohort, storage, scratchDir, start, nullptr, 0, res);  // no cache, or its folder cannot take them (said)
  }
  const gram::FeatureMatrix& x = *res.features;
  res.report.dataBytes = FeatureBytes(cohort.ids.size(), x.Voxels(), x.storage);
  res.featureStorage = x.storage;
  res.featureStorageNote = storage.why;
  const std::uint64_t available = AvailableMemoryBytes();
  if (x.Mapped() && available > 0 && res.report.dataBytes > available) {
    // Measured: 2,000 subjects x 185,405 voxels under a memory limit of half the matrix had not finished a 5-fold CV in
    // 20x the time it takes in memory (docs/learners.md, "Out of core").
    const std::string warning = fmt::format("the features ({}) take more than the memory available ({}): they are paged from the disk on every "
                                            "pass of the learners, many times slower than in memory (docs/learners.md, \"Out of core\")",
                                            Size(res.report.dataBytes), Size(available));
    spdlog::warn("kernels: {}", warning);
    res.warnings.push_back(warning);
  }
  if (res.featureHeld.empty())
    res.featureHeld = x.Mapped() ? "mapped from the kernel cache folder (" + res.cachePath + "/features.npy): paged from the disk as they are read"
                                 : std::string("in memory");
  res.report.totalSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("kernels: {} regions held as features ({} subjects x {} voxels in {}, {:.1f} MiB); no kernel formed", res.set.Size(), x.Subjects(),
               x.Voxels(), gram::ToString(x.storage), static_cast<double>(res.report.dataBytes) / 1048576.0);
  return res;
}

}  // namespace neuromkl::pipeline
