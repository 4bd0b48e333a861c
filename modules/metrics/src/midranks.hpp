#pragma once
// Midranks, shared by the AUC and DeLong's structural components (private to the metrics module).
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace neuromkl::metrics {

/// 1-based ranks of values[0..n) in ascending order; ties share the mean of their ranks.
inline std::vector<double> Midranks(const double* values, std::size_t n) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<double> rank(n);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && values[order[j + 1]] == values[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * static_cast<double>(i + j) + 1.0;
    i = j + 1;
  }
  return rank;
}

}  // namespace neuromkl::metrics
