#include "neuromkl/gram/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "neuromkl/core/system.hpp"

namespace neuromkl::gram {

namespace {
constexpr double kZeroNormRelative = 1e-12;
/// A full kernel of either precision (the compact store holds float32; see compact_kernels.hpp).
template <typename Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
}

namespace {
template <typename Scalar>
FoldKernel SliceFoldOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
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
}  // namespace

FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                     const Eigen::Ref<const Eigen::VectorXi>& testIdx) {
  return SliceFoldOf<double>(full, trainIdx, testIdx);
}
FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                     const Eigen::Ref<const Eigen::VectorXi>& testIdx) {
  return SliceFoldOf<float>(full, trainIdx, testIdx);
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
/// Sum of values[idx[k]] over k (in double), in four interleaved partial sums (a fixed order: deterministic).
template <typename Scalar>
double GatherSum(const Scalar* values, const int* idx, Eigen::Index count) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  Eigen::Index k = 0;
  for (; k + 4 <= count; k += 4) {
    s0 += static_cast<double>(values[idx[k]]);
    s1 += static_cast<double>(values[idx[k + 1]]);
    s2 += static_cast<double>(values[idx[k + 2]]);
    s3 += static_cast<double>(values[idx[k + 3]]);
  }
  for (; k < count; ++k) s0 += static_cast<double>(values[idx[k]]);
  return (s0 + s1) + (s2 + s3);
}
}  // namespace

double FoldVectors::Trace() const {
  double trace = 0;
  for (Eigen::Index a = 0; a < trainDiag.size(); ++a) trace += (invTrain[a] * trainDiag[a]) * invTrain[a];
  return trace;
}

namespace {
/// The fold vectors from a kernel's columns: trainColumn(b) and testColumn(b) point at the values of training
/// column b, read at rows trainRows (l) and testRows (m); rawTrainDiag / rawTestDiag are the uncentred
/// self-similarities. One routine for the full kernel and for blocks already sliced: the same sums in the same
/// order, so both give the same vectors bit for bit.
template <typename TrainColumn, typename TestColumn>
FoldVectors VectorsFromColumns(Eigen::Index l, Eigen::Index m, const TrainColumn& trainColumn, const int* trainRows, const TestColumn& testColumn,
                               const int* testRows, const Eigen::VectorXd& rawTrainDiag, const Eigen::VectorXd& rawTestDiag, bool centre,
                               bool normalise) {
  FoldVectors v;
  v.colMean = Eigen::VectorXd::Zero(l);
  v.testMean = Eigen::VectorXd::Zero(m);
  if (centre && l > 0) {
    // Column by column (kernels are stored by columns): training column b gives its training mean and,
    // at the test rows, one term of every test row's mean.
    for (Eigen::Index b = 0; b < l; ++b) {
      v.colMean[b] = GatherSum(trainColumn(b), trainRows, l) / static_cast<double>(l);
      const auto* test = testColumn(b);
      for (Eigen::Index i = 0; i < m; ++i) v.testMean[i] += static_cast<double>(test[testRows[i]]);
    }
    v.testMean /= static_cast<double>(l);
    v.grand = v.colMean.mean();
  }
  // CentreFold's arithmetic on the diagonals.
  v.trainDiag.resize(l);
  v.testDiag.resize(m);
  for (Eigen::Index a = 0; a < l; ++a) v.trainDiag[a] = ((rawTrainDiag[a] - v.colMean[a]) - v.colMean[a]) + v.grand;
  for (Eigen::Index i = 0; i < m; ++i) v.testDiag[i] = rawTestDiag[i] + (-2.0 * v.testMean[i] + v.grand);
  if (normalise) {
    InverseNorms(v.trainDiag, v.testDiag, v.invTrain, v.invTest);
  } else {
    v.invTrain = Eigen::VectorXd::Ones(l);
    v.invTest = Eigen::VectorXd::Ones(m);
  }
  return v;
}
}  // namespace

namespace {
template <typename Scalar>
FoldVectors MakeFoldVectorsOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                              const Eigen::Ref<const Eigen::VectorXi>& te, bool centre, bool normalise) {
  const Eigen::Index l = tr.size(), m = te.size();
  Eigen::VectorXd trainDiag(l), testDiag(m);
  for (Eigen::Index a = 0; a < l; ++a) trainDiag[a] = static_cast<double>(full(tr[a], tr[a]));
  for (Eigen::Index i = 0; i < m; ++i) testDiag[i] = static_cast<double>(full(te[i], te[i]));
  const auto column = [&](Eigen::Index b) { return full.col(tr[b]).data(); };
  return VectorsFromColumns(l, m, column, tr.data(), column, te.data(), trainDiag, testDiag, centre, normalise);
}
}  // namespace

FoldVectors MakeFoldVectors(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, bool centre, bool normalise) {
  return MakeFoldVectorsOf<double>(full, tr, te, centre, normalise);
}
FoldVectors MakeFoldVectors(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, bool centre, bool normalise) {
  return MakeFoldVectorsOf<float>(full, tr, te, centre, normalise);
}

FoldVectors BlockFoldVectors(const Eigen::Ref<const Eigen::MatrixXd>& train, const Eigen::Ref<const Eigen::MatrixXd>& testTrain,
                             const Eigen::Ref<const Eigen::VectorXd>& testDiag, bool centre, bool normalise) {
  const Eigen::Index l = train.rows(), m = testTrain.rows();
  std::vector<int> trainRows(static_cast<std::size_t>(l)), testRows(static_cast<std::size_t>(m));
  for (Eigen::Index a = 0; a < l; ++a) trainRows[static_cast<std::size_t>(a)] = static_cast<int>(a);
  for (Eigen::Index i = 0; i < m; ++i) testRows[static_cast<std::size_t>(i)] = static_cast<int>(i);
  const Eigen::VectorXd rawTestDiag = testDiag.size() > 0 ? Eigen::VectorXd(testDiag) : Eigen::VectorXd::Zero(m);
  return VectorsFromColumns(
      l, m, [&](Eigen::Index b) { return train.col(b).data(); }, trainRows.data(), [&](Eigen::Index b) { return testTrain.col(b).data(); },
      testRows.data(), Eigen::VectorXd(train.diagonal()), rawTestDiag, centre, normalise);
}

void PrepareBlocksInPlace(Eigen::MatrixXd& train, Eigen::MatrixXd& testTrain, const FoldVectors& v) {
  const Eigen::Index l = train.rows(), m = testTrain.rows();
  for (Eigen::Index b = 0; b < l; ++b) {
    for (Eigen::Index a = 0; a < l; ++a) train(a, b) = PreparedEntry(train(a, b), v.colMean[b], v.colMean[a], v.grand, v.invTrain[a], v.invTrain[b], 1.0);
    for (Eigen::Index i = 0; i < m; ++i)
      testTrain(i, b) = PreparedEntry(testTrain(i, b), v.colMean[b], v.testMean[i], v.grand, v.invTest[i], v.invTrain[b], 1.0);
  }
}

namespace {
template <typename Scalar>
void PreparedTrainingColumnOf(const Scalar* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v, Eigen::Index b,
                              Eigen::Index rows, double scale, double* out) {
  // The gather first, then the arithmetic over contiguous arrays (vectorised): the learners of kernel weights
  // read their fold's columns this way at every iteration (cv::FoldColumns), and one fused scalar loop took
  // 166 s where this takes 127 s (bench_nested_cv memory-mkl 1400; copies 49.8 s).
  const int* idx = tr.data();
  for (Eigen::Index a = 0; a < rows; ++a) out[a] = static_cast<double>(fullColumn[idx[a]]);
  const double cb = v.colMean[b], ib = v.invTrain[b], grand = v.grand;
  const double* colMean = v.colMean.data();
  const double* invTrain = v.invTrain.data();
  for (Eigen::Index a = 0; a < rows; ++a) out[a] = PreparedEntry(out[a], cb, colMean[a], grand, invTrain[a], ib, scale);
}

template <typename Scalar>
void PreparedTestColumnOf(const Scalar* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, Eigen::Index b, double scale,
                          double* out) {
  const double cb = v.colMean[b], ib = v.invTrain[b];
  for (Eigen::Index i = 0; i < te.size(); ++i)
    out[i] = PreparedEntry(static_cast<double>(fullColumn[te[i]]), cb, v.testMean[i], v.grand, v.invTest[i], ib, scale);
}

template <typename Scalar>
void WritePreparedBlocksOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                           const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& train,
                           Eigen::MatrixXd& testTrain) {
  const Eigen::Index l = tr.size(), m = te.size();
  if (train.rows() != l || train.cols() != l) {
    train.resize(l, l);
    AdviseHugePages(train.data(), static_cast<std::size_t>(l * l) * sizeof(double));
  }
  if (testTrain.rows() != m || testTrain.cols() != l) {
    testTrain.resize(m, l);
    AdviseHugePages(testTrain.data(), static_cast<std::size_t>(m * l) * sizeof(double));
  }
  for (Eigen::Index b = 0; b < l; ++b) {
    const Scalar* col = full.col(tr[b]).data();
    PreparedTrainingColumnOf(col, tr, v, b, l, scale, train.col(b).data());
    PreparedTestColumnOf(col, te, v, b, scale, testTrain.col(b).data());
  }
}

template <typename Scalar>
void WritePreparedTestBlockOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                              const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& testTrain) {
  const Eigen::Index l = tr.size(), m = te.size();
  if (testTrain.rows() != m || testTrain.cols() != l) {
    testTrain.resize(m, l);
    AdviseHugePages(testTrain.data(), static_cast<std::size_t>(m * l) * sizeof(double));
  }
  for (Eigen::Index b = 0; b < l; ++b) PreparedTestColumnOf(full.col(tr[b]).data(), te, v, b, scale, testTrain.col(b).data());
}

template <typename Scalar>
FoldKernel PreparedBlocksOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, bool normalise, double scale) {
  FoldKernel k;
  WritePreparedBlocksOf<Scalar>(full, tr, te, v, scale, k.train, k.testTrain);
  const Eigen::Index m = te.size();
  k.testDiag.resize(m);
  for (Eigen::Index i = 0; i < m; ++i) k.testDiag[i] = (normalise ? (v.invTest[i] > 0 ? 1.0 : 0.0) : v.testDiag[i]) * scale;
  return k;
}

template <typename Scalar>
Eigen::MatrixXd PreparedProductsOf(const Eigen::Ref<const Matrix<Scalar>>& full, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v,
                                   const Eigen::Ref<const Eigen::MatrixXd>& A) {
  const Eigen::Index l = tr.size(), k = A.cols();
  const Eigen::MatrixXd U = v.invTrain.asDiagonal() * A;
  Eigen::MatrixXd KU = Eigen::MatrixXd::Zero(l, k);
  // K[tr, tr] U column by column of K: each column is read once, at the training rows.
  for (Eigen::Index b = 0; b < l; ++b) {
    const Scalar* col = full.col(tr[b]).data();
    for (Eigen::Index c = 0; c < k; ++c) {
      const double u = U(b, c);
      if (u == 0.0) continue;
      double* out = KU.col(c).data();
      for (Eigen::Index a = 0; a < l; ++a) out[a] += static_cast<double>(col[tr[a]]) * u;
    }
  }
  const Eigen::RowVectorXd s = U.colwise().sum(), t = v.colMean.transpose() * U;
  for (Eigen::Index c = 0; c < k; ++c)
    for (Eigen::Index a = 0; a < l; ++a) KU(a, c) = v.invTrain[a] * (((KU(a, c) - v.colMean[a] * s[c]) - t[c]) + v.grand * s[c]);
  return KU;
}
}  // namespace

void WritePreparedBlocks(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                         const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& train,
                         Eigen::MatrixXd& testTrain) {
  WritePreparedBlocksOf<double>(full, tr, te, v, scale, train, testTrain);
}
void WritePreparedBlocks(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                         const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& train,
                         Eigen::MatrixXd& testTrain) {
  WritePreparedBlocksOf<float>(full, tr, te, v, scale, train, testTrain);
}

void PreparedTrainingColumn(const double* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v, Eigen::Index b,
                            Eigen::Index rows, double scale, double* out) {
  PreparedTrainingColumnOf(fullColumn, tr, v, b, rows, scale, out);
}
void PreparedTrainingColumn(const float* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v, Eigen::Index b,
                            Eigen::Index rows, double scale, double* out) {
  PreparedTrainingColumnOf(fullColumn, tr, v, b, rows, scale, out);
}

void PreparedTestColumn(const double* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, Eigen::Index b, double scale,
                        double* out) {
  PreparedTestColumnOf(fullColumn, te, v, b, scale, out);
}
void PreparedTestColumn(const float* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, Eigen::Index b, double scale,
                        double* out) {
  PreparedTestColumnOf(fullColumn, te, v, b, scale, out);
}

void WritePreparedTestBlock(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& testTrain) {
  WritePreparedTestBlockOf<double>(full, tr, te, v, scale, testTrain);
}
void WritePreparedTestBlock(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                            const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, double scale, Eigen::MatrixXd& testTrain) {
  WritePreparedTestBlockOf<float>(full, tr, te, v, scale, testTrain);
}

FoldKernel PreparedBlocks(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                          const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, bool normalise, double scale) {
  return PreparedBlocksOf<double>(full, tr, te, v, normalise, scale);
}
FoldKernel PreparedBlocks(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& tr,
                          const Eigen::Ref<const Eigen::VectorXi>& te, const FoldVectors& v, bool normalise, double scale) {
  return PreparedBlocksOf<float>(full, tr, te, v, normalise, scale);
}

Eigen::MatrixXd PreparedProducts(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v,
                                 const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return PreparedProductsOf<double>(full, tr, v, A);
}
Eigen::MatrixXd PreparedProducts(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& tr, const FoldVectors& v,
                                 const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return PreparedProductsOf<float>(full, tr, v, A);
}

}  // namespace neuromkl::gram
