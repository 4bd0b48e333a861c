#include "neuromkl/metrics/family_wise.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace neuromkl::metrics {

FamilyPValues MaxStatisticPValues(const std::vector<double>& observed, const std::vector<std::vector<double>>& null, const std::vector<char>& failed) {
  if (failed.size() != null.size()) throw std::invalid_argument("MaxStatisticPValues: one failure flag per permutation");
  const std::size_t m = observed.size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> maxima(null.size(), -std::numeric_limits<double>::infinity());
  for (std::size_t b = 0; b < null.size(); ++b) {
    if (failed[b]) {
      maxima[b] = std::numeric_limits<double>::infinity();
      continue;
    }
    if (null[b].size() != m) throw std::invalid_argument("MaxStatisticPValues: one null value per member and permutation");
    for (double v : null[b])
      if (std::isfinite(v)) maxima[b] = std::max(maxima[b], v);
  }
  FamilyPValues out{std::vector<double>(m, nan), std::vector<double>(m, nan), {}};
  const double denominator = static_cast<double>(null.size()) + 1.0;
  for (std::size_t j = 0; j < m; ++j) {
    if (!std::isfinite(observed[j])) continue;
    int members = 0, family = 0;
    for (std::size_t b = 0; b < null.size(); ++b) {
      members += failed[b] || (std::isfinite(null[b][j]) && null[b][j] >= observed[j]);
      family += maxima[b] >= observed[j];
    }
    out.uncorrected[j] = (members + 1.0) / denominator;
    out.familyWise[j] = (family + 1.0) / denominator;
  }
  out.q = BenjaminiHochberg(out.uncorrected);
  return out;
}

namespace {

/// The indices of the finite p-values, smallest p first (ties in index order): the order both adjustments walk.
std::vector<std::size_t> FiniteAscending(const std::vector<double>& p) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (std::isfinite(p[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
  return order;
}

}  // namespace

std::vector<double> Holm(const std::vector<double>& p) {
  const std::vector<std::size_t> order = FiniteAscending(p);
  std::vector<double> adjusted(p.size(), std::numeric_limits<double>::quiet_NaN());
  const auto m = static_cast<double>(order.size());
  double running = 0;  // the maximum over the smaller p-values, walking up from the smallest
  for (std::size_t k = 0; k < order.size(); ++k) {
    running = std::max(running, std::min(1.0, (m - static_cast<double>(k)) * p[order[k]]));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

std::vector<double> BenjaminiHochberg(const std::vector<double>& p) {
  const std::vector<std::size_t> order = FiniteAscending(p);
  std::vector<double> q(p.size(), std::numeric_limits<double>::quiet_NaN());
  const auto m = static_cast<double>(order.size());
  double running = 1.0;  // the minimum over the larger p-values, walking down from the largest
  for (std::size_t k = order.size(); k-- > 0;) {
    running = std::min(running, m * p[order[k]] / static_cast<double>(k + 1));
    q[order[k]] = running;
  }
  return q;
}

}  // namespace neuromkl::metrics
