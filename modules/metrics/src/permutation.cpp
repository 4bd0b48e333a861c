#include "neuromkl/metrics/permutation.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace neuromkl::metrics {

double PermutationPValue(double observed, const std::vector<double>& null, const std::vector<char>& failed, bool higherIsBetter) {
  if (failed.size() != null.size()) throw std::invalid_argument("PermutationPValue: one failure flag per permutation");
  if (!std::isfinite(observed)) return std::numeric_limits<double>::quiet_NaN();
  int atLeastAsGood = 0;
  for (std::size_t i = 0; i < null.size(); ++i) {
    const double v = null[i];
    if (failed[i] || (std::isfinite(v) && (higherIsBetter ? v >= observed : v <= observed))) ++atLeastAsGood;
  }
  return (atLeastAsGood + 1.0) / (static_cast<double>(null.size()) + 1.0);
}

}  // namespace neuromkl::metrics
