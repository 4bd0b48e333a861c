#include "neuromkl/weights/stability.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>

namespace neuromkl::weights {

MapStability FoldMapStability(const std::vector<std::vector<float>>& foldMaps) {
  MapStability out;
  if (foldMaps.size() < 2) return out;
  const std::size_t voxels = foldMaps[0].size();
  const auto K = static_cast<double>(foldMaps.size());
  constexpr float kUndefined = std::numeric_limits<float>::quiet_NaN();
  out.folds = static_cast<int>(foldMaps.size());
  out.meanOverSd.assign(voxels, kUndefined);
  out.signBalance.assign(voxels, -1);
  for (std::size_t v = 0; v < voxels; ++v) {
    double sum = 0;
    int positive = 0, negative = 0;
    for (const auto& map : foldMaps) {
      const double w = map[v];
      sum += w;
      positive += w > 0;
      negative += w < 0;
    }
    const double mean = sum / K;
    double squares = 0;  // two passes: the spread of nearly equal weights is not lost to cancellation
    for (const auto& map : foldMaps) squares += (map[v] - mean) * (map[v] - mean);
    const double sd = std::sqrt(squares / (K - 1));
    if (sd > 0) out.meanOverSd[v] = static_cast<float>(mean / sd);
    if (positive + negative > 0) out.signBalance[v] = std::abs(positive - negative);
  }
  return out;
}

std::vector<float> MapStability::SignConsistency() const {
  std::vector<float> out(signBalance.size(), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t v = 0; v < signBalance.size(); ++v)
    if (signBalance[v] >= 0) out[v] = static_cast<float>(signBalance[v] / static_cast<double>(folds));
  return out;
}

double ChanceSignConsistency(int folds) {
  if (folds < 1) return std::numeric_limits<double>::quiet_NaN();
  // sum_b C(K, b) 2^-K |2b - K| / K, with the binomial weights built up from C(K, 0) 2^-K to stay in range for any K.
  double weight = std::pow(0.5, folds), expected = 0;
  for (int b = 0; b <= folds; ++b) {
    expected += weight * std::abs(2 * b - folds);
    weight *= static_cast<double>(folds - b) / (b + 1);
  }
  return expected / folds;
}

void RegionSignConsistency(const MapStability& stability, const atlas::RegionIndex& regions, const std::vector<kernels::KernelInfo>& kernels,
                           std::size_t first, std::size_t count, std::vector<double>& perKernel) {
  perKernel.resize(kernels.size(), std::numeric_limits<double>::quiet_NaN());
  std::map<std::int64_t, const atlas::RegionVoxels*> byLabel;
  for (const auto& region : regions.regions) byLabel[region.label] = &region;
  for (std::size_t j = first; j < first + count && j < kernels.size(); ++j) {
    perKernel[j] = std::numeric_limits<double>::quiet_NaN();
    const auto it = byLabel.find(kernels[j].label);
    if (it == byLabel.end() || stability.signBalance.empty()) continue;
    std::int64_t balance = 0, defined = 0;  // integers: the mean is exact to the last digit
    for (const auto voxel : it->second->voxels) {
      const int b = stability.signBalance[static_cast<std::size_t>(voxel)];
      if (b < 0) continue;
      balance += b;
      ++defined;
    }
    if (defined > 0) perKernel[j] = static_cast<double>(balance) / (static_cast<double>(defined) * stability.folds);
  }
}

}  // namespace neuromkl::weights
