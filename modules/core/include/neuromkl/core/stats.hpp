#pragma once
// Summary statistics shared by the CV summaries and the region tables.
#include <cmath>
#include <limits>
#include <vector>

namespace neuromkl {

struct MeanSd {
  double mean;
  double sd;  ///< sample SD (n - 1); NaN for fewer than 2 values
};

inline MeanSd SampleMeanSd(const std::vector<double>& values) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (values.empty()) return {nan, nan};
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  if (values.size() < 2) return {mean, nan};
  double ss = 0;
  for (double v : values) ss += (v - mean) * (v - mean);
  return {mean, std::sqrt(ss / static_cast<double>(values.size() - 1))};
}

}  // namespace neuromkl
