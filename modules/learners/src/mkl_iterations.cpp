// What the iterations of the learners of kernel weights share: screened kernel quadratics and Newton steps on the
// weights.
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <Eigen/LU>
#include <Eigen/QR>

#include "inner.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

ScreenedNorms::ScreenedNorms(const gram::KernelStack& stack)
    : stack_(stack),
      value_(Eigen::VectorXd::Zero(stack.Size())),
      known_(static_cast<std::size_t>(stack.Size()), 0),
      anchorValue_(Eigen::VectorXd::Zero(stack.Size())),
      anchors_(static_cast<std::size_t>(stack.Size())) {}

void ScreenedNorms::Begin(const InnerSolution& sol) {
  current_ = sol.coefs.cols() > 0 ? sol.coefs : Eigen::MatrixXd(sol.coef);
  form_ = stack_.Form(current_);
  std::fill(known_.begin(), known_.end(), 0);
}

double ScreenedNorms::Exact(Eigen::Index j) {
  const auto u = static_cast<std::size_t>(j);
  if (!known_[u]) Record(j, std::sqrt(form_->Value(j)));
  return value_[j];
}

double ScreenedNorms::Bound(Eigen::Index j) const {
  const auto u = static_cast<std::size_t>(j);
  if (known_[u]) return value_[j];
  const Eigen::MatrixXd& b = anchors_[u];
  if (b.size() != current_.size()) return std::numeric_limits<double>::infinity();
  const double d = (current_ - b).norm();
  // Relative slack for the rounding of the two quadratics.
  return (anchorValue_[j] + stack_.RootSpectralBound(j) * d) * (1.0 + 1e-9) + 1e-300;
}

void ScreenedNorms::Evaluate(const std::vector<Eigen::Index>& which) {
  const std::size_t together = form_->Together();
  if (together == 0) {  // nothing to share between kernels
    for (const auto j : which) Exact(j);
    return;
  }
  std::vector<Eigen::Index> missing;
  for (const auto j : which)
    if (!Known(j)) missing.push_back(j);
  if (missing.empty() || missing.size() < together) return;  // Exact computes them when asked
  // Side by side or in one request, each as Exact would compute it, then recorded in order.
  const Eigen::VectorXd q = form_->Values(missing);
  for (std::size_t i = 0; i < missing.size(); ++i) Record(missing[i], std::sqrt(q[static_cast<Eigen::Index>(i)]));
}

bool ScreenedNorms::EvaluateWithProducts(const std::vector<Eigen::Index>& which, Eigen::MatrixXd& products) {
  if (current_.cols() != 1) return false;
  const Eigen::VectorXd a = current_.col(0);
  products = stack_.Products(which, a);
  for (std::size_t i = 0; i < which.size(); ++i)
    if (!Known(which[i])) Record(which[i], std::sqrt(std::max(0.0, a.dot(products.col(static_cast<Eigen::Index>(i))))));  // PSD: clip rounding
  return true;
}

void ScreenedNorms::Record(Eigen::Index j, double value) {
  const auto u = static_cast<std::size_t>(j);
  value_[j] = value;
  known_[u] = 1;
  anchorValue_[j] = value;
  anchors_[u] = current_;
  ++exactEvaluations;
}

Eigen::VectorXd ScreenedNorms::All() {
  std::vector<Eigen::Index> every(static_cast<std::size_t>(stack_.Size()));
  std::iota(every.begin(), every.end(), Eigen::Index{0});
  Evaluate(every);
  Eigen::VectorXd c(stack_.Size());
  for (Eigen::Index j = 0; j < c.size(); ++j) c[j] = Exact(j);
  return c;
}


Eigen::VectorXd SolveNewtonSystem(const Eigen::MatrixXd& J, const Eigen::VectorXd& rhs) {
  // LU costs a third of the complete orthogonal decomposition; the two agree where J is well conditioned.
  constexpr double kSmallestReciprocalCondition = 1e-12;
  const Eigen::PartialPivLU<Eigen::MatrixXd> lu(J);
  if (lu.rcond() > kSmallestReciprocalCondition) {
    Eigen::VectorXd delta = lu.solve(rhs);
    if (delta.allFinite()) return delta;
  }
  return J.completeOrthogonalDecomposition().solve(rhs);
}


}  // namespace neuromkl::learners
