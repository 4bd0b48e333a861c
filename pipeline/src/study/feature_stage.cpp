// The kernel stage of a study on features (kernels.representation): the images read once into one FeatureMatrix (the
// masked voxels, subject-major, grouped by region), with the kernel stage's masking, non-finite rule and intensity
// scaling, and the choice between features and kernels that "auto" makes from the two footprints.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"

namespace neuromkl::pipeline {

namespace {

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

/// Moves the columns of the regions in `keep` (old region indices, increasing) to the front of every row, in place, and
/// shrinks the matrix to them: Eigen's resize of a row-major matrix to fewer columns copies it once (a peak of the old
/// and the new matrix), only when a region is left out.
void KeepRegions(gram::FeatureMatrix& x, const std::vector<std::size_t>& keep) {
  if (keep.size() == x.Regions()) return;
  std::vector<Eigen::Index> start = {0};
  for (const std::size_t r : keep) start.push_back(start.back() + x.RegionSize(r));
  const Eigen::Index width = start.back();
  for (Eigen::Index i = 0; i < x.Subjects(); ++i) {
    float* row = x.values.row(i).data();
    for (std::size_t k = 0; k < keep.size(); ++k)  // start[k] <= the old start: a move to the left, or none
      if (start[k] < x.regionStart[keep[k]]) std::copy(row + x.regionStart[keep[k]], row + x.regionStart[keep[k] + 1], row + start[k]);
  }
  x.values.conservativeResize(x.Subjects(), width);
  x.regionStart = std::move(start);
}

}  // namespace

std::uint64_t FeatureBytes(std::size_t subjects, std::int64_t voxels) {
  return static_cast<std::uint64_t>(subjects) * static_cast<std::uint64_t>(std::max<std::int64_t>(voxels, 0)) * sizeof(float);
}

RepresentationChoice ChooseRepresentation(const config::StudyConfig& study, const Cohort& cohort, std::size_t kernelCount, int ranks) {
  RepresentationChoice choice;
  const auto n = static_cast<std::uint64_t>(cohort.ids.size());
  const bool float32 = study.kernels.precision == config::KernelPrecision::Float32;
  choice.kernelBytes = static_cast<std::uint64_t>(kernelCount) * n * n * (float32 ? 4 : 8);
  const config::FeatureFormObstacle obstacle = config::WhyNoFeatureForm(study);
  if (obstacle.Empty()) {
    std::vector<std::string> warnings;
    choice.featureBytes = FeatureBytes(cohort.ids.size(), RegionVoxelCount(StudyRegions(study, cohort, warnings)));
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
      } else if (memory > 0 && 2 * share > memory && choice.featureBytes < share && 2 * choice.featureBytes <= memory) {
        choice.chosen = Representation::Features;
        choice.why = fmt::format("auto: features, as the kernels ({}{}) take more than half of this machine's {:.1f} GiB and the features ({}) less",
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
  throw InputError("kernels:TooLarge", study.path,
                   fmt::format("the study's voxels as features need {:.1f} GiB of memory (subjects x voxels x 4 bytes), more than this machine's {:.1f} "
                               "GiB: nothing was computed. Use a coarser grid (3 mm), a mask, or fewer regions",
                               Gib(choice.featureBytes), Gib(memory)));
}

KernelStageResult FormFeatureStage(const config::StudyConfig& study, const Cohort& cohort, const std::string& scratchDir) {
  const auto start = std::chrono::steady_clock::now();
  KernelStageResult res;
  res.key = KernelCacheKey(study, cohort);  // the inputs' hash (results.json's input hash); no entry is written
  for (const auto& w : cohort.warnings) {
    spdlog::warn("{}", w);
    res.warnings.push_back(w);
  }
  res.regions = StudyRegions(study, cohort, res.warnings);
  const atlas::RegionIndex& index = *res.regions;
  kernels::RegionKernelOptions options = RegionKernelOptionsOf(study, index, scratchDir);
  options.compact = false;
  const std::vector<std::int64_t> offsets = kernels::RegionColumnOffsets(index);
  auto x = std::make_shared<gram::FeatureMatrix>();
  const auto n = static_cast<Eigen::Index>(cohort.ids.size());
  x->values.resize(n, static_cast<Eigen::Index>(offsets.back()));
  x->regionStart.assign(offsets.begin(), offsets.end());
  const kernels::SubjectRows facts = kernels::ReadSubjectRowsInto(cohort.ids, cohort.images, index, options, x->values.data());
  res.report.readSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::int64_t> dropped;
  kernels::KernelSet set = kernels::RegionKernelHeader(cohort.ids, index, facts.nonFiniteCount, study.kernels.nanPolicy, dropped);
  for (const std::int64_t c : dropped) x->values.col(static_cast<Eigen::Index>(c)).setZero();  // nan_policy drop_voxel: 0 in every row
  set.intensityScale = facts.intensityScale;
  set.nonZeroInsideAtlas = facts.nonZeroInsideAtlas;
  set.nonZeroOutsideAtlas = facts.nonZeroOutsideAtlas;
  // Each region's kernel diagonal, ||x_ir||^2 (which subjects have signal there), summed in double by subject.
  const std::size_t R = x->Regions();
  Eigen::MatrixXd norms(n, static_cast<Eigen::Index>(R));
  tbb::parallel_for(Eigen::Index{0}, n, [&](Eigen::Index i) {
    for (std::size_t r = 0; r < R; ++r) {
      double sum = 0;
      for (Eigen::Index c = x->regionStart[r]; c < x->regionStart[r + 1]; ++c) sum += static_cast<double>(x->values(i, c)) * x->values(i, c);
      norms(i, static_cast<Eigen::Index>(r)) = sum;
    }
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
  KeepRegions(*x, keep);
  ExcludeRegionsWithoutVoxels(study, index, kept);
  kept.featureForm = true;
  res.set = std::move(kept);
  for (const auto& e : res.set.excluded) spdlog::warn("region {} excluded: {}", e.info.name, e.reason);
  AddExclusionWarnings(res);
  if (res.set.Size() == 0) throw InputError("kernels:NoneLeft", study.path, "no usable kernel is left (every region was excluded; see the warnings above)");
  res.report.peakDataBytes = FeatureBytes(cohort.ids.size(), offsets.back());
  res.report.dataBytes = FeatureBytes(cohort.ids.size(), x->Voxels());
  res.report.droppedVoxels = static_cast<std::int64_t>(dropped.size());
  res.report.totalSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.features = std::move(x);
  spdlog::info("kernels: {} regions held as features ({} subjects x {} voxels, {:.1f} MiB); no kernel formed", res.set.Size(), n,
               res.features->Voxels(), static_cast<double>(FeatureBytes(cohort.ids.size(), res.features->Voxels())) / 1048576.0);
  return res;
}

}  // namespace neuromkl::pipeline
