#pragma once
// Confound removal inside the folds, in kernel space (ALGORITHMS.md section 9; derivation in
// docs/inputs.md, "Covariates"). Training rows T of a fold, fit rows Q (a subset of T: all of them,
// or e.g. the controls), covariate rows c_i (intercept and dummy columns included). The images are
// residualised with coefficients fitted on Q only: G = P X_Q with P = (C_Q'C_Q)^+ C_Q', and every
// row i (training or test) becomes x~_i = x_i - c_i G. For a linear kernel K = X X' this is
//   K~_ij = K_ij - a_i K_Qj - K_iQ a_j' + a_i K_QQ a_j',   a_i = c_i P,
// computed from the fold's kernel blocks only (test rows use the training coefficients: no leakage).
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/preprocess.hpp"

namespace neuromkl::gram {

/// The covariates of every kernel row: the design matrix and which rows may fit the coefficients.
struct Covariates {
  Eigen::MatrixXd design;      ///< n x p: intercept, numeric columns, categorical dummies (one level left out)
  std::vector<char> fitRow;    ///< n: 1 = may fit the coefficients (fit_on); empty = every row
  /// Per design column: the categorical covariate whose dummy it is (the dummies of one covariate share an id), or -1
  /// (intercept, numeric column). Read only when the design has missing values; empty = every column -1.
  std::vector<int> categoryOf;
  /// A missing value is NaN in the design (in every dummy of a categorical covariate); each fold imputes it from its
  /// training rows (ImputationFill).
  bool HasMissing() const { return design.hasNaN(); }
};

/// The values a fold imputes per design column, from its training rows: a numeric column's median (the mean of the two
/// middle values for an even count); for a categorical covariate, the dummies of its most frequent level (the reference
/// level is all zeros; ties go to the first level in the design's order, reference first). NaN where no column is
/// missing (unless `everyColumn`: every column's value, as an exported model keeps them for new subjects). InputError
/// [covariates:NothingToImpute] (naming `where`) when a column with missing values has no value in the training rows.
Eigen::RowVectorXd ImputationFill(const Covariates& covariates, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const char* where = "fold",
                                  bool everyColumn = false);

/// The design rows `rows` with their missing values replaced by `fill`.
Eigen::MatrixXd FilledRows(const Covariates& covariates, const Eigen::Ref<const Eigen::VectorXi>& rows, const Eigen::RowVectorXd& fill);

/// A fold's residualisation: a_i = c_i P for the training rows (l x q) and the test rows (m x q), and
/// the positions (within the training rows) of the q fit rows.
struct FoldResidualiser {
  std::vector<Eigen::Index> fitPositions;  ///< positions in the training rows of Q
  Eigen::MatrixXd P;                       ///< p x q: (C_Q'C_Q)^+ C_Q'
  Eigen::MatrixXd trainA, testA;           ///< l x q, m x q (= trainC P, testC P)
  Eigen::MatrixXd trainC, testC;           ///< l x p, m x p: the design rows (A has rank p: products go through C)
};

/// Missing values are imputed with ImputationFill of the training rows, for training and test rows alike.
/// InputError [covariates:NoFitRows] (naming `where`) when the training rows contain no fit row.
/// The pseudo-inverse (complete orthogonal decomposition, rank threshold 1e-10 relative) handles a
/// rank-deficient design, e.g. a category absent from a small training set.
FoldResidualiser MakeFoldResidualiser(const Covariates& covariates, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                                      const Eigen::Ref<const Eigen::VectorXi>& testIdx, const char* where = "fold");

/// Residualises a sliced fold kernel (SliceFold) in place: training block, test rows and test diagonal.
void ResidualiseFold(FoldKernel& k, const FoldResidualiser& r);

/// Subject weights of a map over residualised training images (map = sum_i d_i x~_i) rewritten as
/// weights of the raw images: d_Q -= P' (C_T' d_T) where C_T P = trainA. `d` holds the training rows
/// (positions as in the fold), updated in place.
void ResidualiseSubjectWeights(Eigen::Ref<Eigen::VectorXd> d, const FoldResidualiser& r);

/// R^2 of an ordinary least-squares fit of y on the design (intercept included in the design).
double CovariateR2(const Eigen::MatrixXd& design, const Eigen::VectorXd& y);

}  // namespace neuromkl::gram
