#include <algorithm>
#include <cmath>
#include <map>

#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::weights {

std::vector<std::vector<float>> VoxelMaps(const std::vector<std::string>& imagePaths, const atlas::RegionIndex& regions,
                                          const std::vector<kernels::KernelInfo>& kernels, const std::vector<Eigen::MatrixXd>& subjectWeights,
                                          kernels::NanPolicy nanPolicy) {
  const auto V = static_cast<std::size_t>(regions.grid.VoxelCount());
  const std::size_t M = subjectWeights.size();
  std::map<std::int64_t, const atlas::RegionVoxels*> byLabel;
  for (const auto& r : regions.regions) byLabel[r.label] = &r;
  std::vector<const atlas::RegionVoxels*> region(kernels.size(), nullptr);
  for (std::size_t j = 0; j < kernels.size(); ++j)
    if (auto it = byLabel.find(kernels[j].label); it != byLabel.end()) region[j] = it->second;
  std::vector<std::vector<double>> acc(M, std::vector<double>(V, 0.0));
  std::vector<char> nonFinite(V, 0);
  const std::size_t n = imagePaths.size();
  // Images are decoded in parallel batches (into reused buffers) and accumulated in subject order:
  // the sums do not depend on the thread count.
  const std::size_t batch = 32;
  std::vector<io::Volume> volumes(batch);
  for (std::size_t start = 0; start < n; start += batch) {
    const std::size_t count = std::min(batch, n - start);
    tbb::parallel_for(std::size_t{0}, count, [&](std::size_t k) { io::ReadVolume(imagePaths[start + k], volumes[k]); });
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = start + k;
      const auto& vol = volumes[k];
      if (const auto diff = vol.geometry.DifferenceFrom(regions.grid); !diff.empty())
        throw GeometryMismatch("weights:GridMismatch", imagePaths[i], "image grid changed since the kernels were computed: " + diff);
      tbb::parallel_for(std::size_t{0}, M, [&](std::size_t mIdx) {
        const Eigen::MatrixXd& D = subjectWeights[mIdx];
        for (std::size_t j = 0; j < region.size(); ++j) {
          const double d = D(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j));
          if (d == 0.0 || !region[j]) continue;
          const auto& weights = region[j]->weights;
          if (weights.empty()) {
            for (auto v : region[j]->voxels) {
              const float x = vol.data[static_cast<std::size_t>(v)];
              if (std::isfinite(x)) acc[mIdx][static_cast<std::size_t>(v)] += d * x;
            }
            continue;
          }
          // Probabilistic region: the kernel's features are sqrt(p) x, so the region's weight vector
          // is w = sum_i d_i sqrt(p) x_i and its contribution <w, sqrt(p) x> = <p (sum_i d_i x_i), x>:
          // the voxel map carries p once more. Voxels in several regions sum their contributions.
          for (std::size_t k = 0; k < region[j]->voxels.size(); ++k) {
            const auto v = static_cast<std::size_t>(region[j]->voxels[k]);
            const float x = vol.data[v];
            if (std::isfinite(x)) acc[mIdx][v] += d * static_cast<double>(weights[k]) * x;
          }
        }
      });
      for (std::size_t v = 0; v < V; ++v)
        if (!std::isfinite(vol.data[v])) nonFinite[v] = 1;
    }
  }
  std::vector<std::vector<float>> maps(M, std::vector<float>(V, 0.0f));
  for (std::size_t mIdx = 0; mIdx < M; ++mIdx)
    for (std::size_t v = 0; v < V; ++v)
      maps[mIdx][v] = (nanPolicy == kernels::NanPolicy::DropVoxel && nonFinite[v]) ? 0.0f : static_cast<float>(acc[mIdx][v]);
  return maps;
}

}  // namespace neuromkl::weights
