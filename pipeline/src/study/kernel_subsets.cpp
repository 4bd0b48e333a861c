// What each region or source holds alone, and what the model loses without it: the study's nested CV rerun on part
// of its kernels (gram::KernelStore::Subset), with the same folds, seeds and preprocessing.
#include "neuromkl/pipeline/study_stages.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::pipeline {

namespace {

std::size_t LearnerIndex(const StudyContext& ctx, const std::string& label) {
  for (std::size_t l = 0; l < ctx.plans.size(); ++l)
    if (ctx.plans[l].label == label) return l;
  throw InputError("config:UnknownLearner", ctx.study.path, "no learner labelled \"" + label + "\"");  // CheckStudyConfig refused it already
}

/// Learner `l`'s nested CV over the kernels `which` only. With equal source weighting the remaining sources are
/// numbered anew, so that the scales balance the sources that are there.
cv::LearnerOutcome NestedCvOf(const StudyContext& ctx, const std::vector<std::size_t>& which, std::size_t l) {
  const std::unique_ptr<gram::KernelStore> part = ctx.kernels->Subset(which);
  cv::NestedCvOptions options = ctx.nestedOptions;
  std::vector<int>& groups = options.preprocessing.kernelGroups;
  if (!groups.empty()) {
    std::map<int, int> renumbered;
    std::vector<int> kept;
    for (const std::size_t j : which) kept.push_back(renumbered.emplace(groups[j], static_cast<int>(renumbered.size())).first->second);
    groups = std::move(kept);
  }
  auto outcomes = cv::RunNestedCv(*part, ctx.TargetsOf(ctx.cohort.y), ctx.outer, ctx.Inner(), {ctx.plans[l]}, options);
  return std::move(outcomes.at(0));
}

}  // namespace

exporting::RegionScanRecord RunRegionScan(const StudyContext& ctx) {
  exporting::RegionScanRecord scan;
  if (ctx.study.regionScan.learner.empty()) return scan;
  const std::size_t l = LearnerIndex(ctx, ctx.study.regionScan.learner);
  const learners::Targets targets = ctx.TargetsOf(ctx.cohort.y);
  scan.learner = ctx.plans[l].label;
  scan.metric = PairedMetric(targets.task);
  scan.higherIsBetter = targets.task != learners::Task::Regression;
  for (std::size_t j = 0; j < ctx.KernelCount(); ++j) {
    const cv::LearnerOutcome outcome = NestedCvOf(ctx, {j}, l);
    cv::Summary summary = cv::Summarise(outcome, targets);
    if (targets.task == learners::Task::Multiclass) NameClasses(summary, ctx.cohort.classNames);
    scan.rows.push_back({j, std::move(summary.pooled), std::move(summary.foldSd)});
  }
  // Best first; a kernel whose every fold failed (NaN) last; ties keep the kernel order.
  const auto value = [&](const exporting::RegionScanRow& row) {
    const auto it = row.pooled.find(scan.metric);
    const double v = it == row.pooled.end() ? std::nan("") : it->second;
    return std::isnan(v) ? -INFINITY : scan.higherIsBetter ? v : -v;
  };
  std::stable_sort(scan.rows.begin(), scan.rows.end(), [&](const auto& a, const auto& b) { return value(a) > value(b); });
  return scan;
}

exporting::AblationRecord RunAblation(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& learners,
                                      const std::vector<std::vector<weights::RegionRow>>& regions) {
  exporting::AblationRecord ablation;
  const auto& spec = ctx.study.ablation;
  if (spec.learner.empty()) return ablation;
  const std::size_t l = LearnerIndex(ctx, spec.learner);
  const learners::Targets targets = ctx.TargetsOf(ctx.cohort.y);
  ablation.learner = ctx.plans[l].label;
  ablation.metric = PairedMetric(targets.task);
  ablation.full = learners[l].summary.pooled;
  const auto run = [&](const std::string& removed, const std::string& kind, const std::vector<std::size_t>& without) {
    std::vector<std::size_t> kept;
    for (std::size_t j = 0; j < ctx.KernelCount(); ++j)
      if (std::find(without.begin(), without.end(), j) == without.end()) kept.push_back(j);
    exporting::AblationRow row{removed, kind, without.size(), {}, {}};
    cv::LearnerOutcome outcome = NestedCvOf(ctx, kept, l);
    outcome.label = ablation.learner + " without " + removed;  // names the tests (and seeds the paired permutation's stream)
    cv::Summary summary = cv::Summarise(outcome, targets);
    if (targets.task == learners::Task::Multiclass) NameClasses(summary, ctx.cohort.classNames);
    row.pooled = std::move(summary.pooled);
    row.tests = ComparePair(ctx, learners[l].outcome, outcome);
    ablation.rows.push_back(std::move(row));
  };
  // Each source (kernels.sources: consecutive blocks of kernels), when there are two or more.
  const auto& counts = ctx.ks.sourceKernelCounts;
  if (counts.size() > 1) {
    std::size_t first = 0;
    for (std::size_t s = 0; s < counts.size(); first += counts[s], ++s) {
      if (counts[s] == 0 || counts[s] == ctx.KernelCount()) continue;  // nothing to leave out, or nothing left
      std::vector<std::size_t> block(counts[s]);
      std::iota(block.begin(), block.end(), first);
      run(ctx.study.kernels.sources[s].name, "source", block);
    }
  }
  // Each of the learner's top regions, one at a time (a study of one kernel would have nothing left).
  const std::size_t top = ctx.KernelCount() < 2 ? 0 : std::min(static_cast<std::size_t>(spec.topRegions), l < regions.size() ? regions[l].size() : 0);
  for (std::size_t i = 0; i < top; ++i) run(ctx.ks.set.info[regions[l][i].kernel].name, "region", {regions[l][i].kernel});
  return ablation;
}

}  // namespace neuromkl::pipeline
