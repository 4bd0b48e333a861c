// The kernel stack is a view on the training kernels (no packed copy: at large n a copy would double the memory)
// that reads only their upper triangles, and the finiteness check of the training kernels is one vectorised pass that still
// finds every kind of non-finite entry. (Sharing the check between fits: kernel_cache_test.cpp.)
#include <cmath>
#include <limits>
#include <random>

#include <Eigen/Eigenvalues>

#include <tbb/global_control.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inner.hpp"
#include "learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;
using neuromkl::testing::MakeMklProblem;

namespace {

// Both storage modes: a packed copy (n = 300 < KernelStack::kViewFrom) and a view on the kernels
// (n = 1100: 605,550 upper-triangle entries, many blocks of Combine's 32,768, the block edges exercised).
class KernelStackModes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(PackedAndView, KernelStackModes, ::testing::Values(300, 1100));

TEST_P(KernelStackModes, CombineEqualsTheDenseSumExactly) {
  const int n = GetParam();
  auto p = MakeMklProblem(n, 5, {0, 2}, 1.0, 11);
  // The stack reads the upper triangle only; d K d leaves the two triangles a rounding apart, so the
  // kernels are made exactly symmetric for the bit-for-bit comparison.
  for (auto& K : p.kernels) K = Eigen::MatrixXd(K.selfadjointView<Eigen::Upper>());
  const auto stackPtr = gram::MakeStack(p.kernels);
  const gram::KernelStack& stack = *stackPtr;
  Eigen::VectorXd w(5);
  w << 0.3, 0.0, 1.7, 0.25, 1e-3;
  // Same additions in the same order per entry (0 + w_0 K_0 + w_2 K_2 + ...): equal bit for bit.
  const Eigen::MatrixXd dense = learners::CombineKernels(p.kernels, w);
  EXPECT_EQ(stack.Combine(w), dense);
  Eigen::MatrixXd reused = Eigen::MatrixXd::Constant(7, 3, 5.0);  // wrong size: resized
  stack.Combine(w, reused);
  EXPECT_EQ(reused, dense);
  reused.setConstant(std::nan(""));  // right size, stale contents: every entry rewritten
  stack.Combine(w, reused);
  EXPECT_EQ(reused, dense);
}

TEST_P(KernelStackModes, QuadraticsProductsAndBoundsMatchDenseAlgebra) {
  const int n = GetParam();
  const auto p = MakeMklProblem(n, 3, {1}, 1.0, 12);
  const auto stackPtr = gram::MakeStack(p.kernels);
  const gram::KernelStack& stack = *stackPtr;
  EXPECT_EQ(neuromkl::testing::IsPackedStack(stack), n < gram::kPackedStackBelow);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd A(n, 2);
  for (Eigen::Index i = 0; i < A.size(); ++i) A.data()[i] = normal(rng);
  for (Eigen::Index i = 0; i < n; i += 3) A(i, 0) = 0;  // non-support vectors of class 0 ...
  for (Eigen::Index i = 0; i < n; i += 4) A.row(i).setZero();  // ... and rows zero in both classes
  const auto nonzero = gram::NonZeroRows(A);
  EXPECT_EQ(static_cast<int>(nonzero.size()), n - (n + 3) / 4);
  for (Eigen::Index k = 0; k < 3; ++k) {
    const Eigen::MatrixXd& K = p.kernels[static_cast<std::size_t>(k)];
    const double dense = A.col(0).dot(K * A.col(0)) + A.col(1).dot(K * A.col(1));
    // Sums of n^2 products of order-1 terms in another order: 1e-12 relative is ~100x the rounding
    // (sqrt(n^2) * 1e-16 with cancellation margin).
    EXPECT_NEAR(stack.Form(A)->Value(k), dense, 1e-12 * std::abs(dense));
    const Eigen::VectorXd v = A.col(1);
    EXPECT_LE((stack.Products({k}, v).col(0) - K * v).norm(), 1e-12 * (K * v).norm());
    EXPECT_NEAR(stack.Quadratics(v)[k], v.dot(K * v), 1e-12 * v.dot(K * v));
    // The screening bound needs sqrt(lambda_max) <= RootSpectralBound.
    const double lambdaMax = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(K).eigenvalues().maxCoeff();
    EXPECT_GE(stack.RootSpectralBound(k), std::sqrt(lambdaMax));
  }
}

TEST(ValidateFitInput, FindsEveryKindOfNonFiniteEntry) {
  const auto p = MakeMklProblem(20, 2, {0}, 1.0, 14);
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (double bad : {std::nan(""), inf, -inf}) {
    auto k = p.kernels;
    k[1](19, 0) = bad;  // lower triangle, last row
    EXPECT_THROW(learners::ValidateFitInput("svm", k, p.targets), InputError);
  }
  auto huge = p.kernels;
  huge[0](0, 0) = 1e308;  // finite: x * 0 = 0
  EXPECT_NO_THROW(learners::ValidateFitInput("svm", huge, p.targets));
}


// The learners of kernel weights check the matrices' values through their stack: a packed stack finds them in the pass
// that packs the matrices (one pass over the values, not two), a view reads them. Every kind of non-finite entry, in the lower triangle the
// stack never reads, gives ValidateFitInput's error, with and without a cache (which then records no check); the bound
// computed in the same pass is RootSpectralBound's value bit for bit.
TEST_P(KernelStackModes, CheckedStackFindsWhatValidateFitInputFinds) {
  const int n = GetParam();
  const auto p = MakeMklProblem(n, 3, {0}, 1.0, 15);
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (const double bad : {std::nan(""), inf, -inf}) {
    auto k = p.kernels;
    k[2](n - 1, 0) = bad;  // lower triangle, last row
    for (const bool cached : {false, true}) {
      learners::TrainingKernelCache cache;
      learners::FitOptions options;
      options.cache = cached ? &cache : nullptr;
      std::unique_ptr<gram::KernelStack> local;
      EXPECT_THAT([&] { learners::CheckedStack("enmkl_svm", k, options, local); },
                  ::testing::ThrowsMessage<InputError>(HasSubstr("training kernel 2 has NaN or infinite entries")));
      EXPECT_EQ(cache.checksRun(), 0);
      // Twice: a cached stack keeps what its pass found.
      if (cached) {
        EXPECT_THROW(learners::CheckedStack("enmkl_svm", k, options, local), InputError);
      }
    }
  }
  learners::TrainingKernelCache cache;
  learners::FitOptions options;
  options.cache = &cache;
  std::unique_ptr<gram::KernelStack> local;
  const gram::KernelStack& stack = learners::CheckedStack("enmkl_svm", p.kernels, options, local);
  EXPECT_EQ(cache.checksRun(), 1);
  learners::CheckedStack("enmkl_svm", p.kernels, options, local);
  EXPECT_EQ(cache.checksRun(), 1);  // checked once per kernel list
  const auto freshStack = gram::MakeStack(p.kernels);
  const gram::KernelStack& fresh = *freshStack;
  for (Eigen::Index k = 0; k < 3; ++k) EXPECT_EQ(stack.RootSpectralBound(k), fresh.RootSpectralBound(k));
}

// A view stack computes its products and quadratics on several threads (a large refit's cost is in them); each value is
// computed exactly as the one-at-a-time call would, so they agree bit for bit.
TEST_P(KernelStackModes, BatchedProductsAndQuadraticsEqualTheOneAtATimeValues) {
  const int n = GetParam();
  const auto p = MakeMklProblem(n, 4, {0, 3}, 1.0, 13);
  const auto stackPtr = gram::MakeStack(p.kernels);
  const gram::KernelStack& stack = *stackPtr;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  Eigen::VectorXd v(n);
  for (Eigen::Index i = 0; i < n; ++i) v[i] = i % 5 == 0 ? 0.0 : normal(rng);
  const std::vector<Eigen::Index> which = {3, 0, 2};
  const Eigen::MatrixXd G = stack.Products(which, v);
  ASSERT_EQ(G.cols(), 3);
  for (std::size_t i = 0; i < which.size(); ++i) EXPECT_EQ(G.col(static_cast<Eigen::Index>(i)), stack.Products({which[i]}, v).col(0));

  learners::InnerSolution sol;
  sol.coef = v;
  learners::ScreenedNorms batched(stack), single(stack);
  batched.Begin(sol);
  single.Begin(sol);
  batched.Evaluate({1, 3, 2});
  EXPECT_TRUE(batched.Known(1) && batched.Known(3) && batched.Known(2));
  EXPECT_EQ(batched.Known(0), false) << "only the kernels asked for are evaluated";
  for (Eigen::Index j = 0; j < 4; ++j) EXPECT_EQ(batched.Exact(j), single.Exact(j)) << "kernel " << j;
  EXPECT_EQ(batched.exactEvaluations, 4);
}

// The refit's cost at large n is in those passes, shared by threads: the fitted model must not
// depend on the number of threads (BRIEF: results do not depend on the number of threads).
TEST(KernelStackThreads, ViewStackFitsAreIdenticalOnOneAndTwoThreads) {
  const int n = static_cast<int>(gram::kPackedStackBelow) + 40;
  const auto p = MakeMklProblem(n, 4, {1, 3}, 2.0, 14);  // well separated: quick solves
  for (const char* name : {"enmkl_svm", "simplemkl"}) {
    const auto learner = learners::MakeLearner(name, {{"c", 1.0}});
    learners::Model one, two;
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
      one = learner->Fit(p.kernels, p.targets);
    }
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
      two = learner->Fit(p.kernels, p.targets);
    }
    EXPECT_EQ(one.beta, two.beta) << name;
    EXPECT_EQ(one.coef, two.coef) << name;
    EXPECT_EQ(one.bias, two.bias) << name;
    EXPECT_EQ(one.info.iterations, two.info.iterations) << name;
    EXPECT_GT((one.beta.array() > 0).count(), 0) << name;
  }
}

}  // namespace
