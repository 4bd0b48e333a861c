#include "neuromkl/gram/residualise.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <Eigen/QR>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/tabular.hpp"

namespace neuromkl::gram {

namespace {
/// (A'A)^+ A' = A^+ (the minimum-norm least-squares solution operator), rank-revealing. The columns are scaled to
/// a largest magnitude of 1 first and the result scaled back (A^+ = S^-1 (A S^-1)^+ for a full-rank A): the rank
/// threshold is relative to the largest singular value, so a covariate in large units (an age in 1e12 units) would
/// otherwise make the intercept look like rounding noise and leave it out of the fit.
Eigen::MatrixXd PseudoInverse(const Eigen::MatrixXd& A) {
  Eigen::VectorXd scale = A.cwiseAbs().colwise().maxCoeff().transpose();
  for (Eigen::Index j = 0; j < scale.size(); ++j)
    if (!(scale[j] > 0) || !std::isfinite(scale[j])) scale[j] = 1.0;
  Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd> cod(A * scale.cwiseInverse().asDiagonal());
  cod.setThreshold(1e-10);
  return scale.cwiseInverse().asDiagonal() * cod.pseudoInverse();
}
}  // namespace

Eigen::RowVectorXd ImputationFill(const Covariates& cov, const Eigen::Ref<const Eigen::VectorXi>& trainIdx, const char* where, bool everyColumn) {
  const Eigen::Index p = cov.design.cols();
  Eigen::RowVectorXd fill = Eigen::RowVectorXd::Constant(p, std::numeric_limits<double>::quiet_NaN());
  auto category = [&](Eigen::Index j) { return cov.categoryOf.empty() ? -1 : cov.categoryOf[static_cast<std::size_t>(j)]; };
  auto nothing = [&](Eigen::Index j) {
    throw InputError("covariates:NothingToImpute", where,
                     fmt::format("covariate design column {} has a missing value but none of the {} training subjects has a value there to "
                                 "impute it from",
                                 j, trainIdx.size()));
  };
  std::map<int, std::vector<Eigen::Index>> dummies;  // categorical covariate -> its columns
  for (Eigen::Index j = 0; j < p; ++j) {
    if (!everyColumn && !cov.design.col(j).hasNaN()) continue;
    if (category(j) >= 0) {
      dummies[category(j)].push_back(j);
      continue;
    }
    std::vector<double> values;
    for (Eigen::Index i = 0; i < trainIdx.size(); ++i)
      if (const double v = cov.design(trainIdx[i], j); !std::isnan(v)) values.push_back(v);
    if (values.empty()) nothing(j);
    fill[j] = Median(values);
  }
  for (const auto& [id, columns] : dummies) {
    // Level counts: index 0 the reference (every dummy 0), c + 1 the level of dummy columns[c].
    std::vector<int> counts(columns.size() + 1, 0);
    for (Eigen::Index i = 0; i < trainIdx.size(); ++i) {
      if (std::isnan(cov.design(trainIdx[i], columns[0]))) continue;
      std::size_t level = 0;
      for (std::size_t c = 0; c < columns.size(); ++c)
        if (cov.design(trainIdx[i], columns[c]) != 0.0) level = c + 1;
      ++counts[level];
    }
    const auto most = static_cast<std::size_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
    if (counts[most] == 0) nothing(columns[0]);
    for (std::size_t c = 0; c < columns.size(); ++c) fill[columns[c]] = most == c + 1 ? 1.0 : 0.0;
  }
  return fill;
}

Eigen::MatrixXd FilledRows(const Covariates& cov, const Eigen::Ref<const Eigen::VectorXi>& rows, const Eigen::RowVectorXd& fill) {
  Eigen::MatrixXd out(rows.size(), cov.design.cols());
  for (Eigen::Index i = 0; i < rows.size(); ++i) {
    out.row(i) = cov.design.row(rows[i]);
    for (Eigen::Index j = 0; j < out.cols(); ++j)
      if (std::isnan(out(i, j))) out(i, j) = fill[j];
  }
  return out;
}

FoldResidualiser MakeFoldResidualiser(const Covariates& cov, const Eigen::Ref<const Eigen::VectorXi>& trainIdx,
                                      const Eigen::Ref<const Eigen::VectorXi>& testIdx, const char* where) {
  FoldResidualiser r;
  const Eigen::Index l = trainIdx.size(), p = cov.design.cols();
  for (Eigen::Index i = 0; i < l; ++i)
    if (cov.fitRow.empty() || cov.fitRow[static_cast<std::size_t>(trainIdx[i])]) r.fitPositions.push_back(i);
  if (r.fitPositions.empty())
    throw InputError("covariates:NoFitRows", where,
                     "no training subject of this fold matches covariates.fit_on, so the covariate coefficients cannot be fitted; "
                     "use fit_on \"all\" or a split that keeps such subjects in every training set");
  const auto q = static_cast<Eigen::Index>(r.fitPositions.size());
  const Eigen::RowVectorXd fill = cov.HasMissing() ? ImputationFill(cov, trainIdx, where) : Eigen::RowVectorXd::Zero(p);
  Eigen::MatrixXd CT = FilledRows(cov, trainIdx, fill), CS = FilledRows(cov, testIdx, fill);
  Eigen::MatrixXd CQ(q, p);
  for (Eigen::Index k = 0; k < q; ++k) CQ.row(k) = CT.row(r.fitPositions[static_cast<std::size_t>(k)]);
  r.P = PseudoInverse(CQ);
  r.trainA = CT * r.P;
  r.testA = CS * r.P;
  r.trainC = std::move(CT);
  r.testC = std::move(CS);
  return r;
}

void ResidualiseFold(FoldKernel& k, const FoldResidualiser& r) {
  const Eigen::Index l = k.train.rows(), m = k.testTrain.rows();
  const auto q = static_cast<Eigen::Index>(r.fitPositions.size());
  // Kernel blocks with the fit rows Q: K_TQ (l x q), K_SQ (m x q), K_QQ (q x q).
  Eigen::MatrixXd KTQ(l, q), KSQ(m, q);
  for (Eigen::Index k2 = 0; k2 < q; ++k2) {
    const Eigen::Index c = r.fitPositions[static_cast<std::size_t>(k2)];
    KTQ.col(k2) = k.train.col(c);
    KSQ.col(k2) = k.testTrain.col(c);
  }
  Eigen::MatrixXd KQQ(q, q);
  for (Eigen::Index a = 0; a < q; ++a) KQQ.row(a) = KTQ.row(r.fitPositions[static_cast<std::size_t>(a)]);
  // A = C P has rank p (the number of design columns, a handful), so every product goes through the
  // p x q and p x p blocks: O(l^2 p) per kernel instead of O(l^2 q) (q = up to l fit rows).
  const Eigen::MatrixXd& CT = r.trainC;
  const Eigen::MatrixXd PKQT = r.P * KTQ.transpose();       // p x l: P K_QT
  const Eigen::MatrixXd PKQQ = r.P * KQQ;                   // p x q
  const Eigen::MatrixXd M = PKQQ * r.P.transpose();         // p x p: P K_QQ P'
  // K~_TT = K - A_T K_QT - K_TQ A_T' + A_T K_QQ A_T', A_T = C_T P
  const Eigen::MatrixXd ATKQT = CT * PKQT;                  // l x l
  Eigen::MatrixXd train = k.train - ATKQT - ATKQT.transpose() + CT * M * CT.transpose();
  k.train = 0.5 * (train + train.transpose());  // exactly symmetric (rounding only)
  if (m > 0) {
    const Eigen::MatrixXd& CS = r.testC;
    // K~_ST = K_ST - A_S K_QT - K_SQ A_T' + A_S K_QQ A_T'
    k.testTrain = k.testTrain - CS * PKQT - (KSQ * r.P.transpose()) * CT.transpose() + CS * M * CT.transpose();
    // diag(K~_SS) = diag(K_SS) - 2 diag(A_S K_QS) + diag(A_S K_QQ A_S')
    k.testDiag = k.testDiag - 2.0 * r.testA.cwiseProduct(KSQ).rowwise().sum() + (CS * M).cwiseProduct(CS).rowwise().sum();
  }
}

void ResidualiseSubjectWeights(Eigen::Ref<Eigen::VectorXd> d, const FoldResidualiser& r) {
  // sum_i d_i (x_i - a_i X_Q) = sum_i d_i x_i - (A_T' d)' X_Q
  const Eigen::VectorXd toQ = r.trainA.transpose() * d;
  for (std::size_t k = 0; k < r.fitPositions.size(); ++k) d[r.fitPositions[k]] -= toQ[static_cast<Eigen::Index>(k)];
}

double CovariateR2(const Eigen::MatrixXd& design, const Eigen::VectorXd& y) {
  if (y.size() < 2) return 0.0;
  const Eigen::VectorXd fitted = design * (PseudoInverse(design) * y);
  const double ssTot = (y.array() - y.mean()).square().sum();
  if (!(ssTot > 0)) return 0.0;
  return 1.0 - (y - fitted).squaredNorm() / ssTot;
}

}  // namespace neuromkl::gram
