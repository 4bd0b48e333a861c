// Reference values for KELM (Huang et al. 2012), MK-ELM (Liu et al. 2015), MKL-BP (Qi, Liang & Xu 2018),
// BSADMM-KELM (Su, Xu & Qin 2021) and DKELM (Zhang, Xia & Liu).
//
// Tolerances: closed forms (KELM, DKELM exact) are one Cholesky/LU solve of a well-conditioned
// system: 1e-10. Iterative solvers are compared at their own stopping accuracy: ADMM vs SMO to
// 1e-4 relative, the agreement required of the ADMM solver (polished ADMM is far better); weights found by brute-force
// search over a grid of step h agree to ~h.
#include <cmath>
#include <numeric>

#include <Eigen/Cholesky>
#include <Eigen/LU>
#include <gmock/gmock.h>

#include "learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using namespace neuromkl;
using learners::MakeLearner;
using neuromkl::testing::MakeMklProblem;
using neuromkl::testing::MatrixNear;

namespace {

learners::Targets Binary(std::initializer_list<double> y) {
  learners::Targets t;
  t.y = Eigen::Map<const Eigen::VectorXd>(y.begin(), static_cast<Eigen::Index>(y.size()));
  return t;
}

/// The SVM (C-SVC) dual value on K, solved tightly: the reference J for kernel-weight searches.
double SvmDual(const Eigen::MatrixXd& K, const learners::Targets& t, double c) {
  return MakeLearner("svm", {{"c", c}, {"tolerance", 1e-11}})->Fit({K}, t).info.objective;
}

// ------------------------------- KELM -------------------------------

TEST(Kelm, TwoSubjectsByHand) {
  // K = [2 1; 1 2], C = 1: (K + I)^-1 = 1/8 [3 -1; -1 3], alpha = (K + I)^-1 [1; -1] = [0.5; -0.5],
  // training decision K alpha = [0.5; -0.5].
  Eigen::MatrixXd K(2, 2);
  K << 2, 1, 1, 2;
  const auto m = MakeLearner("kelm", {{"c", 1}, {"bias", 0}})->Fit({K}, Binary({1, -1}));
  EXPECT_TRUE(MatrixNear(m.coef, Eigen::Vector2d(0.5, -0.5), 1e-14));
  EXPECT_TRUE(MatrixNear(m.Decision({K}), Eigen::Vector2d(0.5, -0.5), 1e-14));
  EXPECT_EQ(m.bias, 0.0);
}

TEST(Kelm, WithBiasIsKernelRidgeWithLambdaOneOverC) {
  const auto p = MakeMklProblem(30, 3, {0}, 0.5, 7, learners::Task::Regression);
  const auto kelm = MakeLearner("kelm", {{"c", 4}})->Fit(p.kernels, p.targets);
  const auto krr = MakeLearner("krr", {{"lambda", 0.25}})->Fit(p.kernels, p.targets);
  EXPECT_TRUE(MatrixNear(kelm.Decision(p.kernels), krr.Decision(p.kernels), 1e-10, 1e-10));
}

TEST(Kelm, MulticlassScoresAreOneHotOutputs) {
  // Three classes on three orthogonal directions: each class scores highest on its own subjects.
  const int n = 30;
  Eigen::MatrixXd X = Eigen::MatrixXd::Zero(n, 3);
  learners::Targets t{learners::Task::Multiclass, Eigen::VectorXd(n), 3};
  for (int i = 0; i < n; ++i) {
    t.y[i] = i % 3;
    X(i, i % 3) = 1.0 + 0.01 * i;
  }
  const Eigen::MatrixXd K = X * X.transpose();
  const auto m = MakeLearner("kelm", {{"c", 10}})->Fit({K}, t);
  ASSERT_TRUE(m.Multiclass());
  const Eigen::MatrixXd S = m.Scores({K});
  ASSERT_EQ(S.rows(), n);
  ASSERT_EQ(S.cols(), 3);
  for (int i = 0; i < n; ++i) {
    Eigen::Index best;
    S.row(i).maxCoeff(&best);
    EXPECT_EQ(best, i % 3) << "subject " << i;
  }
  EXPECT_THROW(m.Decision({K}), InputError);
  // Two classes coded as multiclass: the score difference is twice the binary decision.
  const auto b = MakeMklProblem(20, 1, {0}, 1.0, 3);
  learners::Targets two{learners::Task::Multiclass, (b.targets.y.array() + 1) / 2, 2};
  const auto mm = MakeLearner("kelm", {{"c", 2}})->Fit(b.kernels, two);
  const auto bm = MakeLearner("kelm", {{"c", 2}})->Fit(b.kernels, b.targets);
  const Eigen::MatrixXd s2 = mm.Scores(b.kernels);
  EXPECT_TRUE(MatrixNear(s2.col(1) - s2.col(0), 2 * bm.Decision(b.kernels), 1e-10));
}

TEST(Kelm, MulticlassLabelsOutOfRangeAreRejected) {
  const auto b = MakeMklProblem(12, 2, {0}, 1.0, 3);
  learners::Targets three{learners::Task::Multiclass, Eigen::VectorXd(12), 3};
  for (int i = 0; i < 12; ++i) three.y[i] = i % 3;
  three.y[4] = 3;
  EXPECT_THAT([&] { MakeLearner("svm", {})->Fit(b.kernels, three); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("labels must be 0..2")));
  EXPECT_THAT([&] { MakeLearner("kelm", {})->Fit(b.kernels, three); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("labels must be 0..2")));
}

// ------------------------------- MK-ELM -------------------------------

/// 1/2 tr(T' (K + I/C)^-1 T) with centred T: the MK-ELM objective at fixed weights.
double ElmObjective(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, double c) {
  Eigen::MatrixXd A = K;
  A.diagonal().array() += 1 / c;
  const Eigen::VectorXd yc = y.array() - y.mean();
  return 0.5 * yc.dot(A.llt().solve(yc));
}

TEST(Mkelm, OneKernelIsKelm) {
  const auto p = MakeMklProblem(25, 1, {0}, 0.8, 11);
  const auto a = MakeLearner("mkelm", {{"c", 3}})->Fit(p.kernels, p.targets);
  const auto b = MakeLearner("kelm", {{"c", 3}})->Fit(p.kernels, p.targets);
  EXPECT_EQ(a.beta[0], 1.0);
  EXPECT_TRUE(MatrixNear(a.Decision(p.kernels), b.Decision(p.kernels), 1e-10, 1e-10));
}

TEST(Mkelm, SparseWeightsMinimiseTheObjectiveOverTheSimplex) {
  // Two kernels: brute force over gamma in [0, 1] (step 1e-4) locates the minimiser of the convex
  // objective; MK-ELM's fixed point must sit there (to the grid step and its 1e-4 stopping rule).
  const auto p = MakeMklProblem(40, 2, {0, 1}, 0.6, 5, learners::Task::Classification, 4);
  const double c = 2;
  double bestG = 0, best = INFINITY;
  for (int i = 0; i <= 10000; ++i) {
    const double g = i / 10000.0;
    const double v = ElmObjective(g * p.kernels[0] + (1 - g) * p.kernels[1], p.targets.y, c);
    if (v < best) best = v, bestG = g;
  }
  const auto m = MakeLearner("mkelm", {{"c", c}, {"tolerance", 1e-7}})->Fit(p.kernels, p.targets);
  EXPECT_EQ(m.info.status, learners::FitStatus::Converged);
  EXPECT_NEAR(m.beta[0], bestG, 2e-3) << "brute force minimum at " << bestG;
  EXPECT_NEAR(m.info.objective, best, 1e-6 * best);
}

TEST(Mkelm, LpWeightsOfIdenticalKernelsAreEqualOnTheLpSphere) {
  const auto p = MakeMklProblem(20, 1, {0}, 1.0, 2);
  const learners::KernelList two = {p.kernels[0], p.kernels[0]};
  const auto m = MakeLearner("mkelm", {{"norm", 3}})->Fit(two, p.targets);
  EXPECT_NEAR(m.beta[0], 0.5, 1e-12);
  // sum gamma^3 = 1 with equal weights: gamma = 2^(-1/3), so K_gamma = 2^(2/3) K: KELM with C' = 2^(2/3) C.
  const auto kelm = MakeLearner("kelm", {{"c", std::pow(2.0, 2.0 / 3.0)}})->Fit({p.kernels[0]}, p.targets);
  EXPECT_TRUE(MatrixNear(m.Decision(two), kelm.Decision({p.kernels[0]}), 1e-10, 1e-10));
}

/// Sparse MK-ELM's optimum is l1-MKL's: with the model's coefficients a = (K_gamma + I/C)^-1 (T - offset),
/// c_j = sqrt(a'K_j a) is the same for every kernel of non-zero weight and no larger for the others. The largest
/// violation of those conditions over every kernel, relative to the support's level (recomputed from the model).
double L1Violation(const learners::Model& m, const learners::KernelList& kernels) {
  double level = 0, lowest = INFINITY, outside = 0;
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    const double c = std::sqrt(m.coef.dot(kernels[j] * m.coef));
    if (m.beta[static_cast<Eigen::Index>(j)] > 0) {
      level = std::max(level, c);
      lowest = std::min(lowest, c);
    } else {
      outside = std::max(outside, c);
    }
  }
  return std::max(level - lowest, outside - level) / level;
}

TEST(Mkelm, SparseWeightsAreTheL1OptimumOverEveryKernel) {
  // MK-ELM's alternation as published (Liu et al. 2015) stops on max |delta gamma| < 1e-4 up to 1.2e-2 from this point,
  // with tens of kernels at small weights the optimum has at 0 (n = 120-200, 116 region-like kernels). The fit is ENMKL's
  // at mu = 1: its Newton step certifies a distance below `tolerance`, so the conditions hold to about the inner solve's
  // rounding, and the kernels off the support have weight exactly 0. With and without the offset (bias 0: T as is).
  const auto p = neuromkl::testing::RegionLikeProblem(90, 40, 4, 3);
  for (const double bias : {1.0, 0.0})
    for (const double c : {0.3, 30.0}) {
      const auto m = MakeLearner("mkelm", {{"c", c}, {"bias", bias}})->Fit(p.kernels, p.targets);
      EXPECT_EQ(m.info.status, learners::FitStatus::Converged);
      EXPECT_LT(L1Violation(m, p.kernels), 1e-6) << "c " << c << ", bias " << bias;
      const auto selected = (m.beta.array() > 0).count();
      EXPECT_GE(selected, 2);
      EXPECT_LT(selected, 40);  // sparse: most kernels at exactly 0
      EXPECT_NEAR(m.beta.sum(), 1.0, 1e-12);
      // The model is a kernel ELM on its combined kernel: with every weight fixed, KELM gives the same decisions.
      Eigen::MatrixXd combined = Eigen::MatrixXd::Zero(90, 90);
      for (std::size_t j = 0; j < p.kernels.size(); ++j) combined += m.beta[static_cast<Eigen::Index>(j)] * p.kernels[j];
      const auto kelm = MakeLearner("kelm", {{"c", c}, {"bias", bias}})->Fit({combined}, p.targets);
      EXPECT_TRUE(MatrixNear(m.Decision(p.kernels), kelm.Decision({combined}), 1e-7, 1e-7)) << "c " << c << ", bias " << bias;
      EXPECT_EQ(m.bias, bias == 0.0 ? 0.0 : p.targets.y.mean());  // the offset: the targets' mean, or none
    }
}

TEST(Mkelm, NoiseKernelsLoseWeight) {
  const auto p = MakeMklProblem(60, 4, {2}, 1.5, 9);
  const auto m = MakeLearner("mkelm", {{"c", 10}})->Fit(p.kernels, p.targets);
  Eigen::Index top;
  m.beta.maxCoeff(&top);
  EXPECT_EQ(top, 2);
  EXPECT_GT(m.beta[2], 0.5);
}

// ------------------------------- MKL-BP -------------------------------

TEST(MklBp, OneKernelIsTheSvm) {
  const auto p = MakeMklProblem(30, 1, {0}, 0.7, 4);
  const auto a = MakeLearner("mkl_bp", {{"c", 2}, {"svm_tolerance", 1e-9}})->Fit(p.kernels, p.targets);
  // One kernel: u solves v u + (1 - v) u^2 = 1 (v = 0.5): u = 1, i.e. the SVM on K itself.
  const auto b = MakeLearner("svm", {{"c", 2}, {"tolerance", 1e-9}})->Fit(p.kernels, p.targets);
  EXPECT_TRUE(MatrixNear(a.Decision(p.kernels), b.Decision(p.kernels), 1e-6, 1e-6));
}

TEST(MklBp, WeightsMinimiseTheSvmDualOnTheConstraintSurface) {
  // Two kernels: parametrise the surface v (u1 + u2) + (1 - v)(u1^p + u2^p) = 1 by u1 and scan.
  const auto p = MakeMklProblem(40, 2, {0, 1}, 0.5, 8, learners::Task::Classification, 4);
  const double c = 1;
  for (const auto& [pp, v] : std::vector<std::pair<double, double>>{{2, 0.5}, {3, 0.0}, {2, 0.9}}) {
    auto u2Of = [&](double u1) {  // solve for u2 >= 0 by bisection
      double lo = 0, hi = 2;
      for (int i = 0; i < 100; ++i) {
        const double mid = (lo + hi) / 2;
        (v * (u1 + mid) + (1 - v) * (std::pow(u1, pp) + std::pow(mid, pp)) < 1 ? lo : hi) = mid;
      }
      return lo;
    };
    double umax = 0;
    while (v * umax + (1 - v) * std::pow(umax, pp) < 1) umax += 1e-4;
    double best = INFINITY, bestShare = 0;
    for (int i = 0; i <= 400; ++i) {
      const double u1 = umax * i / 400.0, u2 = u2Of(u1);
      const double J = SvmDual(u1 * p.kernels[0] + u2 * p.kernels[1], p.targets, c);
      if (J < best) best = J, bestShare = u1 / (u1 + u2);
    }
    const auto m = MakeLearner("mkl_bp", {{"c", c}, {"p", pp}, {"v", v}, {"gap_tolerance", 1e-6}, {"svm_tolerance", 1e-10}})->Fit(p.kernels, p.targets);
    EXPECT_EQ(m.info.status, learners::FitStatus::Converged) << "p " << pp << " v " << v;
    EXPECT_NEAR(m.beta[0], bestShare, 1e-2) << "p " << pp << " v " << v;
    EXPECT_NEAR(m.info.objective, best, 1e-4 * best) << "p " << pp << " v " << v;  // J is flat at its minimum
  }
}

TEST(MklBp, VOneIsL1MklAsSimpleMkl) {
  const auto p = MakeMklProblem(40, 4, {0, 2}, 0.8, 3);
  // v = 1 is l1-MKL, fitted by ENMKL's machinery at mu = 1 (Frank-Wolfe zig-zags between the oracle's vertices):
  // the optimum SimpleMKL reaches at a tight gap, to the precision of the two fits (Frank-Wolfe alone ends 5e-3 away).
  const auto bp = MakeLearner("mkl_bp", {{"c", 1}, {"v", 1}, {"svm_tolerance", 1e-9}})->Fit(p.kernels, p.targets);
  const auto smkl = MakeLearner("simplemkl", {{"c", 1}, {"gap_tolerance", 1e-6}, {"svm_tolerance", 1e-9}, {"max_iterations", 2000},
                                              {"line_search_tolerance", 1e-4}})
                        ->Fit(p.kernels, p.targets);
  EXPECT_EQ(bp.info.status, learners::FitStatus::Converged);
  EXPECT_NEAR(bp.info.objective, smkl.info.objective, 1e-4 * std::abs(smkl.info.objective));
  EXPECT_TRUE(MatrixNear(bp.beta, smkl.beta, 1e-4)) << bp.beta.transpose() << "\n" << smkl.beta.transpose();
}

TEST(MklBp, WeightsMeetTheOptimalityConditionsOverEveryKernel) {
  // Frank-Wolfe alone, stopped at a gap of 1e-3, ends up to 3.3e-3 from the optimum, and at v = 0.9 with every kernel
  // at a small weight where the optimum has 1-18 (n = 120-200, 116 region-like kernels); Newton's
  // steps reach the default gap of 1e-7 and tighter ones. At the optimum u of g(u) = v sum u + (1 - v) sum u^p = 1, with the
  // quadratics s_j = a'K_j a of the SVM's coefficients a on sum_j u_j K_j and a multiplier lambda:
  // s_j = lambda (v + p (1 - v) u_j^(p - 1)) where u_j > 0, s_j <= lambda v where u_j = 0. Recomputed from the model.
  const auto prob = neuromkl::testing::RegionLikeProblem(90, 40, 4, 7);
  const double pp = 2;
  // Tolerances: the residual of the conditions shrinks with the gap's square root (J is smooth at the optimum), so the
  // default gap (1e-7) leaves them to a few 1e-4 of the multiplier (measured up to 2.2e-4) and a gap of 1e-11 within
  // 1e-6 (the SMO's 1e-8 limits the quadratics beyond); the tolerances leave a factor 5-10 for other builds' rounding.
  for (const auto& [gap, tolerance] : std::vector<std::pair<double, double>>{{1e-7, 1e-3}, {1e-11, 1e-5}})
  for (const double v : {0.0, 0.5, 0.9})
    for (const double c : {0.3, 30.0}) {
      const auto m = MakeLearner("mkl_bp", {{"c", c}, {"p", pp}, {"v", v}, {"gap_tolerance", gap}})->Fit(prob.kernels, prob.targets);
      ASSERT_EQ(m.info.status, learners::FitStatus::Converged) << "v " << v << ", c " << c;
      // beta = u / sum u: the scale t with g(t beta) = 1 gives u, and coef = a sum u.
      double lo = 0, hi = 1e6;
      for (int i = 0; i < 200; ++i) {
        const double mid = 0.5 * (lo + hi);
        (v * mid * m.beta.sum() + (1 - v) * (mid * m.beta).array().pow(pp).sum() < 1 ? lo : hi) = mid;
      }
      const Eigen::VectorXd u = lo * m.beta, a = m.coef / u.sum();
      Eigen::VectorXd s(u.size()), w(u.size());
      for (Eigen::Index j = 0; j < u.size(); ++j) {
        s[j] = a.dot(prob.kernels[static_cast<std::size_t>(j)] * a);
        w[j] = v + pp * (1 - v) * std::pow(u[j], pp - 1);
      }
      double num = 0, den = 0;
      for (Eigen::Index j = 0; j < u.size(); ++j)
        if (u[j] > 0) num += s[j] * w[j], den += w[j] * w[j];
      const double lambda = num / den;
      for (Eigen::Index j = 0; j < u.size(); ++j) {
        if (u[j] > 0) {
          EXPECT_NEAR(s[j], lambda * w[j], tolerance * lambda) << "kernel " << j << ", v " << v << ", c " << c << ", gap " << gap;
        } else {
          EXPECT_LE(s[j], lambda * v * (1 + tolerance)) << "kernel " << j << ", v " << v << ", c " << c << ", gap " << gap;
        }
      }
      if (v > 0) {
        EXPECT_LT((m.beta.array() > 0).count(), 40) << "v " << v << ", c " << c;  // sparse: kernels at exactly 0
      }
    }
}

// ------------------------------- BSADMM-KELM -------------------------------

TEST(BsadmmKelm, WithBiasMatchesTheSmoSvm) {
  for (double c : {0.1, 1.0, 100.0}) {
    const auto p = MakeMklProblem(80, 2, {0}, 0.6, 13);
    const auto svm = MakeLearner("svm", {{"c", c}, {"tolerance", 1e-10}})->Fit(p.kernels, p.targets);
    const auto admm = MakeLearner("bsadmm_kelm", {{"c", c}, {"bias", 1}})->Fit(p.kernels, p.targets);
    EXPECT_EQ(admm.info.status, learners::FitStatus::Converged) << "C " << c;
    const Eigen::VectorXd a = admm.Decision(p.kernels), b = svm.Decision(p.kernels);
    EXPECT_TRUE(MatrixNear(a, b, 1e-4 * b.cwiseAbs().maxCoeff(), 1e-4)) << "C " << c;
    EXPECT_NEAR(admm.info.objective, svm.info.objective, 1e-6 * std::abs(svm.info.objective)) << "C " << c;
    // Without polishing the ADMM iterate alone meets the same 1e-4 bar.
    const auto raw = MakeLearner("bsadmm_kelm", {{"c", c}, {"bias", 1}, {"polish", 0}})->Fit(p.kernels, p.targets);
    EXPECT_TRUE(MatrixNear(raw.Decision(p.kernels), b, 1e-4 * b.cwiseAbs().maxCoeff(), 1e-4)) << "C " << c;
  }
}

TEST(BsadmmKelm, WithoutBiasSolvesTheBoxQpOfSeed003) {
  // Independent reference: exact coordinate descent on min 1/2 v'Pv - 1'v, 0 <= v <= C.
  const auto p = MakeMklProblem(50, 1, {0}, 0.5, 17);
  const double C = 2;
  const Eigen::MatrixXd P = p.kernels[0].cwiseProduct(p.targets.y * p.targets.y.transpose());
  Eigen::VectorXd v = Eigen::VectorXd::Zero(50);
  for (int sweep = 0; sweep < 20000; ++sweep)
    for (Eigen::Index i = 0; i < 50; ++i) v[i] = std::clamp(v[i] - (P.row(i).dot(v) - 1) / P(i, i), 0.0, C);
  const Eigen::VectorXd reference = p.kernels[0] * p.targets.y.cwiseProduct(v);
  const auto m = MakeLearner("bsadmm_kelm", {{"c", C}})->Fit(p.kernels, p.targets);
  EXPECT_EQ(m.bias, 0.0);
  EXPECT_TRUE(MatrixNear(m.Decision(p.kernels), reference, 1e-6, 1e-6));
}

TEST(BsadmmKelm, WarmStartsChangeThePathNotTheSolution) {
  const auto p = MakeMklProblem(60, 1, {0}, 0.6, 23);
  const auto first = MakeLearner("bsadmm_kelm", {{"c", 1}, {"bias", 1}})->Fit(p.kernels, p.targets);
  learners::FitOptions o;
  o.warmStart = &first;
  const auto cold = MakeLearner("bsadmm_kelm", {{"c", 3}, {"bias", 1}})->Fit(p.kernels, p.targets);
  const auto warm = MakeLearner("bsadmm_kelm", {{"c", 3}, {"bias", 1}})->Fit(p.kernels, p.targets, o);
  EXPECT_TRUE(MatrixNear(warm.Decision(p.kernels), cold.Decision(p.kernels), 1e-6, 1e-6));
}

// ------------------------------- DKELM -------------------------------

TEST(Dkelm, NoDeformationIsKelm) {
  const auto p = MakeMklProblem(30, 2, {0}, 0.8, 31);
  const auto a = MakeLearner("dkelm", {{"c", 2}, {"deformation", 0}})->Fit(p.kernels, p.targets);
  const auto b = MakeLearner("kelm", {{"c", 2}})->Fit(p.kernels, p.targets);
  EXPECT_TRUE(MatrixNear(a.Decision(p.kernels), b.Decision(p.kernels), 1e-10, 1e-10));
}

/// Points on a line at 0, 1, 2, ..., the kernel linear plus 1: k(x, z) = 1 + x z / 100.
Eigen::MatrixXd LineKernel(const Eigen::VectorXd& x) { return (Eigen::MatrixXd::Ones(x.size(), x.size()) + x * x.transpose() / 100).eval(); }

TEST(Dkelm, DeformedKernelByHandOnAChain) {
  // Five points on a line, 1 nearest neighbour: the graph is the chain 0-1-2-3-4 (binary weights).
  // Labelled: 0 and 4 (NaN = unlabelled for 1, 2, 3). Reference built here with dense algebra.
  const Eigen::VectorXd x = (Eigen::VectorXd(5) << 0, 1, 2, 3, 4).finished();
  const Eigen::MatrixXd K = LineKernel(x);
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(5, 5);
  for (int i = 0; i < 4; ++i) L(i, i + 1) = L(i + 1, i) = -1;
  for (int i = 0; i < 5; ++i) L(i, i) = -L.row(i).sum();
  const double r = 0.5, C = 10;
  const Eigen::MatrixXd M = r * L;
  const Eigen::MatrixXd B = (Eigen::MatrixXd::Identity(5, 5) + M * K).inverse() * M;
  const Eigen::MatrixXd Kd = K - K * B * K;  // deformed kernel over all five points
  const std::vector<int> lab = {0, 4};
  Eigen::Matrix2d KLL;
  KLL << Kd(0, 0), Kd(0, 4), Kd(4, 0), Kd(4, 4);
  const Eigen::Vector2d y(-1, 1);
  const Eigen::Vector2d alpha = (KLL + Eigen::Matrix2d::Identity() / C).inverse() * y;
  // Test points 0.5 and 3.5: k~(x, z) = k(x, z) - k_x' B k_z.
  const Eigen::VectorXd xt = (Eigen::VectorXd(2) << 0.5, 3.5).finished();
  Eigen::MatrixXd Kt(2, 5);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) Kt(i, j) = 1 + xt[i] * x[j] / 100;
  const Eigen::MatrixXd KdT = Kt - Kt * B * K;
  const Eigen::Vector2d expected(KdT.row(0)(lab).dot(alpha), KdT.row(1)(lab).dot(alpha));

  learners::Targets t;
  t.y = (Eigen::VectorXd(5) << -1, NAN, NAN, NAN, 1).finished();
  const auto m = MakeLearner("dkelm", {{"c", C}, {"bias", 0}, {"deformation", r}, {"neighbours", 1}})->Fit({K}, t);
  EXPECT_EQ(m.coef.size(), 5);
  EXPECT_TRUE(MatrixNear(m.Decision({Kt}), expected, 1e-10, 1e-10));
}

TEST(Dkelm, NystroemIsExactForALowRankKernel) {
  // A rank-3 kernel: 8 random landmarks span it, so the approximation must equal the exact form.
  const auto p = MakeMklProblem(40, 1, {0}, 1.0, 37, learners::Task::Classification, 3);
  learners::Targets t = p.targets;
  for (int i = 0; i < 40; i += 3) t.y[i] = NAN;
  const auto exact = MakeLearner("dkelm", {{"deformation", 0.3}, {"neighbours", 5}})->Fit(p.kernels, t);
  const auto approx = MakeLearner("dkelm", {{"deformation", 0.3}, {"neighbours", 5}, {"landmarks", 8}, {"seed", 4}})->Fit(p.kernels, t);
  EXPECT_TRUE(MatrixNear(approx.Decision(p.kernels), exact.Decision(p.kernels), 1e-8, 1e-8));
}

TEST(Dkelm, UnlabelledSubjectsCarryTheLabelAlongTheirCluster) {
  // Two interleaved chains (x = 0..19 on two parallel lines 1 apart in y, spacing 0.5 along x
  // such that neighbours are along the chain); one labelled subject per chain, at opposite ends.
  // KELM with two labels splits the plane by the nearest label; DKELM follows the chains.
  const int per = 20;
  Eigen::MatrixXd X(2 * per, 2);
  learners::Targets t;
  t.y = Eigen::VectorXd::Constant(2 * per, NAN);
  for (int i = 0; i < per; ++i) {
    X.row(i) << 0.5 * i, 0.0;
    X.row(per + i) << 0.5 * i, 1.5;
  }
  t.y[0] = -1;              // chain A labelled at its left end
  t.y[2 * per - 1] = 1;     // chain B at its right end
  const Eigen::MatrixXd K = (-(X.rowwise().squaredNorm() * Eigen::RowVectorXd::Ones(2 * per) +
                               Eigen::VectorXd::Ones(2 * per) * X.rowwise().squaredNorm().transpose() - 2 * X * X.transpose()) /
                             32.0)  // Gaussian, width 4
                                .array()
                                .exp()
                                .matrix();
  const auto dk = MakeLearner("dkelm", {{"c", 100}, {"deformation", 1000}, {"neighbours", 2}})->Fit({K}, t);
  const Eigen::VectorXd f = dk.Decision({K});
  int correct = 0;
  for (int i = 0; i < 2 * per; ++i) correct += (f[i] > 0) == (i >= per);
  EXPECT_EQ(correct, 2 * per);
  learners::Targets labelledOnly;
  labelledOnly.y = Eigen::Vector2d(-1, 1);
  Eigen::VectorXi li(2);
  li << 0, 2 * per - 1;
  const auto kelm = MakeLearner("kelm", {{"c", 100}})->Fit({K(li, li)}, labelledOnly);
  const Eigen::VectorXd g = kelm.Decision({K(Eigen::all, li)});
  int kelmCorrect = 0;
  for (int i = 0; i < 2 * per; ++i) kelmCorrect += (g[i] > 0) == (i >= per);
  EXPECT_LT(kelmCorrect, 2 * per - 10) << "the supervised baseline should not already solve this";
}

TEST(Dkelm, TargetsMayBeMissingOnlyForSemiSupervisedLearners) {
  auto p = MakeMklProblem(20, 1, {0}, 1.0, 41);
  p.targets.y[3] = NAN;
  EXPECT_THAT([&] { MakeLearner("kelm", {})->Fit(p.kernels, p.targets); }, ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("NaN")));
  EXPECT_NO_THROW(MakeLearner("dkelm", {})->Fit(p.kernels, p.targets));
}

}  // namespace
