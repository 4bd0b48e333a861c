// White-box tests of the SMO solver (modules/learners/src/smo.hpp): shrinking must change only the
// cost of the path, never where the solver stops. Optimality is checked with a gradient recomputed
// from scratch, independently of the solver's incrementally maintained one.
#include <gtest/gtest.h>

#include <limits>

#include "learner_fixtures.hpp"
#include "smo.hpp"

using neuromkl::learners::SmoResult;
using neuromkl::learners::SolveSmo;

namespace {

/// Maximal KKT violation m(a) - M(a) of LIBSVM's dual, from G = Q a + p computed afresh.
double Violation(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& C,
                 const Eigen::VectorXd& a) {
  const Eigen::Index n = K.rows(), l = y.size();
  Eigen::VectorXd u = Eigen::VectorXd::Zero(n);
  for (Eigen::Index j = 0; j < l; ++j) u[j % n] += y[j] * a[j];
  const Eigen::VectorXd Ku = K * u;
  double up = -std::numeric_limits<double>::infinity(), low = up;
  for (Eigen::Index t = 0; t < l; ++t) {
    const double yG = y[t] * (y[t] * Ku[t % n] + p[t]);
    const bool canRise = y[t] > 0 ? a[t] < C[t] : a[t] > 0;  // t in I_up
    const bool canFall = y[t] > 0 ? a[t] > 0 : a[t] < C[t];  // t in I_low
    if (canRise) up = std::max(up, -yG);
    if (canFall) low = std::max(low, yG);
  }
  return up + low;
}
double Violation(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, double C, const Eigen::VectorXd& a) {
  return Violation(K, y, p, Eigen::VectorXd::Constant(y.size(), C), a);
}

struct Classification {
  Eigen::MatrixXd K;
  Eigen::VectorXd y, p;
};

Classification Overlapping(int n, unsigned seed, double shift = 0.3) {
  const auto problem = neuromkl::testing::MakeMklProblem(n, 1, {0}, shift, seed);  // overlapping classes: many bounded alphas
  return {problem.kernels[0], problem.targets.y, Eigen::VectorXd::Constant(n, -1.0)};
}

TEST(Smo, ShrinkingReachesTheSameOptimumOnEveryVariable) {
  const auto c = Overlapping(400, 3);
  const double C = 2.0, tol = 1e-9;
  const SmoResult plain = SolveSmo(c.K, c.y, c.p, C, nullptr, tol, 10'000'000, false);
  const SmoResult shrunk = SolveSmo(c.K, c.y, c.p, C, nullptr, tol, 10'000'000, true);
  ASSERT_TRUE(plain.converged);
  ASSERT_TRUE(shrunk.converged);
  // The stopping rule holds on the whole problem, checked with an independent gradient.
  EXPECT_LT(Violation(c.K, c.y, c.p, C, shrunk.alpha), tol);
  EXPECT_NEAR(shrunk.violation, Violation(c.K, c.y, c.p, C, shrunk.alpha), 1e-12);
  // Both are tol-optimal points of one convex dual: objectives agree to about tol * sum(alpha)
  // (the duality-gap bound of an epsilon-KKT point), and the unique primal decision values to a
  // few digits more than the 1e-6 the learners promise.
  EXPECT_NEAR(shrunk.objective, plain.objective, 1e-7 * std::abs(plain.objective));
  const Eigen::VectorXd fPlain = c.K * c.y.cwiseProduct(plain.alpha), fShrunk = c.K * c.y.cwiseProduct(shrunk.alpha);
  EXPECT_LT((fPlain - fShrunk).cwiseAbs().maxCoeff() + std::abs(plain.rho - shrunk.rho), 1e-6 * fPlain.cwiseAbs().maxCoeff());
  // The case exercises shrinking: a quarter or more of the variables end at a bound.
  EXPECT_GT((shrunk.alpha.array() >= C).count() + (shrunk.alpha.array() <= 0).count(), 100);
}

TEST(Smo, ShrinkingSolvesRegressionsDoubledVariables) {
  // epsilon-SVR: l = 2n variables on one n x n kernel (rows t and t + n share K's row).
  const auto problem = neuromkl::testing::MakeMklProblem(150, 1, {}, 0.0, 9, neuromkl::learners::Task::Regression);
  const Eigen::Index n = 150;
  const Eigen::VectorXd z = problem.targets.y;
  Eigen::VectorXd y(2 * n), p(2 * n);
  y << Eigen::VectorXd::Ones(n), -Eigen::VectorXd::Ones(n);
  p << 0.1 - z.array(), 0.1 + z.array();
  const double C = 1.0, tol = 1e-9;
  const SmoResult plain = SolveSmo(problem.kernels[0], y, p, C, nullptr, tol, 10'000'000, false);
  const SmoResult shrunk = SolveSmo(problem.kernels[0], y, p, C, nullptr, tol, 10'000'000, true);
  ASSERT_TRUE(shrunk.converged);
  EXPECT_LT(Violation(problem.kernels[0], y, p, C, shrunk.alpha), tol);
  EXPECT_NEAR(shrunk.objective, plain.objective, 1e-7 * std::abs(plain.objective));
  EXPECT_NEAR(shrunk.rho, plain.rho, 1e-6);
}

TEST(Smo, WarmStartAndIterationCapKeepTheGradientWhole) {
  const auto c = Overlapping(300, 5);
  const double tol = 1e-8;
  const SmoResult first = SolveSmo(c.K, c.y, c.p, 1.0, nullptr, tol, 10'000'000, true);
  // A warm start from a neighbouring C (a grid search) must reach the same optimum as a cold start.
  const SmoResult warm = SolveSmo(c.K, c.y, c.p, 2.0, &first.alpha, tol, 10'000'000, true);
  const SmoResult cold = SolveSmo(c.K, c.y, c.p, 2.0, nullptr, tol, 10'000'000, true);
  EXPECT_LT(Violation(c.K, c.y, c.p, 2.0, warm.alpha), tol);
  EXPECT_NEAR(warm.objective, cold.objective, 1e-6 * std::abs(cold.objective));
  // Stopped by the cap after shrinking has started (the first shrink is at iteration min(l, 1000)):
  // the reported violation and bias come from the whole, rebuilt gradient.
  const SmoResult capped = SolveSmo(c.K, c.y, c.p, 2.0, nullptr, 1e-12, 350, true);
  EXPECT_FALSE(capped.converged);
  EXPECT_EQ(capped.iterations, 350);
  EXPECT_NEAR(capped.violation, Violation(c.K, c.y, c.p, 2.0, capped.alpha), 1e-9);
  EXPECT_TRUE(std::isfinite(capped.rho));
}

TEST(Smo, PerVariableBoundsEqualDuplicatedSubjects) {
  // A subject with bound 2C is the same problem as that subject listed twice with bound C (the two
  // copies' alphas add up): class weights as per-class C. Every positive subject is doubled here.
  const auto c = Overlapping(120, 13, 1.0);
  const double C = 5.0, tol = 1e-10;
  const Eigen::Index n = c.K.rows();
  Eigen::VectorXd upper(n);
  for (Eigen::Index i = 0; i < n; ++i) upper[i] = c.y[i] > 0 ? 2 * C : C;
  const SmoResult weighted = SolveSmo(c.K, c.y, c.p, upper, nullptr, tol, 10'000'000, true);
  ASSERT_TRUE(weighted.converged);
  EXPECT_LT(Violation(c.K, c.y, c.p, upper, weighted.alpha), tol);
  EXPECT_TRUE((weighted.alpha.array() <= upper.array()).all());
  EXPECT_GT((weighted.alpha.array() >= upper.array()).count(), 0);  // some bounds are active
  // The duplicated problem, solved with the scalar C.
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < n; ++i) {
    rows.push_back(i);
    if (c.y[i] > 0) rows.push_back(i);
  }
  const auto big = static_cast<Eigen::Index>(rows.size());
  Eigen::MatrixXd K2(big, big);
  Eigen::VectorXd y2(big);
  for (Eigen::Index a = 0; a < big; ++a) {
    y2[a] = c.y[rows[static_cast<std::size_t>(a)]];
    for (Eigen::Index b = 0; b < big; ++b) K2(a, b) = c.K(rows[static_cast<std::size_t>(a)], rows[static_cast<std::size_t>(b)]);
  }
  const SmoResult doubled = SolveSmo(K2, y2, Eigen::VectorXd::Constant(big, -1.0), C, nullptr, tol, 10'000'000, true);
  ASSERT_TRUE(doubled.converged);
  Eigen::VectorXd coef = Eigen::VectorXd::Zero(n);  // y_i * (sum of the copies' alphas)
  for (Eigen::Index a = 0; a < big; ++a) coef[rows[static_cast<std::size_t>(a)]] += y2[a] * doubled.alpha[a];
  // Decision values f = K coef - rho are unique (the primal is strictly convex in w); both are
  // 1e-10-optimal, so they agree far below the learners' 1e-6 promise.
  const Eigen::VectorXd fWeighted = (c.K * c.y.cwiseProduct(weighted.alpha)).array() - weighted.rho;
  const Eigen::VectorXd fDoubled = (c.K * coef).array() - doubled.rho;
  const double scale = fWeighted.cwiseAbs().maxCoeff();
  ASSERT_GT((c.K * c.y.cwiseProduct(weighted.alpha)).cwiseAbs().maxCoeff(), 0.1);  // a non-trivial w
  EXPECT_LT((fWeighted - fDoubled).cwiseAbs().maxCoeff() / scale, 1e-7);
  EXPECT_NEAR(weighted.objective, doubled.objective, 1e-8 * std::abs(doubled.objective));
}


/// Fan, Chen & Lin's WSS 2 and LIBSVM's pair update as plain loops (no shrinking, every gradient updated
/// each iteration), for C-SVC from alpha = 0: the definition the solver's faster loops must follow
/// exactly, ties included (the later variable wins them, as `>=` / `<=` in one pass do).
Eigen::VectorXd PlainSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, double C, double tol, long& iterations) {
  const Eigen::Index l = y.size();
  const double inf = std::numeric_limits<double>::infinity();
  Eigen::VectorXd a = Eigen::VectorXd::Zero(l), G = Eigen::VectorXd::Constant(l, -1.0);
  iterations = 0;
  while (true) {
    double gMax = -inf, gMax2 = -inf, best = inf;
    Eigen::Index i = -1, j = -1;
    for (Eigen::Index t = 0; t < l; ++t) {
      const bool up = y[t] > 0 ? a[t] < C : a[t] > 0;
      if (up && -y[t] * G[t] >= gMax) { gMax = -y[t] * G[t]; i = t; }
    }
    for (Eigen::Index t = 0; i >= 0 && t < l; ++t) {
      const bool low = y[t] > 0 ? a[t] > 0 : a[t] < C;
      if (!low) continue;
      const double g = y[t] * G[t];
      if (g >= gMax2) gMax2 = g;
      const double gradDiff = gMax + g;
      if (gradDiff > 0) {
        const double quad = K(i, i) + K(t, t) - 2.0 * K(t, i);  // column i, as the solver reads it
        const double objDiff = -(gradDiff * gradDiff) / (quad > 0 ? quad : 1e-12);
        if (objDiff <= best) { best = objDiff; j = t; }
      }
    }
    if (i < 0 || j < 0 || gMax + gMax2 < tol) return a;
    ++iterations;
    const double oldI = a[i], oldJ = a[j], Qij = y[i] * y[j] * K(j, i);
    if (y[i] != y[j]) {
      double quad = K(i, i) + K(j, j) + 2.0 * Qij;
      if (quad <= 0) quad = 1e-12;
      const double delta = (-G[i] - G[j]) / quad, diff = a[i] - a[j];
      a[i] += delta;
      a[j] += delta;
      if (diff > 0) {
        if (a[j] < 0) { a[j] = 0; a[i] = diff; }
      } else if (a[i] < 0) {
        a[i] = 0; a[j] = -diff;
      }
      if (diff > 0) {
        if (a[i] > C) { a[i] = C; a[j] = C - diff; }
      } else if (a[j] > C) {
        a[j] = C; a[i] = C + diff;
      }
    } else {
      double quad = K(i, i) + K(j, j) - 2.0 * Qij;
      if (quad <= 0) quad = 1e-12;
      const double delta = (G[i] - G[j]) / quad, sum = a[i] + a[j];
      a[i] -= delta;
      a[j] += delta;
      if (sum > C) {
        if (a[i] > C) { a[i] = C; a[j] = sum - C; }
      } else if (a[j] < 0) {
        a[j] = 0; a[i] = sum;
      }
      if (sum > C) {
        if (a[j] > C) { a[j] = C; a[i] = sum - C; }
      } else if (a[i] < 0) {
        a[i] = 0; a[j] = sum;
      }
    }
    const double ci = y[i] * (a[i] - oldI), cj = y[j] * (a[j] - oldJ);
    for (Eigen::Index t = 0; t < l; ++t) G[t] += y[t] * (ci * K(t, i) + cj * K(t, j));
  }
}

TEST(Smo, SelectsThePairsOfThePlainDefinitionBitForBit) {
  // Duplicated subjects make exact ties in the selection (equal gradients and curvatures from the first
  // iteration on); the solver without shrinking must walk the plain loops' path to the same bits.
  const auto c = Overlapping(60, 21);
  const Eigen::Index n = 120;
  Eigen::MatrixXd K(n, n);
  Eigen::VectorXd y(n);
  for (Eigen::Index a = 0; a < n; ++a) {
    y[a] = c.y[a % 60];
    for (Eigen::Index b = 0; b < n; ++b) K(a, b) = c.K(a % 60, b % 60);
  }
  for (const double C : {0.5, 10.0}) {
    long iterations = 0;
    const Eigen::VectorXd expected = PlainSmo(K, y, C, 1e-8, iterations);
    const SmoResult r = SolveSmo(K, y, Eigen::VectorXd::Constant(n, -1.0), C, nullptr, 1e-8, 10'000'000, false);
    ASSERT_TRUE(r.converged);
    EXPECT_EQ(r.iterations, iterations) << "C = " << C;
    EXPECT_EQ(r.alpha, expected) << "C = " << C;  // exact: the same operations in the same order
    EXPECT_GT(iterations, 50);
    EXPECT_GT((r.alpha.array() >= C).count(), 0);  // some variables at each bound: both sets are exercised
    EXPECT_GT((r.alpha.array() <= 0).count(), 0);
  }
}

}  // namespace
