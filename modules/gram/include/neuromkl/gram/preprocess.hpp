#pragma once
// Per-fold kernel preprocessing with training statistics only (ALGORITHMS.md section 2):
// centre (= inner products of training-mean-centred vectors), then normalise (cosine).
// Every function that reads a full kernel takes it in float64 or float32 (the compact store,
// compact_kernels.hpp): a float32 entry is widened to double when read, and all arithmetic is in double,
// so a float32 kernel gives what its values widened to a float64 kernel give, bit for bit.
#include <Eigen/Core>

namespace neuromkl::gram {

/// One kernel restricted to a fold: train x train, test x train, and the test self-similarities.
struct FoldKernel {
  Eigen::MatrixXd train;      ///< l x l
  Eigen::MatrixXd testTrain;  ///< m x l
  Eigen::VectorXd testDiag;   ///< m: k(x_t, x_t)
};

/// Slices a full n x n kernel into a FoldKernel (sklearn's K[np.ix_(test, train)]).
FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                     const Eigen::Ref<const Eigen::VectorXi>& testIdx);
FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                     const Eigen::Ref<const Eigen::VectorXi>& testIdx);

/// Centres with the training mean: C = HKH for the training block; test rows and test diagonal
/// with training statistics only.
void CentreFold(FoldKernel& k);

/// Cosine normalisation K_ij / sqrt(K_ii K_jj); each test sample uses its own self-similarity.
/// A sample whose self-similarity is <= 0 (a zero vector, e.g. equal to the training mean)
/// (relative to the fold's largest, below 1e-12) gets an all-zero row (and column), never NaN.
void NormaliseFold(FoldKernel& k);

/// The scales NormaliseFold applies: 1 / sqrt(self-similarity), or 0 for a sample whose
/// self-similarity is below 1e-12 of the largest (train and test together).
void InverseNorms(const Eigen::Ref<const Eigen::VectorXd>& trainDiag, const Eigen::Ref<const Eigen::VectorXd>& testDiag,
                  Eigen::VectorXd& invTrain, Eigen::VectorXd& invTest);

/// One kernel's fold preprocessing (CentreFold, then NormaliseFold) as vectors, read from the full kernel in
/// place: no copy of the fold's blocks (copies of every kernel's fold blocks would nearly double the memory at
/// large n). Entry (a, b) of the prepared training block is
///   invTrain_a (((K_ab - colMean_b) - colMean_a) + grand) invTrain_b,
/// a test row i uses testMean_i for colMean_a and invTest_i for invTrain_a. Without centring the means are 0,
/// without normalising the inverse norms are 1. Equal to CentreFold then NormaliseFold up to rounding (the
/// means are summed in another order); nested CV's fold kernels, summed or copied, are all written from these
/// vectors. Covariates are not vectors (residualising mixes rows): not for them.
struct FoldVectors {
  Eigen::VectorXd colMean, testMean;    ///< l training column means; m test row means over the training columns
  Eigen::VectorXd trainDiag, testDiag;  ///< centred self-similarities (before normalising)
  Eigen::VectorXd invTrain, invTest;    ///< InverseNorms of the diagonals (ones without normalising)
  double grand = 0;                     ///< mean of colMean
  /// Trace of the prepared training block.
  double Trace() const;
};
FoldVectors MakeFoldVectors(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                            const Eigen::Ref<const Eigen::VectorXi>& testIdx, bool centre, bool normalise);
FoldVectors MakeFoldVectors(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                            const Eigen::Ref<const Eigen::VectorXi>& testIdx, bool centre, bool normalise);

/// One prepared entry from FoldVectors, times `scale` (equal source weighting): the arithmetic every in-place
/// path shares, so that a fold's summed kernel is the sum of its prepared copies bit for bit.
/// Training entry (a, b): meanA = colMean_a, invA = invTrain_a; test entry (i, b): testMean_i, invTest_i.
inline double PreparedEntry(double k, double colMeanB, double meanA, double grand, double invA, double invB, double scale) {
  return ((invA * (((k - colMeanB) - meanA) + grand)) * invB) * scale;
}

/// The fold blocks of CentreFold + NormaliseFold (times `scale`) written from FoldVectors in one pass over the
/// kernel's training columns: no intermediate copies. The test diagonal is the prepared self-similarity
/// (1, or 0 for a zero-norm sample, when normalised), times `scale`.
FoldKernel PreparedBlocks(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                          const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, bool normalise, double scale = 1.0);
FoldKernel PreparedBlocks(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                          const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, bool normalise, double scale = 1.0);
/// The training and test blocks of PreparedBlocks written into `train` and `testTrain`, whose storage is
/// reused when it already has the size (fold tasks of one size in a row: no fresh pages to fault in).
void WritePreparedBlocks(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                         const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, double scale, Eigen::MatrixXd& train,
                         Eigen::MatrixXd& testTrain);
void WritePreparedBlocks(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                         const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, double scale, Eigen::MatrixXd& train,
                         Eigen::MatrixXd& testTrain);

/// Column b of the prepared training block, rows 0..rows-1 (`fullColumn`: the full kernel's column trainIdx[b]),
/// and column b of the prepared test block: the columns WritePreparedBlocks writes, one code for every path
/// that prepares fold columns from the full kernel.
void PreparedTrainingColumn(const double* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const FoldVectors& v, Eigen::Index b,
                            Eigen::Index rows, double scale, double* out);
void PreparedTrainingColumn(const float* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const FoldVectors& v, Eigen::Index b,
                            Eigen::Index rows, double scale, double* out);
void PreparedTestColumn(const double* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, Eigen::Index b, double scale,
                        double* out);
void PreparedTestColumn(const float* fullColumn, const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, Eigen::Index b, double scale,
                        double* out);

/// The test block alone (m x l), as WritePreparedBlocks writes it: for learners that read the training block
/// in place.
void WritePreparedTestBlock(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                            const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, double scale, Eigen::MatrixXd& testTrain);
void WritePreparedTestBlock(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                            const Eigen::Ref<const Eigen::VectorXi>& testIdx, const FoldVectors& v, double scale, Eigen::MatrixXd& testTrain);

/// FoldVectors from a fold's blocks already sliced (train l x l, test m x l, the test self-similarities m;
/// empty = zeros): the same sums in the same order as MakeFoldVectors on the full kernel, so the same vectors.
FoldVectors BlockFoldVectors(const Eigen::Ref<const Eigen::MatrixXd>& train, const Eigen::Ref<const Eigen::MatrixXd>& testTrain,
                             const Eigen::Ref<const Eigen::VectorXd>& testDiag, bool centre, bool normalise);
/// Prepares sliced blocks in place from their FoldVectors (PreparedEntry): the values PreparedBlocks writes
/// from the full kernel.
void PrepareBlocksInPlace(Eigen::MatrixXd& train, Eigen::MatrixXd& testTrain, const FoldVectors& v);

/// P A for the prepared training block P of `v` (l x l, never formed) and A (l x k), reading the full
/// kernel in place: P A = invTrain o (K U - colMean (1'U) - 1 (colMean'U) + grand 1 (1'U)), U = invTrain o A.
Eigen::MatrixXd PreparedProducts(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const FoldVectors& v,
                                 const Eigen::Ref<const Eigen::MatrixXd>& A);
Eigen::MatrixXd PreparedProducts(const Eigen::Ref<const Eigen::MatrixXf>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const FoldVectors& v,
                                 const Eigen::Ref<const Eigen::MatrixXd>& A);

}  // namespace neuromkl::gram
