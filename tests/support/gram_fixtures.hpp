#pragma once
// Short forms of a kernel store's fold operations for the tests (gram/store.hpp): every backend is asked the same way.
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/store.hpp"

namespace neuromkl::testing {

inline std::vector<int> Vec(const Eigen::Ref<const Eigen::VectorXi>& v) { return std::vector<int>(v.data(), v.data() + v.size()); }

/// The fold's summed kernel (PreparedFold::Summed).
inline gram::FoldKernels SummedFold(const gram::KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test,
                                    const gram::Preprocessing& pre) {
  return kernels.OpenFold(train, test, pre)->Summed();
}

/// The fold's source scales from index vectors.
inline Eigen::VectorXd FoldScalesAt(const gram::KernelStore& kernels, const Eigen::Ref<const Eigen::VectorXi>& train,
                                    const Eigen::Ref<const Eigen::VectorXi>& test, const gram::Preprocessing& pre) {
  return gram::FoldScales(kernels, Vec(train), Vec(test), pre);
}

/// The training kernels of the learners of kernel weights in `form`, and the test blocks (the fold may go: what is
/// returned holds what it needs).
inline gram::WeightedKernels WeightedFold(const gram::KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test,
                                          const gram::Preprocessing& pre, gram::TrainingForm form) {
  gram::WeightedKernels w;
  kernels.OpenFold(train, test, pre)->Weighted(form, w);
  return w;
}

/// The fold's copies written into `out`, whose storage is reused where sizes match (as nested CV hands a finished fold
/// task's copies to the next).
inline void PrepareFoldInto(const gram::KernelStore& kernels, const std::vector<int>& train, const std::vector<int>& test,
                            const gram::Preprocessing& pre, gram::FoldKernels& out) {
  gram::WeightedKernels w;
  w.train = std::move(out.train);
  w.test = std::move(out.test);
  kernels.OpenFold(train, test, pre)->Weighted(gram::TrainingForm::Copies, w);
  out.train = std::move(w.train);
  out.test = std::move(w.test);
}

/// K~_r A of one kernel times `scale` (PreparedFold::Products for one kernel).
inline Eigen::MatrixXd FoldProducts(const gram::PreparedFold& fold, std::size_t r, const Eigen::MatrixXd& A, double scale, std::size_t kernelCount) {
  Eigen::VectorXd scales = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(kernelCount));
  scales[static_cast<Eigen::Index>(r)] = scale;
  return fold.Products({r}, A, scales)[0];
}

}  // namespace neuromkl::testing
