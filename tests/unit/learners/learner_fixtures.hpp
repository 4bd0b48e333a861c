#pragma once
#include <random>

#include <Eigen/Core>

#include "neuromkl/gram/stack.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::testing {

/// m linear kernels on random features; kernels listed in `signal` carry the label in their
/// first feature (shifted by +-shift), the others are pure noise. Kernels are cosine-normalised.
struct MklProblem {
  learners::KernelList kernels;
  std::vector<Eigen::MatrixXd> features;
  learners::Targets targets;
};

/// Whether a stack packs its kernels (its quadratic form shares nothing between kernels) or reads them in place: the
/// tests that cover both storage modes check that each mode is the one exercised.
inline bool IsPackedStack(const gram::KernelStack& stack) { return stack.Form(Eigen::MatrixXd::Zero(stack.Subjects(), 1))->Together() == 0; }

inline MklProblem MakeMklProblem(int n, int m, const std::vector<int>& signal, double shift, unsigned seed,
                                 learners::Task task = learners::Task::Classification, int dims = 6) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  MklProblem p;
  p.targets.task = task;
  p.targets.y.resize(n);
  for (int i = 0; i < n; ++i) p.targets.y[i] = task == learners::Task::Classification ? (i % 2 ? 1.0 : -1.0) : normal(rng);
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, dims);
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = normal(rng);
    if (std::find(signal.begin(), signal.end(), j) != signal.end()) X.col(0) += shift * p.targets.y;
    X = X.rowwise() - X.colwise().mean();
    Eigen::MatrixXd K = X * X.transpose();
    const Eigen::VectorXd d = K.diagonal().cwiseSqrt().cwiseInverse();
    p.kernels.push_back(d.asDiagonal() * K * d.asDiagonal());
    p.features.push_back(X);
  }
  return p;
}

/// Region-like kernels (bench_learners' problems): n subjects (labels +1, -1, +1, ...: LIBSVM's sign convention takes
/// the first), m kernels of 20..400 features each (features centred, each subject's row of unit norm), the first
/// `signalKernels` with a class difference of 0.4 in five features. Dozens of kernels are selected at mu 0.5.
inline MklProblem RegionLikeProblem(int n, int m, int signalKernels, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> features(20, 400);
  MklProblem p;
  p.targets.task = learners::Task::Classification;
  p.targets.y.resize(n);
  for (int i = 0; i < n; ++i) p.targets.y[i] = i % 2 == 0 ? 1.0 : -1.0;
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, features(rng));
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = normal(rng);
    if (j < signalKernels) X.leftCols(5).colwise() += 0.4 * p.targets.y;
    X = X.rowwise() - X.colwise().mean();
    X.rowwise().normalize();
    p.kernels.push_back(X * X.transpose());
  }
  return p;
}

/// Symmetric permutation of every kernel and of the targets.
inline MklProblem Permute(const MklProblem& p, const Eigen::VectorXi& perm) {
  MklProblem q = p;
  const auto n = perm.size();
  for (auto& K : q.kernels) {
    Eigen::MatrixXd P(n, n);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j) P(i, j) = K(perm[i], perm[j]);
    K = P;
  }
  for (Eigen::Index i = 0; i < n; ++i) q.targets.y[i] = p.targets.y[perm[i]];
  return q;
}

}  // namespace neuromkl::testing
