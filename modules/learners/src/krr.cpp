// The kernel ridge regression solver (direct: a Cholesky of K + lambda W^-1) behind KRR, ENMKL-KRR and the kernel
// ELM family, with its sensitivity to the kernel weights.
#include <memory>

#include <Eigen/Cholesky>

#include "inner.hpp"

namespace neuromkl::learners {

namespace {

class KrrSolver final : public InnerSolver {
 public:
  KrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights, bool bias)
      : mean_(!bias ? 0.0 : EffectiveWeights(weights).size() > 0 ? weights.dot(y) / weights.sum() : y.mean()), yc_(y.array() - mean_), lambda_(lambda),
        weights_(EffectiveWeights(weights)) {}
  bool Exact() const override { return true; }
  InnerSolution Solve(const Eigen::MatrixXd& K, const InnerSolution*) const override {
    Eigen::MatrixXd A = K;
    // Weighted ridge (class weights): min sum_i w_i (y_i - f_i)^2 / (2 lambda) + 1/2 ||f||^2 gives
    // coef = (K + lambda W^-1)^-1 (y - m_w), m_w the weighted mean.
    if (weights_.size() > 0) A.diagonal().array() += lambda_ / weights_.array();
    else A.diagonal().array() += lambda_;
    Eigen::LLT<Eigen::MatrixXd> llt(A);
    InnerSolution s;
    if (llt.info() == Eigen::Success) {
      s.coef = llt.solve(yc_);
    } else {  // K not numerically PSD: fall back to a symmetric indefinite solve
      s.coef = A.ldlt().solve(yc_);
    }
    s.alpha = s.coef;
    s.bias = mean_;
    // KRR dual: max_a a'yc - 1/2 a'(K + lambda I)a, optimal value 1/2 yc'(K + lambda I)^-1 yc.
    s.dual = 0.5 * s.coef.dot(yc_);
    return s;
  }
  double Loss(const Eigen::VectorXd& f) const override {
    if (weights_.size() > 0) return (weights_.array() * (yc_.array() + mean_ - f.array()).square()).sum() / (2.0 * lambda_);
    return (yc_.array() + mean_ - f.array()).square().sum() / (2.0 * lambda_);
  }
  // coef = (K + lambda W^-1)^-1 yc (W = I without class weights): d coef / d beta_k = -(K + lambda W^-1)^-1 K_k coef.
  // (No dcoef: each solve is exact and takes no warm start.)
  bool Curvature(const Eigen::MatrixXd& K, const InnerSolution& sol, const std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>& gradients,
                 Eigen::MatrixXd& H, Eigen::MatrixXd* dcoef) const override {
    if (dcoef) dcoef->resize(0, 0);
    const Eigen::MatrixXd G = gradients(sol.coef);
    Eigen::MatrixXd A = K;
    if (weights_.size() > 0) A.diagonal().array() += lambda_ / weights_.array();
    else A.diagonal().array() += lambda_;
    Eigen::LLT<Eigen::MatrixXd> llt(A);
    if (llt.info() != Eigen::Success) return false;
    H = G.transpose() * llt.solve(G);
    H = 0.5 * (H + H.transpose()).eval();
    return H.allFinite();
  }

 private:
  double mean_;
  Eigen::VectorXd yc_;
  double lambda_;
  Eigen::VectorXd weights_;  ///< class weights per subject; empty = all 1
};

}  // namespace

std::unique_ptr<InnerSolver> MakeKrrSolver(const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights, bool bias) {
  return std::make_unique<KrrSolver>(y, lambda, weights, bias);
}

}  // namespace neuromkl::learners
