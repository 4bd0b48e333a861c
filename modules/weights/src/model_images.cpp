// The image arrays of an exported model (docs/predict.md): training means, covariate coefficient images
// and per-region primal weights, as linear combinations of the training images in one pass.
#include <algorithm>
#include <cmath>
#include <map>

#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::weights {

std::vector<ModelImageArrays> ModelImages(const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                          const std::vector<kernels::KernelInfo>& kernels, const std::vector<ModelImageRequest>& requests,
                                          kernels::NanPolicy nanPolicy, ModelImageLayout& layout) {
  std::map<std::int64_t, const atlas::RegionVoxels*> byLabel;
  for (const auto& r : regions.regions) byLabel[r.label] = &r;
  std::vector<const atlas::RegionVoxels*> region(kernels.size(), nullptr);
  std::vector<std::int64_t> all;
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (auto it = byLabel.find(kernels[j].label); it != byLabel.end()) {
      region[j] = it->second;
      all.insert(all.end(), it->second->voxels.begin(), it->second->voxels.end());
    }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const std::size_t U = all.size();
  std::map<std::int64_t, std::size_t> rowOf;
  for (std::size_t u = 0; u < U; ++u) rowOf.emplace(all[u], u);
  std::vector<std::size_t> entryKernel, entryVoxel;
  std::vector<double> entryWeight;
  for (std::size_t j = 0; j < region.size(); ++j) {
    if (!region[j]) continue;
    for (std::size_t k = 0; k < region[j]->voxels.size(); ++k) {
      entryKernel.push_back(j);
      entryVoxel.push_back(rowOf.at(region[j]->voxels[k]));
      entryWeight.push_back(region[j]->weights.empty() ? 1.0 : static_cast<double>(region[j]->weights[k]));
    }
  }
  const std::size_t E = entryKernel.size(), M = requests.size();
  std::vector<ModelImageArrays> out(M);
  for (std::size_t m = 0; m < M; ++m) {
    out[m].atVoxels = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(U), requests[m].voxelWeights.cols());
    out[m].atEntries = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(E), static_cast<Eigen::Index>(requests[m].kernelWeights.size()));
  }
  std::vector<char> nonFinite(U, 0);
  const std::size_t n = imagePaths.size(), batch = 32;
  std::vector<io::Volume> volumes(batch);
  std::vector<Eigen::VectorXd> values(batch);
  for (std::size_t start = 0; start < n; start += batch) {
    const std::size_t count = std::min(batch, n - start);
    tbb::parallel_for(std::size_t{0}, count, [&](std::size_t k) {
      io::ReadVolume(imagePaths[start + k], volumes[k]);
      if (const auto diff = volumes[k].geometry.DifferenceFrom(regions.grid); !diff.empty())
        throw GeometryMismatch("weights:GridMismatch", imagePaths[start + k], "image grid changed since the kernels were computed: " + diff);
      values[k].resize(static_cast<Eigen::Index>(U));
      for (std::size_t u = 0; u < U; ++u) {
        const float x = volumes[k].data[static_cast<std::size_t>(all[u])];
        values[k][static_cast<Eigen::Index>(u)] = std::isfinite(x) ? static_cast<double>(x) : 0.0;
      }
    });
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = start + k;
      for (std::size_t u = 0; u < U; ++u)
        if (!std::isfinite(volumes[k].data[static_cast<std::size_t>(all[u])])) nonFinite[u] = 1;
      const Eigen::VectorXd& x = values[k];
      tbb::parallel_for(std::size_t{0}, M, [&](std::size_t m) {
        const auto& req = requests[m];
        for (Eigen::Index s = 0; s < req.voxelWeights.cols(); ++s)
          if (const double w = req.voxelWeights(static_cast<Eigen::Index>(i), s); w != 0.0) out[m].atVoxels.col(s) += w * x;
        for (std::size_t c = 0; c < req.kernelWeights.size(); ++c) {
          const Eigen::MatrixXd& D = req.kernelWeights[c];
          auto col = out[m].atEntries.col(static_cast<Eigen::Index>(c));
          for (std::size_t e = 0; e < E; ++e) {
            const double d = D(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(entryKernel[e]));
            if (d != 0.0) col[static_cast<Eigen::Index>(e)] += d * entryWeight[e] * x[static_cast<Eigen::Index>(entryVoxel[e])];
          }
        }
      });
    }
  }
  // The NaN rule: drop_voxel removes a voxel non-finite in any image (as the kernels did).
  layout = {};
  layout.allVoxels = all;
  std::vector<std::int64_t> newRow(U, -1);
  std::vector<Eigen::Index> keptRows, keptEntries;
  for (std::size_t u = 0; u < U; ++u)
    if (nanPolicy != kernels::NanPolicy::DropVoxel || !nonFinite[u]) {
      newRow[u] = static_cast<std::int64_t>(layout.voxels.size());
      layout.voxels.push_back(all[u]);
      keptRows.push_back(static_cast<Eigen::Index>(u));
    }
  for (std::size_t e = 0; e < E; ++e)
    if (newRow[entryVoxel[e]] >= 0) {
      layout.entryKernel.push_back(entryKernel[e]);
      layout.entryVoxel.push_back(static_cast<std::size_t>(newRow[entryVoxel[e]]));
      layout.entryWeight.push_back(entryWeight[e]);
      keptEntries.push_back(static_cast<Eigen::Index>(e));
    }
  if (keptRows.size() != U)
    for (auto& a : out) {
      a.atVoxels = Eigen::MatrixXd(a.atVoxels(keptRows, Eigen::all));
      a.atEntries = Eigen::MatrixXd(a.atEntries(keptEntries, Eigen::all));
    }
  return out;
}

}  // namespace neuromkl::weights
