#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/preprocess.hpp"
#include "neuromkl/weights/weights.hpp"

namespace neuromkl::weights {

namespace {
template <typename KernelVec>
Eigen::MatrixXd SubjectWeightsOf(const KernelVec& kernels, const FoldModel& model, bool centre, bool normalise, const kernels::Covariates* covariates) {
  const Eigen::Index n = kernels.empty() ? 0 : kernels[0].rows();
  const auto l = static_cast<Eigen::Index>(model.train.size());
  Eigen::MatrixXd D = Eigen::MatrixXd::Zero(n, static_cast<Eigen::Index>(kernels.size()));
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(model.train.data(), l);
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(model.test.data(), static_cast<Eigen::Index>(model.test.size()));
  std::optional<kernels::FoldResidualiser> residualiser;
  if (covariates) residualiser = kernels::MakeFoldResidualiser(*covariates, tr, te);
  for (std::size_t r = 0; r < kernels.size(); ++r) {
    const double beta = model.beta[static_cast<Eigen::Index>(r)];
    if (beta == 0.0) continue;
    // The same fold statistics the learner saw: centred self-similarities -> the scales s_ir (without
    // covariates from the full kernel in place, with them from the residualised fold copy).
    Eigen::VectorXd s = Eigen::VectorXd::Ones(l), unused;
    if (residualiser) {
      kernels::FoldKernel fk = kernels::SliceFold(kernels[r], tr, te);
      kernels::ResidualiseFold(fk, *residualiser);
      if (centre) kernels::CentreFold(fk);
      if (normalise) kernels::InverseNorms(fk.train.diagonal(), fk.testDiag, s, unused);
    } else if (normalise) {
      s = kernels::MakeFoldVectors(kernels[r], tr, te, centre, normalise).invTrain;
    }
    const Eigen::VectorXd a = model.coef.cwiseProduct(s);
    const double meanTerm = centre ? a.sum() / static_cast<double>(l) : 0.0;
    Eigen::VectorXd d = beta * (a.array() - meanTerm).matrix();
    if (residualiser) kernels::ResidualiseSubjectWeights(d, *residualiser);
    for (Eigen::Index i = 0; i < l; ++i) D(model.train[static_cast<std::size_t>(i)], static_cast<Eigen::Index>(r)) = d[i];
  }
  return D;
}
}  // namespace

Eigen::MatrixXd SubjectWeights(const std::vector<Eigen::MatrixXd>& kernels, const FoldModel& model, bool centre, bool normalise,
                               const kernels::Covariates* covariates) {
  return SubjectWeightsOf(kernels, model, centre, normalise, covariates);
}

Eigen::MatrixXd SubjectWeights(const kernels::CompactKernelList& kernels, const FoldModel& model, bool centre, bool normalise,
                               const kernels::Covariates* covariates) {
  kernels::CheckCentredStoreFolds(kernels, centre, covariates != nullptr);
  if (covariates && kernels.centred) {
    const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(model.train.data(), static_cast<Eigen::Index>(model.train.size()));
    const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(model.test.data(), static_cast<Eigen::Index>(model.test.size()));
    kernels::CheckCentredStoreResidualiser(kernels, kernels::MakeFoldResidualiser(*covariates, tr, te));
  }
  return SubjectWeightsOf(kernels, model, centre, normalise, covariates);
}

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
