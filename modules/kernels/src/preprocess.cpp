#include "neuromkl/kernels/preprocess.hpp"

#include <algorithm>
#include <cmath>

#include "neuromkl/kernels/huge_pages.hpp"

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

namespace {
/// Sum of values[idx[k]] over k, in four interleaved partial sums (a fixed order: deterministic).
double GatherSum(const double* values, const int* idx, Eigen::Index count) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Eigen::Index k = 0;
  for (; k + 4 <= count; k += 4) {
    s0 += values[idx[k]];
    s1 += values[idx[k + 1]];
    s2 += values[idx[k + 2]];
    s3 += values[idx[k + 3]];
  }
  for (; k < count; ++k) s0 += values[idx[k]];
  return (s0 + s1) + (s2 + s3);
}
}  // namespace

double FoldVectors::Trace() const {
  double trace = 0;
  for (Eigen::Index a = 0; a < trainDiag.size(); ++a) trace += (invTrain[a] * trainDiag[a]) * invTrain[a];
  return trace;
}

FoldVectors MakeFoldVectors(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, bool centre, bool normalise) {
  const Eigen::Index l = tr.size(), m = te.size();
  FoldVectors v;
  v.colMean = Eigen::VectorXd::Zero(l);
  v.testMean = Eigen::VectorXd::Zero(m);
  if (centre && l > 0) {
    // Column by column (the kernel is stored by columns): column tr_b gives the training mean of column b
    // and, at the test rows, one term of every test row's mean.
    for (Eigen::Index b = 0; b < l; ++b) {
      const double* col = full.col(tr[b]).data();
      v.colMean[b] = GatherSum(col, tr.data(), l) / static_cast<double>(l);
      for (Eigen::Index i = 0; i < m; ++i) v.testMean[i] += col[te[i]];
    }
    v.testMean /= static_cast<double>(l);
    v.grand = v.colMean.mean();
  }
  // CentreFold's arithmetic on the diagonals.
  v.trainDiag.resize(l);
  v.testDiag.resize(m);
  for (Eigen::Index a = 0; a < l; ++a) v.trainDiag[a] = ((full(tr[a], tr[a]) - v.colMean[a]) - v.colMean[a]) + v.grand;
  for (Eigen::Index i = 0; i < m; ++i) v.testDiag[i] = full(te[i], te[i]) + (-2.0 * v.testMean[i] + v.grand);
  if (normalise) {
    InverseNorms(v.trainDiag, v.testDiag, v.invTrain, v.invTest);
  } else {
    v.invTrain = Eigen::VectorXd::Ones(l);
    v.invTest = Eigen::VectorXd::Ones(m);
  }
  return v;
}

FoldKernel PreparedBlocks(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                          const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, bool normalise, double scale) {
  FoldKernel k;
  const Eigen::Index l = tr.size(), m = te.size();
  k.train.resize(l, l);
  k.testTrain.resize(m, l);
  AdviseHugePages(k.train.data(), static_cast<std::size_t>(l * l) * sizeof(double));
  AdviseHugePages(k.testTrain.data(), static_cast<std::size_t>(m * l) * sizeof(double));
  const double grand = v.grand;
  for (Eigen::Index b = 0; b < l; ++b) {
    const double* col = full.col(tr[b]).data();
    const double cb = v.colMean[b], ib = v.invTrain[b];
    double* outTrain = k.train.col(b).data();
    double* outTest = k.testTrain.col(b).data();
    for (Eigen::Index a = 0; a < l; ++a) outTrain[a] = PreparedEntry(col[tr[a]], cb, v.colMean[a], grand, v.invTrain[a], ib, scale);
    for (Eigen::Index i = 0; i < m; ++i) outTest[i] = PreparedEntry(col[te[i]], cb, v.testMean[i], grand, v.invTest[i], ib, scale);
  }
  k.testDiag.resize(m);
  for (Eigen::Index i = 0; i < m; ++i) k.testDiag[i] = (normalise ? (v.invTest[i] > 0 ? 1.0 : 0.0) : v.testDiag[i]) * scale;
  return k;
}

Eigen::MatrixXd PreparedProducts(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v,
                                 const Eigen::Ref<const Eigen::MatrixXd>& A) {
  const Eigen::Index l = tr.size(), k = A.cols();
  const Eigen::MatrixXd U = v.invTrain.asDiagonal() * A;
  Eigen::MatrixXd KU = Eigen::MatrixXd::Zero(l, k);
  // K[tr, tr] U column by column of K: each column is read once, at the training rows.
  for (Eigen::Index b = 0; b < l; ++b) {
    const double* col = full.col(tr[b]).data();
    for (Eigen::Index c = 0; c < k; ++c) {
      const double u = U(b, c);
      if (u == 0.0) continue;
      double* out = KU.col(c).data();
      for (Eigen::Index a = 0; a < l; ++a) out[a] += col[tr[a]] * u;
    }
  }
  const Eigen::RowVectorXd s = U.colwise().sum(), t = v.colMean.transpose() * U;
  for (Eigen::Index c = 0; c < k; ++c)
    for (Eigen::Index a = 0; a < l; ++a) KU(a, c) = v.invTrain[a] * (((KU(a, c) - v.colMean[a] * s[c]) - t[c]) + v.grand * s[c]);
  return KU;
}

}  // namespace neuromkl::kernels
