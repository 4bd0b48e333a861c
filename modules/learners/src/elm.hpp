#pragma once
// Shared pieces of the kernel extreme learning machines (KELM, MK-ELM, DKELM): the output matrix
// T (one column for binary and regression targets, one-hot +-1 columns for multiclass) and the
// regularised least-squares solve alpha = (K + I/C)^-1 T.
#include <vector>

#include <Eigen/Core>

#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

struct ElmOutputs {
  Eigen::MatrixXd T;        ///< rows: the labelled subjects (in `rows` order); centred if bias
  Eigen::VectorXd offset;   ///< column means removed from T (zeros without a bias)
  std::vector<Eigen::Index> rows;  ///< positions of the labelled subjects in the training set
  Eigen::VectorXd weights;  ///< class weights of the labelled subjects (rows order); empty = all 1
};

/// T for the labelled subjects (NaN targets are skipped). Multiclass: T_ic = +1 if subject i is in
/// class c, else -1 (Huang's coding). With `bias`, each column is centred and its mean is the offset
/// (the weighted mean with class weights).
ElmOutputs MakeElmOutputs(const Targets& targets, bool bias);

/// alpha = (K + I/C)^-1 T by Cholesky (LDL' if K is not numerically PSD). With class weights w
/// (weighted least squares, min 1/2 ||beta||^2 + C/2 sum_i w_i ||xi_i||^2): alpha = (K + (C W)^-1)^-1 T.
Eigen::MatrixXd SolveElm(const Eigen::MatrixXd& K, const Eigen::MatrixXd& T, double C, const Eigen::VectorXd& weights = {});

/// Stores alpha (n x T columns) and offsets in the model: coef/bias for one column, coefs/biases
/// for multiclass. `scale` multiplies the coefficients (beta normalisation).
void SetElmOutputs(Model& model, const Eigen::MatrixXd& alpha, const Eigen::VectorXd& offset, Task task, double scale);

/// 1/2 tr(T' alpha): the optimal value of the ELM problem min 1/2 ||beta||^2 + C/2 ||xi||^2.
double ElmObjective(const Eigen::MatrixXd& T, const Eigen::MatrixXd& alpha);

/// The model of a one-solve ELM on the unweighted sum of `kernels` kernels: beta_j = 1/m (so the
/// coefficients `coefs` are scaled by m), the ELM objective of `alpha` for `out`. Seconds are the caller's.
Model SummedKernelElmModel(Eigen::Index kernels, const Eigen::MatrixXd& coefs, const ElmOutputs& out, const Eigen::MatrixXd& alpha, Task task);

}  // namespace neuromkl::learners
