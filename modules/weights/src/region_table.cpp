#include <algorithm>
#include <cmath>
#include <numeric>

#include "neuromkl/core/stats.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::weights {

double SelectionFrequency(const RegionRow& row) {
  return row.foldPercent.empty() ? std::nan("") : row.foldsSelected / static_cast<double>(row.foldPercent.size());
}

Eigen::VectorXd Ranks(const Eigen::VectorXd& values) {
  const Eigen::Index n = values.size();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return values[a] > values[b]; });
  Eigen::VectorXd rank(n);
  for (Eigen::Index i = 0; i < n;) {
    Eigen::Index j = i;
    while (j + 1 < n && values[order[static_cast<std::size_t>(j + 1)]] == values[order[static_cast<std::size_t>(i)]]) ++j;
    for (Eigen::Index k = i; k <= j; ++k) rank[order[static_cast<std::size_t>(k)]] = 0.5 * static_cast<double>(i + j) + 1.0;
    i = j + 1;
  }
  return rank;
}

std::vector<RegionRow> RegionTable(const std::vector<Eigen::VectorXd>& foldWeights) {
  if (foldWeights.empty()) return {};
  const auto m = static_cast<std::size_t>(foldWeights[0].size());
  std::vector<RegionRow> rows(m);
  for (std::size_t j = 0; j < m; ++j) rows[j].kernel = j;
  for (const auto& w : foldWeights) {
    const double total = w.sum();
    const Eigen::VectorXd percent = total > 0 ? Eigen::VectorXd(100.0 * w / total) : Eigen::VectorXd(Eigen::VectorXd::Zero(w.size()));
    const Eigen::VectorXd rank = Ranks(percent);
    for (std::size_t j = 0; j < m; ++j) {
      rows[j].foldPercent.push_back(percent[static_cast<Eigen::Index>(j)]);
      rows[j].foldsSelected += w[static_cast<Eigen::Index>(j)] > 0;
      rows[j].expectedRank += rank[static_cast<Eigen::Index>(j)] / static_cast<double>(foldWeights.size());
    }
  }
  for (auto& r : rows) {
    const MeanSd ms = SampleMeanSd(r.foldPercent);
    r.meanPercent = ms.mean;
    r.sdPercent = r.foldPercent.size() > 1 ? ms.sd : 0.0;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const RegionRow& a, const RegionRow& b) {
    if (a.meanPercent != b.meanPercent) return a.meanPercent > b.meanPercent;
    return a.expectedRank < b.expectedRank;
  });
  return rows;
}

std::vector<SourceShare> SourceShares(const std::vector<RegionRow>& table, const std::vector<std::size_t>& kernelsPerSource) {
  std::vector<SourceShare> shares(kernelsPerSource.size());
  std::size_t first = 0;
  for (std::size_t s = 0; s < kernelsPerSource.size(); ++s) {
    const std::size_t end = first + kernelsPerSource[s];
    // Summed in table order, so the shares are the same numbers whoever asks for them.
    for (const auto& row : table) {
      if (row.kernel < first || row.kernel >= end) continue;
      auto& share = shares[s];
      if (share.foldPercent.size() < row.foldPercent.size()) share.foldPercent.resize(row.foldPercent.size(), 0.0);
      for (std::size_t f = 0; f < row.foldPercent.size(); ++f) share.foldPercent[f] += row.foldPercent[f];
      share.meanPercent += row.meanPercent;
    }
    first = end;
  }
  return shares;
}

double ModelNorm(const Eigen::MatrixXd& trainKernel, const Eigen::VectorXd& coef, double beta) { return ModelNorm(coef.dot(trainKernel * coef), beta); }

double ModelNorm(double quadratic, double beta) {
  // A PSD kernel gives quadratic >= 0; rounding can leave -1e-17 for a region the model ignores.
  return beta * std::sqrt(std::max(quadratic, 0.0));
}

Eigen::VectorXd ModelNorms(const std::vector<Eigen::MatrixXd>& trainKernels, const Eigen::VectorXd& coef, const Eigen::VectorXd& beta) {
  Eigen::VectorXd norms(static_cast<Eigen::Index>(trainKernels.size()));
  for (std::size_t r = 0; r < trainKernels.size(); ++r)
    norms[static_cast<Eigen::Index>(r)] = ModelNorm(trainKernels[r], coef, beta[static_cast<Eigen::Index>(r)]);
  return norms;
}

}  // namespace neuromkl::weights
