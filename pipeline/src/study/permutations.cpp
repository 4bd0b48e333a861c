// The permutation test: blocks of permutations computed or reused from the checkpoint, and the p-values.
#include "neuromkl/pipeline/study_stages.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/progress.hpp"
#include "neuromkl/export/checkpoint.hpp"
#include "neuromkl/metrics/family_wise.hpp"
#include "neuromkl/metrics/permutation.hpp"

namespace neuromkl::pipeline {

namespace {

/// Per metric, the null distribution of the permutations and the permutation p-value.
exporting::PermutationRecord PermutationPValues(const StudyContext& ctx, const exporting::LearnerRecord& observed, const std::vector<PooledBlock>& blocks,
                                                std::size_t learner) {
  const auto& study = ctx.study;
  exporting::PermutationRecord pr;
  pr.count = study.permutations.count;
  pr.seed = ctx.PermutationSeed();
  pr.exchangeability = ctx.cohort.groups.empty() ? "all subjects" : "within groups of column " + study.cv.outer.groupColumn + study.cv.inner.groupColumn;
  for (const auto& [metric, higherIsBetter] : cv::PermutationMetrics(study.target.task)) {
    std::vector<char> failed;
    for (const auto& block : blocks)
      for (const auto& permutation : block.pooled) {
        // A permutation with a failed outer fold has no comparable metric: it enters the null as NaN.
        const auto& pooled = permutation[learner];
        const auto it = pooled.find("failed_folds");
        failed.push_back(it != pooled.end() && it->second > 0);
        pr.null[metric].push_back(failed.back() ? std::nan("") : pooled.at(metric));
      }
    pr.pValues[metric] = metrics::PermutationPValue(observed.summary.pooled.at(metric), pr.null[metric], failed, higherIsBetter);
  }
  for (const auto& block : blocks)
    for (const auto& permutation : block.shares) pr.shareNull.push_back(permutation[learner]);
  return pr;
}


}  // namespace

PooledBlock LoadOrComputePermutationBlock(const StudyContext& ctx, const std::string& checkpointDir, int block, bool* reused, Progress* progress) {
  const int first = block * kPermutationBlock;
  const int count = std::min(kPermutationBlock, ctx.study.permutations.count - first);
  const std::string path = PermutationBlockPath(checkpointDir, block);
  const std::string key = ctx.PermutationKey();
  const auto labels = ctx.LearnerLabels();
  if (reused) *reused = false;
  if (auto saved = exporting::LoadPermutationBlock(path, key);
      saved && saved->first == first && saved->learners == labels && static_cast<int>(saved->pooled.size()) == count) {
    if (reused) *reused = true;
    if (progress) progress->Advance(static_cast<std::size_t>(count));
    return {std::move(saved->pooled), std::move(saved->shares)};
  }
  PooledBlock pooled = ComputePermutationBlock(ctx, first, count, progress);
  try {
    exporting::SavePermutationBlock(path, {key, first, labels, pooled.pooled, pooled.shares});
  } catch (const Error& e) {
    spdlog::warn("permutations: checkpoint not written ({}); the run continues without it", e.what());
  }
  return pooled;
}

PermutationResult RunPermutationTest(const StudyContext& ctx, const std::vector<exporting::LearnerRecord>& observed, const std::string& checkpointDir) {
  const int P = ctx.study.permutations.count;
  const int blockCount = (P + kPermutationBlock - 1) / kPermutationBlock;
  PermutationResult result;
  std::vector<PooledBlock> blocks;
  Progress progress("permutations", static_cast<std::size_t>(P));
  for (int b = 0; b < blockCount; ++b) {
    bool reused = false;
    blocks.push_back(LoadOrComputePermutationBlock(ctx, checkpointDir, b, &reused, &progress));
    result.blocksReused += reused;
  }
  progress.Finish();
  if (result.blocksReused > 0)
    spdlog::info("permutations: {} of {} blocks reused from the checkpoint in {}", result.blocksReused, blockCount, checkpointDir);
  for (std::size_t l = 0; l < observed.size(); ++l) result.learners.push_back(PermutationPValues(ctx, observed[l], blocks, l));
  return result;
}

void TestKernelShares(exporting::LearnerRecord& lr, const std::vector<std::size_t>& sourceKernelCounts) {
  auto& pr = lr.permutations;
  if (pr.shareNull.empty() || lr.regions.empty()) return;
  const std::size_t kernels = lr.regions.size();
  std::vector<double> observed(kernels, std::nan(""));
  for (const auto& row : lr.regions) observed[row.kernel] = row.meanPercent;
  // A permutation without a successful outer fold has no shares: it counts against every region (conservative).
  std::vector<char> failed;
  for (const auto& shares : pr.shareNull) failed.push_back(shares.size() != kernels);
  pr.regions = metrics::MaxStatisticPValues(observed, pr.shareNull, failed);
  if (sourceKernelCounts.size() < 2) return;
  // A source's statistic is the sum of its kernels' shares, summed in kernel order on the observed table and on every
  // permutation alike (so that equal sums, such as a source holding all the weight, compare as equal).
  const auto sourceSums = [&](const std::vector<double>& shares) {
    std::vector<double> sums(sourceKernelCounts.size(), 0.0);
    std::size_t j = 0;
    for (std::size_t s = 0; s < sourceKernelCounts.size(); ++s)
      for (std::size_t k = 0; k < sourceKernelCounts[s]; ++k) sums[s] += shares[j++];
    return sums;
  };
  std::vector<std::vector<double>> null(pr.shareNull.size(), std::vector<double>(sourceKernelCounts.size(), 0.0));
  for (std::size_t b = 0; b < null.size(); ++b)
    if (!failed[b]) null[b] = sourceSums(pr.shareNull[b]);
  // The sources' shares add up to 100 %: every permutation's largest is at least 100 / sources, so the maximum statistic
  // would leave a small source no power. The family is small: Holm's step-down correction of the uncorrected p-values
  // controls the family-wise error under any dependence.
  pr.sources = metrics::MaxStatisticPValues(sourceSums(observed), null, failed);
  pr.sources.familyWise = metrics::Holm(pr.sources.uncorrected);
}

}  // namespace neuromkl::pipeline
