#pragma once
// Permutation p-values for a family of statistics computed on the same permutations (every region's weight share,
// every source's): uncorrected, family-wise corrected by the maximum statistic, and the Benjamini-Hochberg q.
#include <vector>

namespace neuromkl::metrics {

struct FamilyPValues {
  std::vector<double> uncorrected;  ///< per member: (1 + #{b: null[b][j] >= observed[j]}) / (1 + P)
  std::vector<double> familyWise;   ///< per member: (1 + #{b: max_k null[b][k] >= observed[j]}) / (1 + P)
  std::vector<double> q;            ///< per member: Benjamini-Hochberg q of the uncorrected p-values
};

/// Single-step maximum-statistic permutation test (Westfall & Young 1993; Nichols & Holmes 2002), higher is more
/// extreme. `null[b]` holds the family's statistics on permutation b (one per member); `failed[b]`: permutation b has
/// no comparable values and counts as at least as extreme for every member (conservative, as PermutationPValue).
/// The maximum is taken over the raw statistics: strong control of the family-wise error for any dependence between
/// the members and any difference in their null distributions; members whose null values are small (small
/// regions) are judged against the largest null value of any member, so the correction is conservative for them.
/// A non-finite observed statistic gives NaN p-values and q for that member (and is left out of the BH family).
FamilyPValues MaxStatisticPValues(const std::vector<double>& observed, const std::vector<std::vector<double>>& null, const std::vector<char>& failed);

/// Holm (1979) step-down adjusted p-values: with p_(1) <= ... <= p_(m) the m finite p-values, adjusted p_(i) = max over
/// k <= i of min(1, (m - k + 1) p_(k)); NaN entries stay NaN. Rejecting adjusted p <= alpha controls the family-wise
/// error at alpha under any dependence.
std::vector<double> Holm(const std::vector<double>& p);

/// Benjamini & Hochberg (1995) adjusted p-values: q_(i) = min over k >= i of m p_(k) / k, capped at 1, where p_(1) <=
/// ... <= p_(m) are the m finite p-values; NaN entries stay NaN. Rejecting q <= alpha controls the false discovery
/// rate at alpha for independent or positively dependent tests.
std::vector<double> BenjaminiHochberg(const std::vector<double>& p);

}  // namespace neuromkl::metrics
