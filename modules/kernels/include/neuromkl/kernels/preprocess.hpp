#pragma once
// Per-fold kernel preprocessing with training statistics only (ALGORITHMS.md section 2):
// centre (= inner products of training-mean-centred vectors), then normalise (cosine).
#include <Eigen/Core>

namespace neuromkl::kernels {

/// One kernel restricted to a fold: train x train, test x train, and the test self-similarities.
struct FoldKernel {
  Eigen::MatrixXd train;      ///< l x l
  Eigen::MatrixXd testTrain;  ///< m x l
  Eigen::VectorXd testDiag;   ///< m: k(x_t, x_t)
};

/// Slices a full n x n kernel into a FoldKernel (sklearn's K[np.ix_(test, train)]).
FoldKernel SliceFold(const Eigen::Ref<const Eigen::MatrixXd>& full, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
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

}  // namespace neuromkl::kernels
