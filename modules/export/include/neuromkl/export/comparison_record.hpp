#pragma once
// One paired test of two outcomes on the same outer folds and subjects: two learners of a study, a model and its
// ablation, or two studies of a batch (docs/statistics.md).
#include <cstdint>
#include <string>
#include <vector>

namespace neuromkl::exporting {

struct ComparisonRecord {
  std::string learnerA, learnerB;  ///< labels (in a batch, <study>/<learner>)
  std::string test;                ///< corrected_resampled_t, mcnemar_exact, delong, paired_permutation
  std::string metric;              ///< what is compared: balanced_accuracy, auc, accuracy, mse
  double valueA = 0, valueB = 0;   ///< the metric of each learner on what the test uses (pooled, or the fold mean)
  double statistic = 0;            ///< t, z, the discordant pairs b - c, or the observed difference A - B
  double p = 1;                    ///< two-sided
  std::int64_t n = 0;              ///< folds (t-test) or subjects (the others)
  std::string detail;              ///< what exactly was compared
};

/// The tests of a pair of outcomes on the same folds (ComparisonRecord::test), in the order they are written.
inline constexpr const char* kPairedTests[] = {"corrected_resampled_t", "mcnemar_exact", "delong", "paired_permutation"};
/// The test named `test` among `tests`, or null where it does not apply (e.g. DeLong in regression).
const ComparisonRecord* FindTest(const std::vector<ComparisonRecord>& tests, const std::string& test);

}  // namespace neuromkl::exporting
