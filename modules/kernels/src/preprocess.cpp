#include "neuromkl/kernels/preprocess.hpp"

#include <algorithm>
#include <cmath>

#include "huge_pages.hpp"

namespace neuromkl::kernels {

namespace {
constexpr double kZeroNormRelative = 1e-12;
}

FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                     const Eigen::Ref<const Eigen::VectorXi>& testIdx) {
  FoldKernel k;
  const Eigen::Index l = trainIdx.size(), m = testIdx.size();
  k.train.resize(l, l);
  k.testTrain.resize(m, l);
  k.testDiag.resize(m);
  // A fold's copies of a large study's kernels are fresh memory, touched first here.
  AdviseHugePages(k.train.data(), static_cast<std::size_t>(l * l) * sizeof(double));
  AdviseHugePages(k.testTrain.data(), static_cast<std::size_t>(m * l) * sizeof(double));
  for (Eigen::Index j = 0; j < l; ++j) {
    for (Eigen::Index i = 0; i < l; ++i) k.train(i, j) = full(trainIdx[i], trainIdx[j]);
    for (Eigen::Index i = 0; i < m; ++i) k.testTrain(i, j) = full(testIdx[i], trainIdx[j]);
  }
  for (Eigen::Index i = 0; i < m; ++i) k.testDiag[i] = full(testIdx[i], testIdx[i]);
  return k;
}

void CentreFold(FoldKernel& k) {
  const Eigen::Index l = k.train.rows();
  if (l == 0) return;
  const Eigen::VectorXd colMean = k.train.colwise().mean().transpose();  // kbar_j
  const double grandMean = colMean.mean();                              // 1'K1 / l^2
  // Training block: K - 1 kbar' - kbar 1' + grand.
  k.train.rowwise() -= colMean.transpose();
  k.train.colwise() -= colMean;
  k.train.array() += grandMean;
  if (k.testTrain.rows() > 0) {
    const Eigen::VectorXd rowMean = k.testTrain.rowwise().mean();  // (1/l) sum_m Ks_im
    k.testTrain.rowwise() -= colMean.transpose();
    k.testTrain.colwise() -= rowMean;
    k.testTrain.array() += grandMean;
    k.testDiag.array() += -2.0 * rowMean.array() + grandMean;
  }
}

void InverseNorms(const Eigen::Ref<const Eigen::VectorXd>& trainDiag, const Eigen::Ref<const Eigen::VectorXd>& testDiag,
                  Eigen::VectorXd& invTrain, Eigen::VectorXd& invTest) {
  // A self-similarity this small relative to the fold's largest is a zero vector up to rounding
  // (after centring, a sample equal to the training mean leaves ~1e-16): 0/0, so its row becomes 0.
  double scale = 0;
  if (trainDiag.size() > 0) scale = std::max(scale, trainDiag.maxCoeff());
  if (testDiag.size() > 0) scale = std::max(scale, testDiag.maxCoeff());
  const double floor = kZeroNormRelative * scale;
  invTrain.resize(trainDiag.size());
  invTest.resize(testDiag.size());
  for (Eigen::Index i = 0; i < trainDiag.size(); ++i) invTrain[i] = trainDiag[i] > floor ? 1.0 / std::sqrt(trainDiag[i]) : 0.0;
  for (Eigen::Index i = 0; i < testDiag.size(); ++i) invTest[i] = testDiag[i] > floor ? 1.0 / std::sqrt(testDiag[i]) : 0.0;
}

void NormaliseFold(FoldKernel& k) {
  Eigen::VectorXd invTrain, invTest;
  InverseNorms(k.train.diagonal(), k.testDiag, invTrain, invTest);
  k.train = invTrain.asDiagonal() * k.train * invTrain.asDiagonal();
  k.testTrain = invTest.asDiagonal() * k.testTrain * invTrain.asDiagonal();
  for (Eigen::Index i = 0; i < k.testDiag.size(); ++i) k.testDiag[i] = invTest[i] > 0 ? 1.0 : 0.0;
}

}  // namespace neuromkl::kernels
