#include "neuromkl/pipeline/kernel_stage.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/export/kernel_store.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/pipeline/mpi_kernels.hpp"
#include "neuromkl/ranks/held_kernels.hpp"
#include "neuromkl/pipeline/output_dir.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;
using config::KernelSource;

atlas::Atlas LoadStudyAtlas(const config::StudyConfig& study) {
  if (!study.atlas.builtin.empty() || study.atlas.parts.empty()) {
    const auto files = atlas::BuiltinAtlas(study.atlas.builtin);
    std::error_code ec;
    if (!files || !fs::exists(files->image, ec))
      throw IoError("atlas:BuiltinMissing", files ? files->image : study.atlas.builtin,
                    "the built-in atlas file is missing (data folder: " + atlas::FindDataDir().how +
                        "); reinstall neuromkl (its share/neuromkl) or set NEUROMKL_DATA_DIR to the folder that holds atlases/");
    return atlas::LoadAtlas(files->image, files->table);
  }
  return LoadStudyAtlases(study).at(0);
}

std::vector<atlas::Atlas> LoadStudyAtlases(const config::StudyConfig& study) {
  if (!study.atlas.builtin.empty() || study.atlas.parts.empty()) return {LoadStudyAtlas(study)};
  std::vector<atlas::Atlas> atlases;
  for (const auto& part : study.atlas.parts)
    atlases.push_back(part.probabilistic ? atlas::LoadProbabilisticAtlas(part.image, part.labels, part.threshold)
                                         : atlas::LoadAtlas(part.image, part.labels));
  return atlases;
}

namespace {
void RequireFile(const std::string& path, const char* code, const std::string& message) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(code, path, message + ": " + WhyNotAFile(path));
}
}  // namespace

std::string KernelCacheKey(const config::StudyConfig& study, const Cohort& cohort) {
  if (study.kernels.source == KernelSource::Sources) {  // one key per source (each source is cached on its own)
    Hasher h;
    h.Update(std::string_view("neuromkl-kernel-sources-v1"));
    for (const auto& source : study.kernels.sources) {
      const auto d = SourceStudy(study, source);
      h.Update(source.name).Update(KernelCacheKey(d, SourceCohort(d, source, cohort)));
    }
    return h.Hex();
  }
  Hasher h;
  h.Update(std::string_view("neuromkl-kernels-v2"));
  h.Update(config::ToString(study.kernels.source));
  for (const auto& id : cohort.ids) h.Update(id);
  switch (study.kernels.source) {
    case KernelSource::Images: {
      for (const auto& img : cohort.images) {
        const auto files = io::ImageFilePaths(img);  // a .hdr/.img pair: both halves (a .nii: the key is unchanged)
        for (const auto& f : files) h.Update(HashFile(f));
      }
      std::string image = study.atlas.image, labels = study.atlas.labels;
      if (!study.atlas.builtin.empty())
        if (auto f = atlas::BuiltinAtlas(study.atlas.builtin)) image = f->image, labels = f->table;
      // Missing inputs are the same InputError (exit 2) as in validate, not an IoError while hashing (exit 1).
      const auto atlasFiles = io::ImageFilePaths(image);
      RequireFile(labels, "atlas:TableUnreadable", "cannot open the atlas label table");
      h.Update(HashFile(image)).Update(HashFile(labels));
      if (atlasFiles.size() > 1) h.Update(HashFile(atlasFiles[1]));
      // Probabilistic and multi-image atlases (the key of a plain label atlas is unchanged).
      for (std::size_t k = 0; k < study.atlas.parts.size(); ++k) {
        const auto& part = study.atlas.parts[k];
        if (k == 0 && !part.probabilistic && part.prefix.empty() && study.atlas.parts.size() == 1) break;
        h.Update(std::string_view("atlas-part")).Update(HashFile(part.labels)).Update(part.prefix);
        for (const auto& f : io::ImageFilePaths(part.image)) h.Update(HashFile(f));
        h.Update(static_cast<std::uint64_t>(part.probabilistic)).Update(part.threshold);
      }
      if (!study.mask.empty()) io::ImageFilePaths(study.mask);  // io:Missing, as in validate
      h.Update(study.mask.empty() ? Digest128{} : HashFile(study.mask));
      h.Update(std::string_view(study.kernels.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel"));
      h.Update(static_cast<std::uint64_t>(study.kernels.intensity.scaling));
      for (const auto& name : study.kernels.intensity.referenceRegions) h.Update(name);
      if (!study.kernels.intensity.referenceImage.empty())
        for (const auto& f : io::ImageFilePaths(study.kernels.intensity.referenceImage)) h.Update(HashFile(f));
      break;
    }
    case KernelSource::Precomputed:
      for (const auto& k : study.kernels.precomputed) {
        RequireFile(k.file, "kernels:Missing", "precomputed kernel file \"" + k.name + "\" not found");  // as validate says
        h.Update(k.name).Update(HashFile(k.file));
      }
      break;
    case KernelSource::Tabular:
      h.Update(HashFile(study.kernels.tabular.table)).Update(study.kernels.tabular.idColumn);
      h.Update(static_cast<std::uint64_t>(study.kernels.tabular.standardise));
      for (const auto& [name, cols] : study.kernels.tabular.groups) {
        h.Update(name);
        for (const auto& col : cols) h.Update(col);
      }
      h.Update(study.kernels.tabular.groupsPreset).Update(study.target.column);
      for (const auto& col : study.kernels.tabular.excludeColumns) h.Update(col);
      for (const auto& f : study.kernels.tabular.functions) {
        h.Update(static_cast<std::uint64_t>(f.type)).Update(f.offset);
        for (double v : f.values) h.Update(v);
      }
      break;
    case KernelSource::Connectivity: {
      const auto& conn = study.kernels.connectivity;
      h.Update(conn.column).Update(static_cast<std::uint64_t>(conn.kernels));
      for (const auto& f : ConnectivityFiles(study, conn, cohort)) h.Update(HashFile(f));
      h.Update(conn.nodes.empty() ? Digest128{} : HashFile(conn.nodes));
      break;
    }
    case KernelSource::Sources:
      break;  // handled above
  }
  // A float32 study caches its compact store: another entry than the float64 kernels' (whose key is unchanged).
  if (study.kernels.precision == config::KernelPrecision::Float32) h.Update(std::string_view(study.kernels.centre ? "float32-centred" : "float32-raw"));
  return h.Hex();
}

atlas::RegionIndex StudyRegions(const config::StudyConfig& study, const Cohort& cohort, std::vector<std::string>& warnings) {
  const io::Geometry grid = io::ReadGeometry(cohort.images.at(0));
  std::unique_ptr<io::Volume> mask;
  if (!study.mask.empty()) mask = std::make_unique<io::Volume>(io::ReadVolume(study.mask));
  std::vector<atlas::RegionIndex> parts;
  std::vector<std::string> prefixes;
  for (const auto& atlas : LoadStudyAtlases(study)) {
    for (const auto& w : atlas.warnings) warnings.push_back("atlas: " + w);
    // Resampling goes through world coordinates: without an orientation in one header, the atlas would land wherever
    // NIfTI's fallback (voxel 0 at the origin) puts it, and most regions would miss the brain.
    if (!atlas.geometry.DifferenceFrom(grid).empty() && (!grid.worldKnown || !atlas.geometry.worldKnown)) {
      const bool images = !grid.worldKnown;
      throw InputError("input:NoOrientation", images ? "subject " + cohort.ids.at(0) + " (" + cohort.images.at(0) + ")" : atlas.imagePath,
                       fmt::format("the {} has neither a qform nor an sform (both codes 0), so where it lies in world space is unknown, and the "
                                   "{} ({}) is on another grid ({}): it cannot be resampled without guessing. Set the {} orientation (the qform/sform "
                                   "of the template it was normalised to){}",
                                   images ? "image" : "atlas image", images ? "atlas" : "images", images ? atlas.imagePath : grid.Describe(),
                                   images ? atlas.geometry.Describe() : "atlas " + atlas.geometry.Describe(), images ? "images'" : "atlas's",
                                   images ? ", or give an atlas on the images' voxel grid" : ""));
    }
    parts.push_back(atlas::BuildRegionIndex(atlas, grid, mask.get(), study.mask));
  }
  for (const auto& part : study.atlas.parts) prefixes.push_back(part.prefix);
  atlas::RegionIndex index = parts.size() == 1 && prefixes.size() <= 1 && (prefixes.empty() || prefixes[0].empty())
                                 ? std::move(parts[0])
                                 : atlas::CombineRegionIndices(std::move(parts), prefixes);
  for (const auto& w : index.warnings) warnings.push_back("atlas: " + w);
  return index;
}

void AddExclusionWarnings(KernelStageResult& res) {
  for (const auto& e : res.set.excluded) res.warnings.push_back("kernels: " + e.info.name + " excluded: " + e.reason);
}

void ExcludeRegionsWithoutVoxels(const config::StudyConfig& study, const atlas::RegionIndex& index, kernels::KernelSet& set) {
  for (const auto& r : index.emptyRegions) {
    kernels::ExcludedKernel e;
    e.info.name = r.name;
    e.info.label = r.label;
    e.info.atlasVoxels = r.atlasVoxels;
    e.reason = study.mask.empty() ? "no voxel on the image grid" : "no voxel inside the mask";
    set.excluded.push_back(std::move(e));
  }
}

/// kernels.intensity's reference as voxels of the image grid: the voxels of the named regions, or
/// the non-zero voxels of a label image (resampled onto the grid by nearest neighbour). ConfigError
/// naming the JSON pointer (with a did-you-mean) for a region the atlas does not have; InputError
/// for a reference image without a voxel on the grid.
std::vector<std::int64_t> ReferenceVoxels(const config::StudyConfig& study, const atlas::RegionIndex& index) {
  const auto& spec = study.kernels.intensity;
  const std::string where = study.path + " " + spec.pointer + "/scaling/reference_region";
  std::vector<std::int64_t> out;
  if (!spec.referenceImage.empty()) {
    const io::Volume reference = io::ReadVolume(spec.referenceImage);
    const auto onGrid = atlas::ResampleNearest(reference.geometry, reference.data, index.grid);
    for (std::size_t v = 0; v < onGrid.size(); ++v)
      if (onGrid[v] != 0.0f && std::isfinite(onGrid[v])) out.push_back(static_cast<std::int64_t>(v));
    if (out.empty()) throw InputError("input:EmptyReference", spec.referenceImage, "the reference image has no non-zero voxel on the image grid (" + index.grid.Describe() + ")");
    return out;
  }
  std::vector<std::string> names;
  for (const auto& r : index.regions) names.push_back(r.name);
  for (const auto& name : spec.referenceRegions) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      throw ConfigError("config:UnknownRegion", where, "the atlas has no region \"" + name + "\" with voxels on the image grid" + DidYouMean(name, names));
    const auto& voxels = index.regions[static_cast<std::size_t>(it - names.begin())].voxels;
    out.insert(out.end(), voxels.begin(), voxels.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());  // a voxel in two (probabilistic) regions counts once
  return out;
}

namespace {
KernelStageResult FormKernels(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir, int sourceIndex, bool held);

/// missing_source "impute": a source's kernels over the subjects it has, laid into the study's rows `ids` (the rows of
/// the subjects it lacks are zero until each fold imputes them), and its images the same way ("" where it has none).
/// Returns which rows the source has.
std::vector<char> LayIntoStudyRows(kernels::KernelSet& set, std::vector<std::string>& images, const std::vector<std::string>& ids) {
  std::map<std::string, Eigen::Index> rowOf;
  for (std::size_t i = 0; i < set.subjects.size(); ++i) rowOf.emplace(set.subjects[i], static_cast<Eigen::Index>(i));
  const auto n = static_cast<Eigen::Index>(ids.size());
  std::vector<Eigen::Index> from(ids.size(), -1);
  std::vector<char> present(ids.size(), 0);
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (const auto it = rowOf.find(ids[i]); it != rowOf.end()) from[i] = it->second, present[i] = 1;
  for (auto& K : set.kernels) {
    Eigen::MatrixXd wide = Eigen::MatrixXd::Zero(n, n);
    for (Eigen::Index b = 0; b < n; ++b) {
      if (from[static_cast<std::size_t>(b)] < 0) continue;
      for (Eigen::Index a = 0; a < n; ++a)
        if (from[static_cast<std::size_t>(a)] >= 0) wide(a, b) = K(from[static_cast<std::size_t>(a)], from[static_cast<std::size_t>(b)]);
    }
    K = std::move(wide);
  }
  auto lay = [&](auto& values, auto absent) {
    if (values.empty()) return;
    std::remove_reference_t<decltype(values)> wide(ids.size(), absent);
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (from[i] >= 0) wide[i] = values[static_cast<std::size_t>(from[i])];
    values = std::move(wide);
  };
  lay(set.intensityScale, 1.0);
  lay(images, std::string());
  set.subjects = ids;
  return present;
}

/// kernels.sources: every source through the ordinary kernel stage (so each is cached under its own key,
/// and adding a source computes only that one), then one kernel set with names "source:kernel".
/// Under mpirun, when the study's kernels (`planned`: PlannedKernelCount) exceed the per-rank budget, every source's
/// kernels stay on the ranks (HeldSources): rank 0 holds the kernels of one source at most.
KernelStageResult RunSourcesStage(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir, std::size_t planned) {
  KernelStageResult res;
  res.set.subjects = cohort.ids;
  bool allHits = true;
  Hasher h;
  h.Update(std::string_view("neuromkl-kernel-sources-v1"));
  std::unique_ptr<HeldSources> held = HeldSources::Begin(study, cohort, planned);
  bool heldCompact = false, heldCentred = false;
  for (std::size_t i = 0; i < study.kernels.sources.size(); ++i) {
    const auto& source = study.kernels.sources[i];
    const auto d = SourceStudy(study, source);
    const Cohort sc = SourceCohort(d, source, cohort);
    KernelStageResult sub = FormKernels(d, sc, scratchDir, static_cast<int>(i), held != nullptr);
    std::vector<std::string> images = sc.images;
    std::vector<char> present;
    if (cohort.imputedSources.count(source.name)) {
      if (held || sub.set.Compact())
        throw InputError("sources:ImputedHeldByRanks", study.path + " /kernels/missing_source",
                         "this study's kernels are held by the MPI ranks or in float32, but the folds impute the subjects a source lacks "
                         "in float64 kernels held in one process; run it on fewer subjects, or with missing_source \"drop\"");
      present = LayIntoStudyRows(sub.set, images, cohort.ids);
    }
    res.sourcePresent.push_back(std::move(present));
    if (held) {
      held->Add(sub.set, sub.owners);
      heldCompact = sub.set.Compact();
      heldCentred = sub.set.compact.centred;
    }
    h.Update(source.name).Update(sub.key);
    if (sub.set.subjects != cohort.ids)
      throw InputError("sources:Subjects", source.name, "the source's kernels do not cover the subjects of the table in its order");
    allHits &= sub.cacheHit;
    if (sub.regions)
      res.imageSources.push_back(
          {source.name, res.set.kernels.size(), sub.set.Size(), std::move(*sub.regions), std::move(images), d.kernels.nanPolicy, sub.set.intensityScale});
    for (std::size_t k = 0; k < sub.set.Size(); ++k) {
      auto info = sub.set.info[k];
      info.name = source.name + ":" + info.name;
      res.set.info.push_back(std::move(info));
      if (sub.set.distributed) {  // held by the ranks: the set lists them, with their float64 diagonals
        res.set.rawDiagonals.push_back(std::move(sub.set.rawDiagonals[k]));
      } else if (sub.set.Compact()) {  // float32 studies: every source's store is made with the study's centring
        res.set.compact.centred = sub.set.compact.centred;
        res.set.compact.kernels.push_back(std::move(sub.set.compact.kernels[k]));
        res.set.rawDiagonals.push_back(std::move(sub.set.rawDiagonals[k]));
      } else {
        res.set.kernels.push_back(std::move(sub.set.kernels[k]));
      }
    }
    for (auto e : sub.set.excluded) {
      e.info.name = source.name + ":" + e.info.name;
      res.set.excluded.push_back(std::move(e));
    }
    for (const auto& w : sub.warnings) res.warnings.push_back("source " + source.name + ": " + w);
    res.report.readSeconds += sub.report.readSeconds;
    res.report.productSeconds += sub.report.productSeconds;
    res.report.totalSeconds += sub.report.totalSeconds;
    res.report.droppedVoxels += sub.report.droppedVoxels;
    res.report.ranks = std::max(res.report.ranks, sub.report.ranks);
    res.report.rankBudgetBytes = std::max(res.report.rankBudgetBytes, sub.report.rankBudgetBytes);
    res.sourceNames.push_back(source.name);
    res.sourceKernelCounts.push_back(sub.set.Size());
    res.sourceCacheHits.push_back(sub.cacheHit);
  }
  res.key = h.Hex();
  res.cacheHit = allHits;
  if (!cohort.dropped.empty()) {
    std::vector<std::string> listed;
    for (const auto& [id, why] : cohort.dropped) listed.push_back(id + " (" + why + ")");
    const std::string note = fmt::format("subjects: {} subject(s) left out because a source lacks their data (/kernels/missing_source \"drop\"): {}",
                                         cohort.dropped.size(), Join(listed, ", "));
    spdlog::warn("{}", note);
    res.warnings.insert(res.warnings.begin(), note);
  }
  if (!cohort.imputedSources.empty()) {
    std::vector<std::string> listed;
    for (const auto& [name, lacking] : cohort.imputedSources) listed.push_back(fmt::format("{} lacks {}", name, lacking.size()));
    const std::string note = fmt::format("subjects: kept although a source lacks their data, their rows of its kernels imputed in every fold from "
                                         "its training subjects (/kernels/missing_source \"impute\"): {}; the voxel and edge maps of such a source are "
                                         "made from the data of the subjects having it, and the exported model imputes a new subject lacking it as the "
                                         "folds did (docs/inputs.md)",
                                         Join(listed, ", "));
    spdlog::warn("{}", note);
    res.warnings.insert(res.warnings.begin(), note);
  }
  if (held) {  // the set lists the kernels the ranks hold
    res.set.distributed = true;
    res.set.ownedCompact = heldCompact;
    res.set.compact.centred = heldCentred;
  }
  if (res.set.Size() == 0) throw InputError("kernels:NoneLeft", study.path, "no usable kernel is left in any source");
  if (held) {
    res.owners = held->Finish(static_cast<Eigen::Index>(cohort.ids.size()), heldCompact, heldCentred);
    res.heldNote = "every source's kernels stayed on the ranks as they were formed or read (kernel k of a source on rank k mod ranks; the kernels "
                   "rank 0 formed itself were handed to their rank)";
    res.report.ranks = res.owners->Owners();
    res.report.rankBudgetBytes = held->BudgetBytes();
  }
  return res;
}
}  // namespace

std::size_t PlannedKernelCount(const config::StudyConfig& study, const Cohort& cohort) {
  switch (study.kernels.source) {
    case KernelSource::Images: {
      std::vector<std::string> warnings;
      return StudyRegions(study, cohort, warnings).regions.size();
    }
    case KernelSource::Precomputed:
      return study.kernels.precomputed.size();
    case KernelSource::Tabular:
      return TabularKernelSpecs(TabularFeatures(study, cohort), study.kernels.tabular.functions).size();
    case KernelSource::Connectivity: {
      const auto& spec = study.kernels.connectivity;
      return PlanConnectivityKernels(ReadConnectivity(study, spec, cohort), spec.kernels).names.size();
    }
    case KernelSource::Sources: {
      std::size_t count = 0;
      for (const auto& source : study.kernels.sources) {
        const config::StudyConfig d = SourceStudy(study, source);
        count += PlannedKernelCount(d, SourceCohort(d, source, cohort));
      }
      return count;
    }
  }
  return 0;
}

std::uint64_t CheckKernelsFitMemory(const config::StudyConfig& study, std::size_t subjects, std::size_t kernelCount, int ranks) {
  const std::size_t count = kernelCount;
  const auto n = static_cast<std::uint64_t>(subjects);
  const bool float32 = study.kernels.precision == config::KernelPrecision::Float32;
  const std::uint64_t bytes = count * n * n * (float32 ? 4 : 8);
  const std::uint64_t memory = PhysicalMemoryBytes();
  const std::uint64_t share = bytes / static_cast<std::uint64_t>(std::max(ranks, 1));
  // The kernels are held in memory (the subject data may go out of core, the kernels never do): a share over the
  // machine's memory cannot run, and would fail only after the images were read.
  if (memory == 0 || share <= memory) return bytes;
  const auto gib = [](std::uint64_t b) { return static_cast<double>(b) / 1073741824.0; };
  std::vector<std::string> fits;
  if (config::WhyNoFeatureForm(study).Empty())
    fits.push_back("\"representation\": \"features\" in /kernels (the voxels, subjects x voxels x 4 bytes, instead of the kernels, if they fit; docs/learners.md)");
  if (!float32 && bytes / 2 / static_cast<std::uint64_t>(std::max(ranks, 1)) <= memory)
    fits.push_back(fmt::format("\"precision\": \"float32\" in /kernels ({:.1f} GiB)", gib(bytes / 2)));
  const std::uint64_t perRank = float32 ? bytes : bytes / 2;
  fits.push_back(fmt::format("mpirun over at least {} machines of this memory with kernels.memory_budget_mb below it, so that each rank holds a share{} "
                             "(docs/batch.md)",
                             (perRank + memory - 1) / memory + 1, float32 ? "" : " (with float32)"));
  throw InputError("kernels:TooLarge", study.path,
                   fmt::format("the study's kernels need {:.1f} GiB of memory ({} kernels x {} subjects^2 x {} bytes{}), more than this machine's "
                               "{:.1f} GiB: nothing was computed. What would fit: {}",
                               gib(share), count, n, float32 ? 4 : 8, ranks > 1 ? fmt::format(", a share of {} ranks", ranks) : "", gib(memory),
                               Join(fits, "; or ")));
}

void SaveStageKernels(const std::string& dir, const KernelStageResult& res, const std::string& description, const std::vector<Eigen::MatrixXd>* moved) {
  if (!res.owners) {
    exporting::SaveKernelStore(dir, res.set, res.key, description, moved);
    return;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("store:Mkdir", dir, "cannot create the kernel folder: " + ec.message());
  std::vector<std::string> files;
  for (std::size_t r = 0; r < res.set.Size(); ++r) files.push_back(exporting::KernelStoreFile(r, res.set.info[r].name));
  exporting::SaveKernelStoreIndex(dir, res.set, res.key, description, res.owners->SaveKernels(dir, files));
}

kernels::RegionKernelOptions RegionKernelOptionsOf(const config::StudyConfig& study, const atlas::RegionIndex& index, const std::string& scratchDir) {
  kernels::RegionKernelOptions options;
  options.nanPolicy = study.kernels.nanPolicy;
  options.memoryBudgetBytes = static_cast<std::uint64_t>(study.kernels.memoryBudgetMb * 1048576.0);
  options.threads = study.threads;
  options.scratchDir = scratchDir;
  options.intensity = study.kernels.intensity.scaling;
  options.referenceVoxels = ReferenceVoxels(study, index);
  options.compact = study.kernels.precision == config::KernelPrecision::Float32;
  options.compactCentre = study.kernels.centre;
  options.compactWhere = study.path;
  return options;
}

namespace {
/// The kernel stage of one source (RunKernelStage without the hand-out to MPI ranks). `held`: a source of a study whose
/// kernels the ranks hold (HeldSources): an image source's kernels stay on their ranks as they are formed or read.
KernelStageResult FormKernels(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir, int sourceIndex, bool held) {
  KernelStageResult res;
  res.key = KernelCacheKey(study, cohort);
  // The region index is cheap (the atlas and one header) and the weight maps need it, cache or not.
  if (study.kernels.source == KernelSource::Images) {
    for (const auto& w : cohort.warnings) {
      spdlog::warn("{}", w);  // once per study (Analyze convention, atlas space), also in results.json
      res.warnings.push_back(w);
    }
    res.regions = StudyRegions(study, cohort, res.warnings);
  }
  const bool float32 = study.kernels.precision == config::KernelPrecision::Float32;
  // Under mpirun, kernels over the per-rank budget stay on the ranks that form them (an images study's own stage).
  const bool owned = study.kernels.source == KernelSource::Images &&
                     (held || (sourceIndex < 0 && OwnKernels(cohort.images.size(), *res.regions, RegionKernelOptionsOf(study, *res.regions, scratchDir))));
  if (study.kernels.cache) {
    RemoveDeadTemporaries(study.output.cacheDir, "kernel cache entry");  // entries a killed process was writing
    res.cachePath = study.output.cacheDir + "/" + res.key;
    // A hit on this study's own entry; for a float32 study, else on the float64 kernels' entry (a run of the same
    // study in float64 made it), rounded here: the same store as computing them again would give.
    std::vector<std::pair<std::string, std::string>> entries = {{res.cachePath, res.key}};
    if (float32) {
      config::StudyConfig wide = study;
      wide.kernels.precision = config::KernelPrecision::Float64;
      const std::string key = KernelCacheKey(wide, cohort);
      entries.emplace_back(study.output.cacheDir + "/" + key, key);
    }
    for (const auto& [path, expectedKey] : entries) {
      std::error_code ec;
      if (!fs::exists(path + "/index.json", ec)) continue;
      try {
        std::string key;
        if (owned) {  // kernels held by several ranks: each loads its own kernels from the entry
          exporting::KernelStoreIndex index = exporting::ReadKernelStoreIndex(path, &key);
          if (key != expectedKey || index.set.subjects != cohort.ids) continue;
          if (index.float32 && !float32) continue;
          res.set = OwnedKernelsFromStore(index, float32 && !index.float32, study.kernels.centre, study.path, &res.owners);
          res.cacheHit = true;
          res.report.rankBudgetBytes = RankMemoryBudget(RegionKernelOptionsOf(study, *res.regions, scratchDir));
          spdlog::info("kernels: cache hit ({}), {} kernels, each loaded by the rank that holds it; no image read", path, res.set.Size());
          AddExclusionWarnings(res);
          return res;
        }
        kernels::KernelSet set = exporting::LoadKernelStore(path, &key);
        if (key != expectedKey || set.subjects != cohort.ids) continue;
        if (float32) kernels::CompactKernelSet(set, study.kernels.centre, study.path);
        if (set.Compact() != float32) continue;  // (a float32 entry always holds its store)
        res.set = std::move(set);
        res.cacheHit = true;
        spdlog::info("kernels: cache hit ({}), {} kernels, no image read", path, res.set.Size());
        AddExclusionWarnings(res);  // the notes of the run that computed them, kept on every hit
        return res;
      } catch (const Error& e) {
        // A damaged entry (checksum mismatch, truncated file) is a miss: recomputed, never used.
        res.owners.reset();  // (never set when the entry failed: its ranks hold nothing)
        spdlog::warn("kernels: ignoring an unreadable cache entry {} (recomputing): {}", path, e.what());
        res.warnings.push_back(std::string("kernel cache entry ignored and recomputed: ") + e.what());
      }
    }
  }
  switch (study.kernels.source) {
    case KernelSource::Images: {
      const atlas::RegionIndex& index = *res.regions;
      const kernels::RegionKernelOptions options = RegionKernelOptionsOf(study, index, scratchDir);
      if (owned)  // under mpirun, when the kernels exceed one rank's budget
        res.set = DistributedRegionKernels(sourceIndex, cohort.ids, cohort.images, index, options, &res.report, &res.owners);
      else if (DistributeKernels(cohort.images.size(), index, options))  // under mpirun, when the data exceed one rank's budget
        res.set = DistributedRegionKernels(sourceIndex, cohort.ids, cohort.images, index, options, &res.report);
      else
        res.set = kernels::ComputeRegionKernels(cohort.ids, cohort.images, index, options, &res.report);
      ExcludeRegionsWithoutVoxels(study, index, res.set);
      break;
    }
    case KernelSource::Precomputed:
      res.set = PrecomputedKernels(study, cohort);
      break;
    case KernelSource::Tabular:
      res.set = TabularKernels(study, cohort);
      break;
    case KernelSource::Connectivity:
      res.set = ConnectivityKernels(study, study.kernels.connectivity, cohort);
      break;
    case KernelSource::Sources:
      break;  // RunSourcesStage
  }
  if (study.kernels.source != KernelSource::Images) ExcludeZeroKernelsOrRefuse(res.set, study.path);
  // Kernels that were not rounded as they were formed (other sources, out of core, gathered from MPI ranks).
  if (float32) kernels::CompactKernelSet(res.set, study.kernels.centre, study.path);
  AddExclusionWarnings(res);
  if (res.set.Size() == 0)
    throw InputError("kernels:NoneLeft", study.path, "no usable kernel is left (every region was excluded; see the warnings above)");
  if (study.kernels.cache) {
    try {
      LandCacheEntry(res.cachePath, [&](const std::string& folder) { SaveStageKernels(folder, res, "kernel cache entry"); });
    } catch (const Error& e) {
      spdlog::warn("kernels: cache entry not written (the results are not affected; the next run recomputes): {}", e.what());
      res.warnings.push_back(std::string("kernel cache not written: ") + e.what());
    }
  }
  return res;
}
}  // namespace

KernelStageResult RunKernelStage(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir, int sourceIndex) {
  // The study's kernels counted once (before any image is read) for the memory check and the ranks' plan.
  const std::size_t planned = sourceIndex < 0 ? PlannedKernelCount(study, cohort) : 0;
  std::string representationNote;
  if (sourceIndex < 0) {
    const int ranks = KernelHoldingRanks(study, cohort, planned);
    const RepresentationChoice choice = ChooseRepresentation(study, cohort, planned, ranks);
    spdlog::info("kernels: representation {} ({})", config::ToString(choice.chosen), choice.why);
    if (choice.chosen == config::KernelRepresentation::Features) {
      CheckFeaturesFitMemory(study, choice);
      KernelStageResult res = FormFeatureStage(study, cohort, choice.storage, scratchDir);
      res.representationNote = choice.why;
      return res;
    }
    CheckKernelsFitMemory(study, cohort.ids.size(), planned, ranks);
    representationNote = choice.why;
  }
  if (study.kernels.source == KernelSource::Sources) {
    KernelStageResult res = RunSourcesStage(study, cohort, scratchDir, planned);
    res.representationNote = representationNote;
    return res;
  }
  KernelStageResult res = FormKernels(study, cohort, scratchDir, sourceIndex, false);
  res.representationNote = representationNote;
  // Under mpirun, kernels over the per-rank budget that rank 0 formed or read (precomputed, tabular: an
  // images study's own stage keeps them on their owners as it forms them) go to the ranks now, each to its owner; the
  // cache entry was written before, from rank 0.
  if (sourceIndex < 0 && study.kernels.source != KernelSource::Images && !res.owners) {
    if (HandKernelsToRanks(res.set, study.kernels.memoryBudgetMb, config::ToString(study.kernels.source), &res.owners, &res.report.rankBudgetBytes)) {
      res.report.ranks = res.owners->Owners();
      res.heldNote = "rank 0 formed the kernels (or read them from the kernel cache) and handed kernel k to rank k mod ranks";
    }
  }
  return res;
}

}  // namespace neuromkl::pipeline
