#pragma once
// The ranges of the study file's numbers, once: the reader refuses a number outside its range as it
// reads it (the message quotes the number as written, and an integer must fit its field), and
// CheckStudyConfig refuses the same values in a StudyConfig made in code.
#include <cstdint>

namespace neuromkl::config {

struct IntegerRange {
  std::int64_t lo, hi;
};
struct NumberRange {
  double lo, hi;
};

inline constexpr IntegerRange kSeedRange{0, std::int64_t{1} << 53};  ///< /seed, /cv/seed: exact in a double
inline constexpr IntegerRange kThreadsRange{0, 4096};
inline constexpr IntegerRange kFoldsRange{2, 100000};                ///< /cv/*/k
inline constexpr IntegerRange kRepeatsRange{1, 100000};              ///< /cv/*/repeats
inline constexpr IntegerRange kPermutationsRange{0, 1000000};
inline constexpr IntegerRange kBootstrapRange{200, 1000000};        ///< /statistics/bootstrap_resamples
inline constexpr IntegerRange kPairedSwapsRange{99, 10000000};       ///< /statistics/paired_swaps
inline constexpr IntegerRange kTopRegionsRange{0, 100000};           ///< /ablation/top_regions
inline constexpr IntegerRange kMinSubjectsRange{0, 1000000000};      ///< /output/min_subjects_with_signal
inline constexpr NumberRange kMemoryBudgetRange{0, 1e9};             ///< /kernels/memory_budget_mb
inline constexpr NumberRange kThresholdRange{0, 1};                  ///< probabilistic atlases; 1 itself is refused too
inline constexpr NumberRange kOffsetRange{0, 1e12};                  ///< polynomial kernels of tabular sources

}  // namespace neuromkl::config
