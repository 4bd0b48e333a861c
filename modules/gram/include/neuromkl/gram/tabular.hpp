#pragma once
// Tabular features inside the folds: a tabular source's columns are imputed (a missing value takes the training rows'
// median) and standardised (the training rows' mean and SD) with statistics of each fold's training rows only, then its
// kernels are formed from them. Standardising over every subject would let the held-out subjects' values into the
// training kernels (a small leak, but one a reviewer is right to reject); the same statistics are what an exported
// model applies to new subjects.
#include <string>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::gram {

/// A kernel function of feature rows: linear a'b, polynomial (a'b + offset)^degree, Gaussian exp(-|a - b|^2 / (2 w^2)).
struct FeatureKernel {
  enum class Type { Linear, Polynomial, Gaussian };
  Type type = Type::Linear;
  double value = 0;   ///< polynomial degree or Gaussian width
  double offset = 0;  ///< polynomial offset
  /// The kernel of the rows of X (n x n), exactly symmetric: the linear part from one rank update, mirrored.
  Eigen::MatrixXd Gram(const Eigen::Ref<const Eigen::MatrixXd>& X) const;
  /// The same from X's linear kernel (LinearGram(X)), which several functions of the same columns share.
  Eigen::MatrixXd OfLinear(Eigen::MatrixXd linear) const;
  static Eigen::MatrixXd LinearGram(const Eigen::Ref<const Eigen::MatrixXd>& X);
  /// The kernel between the rows of A and the rows of B (A.rows() x B.rows()).
  Eigen::MatrixXd Between(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B) const;
  /// k(a_i, a_i) for every row of A.
  Eigen::VectorXd Self(const Eigen::Ref<const Eigen::MatrixXd>& A) const;
  /// "linear", "polynomial", "gaussian" (the exported model's names); FromName is its inverse (std::invalid_argument).
  std::string Name() const;
  static Type FromName(const std::string& name);
};

/// How a fold prepares a tabular source's columns, each step fitted on its training rows.
struct TabularSteps {
  bool impute = false;       ///< a missing value (NaN) takes the training rows' median of its column
  bool standardise = false;  ///< (x - mean) / SD of the training rows (SD with n - 1; a constant column keeps SD 1)
  bool Any() const { return impute || standardise; }
};

/// One fold's statistics of a tabular source (per column): what is filled in, subtracted and divided by.
struct TabularFit {
  Eigen::RowVectorXd fill;  ///< the training median where the column has a missing value (with `everyColumn`: every column); NaN elsewhere
  Eigen::RowVectorXd mean;  ///< 0 without standardising
  Eigen::RowVectorXd sd;    ///< 1 without standardising
};

/// The statistics of rows `train` of X (rows x columns; NaN = missing). InputError tabular:NothingToImpute (at `where`,
/// naming the column of `columns`) when a column has a missing value there and no training row has a value in it; with
/// missing values and no imputation, InputError tabular:Missing. `everyColumn`: a fill for every column (an exported
/// model keeps one for new subjects).
TabularFit FitTabular(const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::VectorXi>& train, const TabularSteps& steps,
                      const std::vector<std::string>& columns, const std::string& where, bool everyColumn = false);
/// Rows `rows` of X with `fit` applied: missing values filled, then standardised.
Eigen::MatrixXd ApplyTabular(const TabularFit& fit, const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::VectorXi>& rows);

/// The median of finite values (the mean of the two middle values for an even count); `values` is reordered. Not empty.
double Median(std::vector<double>& values);

}  // namespace neuromkl::gram
