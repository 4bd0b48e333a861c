#pragma once
// Permutation tests of a cross-validated metric (Ojala & Garriga 2010): the whole nested CV is rerun on
// permuted targets, and the observed metric is compared with the metrics of the permutations.
#include <vector>

namespace neuromkl::metrics {

/// The permutation p-value (1 + k) / (1 + P) (Phipson & Smyth 2010): P = null.size() permutations, k of them
/// scoring at least as well as `observed` (>= when higher is better, <= otherwise). `failed[i]`: permutation i
/// has no comparable value (a failed outer fold) and counts as scoring at least as well, since dropping it would
/// make p too small; a NaN metric of a permutation that did not fail counts as not at least as good. NaN when
/// `observed` is not finite.
double PermutationPValue(double observed, const std::vector<double>& null, const std::vector<char>& failed, bool higherIsBetter);

}  // namespace neuromkl::metrics
