// The run record of a study (what was run, on what, with which results) and its outputs.
#include "neuromkl/pipeline/study_stages.hpp"


#include <algorithm>
#include <cmath>
#include <numeric>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/checkpoint.hpp"
#include "neuromkl/export/kernel_store.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/pipeline/connectivity.hpp"
#include "neuromkl/pipeline/study_run.hpp"
#include "neuromkl/metrics/permutation.hpp"
#include "neuromkl/weights/patterns.hpp"
#include "neuromkl/weights/weights.hpp"
#include "neuromkl/ranks/held_kernels.hpp"

namespace neuromkl::pipeline {

namespace {

std::string DescribeSplit(const config::CvSchemeSpec& s) {
  std::string d = config::ToString(s.scheme);
  if (s.scheme != cv::Scheme::LeaveOneOut && s.scheme != cv::Scheme::LeaveOneGroupOut && s.scheme != cv::Scheme::Custom) d += " k=" + std::to_string(s.k);
  if (s.repeats > 1) d += " repeats=" + std::to_string(s.repeats);
  if (!s.groupColumn.empty()) d += " groups=" + s.groupColumn;
  if (!s.foldColumn.empty()) d += " folds=" + s.foldColumn;
  return d;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

/// What was run: the study's settings, CV schemes, target and seeds.
void RecordSettings(const StudyContext& ctx, exporting::RunRecord& record) {
  const auto& study = ctx.study;
  record.permutations = study.permutations.count;
  record.study = study.name;
  record.version = NeuromklVersion();
  record.versions = Versions();
  record.configPath = std::filesystem::absolute(study.path).string();
  record.seed = study.seed;
  record.cvSeed = study.cv.seed;
  record.outerScheme = DescribeSplit(study.cv.outer);
  record.innerScheme = DescribeSplit(study.cv.inner);
  record.task = config::ToString(study.target.task);
  record.targetColumn = study.target.column;
  record.positiveClass = ctx.cohort.positiveClass;
  if (study.target.task == learners::Task::Multiclass) {
    record.classNames = ctx.cohort.classNames;
    record.multiclassWeights = study.target.multiclassWeights == learners::MulticlassWeights::PerClass ? "per_class" : "shared";
  }
  record.innerCriterion = study.cv.criterion;
  record.negativeClass = ctx.cohort.negativeClass;
}

/// On whom: the subjects used, excluded (and why), dropped, and their targets.
void RecordSubjects(const StudyContext& ctx, exporting::RunRecord& record) {
  const auto& cohort = ctx.cohort;
  record.excludedSubjects = cohort.excluded;
  record.droppedSubjects = cohort.dropped;
  record.imputedSources = cohort.imputedSources;
  if (ctx.unlabelledCount > 0)
    for (auto& [id, why] : record.excludedSubjects) why += "; used as unlabelled data by the semi-supervised learners";
  for (auto r : cohort.labelledRows) {
    record.labelledSubjects.push_back(cohort.ids[static_cast<std::size_t>(r)]);
    record.rawTargets.push_back(cohort.rawTargets[static_cast<std::size_t>(r)]);
  }
  record.targets.assign(cohort.y.data(), cohort.y.data() + cohort.y.size());
  for (std::size_t r = 0, e = 0; r < cohort.ids.size(); ++r) {
    const bool used = cohort.labelled[r];
    record.subjectTable.push_back({cohort.ids[r], used ? "yes" : ctx.unlabelledCount > 0 ? "unlabelled" : "no", cohort.rawTargets[r],
                                   used ? "" : record.excludedSubjects[e++].second});
  }
}

/// The kernels: which, from where (cache, ranks, compact store), intensity scaling, coverage and sources.
void RecordKernels(const StudyContext& ctx, exporting::RunRecord& record) {
  const auto& study = ctx.study;
  const auto& ks = ctx.ks;
  record.kernels = ks.set.info;
  record.excludedKernels = ks.set.excluded;
  record.kernelSource = config::ToString(study.kernels.source);
  const bool features = ks.features || ks.set.featureForm;
  record.kernelCache = ks.cacheHit ? (features ? "hit (features: no image read)" : "hit")
                       : features  ? (study.kernels.cache ? "features read and stored (no kernel formed)" : "features read (cache off; no kernel formed)")
                                   : (study.kernels.cache ? "computed and stored" : "computed (cache off)");
  record.kernelRanks = ks.owners ? ks.owners->Owners() : ks.cacheHit ? 1 : ks.report.ranks;
  record.kernelRankBudgetMb = study.kernels.memoryBudgetMb > 0 ? study.kernels.memoryBudgetMb : static_cast<double>(ks.report.rankBudgetBytes) / 1048576.0;
  if (!ks.set.intensityScale.empty()) {
    record.intensityScaling = study.kernels.intensity.scaling == kernels::IntensityScaling::GlobalMean
                                  ? "global_mean"
                                  : "reference_region: " + (study.kernels.intensity.referenceImage.empty() ? Join(study.kernels.intensity.referenceRegions, ", ")
                                                                                                            : study.kernels.intensity.referenceImage);
    for (auto r : ctx.kernelRows) record.intensityScale.push_back(ks.set.intensityScale[static_cast<std::size_t>(r)]);
  }
  record.subjectsWithSignal = ctx.subjectsWithSignal;
  record.representation = ctx.kernels->Features() ? "features" : "kernel";
  record.representationNote = ks.representationNote;
  if (ctx.kernels->Features()) {
    record.featureBytes = ks.report.dataBytes;
    record.featureStorage = gram::ToString(ks.featureStorage);
    record.featureStorageNote = ks.featureStorageNote;
    record.featureHeld = ks.featureHeld;
  }
  if (ctx.kernels->Compact()) {
    record.compactBytes = gram::CompactBytes(ctx.kernels->Count(), static_cast<std::size_t>(ctx.kernels->Subjects()));
    record.compactCentred = ctx.kernels->Centred();
  }
  if (ks.owners) {
    record.kernelsHeldByRanks = true;
    record.kernelsHeldNote = ks.heldNote;
  }
  if (const auto total = ks.set.nonZeroInsideAtlas + ks.set.nonZeroOutsideAtlas; ks.set.nonZeroInsideAtlas >= 0 && total > 0)
    record.outsideAtlasShare = static_cast<double>(ks.set.nonZeroOutsideAtlas) / static_cast<double>(total);
  record.minSubjectsWithSignal = study.output.minSubjectsWithSignal;
  record.sourceWeighting = study.kernels.sourceWeighting == config::SourceWeighting::Equal ? "equal" : "none";
  for (std::size_t s = 0; s < ks.sourceNames.size(); ++s) {
    record.sourceNames.push_back(ks.sourceNames[s]);
    record.sourceKinds.push_back(config::ToString(study.kernels.sources[s].kind));
    record.sourceKernelCounts.push_back(ks.sourceKernelCounts[s]);
    record.sourceCache.push_back(ks.sourceCacheHits[s] ? "hit" : (study.kernels.cache ? "computed and stored" : "computed (cache off)"));
  }
}

/// The harmonisation: sites, preserved covariates, reference group, the sources harmonised and the voxels they hold.
void RecordHarmonisation(const StudyContext& ctx, exporting::RunRecord& record) {
  if (!ctx.harmonisation) return;
  const auto& spec = ctx.study.harmonisation;
  auto& h = record.harmonisation;
  h.siteColumn = spec.siteColumn;
  h.sites = ctx.harmonisation->siteNames;
  h.siteCounts = ctx.harmonisation->SiteCounts();
  h.designColumns = ctx.harmonisation->covariateNames;
  h.fitOn = ctx.harmonisation->fitOn;
  h.missing = ctx.harmonisation->missing;
  h.empiricalBayes = spec.empiricalBayes;
  for (const auto& source : ctx.harmonisedSources) {
    h.sources.push_back(source.name);
    h.sourceKinds.push_back(source.kind);
    h.sourceVoxels.push_back(source.voxels);
    h.bytes += source.bytes;
  }
}

/// The tabular sources whose columns every fold imputes or standardises: what is missing, and per outer fold how many
/// subjects have a value imputed.
void RecordTabularFolds(const StudyContext& ctx, exporting::RunRecord& record) {
  if (!ctx.foldFormedKernels) return;
  for (const gram::FoldTabularSource& s : ctx.foldFormedKernels->TabularSources()) {
    exporting::RunRecord::TabularFolds t{s.name, s.steps.standardise, s.steps.impute, s.harmonise, {}, {}};
    const Eigen::MatrixXd& X = *s.features;
    for (Eigen::Index c = 0; c < X.cols(); ++c)
      if (const auto count = X.col(c).array().isNaN().count(); count > 0) t.missing.emplace_back(s.columns[static_cast<std::size_t>(c)], static_cast<int>(count));
    auto imputed = [&](const std::vector<int>& rows) {
      return static_cast<int>(std::count_if(rows.begin(), rows.end(), [&](int i) { return X.row(i).hasNaN(); }));
    };
    if (!t.missing.empty())
      for (const auto& fold : ctx.outer) t.imputedPerFold.emplace_back(imputed(fold.train), imputed(fold.test));
    record.tabularFolds.push_back(std::move(t));
  }
}

/// The covariates regressed out, and how much of the target they explain (warned from kCovariateR2Warning).
void RecordCovariates(const StudyContext& ctx, exporting::RunRecord& record) {
  if (!ctx.covariates) return;
  record.covariateColumns = ctx.covariates->columns;
  record.covariateFitOn = ctx.covariates->fitOn;
  record.covariateImpute = ctx.study.covariates.imputeMedian;
  record.covariateMissing = ctx.covariates->missing;
  if (!record.covariateMissing.empty()) {
    const Eigen::MatrixXd& design = ctx.covariates->covariates.design;
    auto imputed = [&](const std::vector<int>& rows) {
      int count = 0;
      for (const int i : rows) count += design.row(i).hasNaN() ? 1 : 0;
      return count;
    };
    for (const auto& fold : ctx.outer) record.covariateImputedPerFold.emplace_back(imputed(fold.train), imputed(fold.test));
  }
  // Labelled subjects are the design's first n rows.
  record.covariateTargetR2 = gram::CovariateR2(CohortImputedDesign(*ctx.covariates).topRows(ctx.n), ctx.cohort.y);
  if (record.covariateTargetR2 >= kCovariateR2Warning) {
    record.warnings.push_back(fmt::format("the covariates explain R^2 = {:.3f} of the target (warned from {}): regressing them out of the images "
                                          "removed most of what could predict it, so low performance may only mean that the covariates carry "
                                          "the target; check that no covariate recodes it",
                                          record.covariateTargetR2, kCovariateR2Warning));
    spdlog::warn("{}", record.warnings.back());
  }
}

/// The target's confounds: their design, how much of the target they explain, and each outer fold's coefficients.
void RecordTargetConfounds(const StudyContext& ctx, exporting::RunRecord& record) {
  if (!ctx.targetConfounds) return;
  auto& t = record.targetConfounds;
  t.columns = ctx.targetConfounds->columns;
  t.fitOn = ctx.targetConfounds->fitOn;
  t.impute = ctx.study.target.confounds.imputeMedian;
  t.missing = ctx.targetConfounds->missing;
  t.r2 = gram::CovariateR2(CohortImputedDesign(*ctx.targetConfounds), ctx.cohort.y);
  for (const auto& fold : ctx.outer) {
    const Eigen::VectorXd b = cv::TargetConfoundCoefficients(ctx.cohort.y, ctx.targetConfounds->covariates, fold.train);
    t.foldCoefficients.emplace_back(b.data(), b.data() + b.size());
  }
}

/// The preprocessing and the image inputs: centring, atlas, BIDS dataset, mask, NaN rule.
void RecordInputs(const config::StudyConfig& study, exporting::RunRecord& record) {
  record.centre = study.kernels.centre;
  record.normalise = study.kernels.normalise;
  record.threads = study.threads;
  record.description = study.description;
  if (study.kernels.source == config::KernelSource::Images) {
    std::vector<std::string> images;
    for (const auto& part : study.atlas.parts) images.push_back(part.image + (part.probabilistic ? " (probabilistic)" : ""));
    record.atlas = !study.atlas.builtin.empty() ? study.atlas.builtin : images.empty() ? study.atlas.image : Join(images, " + ");
    record.atlasSpace = study.atlas.space;
    record.builtinAtlas = study.atlas.builtin;
  }
  if (!study.subjects.bids.root.empty()) {
    record.bidsRoot = std::filesystem::absolute(study.subjects.bids.root).lexically_normal().string();
    if (!study.subjects.bids.derivatives.empty())
      record.bidsDerivatives = std::filesystem::absolute(study.subjects.bids.derivatives).lexically_normal().string();
  }
  record.weightMapUnitNorm = study.output.weightMapUnitNorm;
  record.nanPolicy = study.kernels.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel";
  record.mask = study.mask;
}

/// A warning per learner whose top 10 regions include some with non-zero data in too few subjects.
void WarnFragileRegions(exporting::RunRecord& record) {
  for (const auto& lr : record.learners) {
    std::vector<std::string> fragile;
    for (std::size_t i = 0; i < std::min<std::size_t>(10, lr.regions.size()); ++i)
      if (const auto k = lr.regions[i].kernel; exporting::LowCoverage(record, k) && lr.regions[i].meanPercent > 0)
        fragile.push_back(fmt::format("{} ({} subjects)", record.kernels[k].name, record.subjectsWithSignal[k]));
    if (!fragile.empty()) {
      record.warnings.push_back(fmt::format("learner {}: regions among its top 10 have non-zero data in fewer than {} subjects: {}; their weights rest "
                                            "on those few subjects",
                                            lr.outcome.label, record.minSubjectsWithSignal, Join(fragile, ", ")));
      spdlog::warn("{}", record.warnings.back());
    }
  }
}

/// What was analysed, not how or where it was run: the thread count, the output and cache folders (which change
/// no result) stay out, so one analysis has one hash.
std::string InputHash(const StudyContext& ctx) {
  config::StudyConfig hashed = ctx.study;
  hashed.threads = 0;
  hashed.output.dir.clear();
  hashed.output.cacheDir.clear();
  Hasher inputHash;
  inputHash.Update(ctx.ks.key).Update(HashFile(ctx.study.subjects.table)).Update(config::ResolvedConfigJson(hashed, true));
  return inputHash.Hex();
}

}  // namespace

exporting::RunRecord DescribeRun(const StudyContext& ctx, CrossValidationResult cv, PermutationResult permutations, const RegionWeightsResult& weights,
                                 std::map<std::string, double> seconds) {
  exporting::RunRecord record;
  record.learners = std::move(cv.learners);
  for (std::size_t l = 0; l < record.learners.size(); ++l) {
    auto& lr = record.learners[l];
    if (l < permutations.learners.size()) lr.permutations = std::move(permutations.learners[l]);
    lr.regions = weights.tables[l];
    lr.regionSource = weights.sources[l];
    if (l < weights.classTables.size()) lr.classRegions = weights.classTables[l];
    if (l < weights.patternTables.size()) lr.patternRegions = weights.patternTables[l];
    if (l < weights.attributions.size()) lr.attributions = weights.attributions[l];
    TestKernelShares(lr, ctx.ks.sourceKernelCounts);
    AddMetricIntervals(ctx, lr, l);
  }
  record.bootstrapResamples = BootstrapResamples(ctx);
  record.bootstrapSeed = BootstrapSeed(ctx);
  record.comparisons = CompareLearners(ctx, record.learners);
  record.comparisonSeed = ComparisonSeed(ctx);
  record.comparisonSwaps = ComparisonSwaps(ctx);
  for (const auto& w : weights.warnings) {
    cv.warnings.push_back(w);
    spdlog::warn("{}", w);
  }
  record.warnings = std::move(cv.warnings);
  for (const auto& w : ctx.ks.warnings) record.warnings.push_back(w);
  record.seconds = std::move(seconds);
  RecordSettings(ctx, record);
  RecordSubjects(ctx, record);
  RecordKernels(ctx, record);
  RecordCovariates(ctx, record);
  RecordTargetConfounds(ctx, record);
  RecordHarmonisation(ctx, record);
  RecordTabularFolds(ctx, record);
  RecordInputs(ctx.study, record);
  record.date = UtcNow();
  WarnFragileRegions(record);
  record.inputHash = InputHash(ctx);
  return record;
}

void WriteStudyOutputs(StudyContext& ctx, exporting::RunRecord& record, const RegionWeightsResult& weights, const OutputRequest& request,
                       std::chrono::steady_clock::time_point start) {
  const auto& study = ctx.study;
  WriteTextFile(request.dir + "/study.resolved.json", config::ResolvedConfigJson(study) + "\n");
  if (study.output.saveKernels && ctx.kernels->Features()) {
    spdlog::info("output: save_kernels skipped: the study held its kernels as features and never formed them");
  } else if (study.output.saveKernels) {
    // Held by MPI ranks: each writes its own; moved into the study's kernels: written from there.
    SaveStageKernels(request.dir + "/kernels", ctx.ks, "raw region kernels of study " + study.name, ctx.movedKernels);
  }
  exporting::WriteStudyTables(request.dir, record, weights.maps, ctx.ks.regions ? &*ctx.ks.regions : nullptr);
  record.seconds["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  exporting::WriteStudyRecord(request.dir, record, weights.maps, ctx.ks.regions ? &*ctx.ks.regions : nullptr);
  for (const auto& [name, content] : request.extraFiles) WriteTextFile(request.dir + "/" + name, content);
}

std::vector<std::string> SummaryLines(const exporting::RunRecord& record, std::size_t outerFolds) {
  std::vector<std::string> lines;
  for (const auto& lr : record.learners) {
    const auto& m = lr.summary.pooled;
    auto pv = [&](const char* k) { return lr.permutations.pValues.count(k) ? fmt::format(" (p = {:.3g})", lr.permutations.pValues.at(k)) : std::string(); };
    auto sd = [&](const char* k) { return lr.summary.foldSd.count(k) ? fmt::format(" +- {:.3f}", lr.summary.foldSd.at(k)) : std::string(); };
    if (record.task == "multiclass")
      lines.push_back(fmt::format("{:<12} macro balanced accuracy {:.3f}{}{}, macro AUC {:.3f}{}, kappa {:.3f}, accuracy {:.3f}", lr.outcome.label,
                                  m.at("balanced_accuracy"), sd("balanced_accuracy"), pv("balanced_accuracy"), m.at("macro_auc"), pv("macro_auc"),
                                  m.at("kappa"), m.at("accuracy")));
    else if (record.task == "classification")
      lines.push_back(fmt::format("{:<12} balanced accuracy {:.3f}{}{}, AUC {:.3f}{}, accuracy {:.3f} [{:.3f}, {:.3f}]", lr.outcome.label,
                                  m.at("balanced_accuracy"), sd("balanced_accuracy"), pv("balanced_accuracy"), m.at("auc"), pv("auc"), m.at("accuracy"),
                                  m.at("accuracy_ci95_low"), m.at("accuracy_ci95_high")));
    else
      lines.push_back(fmt::format("{:<12} r {:.3f}{}{}, R^2 {:.3f}{}, MSE {:.4g}{}{}", lr.outcome.label, m.at("pearson_r"), sd("pearson_r"),
                                  pv("pearson_r"), m.at("r2"), pv("r2"), m.at("mse"), sd("mse"), pv("mse")));
  }
  for (const auto& lr : record.learners)
    if (const auto f = lr.summary.pooled.find("failed_folds"); f != lr.summary.pooled.end() && f->second > 0)
      lines.push_back(fmt::format("{:<12} WARNING: {} of {} outer folds FAILED; metrics over the {} subjects of the successful folds only",
                                  lr.outcome.label, f->second, lr.outcome.folds.size(), lr.summary.pooled.at("scored_subjects")));
  lines.push_back(fmt::format("(pooled over out-of-fold predictions; +- SD over {} outer folds; {:.1f} s)", outerFolds, record.seconds.at("total")));
  return lines;
}

}  // namespace neuromkl::pipeline
