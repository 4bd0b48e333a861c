// The SVM's sensitivity to the kernel weights (InnerSolver::Curvature), used by the Newton steps of
// ENMKL and SimpleMKL, and the solve of their Newton systems (the curvature is computed from a
// Cholesky factor of K_FF with the border eliminated; singular cases keep the bordered system).
#include <random>

#include <Eigen/LU>
#include <Eigen/QR>

#include <gtest/gtest.h>

#include "inner.hpp"
#include "learner_fixtures.hpp"

using namespace neuromkl;
using neuromkl::testing::MakeMklProblem;

namespace {

/// The definition: H = R_F' X_F where [K_FF 1; 1' 0] X = [R_F; 0], by the minimum-norm solution of
/// the bordered system (a complete orthogonal decomposition, independent of the code under test).
Eigen::MatrixXd BorderedReference(const Eigen::MatrixXd& K, const std::vector<Eigen::Index>& free, const Eigen::MatrixXd& G) {
  const auto f = static_cast<Eigen::Index>(free.size());
  Eigen::MatrixXd M = Eigen::MatrixXd::Zero(f + 1, f + 1), R = Eigen::MatrixXd::Zero(f + 1, G.cols());
  for (Eigen::Index a = 0; a < f; ++a) {
    for (Eigen::Index b = 0; b < f; ++b) M(a, b) = K(free[static_cast<std::size_t>(a)], free[static_cast<std::size_t>(b)]);
    M(a, f) = M(f, a) = 1.0;
    R.row(a) = G.row(free[static_cast<std::size_t>(a)]);
  }
  const Eigen::MatrixXd X = M.completeOrthogonalDecomposition().solve(R);
  return R.topRows(f).transpose() * X.topRows(f);
}

std::vector<Eigen::Index> FreeSet(const Eigen::VectorXd& alpha, double C) {
  std::vector<Eigen::Index> free;
  for (Eigen::Index i = 0; i < alpha.size(); ++i)
    if (alpha[i] > 0 && alpha[i] < C) free.push_back(i);
  return free;
}

// The meaning of H: d (a'K_j a) / d beta_k = -2 H_jk, checked against central differences of SVMs
// re-solved at beta +- h e_k. Tolerance: the SMO solutions are exact to ~1e-11 (tolerance 1e-12), the
// central difference has an O(h^2) error and a rounding error ~1e-11 / h; with h = 1e-5 relative both stay
// below 1e-5 of the largest entry (the free set is checked to be the same at every perturbed point).
TEST(SvmCurvature, IsTheDerivativeOfTheKernelQuadratics) {
  const auto p = MakeMklProblem(60, 4, {0, 2}, 0.7, 5);
  const double C = 1.0;
  const auto solver = learners::MakeSvcSolver(p.targets.y, C, 1e-12, 10'000'000);
  const auto stackPtr = gram::MakeStack(p.kernels);
  const gram::KernelStack& stack = *stackPtr;
  const Eigen::VectorXd beta = Eigen::Vector4d(0.4, 0.1, 0.3, 0.2);
  const std::vector<Eigen::Index> all{0, 1, 2, 3};
  const auto sol = solver->Solve(stack.Combine(beta), nullptr);
  const auto free = FreeSet(sol.alpha, C);
  ASSERT_GE(free.size(), 5u);  // an informative case: several free vectors ...
  ASSERT_LT(free.size(), 60u);  // ... and some at a bound
  Eigen::MatrixXd H, H2, dcoef;
  ASSERT_TRUE(solver->Curvature(stack.Combine(beta), sol, [&](const Eigen::VectorXd& coef) { return stack.Products(all, coef); }, H));
  EXPECT_LE((H - H.transpose()).cwiseAbs().maxCoeff(), 1e-12 * H.cwiseAbs().maxCoeff());
  // Asking for d coef / d beta as well changes nothing in H.
  ASSERT_TRUE(solver->Curvature(stack.Combine(beta), sol, [&](const Eigen::VectorXd& coef) { return stack.Products(all, coef); }, H2, &dcoef));
  EXPECT_EQ(H2, H);
  ASSERT_EQ(dcoef.rows(), 60);
  ASSERT_EQ(dcoef.cols(), 4);
  const double h = 1e-5;
  for (Eigen::Index k = 0; k < 4; ++k) {
    Eigen::VectorXd up = beta, down = beta;
    up[k] += h;
    down[k] -= h;
    const auto solUp = solver->Solve(stack.Combine(up), nullptr), solDown = solver->Solve(stack.Combine(down), nullptr);
    ASSERT_EQ(FreeSet(solUp.alpha, C), free) << k;
    ASSERT_EQ(FreeSet(solDown.alpha, C), free) << k;
    const Eigen::VectorXd derivative = (stack.Quadratics(solUp.coef) - stack.Quadratics(solDown.coef)) / (2 * h);
    for (Eigen::Index j = 0; j < 4; ++j) EXPECT_NEAR(derivative[j], -2.0 * H(j, k), 1e-5 * H.cwiseAbs().maxCoeff()) << j << ", " << k;
    // d coef / d beta_k, the same way (coefficients at a bound do not move: 0 there).
    const Eigen::VectorXd moved = (solUp.coef - solDown.coef) / (2 * h);
    EXPECT_LE((moved - dcoef.col(k)).cwiseAbs().maxCoeff(), 1e-5 * dcoef.cwiseAbs().maxCoeff()) << k;
  }
}

/// A solution with the given free set (alpha strictly inside (0, C)) and the others at 0 or C.
learners::InnerSolution FabricatedSolution(const Eigen::VectorXd& y, const std::vector<Eigen::Index>& free, double C, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> inside(0.1 * C, 0.9 * C);
  learners::InnerSolution sol;
  sol.alpha = Eigen::VectorXd::Zero(y.size());
  for (Eigen::Index i = 0; i < y.size(); i += 3) sol.alpha[i] = C;
  for (const auto i : free) sol.alpha[i] = inside(rng);
  sol.coef = y.cwiseProduct(sol.alpha);
  return sol;
}

// Both ways of computing H agree with the definition: a positive definite K_FF (the Cholesky with the
// border eliminated; cond(K_FF) ~ 1e2 here, so the two backward-stable solves differ by ~1e-13
// relative: 1e-9 allowed), and a singular K_FF (rank 3 with 20 free vectors: the bordered system's
// minimum-norm solution).
TEST(SvmCurvature, EqualsTheBorderedSystemWhetherKffIsPositiveDefiniteOrSingular) {
  const Eigen::Index n = 40;
  std::mt19937 rng(8);
  std::normal_distribution<double> normal;
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) y[i] = i % 2 ? 1.0 : -1.0;
  std::vector<Eigen::Index> free;
  for (Eigen::Index i = 1; i < n; i += 2) free.push_back(i);
  for (const Eigen::Index rank : {Eigen::Index{n}, Eigen::Index{3}}) {
    Eigen::MatrixXd X(n, rank), Z(n, 5);
    for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = normal(rng);
    for (Eigen::Index i = 0; i < Z.size(); ++i) Z.data()[i] = normal(rng);
    const Eigen::MatrixXd K = X * X.transpose() + (rank == n ? 1.0 : 0.0) * Eigen::MatrixXd::Identity(n, n);
    const auto solver = learners::MakeSvcSolver(y, 2.0, 1e-6, 1000);
    const auto sol = FabricatedSolution(y, free, 2.0, 4);
    // Gradients K_j coef of three kernels in the span of the data (as the curvature's are).
    const Eigen::MatrixXd G = K * Z.leftCols(3) * (Z.leftCols(3).transpose() * sol.coef).asDiagonal();
    Eigen::MatrixXd H;
    ASSERT_TRUE(solver->Curvature(K, sol, [&](const Eigen::VectorXd&) { return G; }, H)) << rank;
    const Eigen::MatrixXd reference = BorderedReference(K, free, G);
    EXPECT_LE((H - reference).cwiseAbs().maxCoeff(), 1e-9 * reference.cwiseAbs().maxCoeff()) << "rank " << rank;
  }
}

// Shift, the warm start of ENMKL's next Newton solve: the solution moved by y dcoef where that stays in the box, else
// the projection onto the box and sum_i y_i alpha_i = 0 (each moving variable alpha_i + y_i (dcoef_i + lambda), clipped,
// with one lambda); variables with dcoef_i = 0 (at a bound) stay. Tolerances: 1e-14 on alphas of order C = 2 (one addition
// each), 1e-12 on the equality (a sum of 40 terms after a bisection to ~1e-30 of C).
TEST(SvcShift, MovesWithinTheBoxAndKeepsTheEqualityConstraint) {
  const Eigen::Index n = 40;
  const double C = 2.0;
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) y[i] = i % 2 ? 1.0 : -1.0;
  std::vector<Eigen::Index> free;
  for (Eigen::Index i = 1; i < n; i += 3) free.push_back(i);
  const auto solver = learners::MakeSvcSolver(y, C, 1e-6, 1000);
  const auto sol = FabricatedSolution(y, free, C, 4);
  std::mt19937 rng(2);
  std::normal_distribution<double> normal;
  Eigen::VectorXd dcoef = Eigen::VectorXd::Zero(n);
  for (const auto i : free) dcoef[i] = normal(rng);
  double mean = 0;
  for (const auto i : free) mean += dcoef[i];
  mean /= static_cast<double>(free.size());
  for (const auto i : free) dcoef[i] -= mean;  // 1'dcoef = 0, as d coef / d beta from the bordered system
  const double equality = y.dot(sol.alpha);
  for (const double scale : {1e-3, 10.0}) {  // within the box, then far out of it
    auto shifted = sol;
    ASSERT_TRUE(solver->Shift(shifted, scale * dcoef));
    EXPECT_TRUE((shifted.alpha.array() >= 0).all() && (shifted.alpha.array() <= C).all()) << scale;
    EXPECT_NEAR(y.dot(shifted.alpha), equality, 1e-12) << scale;
    EXPECT_EQ(shifted.coef, y.cwiseProduct(shifted.alpha));
    for (Eigen::Index i = 0; i < n; ++i) {
      if (dcoef[i] == 0.0) {
        EXPECT_EQ(shifted.alpha[i], sol.alpha[i]) << i;
      }
    }
    if (scale < 1) {
      EXPECT_LE((shifted.alpha - (sol.alpha + y.cwiseProduct(scale * dcoef))).cwiseAbs().maxCoeff(), 1e-14);
    } else {
      // Some variables clipped, and the unclipped ones all moved by y_i (scale dcoef_i + lambda) for one lambda.
      int clipped = 0;
      std::vector<double> lambdas;
      for (const auto i : free) {
        if (shifted.alpha[i] == 0.0 || shifted.alpha[i] == C) ++clipped;
        else lambdas.push_back(y[i] * (shifted.alpha[i] - sol.alpha[i]) - scale * dcoef[i]);
      }
      EXPECT_GT(clipped, 0);
      ASSERT_FALSE(lambdas.empty());
      for (const double l : lambdas) EXPECT_NEAR(l, lambdas.front(), 1e-12);
    }
  }
}

// A Newton step needs the columns K_j a of the support anyway: the support's quadratics are read off
// them (equal to the packed-outer-product quadratics to rounding: 1e-13 relative allowed for sums of 1,275
// terms), and nothing is computed for a one-vs-rest solution (quadratics summed over classes).
TEST(ScreenedNorms, QuadraticsFromProductsEqualTheExactOnes) {
  const auto p = MakeMklProblem(50, 5, {1}, 1.0, 6);
  const auto stackPtr = gram::MakeStack(p.kernels);
  const gram::KernelStack& stack = *stackPtr;
  std::mt19937 rng(1);
  std::normal_distribution<double> normal;
  learners::InnerSolution sol;
  sol.coef.resize(50);
  for (Eigen::Index i = 0; i < 50; ++i) sol.coef[i] = i % 4 ? normal(rng) : 0.0;
  learners::ScreenedNorms fromProducts(stack), exact(stack);
  fromProducts.Begin(sol);
  exact.Begin(sol);
  const std::vector<Eigen::Index> support{0, 2, 4};
  Eigen::MatrixXd products;
  ASSERT_TRUE(fromProducts.EvaluateWithProducts(support, products));
  EXPECT_EQ(products, stack.Products(support, sol.coef));
  EXPECT_EQ(fromProducts.exactEvaluations, 3);
  for (const auto j : support) {
    EXPECT_TRUE(fromProducts.Known(j));
    EXPECT_NEAR(fromProducts.Exact(j), exact.Exact(j), 1e-13 * exact.Exact(j)) << j;
  }
  EXPECT_FALSE(fromProducts.Known(1));
  learners::InnerSolution classes;
  classes.coefs = Eigen::MatrixXd::Ones(50, 2);
  learners::ScreenedNorms oneVsRest(stack);
  oneVsRest.Begin(classes);
  EXPECT_FALSE(oneVsRest.EvaluateWithProducts(support, products));
  EXPECT_EQ(oneVsRest.exactEvaluations, 0);
}

// A regular Newton system is solved (by LU) to rounding; a singular one gets the minimum-norm solution,
// as a complete orthogonal decomposition gives it.
TEST(NewtonSystem, RegularByLuSingularByMinimumNorm) {
  std::mt19937 rng(2);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd J(6, 6);
  for (Eigen::Index i = 0; i < J.size(); ++i) J.data()[i] = normal(rng);
  J += 6.0 * Eigen::MatrixXd::Identity(6, 6);
  Eigen::VectorXd rhs(6);
  for (Eigen::Index i = 0; i < 6; ++i) rhs[i] = normal(rng);
  const Eigen::VectorXd delta = learners::SolveNewtonSystem(J, rhs);
  EXPECT_LE((J * delta - rhs).norm(), 1e-13 * (J.norm() * delta.norm() + rhs.norm()));
  // Rank 4 of 6, consistent right-hand side.
  const Eigen::MatrixXd singular = J.leftCols(4) * J.topRows(4);
  const Eigen::VectorXd consistent = singular * rhs;
  const Eigen::VectorXd minimum = learners::SolveNewtonSystem(singular, consistent);
  const Eigen::VectorXd reference = singular.completeOrthogonalDecomposition().solve(consistent);
  EXPECT_LE((minimum - reference).norm(), 1e-10 * reference.norm());
  EXPECT_LE((singular * minimum - consistent).norm(), 1e-10 * consistent.norm());
}

}  // namespace
