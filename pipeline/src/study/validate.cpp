#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {
/// "age: 6 missing, scanner: 5 missing".
std::string MissingCounts(const std::vector<std::pair<std::string, int>>& missing) {
  std::vector<std::string> parts;
  for (const auto& [column, count] : missing) parts.push_back(fmt::format("{}: {} missing", column, count));
  return Join(parts, ", ");
}

std::string DescribeScheme(const config::CvSchemeSpec& s) {
  switch (s.scheme) {
    case config::CvScheme::LeaveOneOut: return "leave-one-out";
    case config::CvScheme::LeaveOneGroupOut: return "leave-one-group-out on column \"" + s.groupColumn + "\"";
    case config::CvScheme::GroupKFold: return fmt::format("group {}-fold on column \"{}\"", s.k, s.groupColumn);
    case config::CvScheme::Custom: return "custom folds from column \"" + s.foldColumn + "\"";
    case config::CvScheme::RepeatedKFold: return fmt::format("{} x repeated {}-fold", s.repeats, s.k);
    case config::CvScheme::StratifiedKFold: return fmt::format("stratified {}-fold", s.k);
    case config::CvScheme::KFold: return fmt::format("{}-fold", s.k);
  }
  return "?";
}

using LineSink = std::function<void(const std::string&)>;

void DescribeKernels(const config::StudyConfig& study, const Cohort& cohort, bool deep, const LineSink& line);

/// Every image header, as run reads them (magic, datatype, 3-D, sizes against the file), on one grid: the cohort's
/// grid, that of its first image.
io::Geometry CheckImageHeaders(const Cohort& cohort, const LineSink& line) {
  const io::Geometry grid = io::ReadGeometry(cohort.images.at(0));
  for (std::size_t s = 1; s < cohort.images.size(); ++s) {
    const io::Geometry g = io::ReadGeometry(cohort.images[s]);
    if (const auto diff = g.DifferenceFrom(grid); !diff.empty())
      throw GeometryMismatch("input:GridMismatch", "subject " + cohort.ids[s] + " (" + cohort.images[s] + ")",
                             "image grid differs from the cohort grid (" + grid.Describe() + "): " + diff +
                                 "; every image of a cohort must be on one grid");
  }
  line(fmt::format("  grid (from {}): {}; every header read", cohort.ids.at(0), grid.Describe()));
  return grid;
}

/// The study's atlases as run loads them: files, label tables, grids against the images' grid.
void DescribeAtlases(const config::StudyConfig& study, const io::Geometry& grid, const LineSink& line) {
  for (const auto& atlas : LoadStudyAtlases(study)) {
    line(fmt::format("Atlas: {} ({}){}, {} regions, grid {}", study.atlas.builtin.empty() ? "custom" : study.atlas.builtin, atlas.imagePath,
                     atlas.probabilistic ? fmt::format(", probabilistic (p > {:g})", atlas.threshold) : std::string(),
                     atlas.regions.size(), atlas.geometry.Describe()));
    line(fmt::format("  label table {} ({}; coding column \"{}\")", atlas.tablePath, atlas.tableFormat, atlas.labelColumn));
    for (const auto& w : atlas.warnings) line("  warning: " + w);
    line(atlas.geometry.DifferenceFrom(grid).empty() ? "  atlas and images share one grid"
                                                      : "  atlas will be resampled onto the image grid (nearest neighbour, world coordinates)");
  }
  if (!study.atlas.space.empty()) line(fmt::format("  atlas space: {}", study.atlas.space));
}

/// --deep: every image decoded (truncated or corrupt data fail here as in the kernel stage), and a subject without
/// one finite voxel inside the atlas regions refused (input:AllNonFinite, as the kernel stage).
void CheckImagesDecode(const Cohort& cohort, const atlas::RegionIndex& regions, const LineSink& line) {
  std::int64_t regionVoxels = 0;
  for (const auto& r : regions.regions) regionVoxels += static_cast<std::int64_t>(r.voxels.size());
  for (std::size_t s = 0; s < cohort.images.size(); ++s) {
    const io::Volume vol = io::ReadVolume(cohort.images[s]);
    bool anyFinite = false;
    for (const auto& r : regions.regions) {
      for (const auto v : r.voxels)
        if (std::isfinite(vol.data[static_cast<std::size_t>(v)])) {
          anyFinite = true;
          break;
        }
      if (anyFinite) break;
    }
    if (!anyFinite)
      throw InputError("input:AllNonFinite", "subject " + cohort.ids[s],
                       fmt::format("all {} voxels inside the atlas regions are NaN or infinite; the image holds no data", regionVoxels));
  }
  line(fmt::format("  --deep: every image decoded; each has finite voxels inside the atlas regions"));
}

/// Image kernels: the files, headers, atlases, region index, mask and intensity scaling, checked as the kernel
/// stage reads them.
void DescribeImageKernels(const config::StudyConfig& study, const Cohort& cohort, bool deep, const LineSink& line) {
  if (!study.subjects.bids.root.empty())
    line(fmt::format("Images: found by BIDS entities under {}", study.subjects.bids.derivatives.empty() ? study.subjects.bids.root
                                                                                                     : study.subjects.bids.derivatives));
  line(fmt::format("Images: all {} files present and readable", cohort.images.size()));
  for (const auto& w : cohort.warnings) line("  warning: " + w);
  const io::Geometry grid = CheckImageHeaders(cohort, line);
  DescribeAtlases(study, grid, line);
  // The region index exactly as run builds it (headers, the atlas and mask volumes; no subject voxels):
  // an atlas without overlap with the image grid, or a mask without overlap with the atlas, is refused here.
  std::vector<std::string> notes;
  const atlas::RegionIndex regions = StudyRegions(study, cohort, notes);
  if (deep) CheckImagesDecode(cohort, regions, line);
  if (!study.mask.empty()) {
    const io::Geometry mg = io::ReadGeometry(study.mask);
    line(fmt::format("Mask: {} ({}){}", study.mask, mg.Describe(), mg.DifferenceFrom(grid).empty() ? "" : ", will be resampled"));
  } else {
    line("Mask: none (the atlas labels define the voxels)");
  }
  if (study.kernels.intensity.scaling == kernels::IntensityScaling::GlobalMean) line("Intensity scaling: each image divided by its mean over the atlas voxels");
  if (study.kernels.intensity.scaling == kernels::IntensityScaling::ReferenceRegions) {
    // the same region index and reference as the kernel stage: run rejects nothing validate accepts
    const auto voxels = ReferenceVoxels(study, regions);
    line(fmt::format("Intensity scaling: each image divided by its mean over {} reference voxels", voxels.size()));
  }
  line(fmt::format("Kernels: one linear kernel per region; non-finite voxels: {}", study.kernels.nanPolicy == kernels::NanPolicy::Zero
                                                                                      ? "set to 0 (zero)"
                                                                                      : "dropped when non-finite in any subject (drop_voxel)"));
}

/// Precomputed kernels: every file present, read and checked as run reads it.
void DescribePrecomputedKernels(const config::StudyConfig& study, const Cohort& cohort, const LineSink& line) {
  line(fmt::format("Kernels: {} precomputed kernel files", study.kernels.precomputed.size()));
  for (const auto& k : study.kernels.precomputed) {
    std::error_code ec;
    if (!fs::is_regular_file(k.file, ec))
      throw InputError("kernels:Missing", k.file, "precomputed kernel file \"" + k.name + "\" not found: " + WhyNotAFile(k.file));
    line(fmt::format("  {}: {}", k.name, k.file));
  }
  // Read and checked as run does (shape n x n, finite, symmetric, positive semi-definite; zero kernels excluded): the
  // same functions.
  kernels::KernelSet set = PrecomputedKernels(study, cohort);
  ExcludeZeroKernelsOrRefuse(set, study.path);
  line(fmt::format("  every kernel read: {0}x{0}, finite, symmetric and positive semi-definite", cohort.ids.size()));
  for (const auto& e : set.excluded) line(fmt::format("  warning: kernel {} excluded: {}", e.info.name, e.reason));
}

/// Tabular kernels: the feature groups, every kernel formed as run forms it.
void DescribeTabularKernels(const config::StudyConfig& study, const Cohort& cohort, const LineSink& line) {
  line(fmt::format("Kernels: {} linear kernels on feature groups of {}", study.kernels.tabular.groups.size(), study.kernels.tabular.table));
  for (const auto& [name, cols] : study.kernels.tabular.groups) line(fmt::format("  {}: {} columns", name, cols.size()));
  // Formed as run forms them (a function that overflows is refused here too); features are small next to images.
  kernels::KernelSet set = TabularKernels(study, cohort);
  ExcludeZeroKernelsOrRefuse(set, study.path);
  line(fmt::format("  every kernel formed: {} kernels, finite", set.Size()));
  for (const auto& e : set.excluded) line(fmt::format("  warning: kernel {} excluded: {}", e.info.name, e.reason));
  const auto& spec = study.kernels.tabular;
  if (spec.InFold()) {
    const TabularFeatureTable table = TabularFeatures(study, cohort);
    const std::vector<int> missing = table.Missing();
    std::vector<std::string> imputed;
    for (std::size_t c = 0; c < missing.size(); ++c)
      if (missing[c] > 0) imputed.push_back(fmt::format("{}: {} missing", table.columns[c], missing[c]));
    const std::string steps = spec.imputeMedian && spec.standardise ? "imputed (median) and standardised (mean, SD)"
                              : spec.imputeMedian                     ? "imputed (median)"
                                                                      : "standardised (mean, SD)";
    line(fmt::format("  inside every fold: the columns {} with the fold's training subjects' statistics, then its kernels formed", steps));
    if (!imputed.empty()) line(fmt::format("  imputed inside the folds: {}", Join(imputed, ", ")));
  }
}

/// kernels.missing_source: the subjects dropped, or kept with a source imputed, and what each lacks.
void DescribeSubjectsLackingSources(const Cohort& cohort, const LineSink& line) {
  if (!cohort.dropped.empty()) {
    line(fmt::format("  dropped (/kernels/missing_source \"drop\"): {}", cohort.dropped.size()));
    for (const auto& [id, why] : cohort.dropped) line(fmt::format("    {}: {}", id, why));
  }
  for (const auto& [source, lacking] : cohort.imputedSources) {
    line(fmt::format("  kept without source \"{}\" (/kernels/missing_source \"impute\": its kernels' rows imputed in every fold): {}", source,
                     lacking.size()));
    for (const auto& [id, why] : lacking) line(fmt::format("    {}: {}", id, why));
  }
}

/// Several sources: each described as a study of its own, indented under its name.
void DescribeSourceKernels(const config::StudyConfig& study, const Cohort& cohort, bool deep, const LineSink& line) {
  line(fmt::format("Kernels: {} sources{}", study.kernels.sources.size(),
                   study.kernels.sourceWeighting == config::SourceWeighting::Equal ? ", each scaled to the same total trace in every fold" : ""));
  for (const auto& source : study.kernels.sources) {
    // Each source checked as a study of its own would be, with the same functions as run.
    const auto d = SourceStudy(study, source);
    const Cohort sc = SourceCohort(d, source, cohort);
    line(fmt::format("Source \"{}\" ({}):", source.name, config::ToString(source.kind)));
    DescribeKernels(d, sc, deep, [&](const std::string& text) { line("  " + text); });
  }
}

/// Connectivity kernels: every matrix read, and the kernels planned from the nodes or networks.
void DescribeConnectivityKernels(const config::StudyConfig& study, const Cohort& cohort, const LineSink& line) {
  const auto& spec = study.kernels.connectivity;
  const ConnectivityData data = ReadConnectivity(study, spec, cohort);
  const auto plan = PlanConnectivityKernels(data, spec.kernels);
  line(fmt::format("Connectivity: {} matrices from column \"{}\", {} nodes ({}), {} connections; every matrix read: square, finite, symmetric",
                   cohort.ids.size(), spec.column, data.nodes.size(), spec.nodes.empty() ? "unnamed" : spec.nodes, data.edges.cols()));
  line(fmt::format("Kernels: {} linear kernels ({})", plan.names.size(),
                   spec.kernels == config::ConnectivitySpec::Kernels::Node      ? "one per node"
                   : spec.kernels == config::ConnectivitySpec::Kernels::Network ? "one per network"
                                                                                : "one over every connection"));
}

/// What a study's kernel source is, checked as the kernel stage reads it (headers, atlas, mask, files).
void DescribeKernels(const config::StudyConfig& study, const Cohort& cohort, bool deep, const LineSink& line) {
  switch (study.kernels.source) {
    case config::KernelSource::Images: DescribeImageKernels(study, cohort, deep, line); break;
    case config::KernelSource::Precomputed: DescribePrecomputedKernels(study, cohort, line); break;
    case config::KernelSource::Tabular: DescribeTabularKernels(study, cohort, line); break;
    case config::KernelSource::Sources: DescribeSourceKernels(study, cohort, deep, line); break;
    case config::KernelSource::Connectivity: DescribeConnectivityKernels(study, cohort, line); break;
  }
}

/// What the folds regress out or harmonise: the target's confounds, the covariates and the ComBat design.
void DescribeConfounds(const StudyContext& ctx, const LineSink& line) {
  if (ctx.targetConfounds) {
    line(fmt::format("Target confounds: {} regressed out of the target \"{}\" inside every fold, fitted on {} training subjects (in-sample "
                     "R^2 {:.3f}); the learners predict and the metrics score what they leave",
                     Join(ctx.targetConfounds->columns, ", "), ctx.study.target.column, ctx.targetConfounds->fitOn,
                     gram::CovariateR2(CohortImputedDesign(*ctx.targetConfounds), ctx.cohort.y)));
    if (!ctx.targetConfounds->missing.empty())
      line("  missing values imputed inside every fold from its training subjects (median; most frequent level): " + MissingCounts(ctx.targetConfounds->missing));
  }
  if (ctx.covariates) {
    line(fmt::format("Covariates: {} regressed out inside every fold, fitted on {} training subjects", Join(ctx.covariates->columns, ", "),
                     ctx.covariates->fitOn));
    if (!ctx.covariates->missing.empty())
      line("  missing values imputed inside every fold from its training subjects (median; most frequent level): " + MissingCounts(ctx.covariates->missing));
  }
  if (ctx.harmonisation) {
    const auto& h = *ctx.harmonisation;
    const auto& spec = ctx.study.harmonisation;
    const std::vector<int> counts = h.SiteCounts();
    std::vector<std::string> sites;
    for (std::size_t s = 0; s < counts.size(); ++s) sites.push_back(fmt::format("\"{}\" n = {}", h.siteNames[s], counts[s]));
    const auto& cov = spec.preserve;
    line(fmt::format("Harmonisation: ComBat{} inside every fold on column \"{}\", {} sites: {}", spec.empiricalBayes ? " (empirical Bayes)" : "",
                     spec.siteColumn, sites.size(), Join(sites, ", ")));
    line(fmt::format("  preserved covariates: {}; fitted on {} training subjects; image sources: {}",
                     h.covariateNames.empty() ? "none" : Join(h.covariateNames, ", "),
                     cov.fitOnColumn.empty() ? "all" : fmt::format("the \"{}\" = \"{}\"", cov.fitOnColumn, cov.fitOnValue),
                     spec.sources.empty() ? "every one" : Join(spec.sources, ", ")));
    if (!h.missing.empty())
      line("  missing preserved covariates imputed inside every fold from its training subjects (median; most frequent level): " +
           MissingCounts(h.missing));
    line(std::string("  every site has 2 or more fitting subjects in every training set; each fold forms its harmonised kernels from the voxels, "
                     "which stay in memory (float32); voxel maps are of each fold's harmonised images") +
         (ctx.study.output.model ? "; each exported model keeps its ComBat fit for predict" : ""));
  }
}

}  // namespace

std::string ValidateStudy(const config::StudyConfig& study, bool deep) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("Study \"{}\" ({})", study.name, study.path));
  if (!study.description.empty()) line("  " + study.description);
  // The cohort and the outer folds exactly as `run` makes them: an impossible CV plan (outer k larger
  // than the number of subjects, a custom fold column that leaves a class out) is refused here too.
  const StudyContext ctx = LoadStudyInputs(study);
  const Cohort& cohort = ctx.cohort;
  line(fmt::format("Subjects: {} rows in {}", cohort.ids.size(), study.subjects.table));
  line(fmt::format("  used for supervised learning: {}", cohort.labelledRows.size()));
  std::vector<std::string> semi;
  for (const auto& l : study.learners)
    if (const auto* info = learners::FindLearner(l.name); info && info->semiSupervised) semi.push_back(l.label);
  if (!cohort.excluded.empty() && !semi.empty())
    line(fmt::format("  unlabelled data for {}: {} (never test subjects; the other learners leave them out)", Join(semi, ", "), cohort.excluded.size()));
  if (!cohort.excluded.empty()) {
    line(fmt::format("  excluded: {}", cohort.excluded.size()));
    for (const auto& [id, why] : cohort.excluded) line(fmt::format("    {}: {}", id, why));
  }
  if (study.target.task == learners::Task::Multiclass) {
    std::vector<std::string> counts;
    for (const auto& [k, v] : cohort.classCounts) counts.push_back(fmt::format("\"{}\" n = {}", k, v));
    line(fmt::format("Target: \"{}\", multiclass ({} classes, labels 0..{} in this order): {}; kernel weights {}", study.target.column,
                     cohort.classNames.size(), cohort.classNames.size() - 1, Join(counts, ", "),
                     study.target.multiclassWeights == learners::MulticlassWeights::PerClass ? "per class" : "shared by all classes"));
  } else if (study.target.task == learners::Task::Classification) {
    std::vector<std::string> counts;
    for (const auto& [k, v] : cohort.classCounts) counts.push_back(fmt::format("\"{}\" n = {}", k, v));
    line(fmt::format("Target: \"{}\", classification: {}; positive class \"{}\"", study.target.column, Join(counts, ", "), cohort.positiveClass));
    if (!cohort.classDescriptions.empty()) {
      std::vector<std::string> described;
      for (const auto& [k, _] : cohort.classCounts)
        if (auto it = cohort.classDescriptions.find(k); it != cohort.classDescriptions.end()) described.push_back(fmt::format("\"{}\" = {}", k, it->second));
      line(fmt::format("  levels (from {}): {}", cohort.sidecar, Join(described, "; ")));
    }
  } else {
    const auto& y = cohort.y;
    const double mean = y.mean();
    const double sd = std::sqrt((y.array() - mean).square().sum() / std::max<double>(1.0, static_cast<double>(y.size() - 1)));
    line(fmt::format("Target: \"{}\", regression: range [{:.4g}, {:.4g}], mean {:.4g}, SD {:.4g}", study.target.column, y.minCoeff(),
                     y.maxCoeff(), mean, sd));
  }
  DescribeSubjectsLackingSources(cohort, line);
  DescribeKernels(study, cohort, deep, line);
  bool onFeatures = false;
  {
    const std::size_t count = PlannedKernelCount(study, cohort);
    const RepresentationChoice choice = ChooseRepresentation(study, cohort, count);
    const double memory = static_cast<double>(PhysicalMemoryBytes());
    const auto mib = [](std::uint64_t b) { return static_cast<double>(b) / 1048576.0; };
    const bool features = choice.chosen == config::KernelRepresentation::Features;
    onFeatures = features;
    line(fmt::format("  representation: {} ({}); kernels {:.1f} MiB, features {}", features ? "features" : "kernels", choice.why, mib(choice.kernelBytes),
                     choice.featureBytes > 0 ? fmt::format("{:.1f} MiB (subjects x voxels x {} bytes; {})", mib(choice.featureBytes),
                                                                          gram::BytesPerValue(choice.storage.storage), choice.storage.why)
                                             : std::string("none")));
    if (features) {
      CheckFeaturesFitMemory(study, choice);  // as run checks it
      line(fmt::format("  memory: the features take {:.1f} MiB, {:.1f} % of this machine's {:.1f} GiB{}; the study's kernels are never formed (a fold "
                       "forms its own when they take at most {})",
                       mib(choice.featureBytes), 100.0 * static_cast<double>(choice.featureBytes) / memory, memory / 1073741824.0,
                       study.kernels.cache ? ", in the kernel cache folder's features.npy, mapped (paged from the disk as they are read)" : ", in memory",
                       study.kernels.memoryBudgetMb > 0 ? fmt::format("kernels.memory_budget_mb ({} MiB)", study.kernels.memoryBudgetMb)
                                                        : std::string("an eighth of the memory")));
      if (study.kernels.precision == config::KernelPrecision::Float32) line(fmt::format("  precision: float32 does not apply (the features are {}; every fold computation is in double)", gram::ToString(choice.storage.storage)));
      if (study.output.saveKernels) line("  output.save_kernels: skipped (no kernel is formed)");
    } else {
      const std::uint64_t bytes = CheckKernelsFitMemory(study, cohort.ids.size(), count);  // kernels:TooLarge when they cannot fit this machine
      const bool float32 = study.kernels.precision == config::KernelPrecision::Float32;
      line(fmt::format("  memory: the kernels take {:.1f} MiB ({} kernels x {} subjects^2 x {} bytes), {:.1f} % of this machine's {:.1f} GiB; learners of "
                       "kernel weights add fold copies (up to ~1.7x more, docs/batch.md \"Measured\")",
                       mib(bytes), count, cohort.ids.size(), float32 ? 4 : 8, 100.0 * static_cast<double>(bytes) / memory, memory / 1073741824.0));
    }
  }
  line(fmt::format("  per-fold preprocessing: centre {}, normalise {}", study.kernels.centre ? "on" : "off", study.kernels.normalise ? "on" : "off"));
  if (study.kernels.precision == config::KernelPrecision::Float32 && !onFeatures) {
    const double side = static_cast<double>(cohort.y.size());  // labelled subjects (semi-supervised studies add their unlabelled ones)
    line(fmt::format("  precision: float32 after the kernel stage (compact store{}): {:.1f} MiB per kernel over the labelled subjects instead of {:.1f}; "
                     "raw kernels not saved",
                     study.kernels.centre ? ", centred with the cohort mean before rounding" : ", raw values", side * side * 4 / 1048576.0,
                     side * side * 8 / 1048576.0));
  }
  DescribeConfounds(ctx, line);
  line(fmt::format("CV plan: outer {}, inner {}, seed {}", DescribeScheme(study.cv.outer), DescribeScheme(study.cv.inner), study.cv.seed));
  bool anySearch = false;
  for (const auto& p : ctx.plans) anySearch |= p.grid.size() > 1;
  if (anySearch) {  // the inner splits of every outer training set, as the nested CV makes them
    const cv::InnerSplitter inner = ctx.Inner();
    for (std::size_t f = 0; f < ctx.outer.size(); ++f) {
      const auto& train = ctx.outer[f].train;
      Eigen::VectorXd y(static_cast<Eigen::Index>(train.size()));
      for (std::size_t i = 0; i < train.size(); ++i) y[static_cast<Eigen::Index>(i)] = cohort.y[train[i]];
      inner(f, train, y);
    }
  }
  line(fmt::format("Learners: {}", study.learners.size()));
  for (const auto& l : study.learners) {
    std::vector<std::string> fixed, grid;
    for (const auto& [k, v] : l.params)
      if (!l.grid.count(k)) fixed.push_back(k + "=" + FormatDouble(v));
    for (const auto& [k, v] : l.grid) grid.push_back(fmt::format("{} ({} values)", k, v.size()));
    line(fmt::format("  {} [{}]: {}", l.label, l.name, fixed.empty() ? "every parameter searched" : "fixed " + Join(fixed, ", ")));
    if (!grid.empty()) line(fmt::format("    grid: {} = {} points", Join(grid, " x "), l.GridSize()));
  }
  line(fmt::format("Permutations: {}", study.permutations.count));
  std::error_code ec;
  CheckOutputWritable(study.output.dir);  // as run checks it before it works
  line(fmt::format("Output: {}{}", study.output.dir, fs::exists(study.output.dir, ec) ? " (exists: `run` needs --force to replace it)" : ""));
  line("OK: the study is valid");
  return out;
}

}  // namespace neuromkl::pipeline
