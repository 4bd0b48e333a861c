#include "neuromkl/gram/compact.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include <tbb/parallel_for.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/residualise.hpp"

namespace neuromkl::gram {

Eigen::MatrixXf CompactKernel(const Eigen::Ref<const Eigen::MatrixXd>& kernel, bool centre, const std::string& where) {
  const Eigen::Index n = kernel.rows();
  if (kernel.cols() != n)
    throw InputError("kernels:NotSquare", where, "the kernel is " + std::to_string(n) + "x" + std::to_string(kernel.cols()) + ", expected a square matrix");
  Eigen::VectorXd rowMean = Eigen::VectorXd::Zero(n);
  double grand = 0;
  if (centre && n > 0) {
    // Column sums in a fixed order (= row sums: the kernel is symmetric).
    for (Eigen::Index b = 0; b < n; ++b) rowMean[b] = kernel.col(b).sum() / static_cast<double>(n);
    grand = rowMean.mean();
  }
  Eigen::MatrixXf out(n, n);
  // The upper triangle, column by column, then mirrored in blocks (cache-friendly at n = 5,000): the two
  // halves are equal bit for bit (the learners read the upper one, the test blocks read any).
  for (Eigen::Index b = 0; b < n; ++b)
    for (Eigen::Index a = 0; a <= b; ++a) {
      const double exact = ((kernel(a, b) - rowMean[a]) - rowMean[b]) + grand;
      const float v = static_cast<float>(exact);
      if (!std::isfinite(v)) {
        std::ostringstream what;
        what << "entry (" << a << ", " << b << ") is " << exact;
        if (std::isfinite(exact))
          what << ", beyond float32's range (" << std::numeric_limits<float>::max() << "): keep this study's kernels in float64";
        else
          what << ", not a finite number";
        throw InputError("kernels:Float32Range", where, what.str());
      }
      out(a, b) = v;
    }
  constexpr Eigen::Index kBlock = 64;
  for (Eigen::Index jb = 0; jb < n; jb += kBlock)
    for (Eigen::Index ib = jb; ib < n; ib += kBlock) {
      const Eigen::Index je = std::min(jb + kBlock, n), ie = std::min(ib + kBlock, n);
      for (Eigen::Index j = jb; j < je; ++j)
        for (Eigen::Index i = std::max(ib, j + 1); i < ie; ++i) out(i, j) = out(j, i);
    }
  return out;
}

CompactKernelList CompactEach(std::size_t count, bool centre, const std::function<Eigen::MatrixXf(std::size_t)>& round) {
  CompactKernelList out;
  out.kernels.resize(count);
  out.centred = centre;
  std::vector<std::exception_ptr> errors(count);
  tbb::parallel_for(std::size_t{0}, count, [&](std::size_t j) {
    try {
      out.kernels[j] = round(j);
    } catch (...) {
      errors[j] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

CompactKernelList CompactKernels(const std::vector<Eigen::MatrixXd>& kernels, bool centre) {
  return CompactEach(kernels.size(), centre, [&](std::size_t j) { return CompactKernel(kernels[j], centre, "kernel " + std::to_string(j)); });
}

CompactKernelList CompactKernelsReleasing(std::vector<Eigen::MatrixXd>& kernels, bool centre, const std::vector<std::string>& names) {
  return CompactEach(kernels.size(), centre, [&](std::size_t j) {
    Eigen::MatrixXf rounded = CompactKernel(kernels[j], centre, names.at(j));
    kernels[j] = Eigen::MatrixXd();
    return rounded;
  });
}

void AppendCompactKernel(CompactKernelList& store, const Eigen::Ref<const Eigen::MatrixXd>& kernel) {
  store.kernels.push_back(CompactKernel(kernel, store.centred, "kernel " + std::to_string(store.kernels.size())));
}

std::uint64_t CompactBytes(std::size_t kernels, std::size_t subjects) {
  return static_cast<std::uint64_t>(kernels) * subjects * subjects * sizeof(float);
}

void CheckCentredStoreFolds(const CompactKernelList& store, bool centre, bool residualised) {
  if (store.centred && !centre && !residualised)
    throw InputError("cv:CentredStoreUncentredFolds", "compact store",
                     "the store's kernels were centred with the whole cohort's mean (CompactKernel with centre), which only fold "
                     "centring undoes, but this run does not centre its folds: make the store without centring");
}

void CheckCentredStoreResidualiser(const CompactKernelList& store, const FoldResidualiser& residualiser) {
  if (!store.centred) return;
  constexpr double kTolerance = 1e-8;  // the pseudo-inverse's rank threshold is 1e-10 relative
  for (const Eigen::MatrixXd* A : {&residualiser.trainA, &residualiser.testA})
    for (Eigen::Index i = 0; i < A->rows(); ++i)
      if (std::abs(A->row(i).sum() - 1.0) > kTolerance)
        throw InputError("cv:CentredStoreCovariates", "compact store",
                         "in a fold, the covariates' fit does not keep the intercept for every subject (a category's reference level "
                         "absent from the fit rows?), so the store's whole-cohort centring does not cancel: make the store without "
                         "centring, or use float64 kernels");
}

}  // namespace neuromkl::gram
