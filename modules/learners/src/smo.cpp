#include "smo.hpp"

#include <cmath>
#include <limits>

namespace neuromkl::learners {

namespace {
constexpr double kTau = 1e-12;  // curvature floor for non-positive-definite pairs
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, double C,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations) {
  const Eigen::Index n = K.rows();
  const Eigen::Index l = y.size();
  SmoResult res;
  res.alpha = Eigen::VectorXd::Zero(l);
  if (warmStart && warmStart->size() == l && (warmStart->array() >= 0).all()) {
    // A start from another C may exceed the box: scaling keeps y'a = 0 and makes it feasible.
    Eigen::VectorXd start = *warmStart;
    const double top = start.maxCoeff();
    if (top > C) start *= C / top;
    const double balance = y.dot(start);
    if (std::abs(balance) <= 1e-10 * (1.0 + C * static_cast<double>(l))) res.alpha = start.cwiseMin(C);
  }
  Eigen::VectorXd& a = res.alpha;

  // Gradient G = Q a + p, through u = sum_j y_j a_j e_(j mod n).
  Eigen::VectorXd G = p;
  {
    Eigen::VectorXd u = Eigen::VectorXd::Zero(n);
    for (Eigen::Index j = 0; j < l; ++j) u[j % n] += y[j] * a[j];
    if (u.any()) {
      const Eigen::VectorXd Ku = K * u;
      for (Eigen::Index i = 0; i < l; ++i) G[i] += y[i] * Ku[i % n];
    }
  }
  Eigen::VectorXd QD(l);
  for (Eigen::Index i = 0; i < l; ++i) QD[i] = K(i % n, i % n);

  // Q_ij = y_i y_j K(i mod n, j mod n): columns are read straight from K, half by half (l = n or
  // 2n), so no Q column is ever materialised and no index needs a modulo.
  const double* yv = y.data();
  double* Gv = G.data();
  double* av = a.data();
  const Eigen::Index halves = l / n;
  auto kcol = [&](Eigen::Index i) { return K.data() + (i % n) * n; };  // K symmetric: column = row
  auto isUpper = [&](Eigen::Index t) { return av[t] >= C; };
  auto isLower = [&](Eigen::Index t) { return av[t] <= 0; };

  long iter = 0;
  while (true) {
    // ---- working set selection (WSS 2 of Fan, Chen & Lin 2005) ----
    double gMax = -kInf, gMax2 = -kInf, objDiffMin = kInf;
    Eigen::Index iSel = -1, jSel = -1;
    for (Eigen::Index t = 0; t < l; ++t) {
      if (yv[t] > 0) {
        if (!isUpper(t) && -Gv[t] >= gMax) { gMax = -Gv[t]; iSel = t; }
      } else {
        if (!isLower(t) && Gv[t] >= gMax) { gMax = Gv[t]; iSel = t; }
      }
    }
    if (iSel >= 0) {
      const double* Ki = kcol(iSel);
      const double yi = yv[iSel], qdi = QD[iSel];
      for (Eigen::Index h = 0; h < halves; ++h) {
        const Eigen::Index base = h * n;
        for (Eigen::Index r = 0; r < n; ++r) {
          const Eigen::Index t = base + r;
          const double qit = yi * yv[t] * Ki[r];  // Q_i[t]
          if (yv[t] > 0) {
            if (isLower(t)) continue;
            const double gradDiff = gMax + Gv[t];
            if (Gv[t] >= gMax2) gMax2 = Gv[t];
            if (gradDiff > 0) {
              const double quad = qdi + QD[t] - 2.0 * yi * qit;
              const double objDiff = -(gradDiff * gradDiff) / (quad > 0 ? quad : kTau);
              if (objDiff <= objDiffMin) { jSel = t; objDiffMin = objDiff; }
            }
          } else {
            if (isUpper(t)) continue;
            const double gradDiff = gMax - Gv[t];
            if (-Gv[t] >= gMax2) gMax2 = -Gv[t];
            if (gradDiff > 0) {
              const double quad = qdi + QD[t] + 2.0 * yi * qit;
              const double objDiff = -(gradDiff * gradDiff) / (quad > 0 ? quad : kTau);
              if (objDiff <= objDiffMin) { jSel = t; objDiffMin = objDiff; }
            }
          }
        }
      }
    }
    res.violation = (iSel >= 0 && gMax2 > -kInf) ? gMax + gMax2 : 0.0;
    if (iSel < 0 || jSel < 0 || gMax + gMax2 < tolerance) {
      res.converged = true;
      break;
    }
    if (iter >= maxIterations) break;
    ++iter;
    const Eigen::Index i = iSel, j = jSel;
    const double* Ki = kcol(i);
    const double* Kj = kcol(j);
    const double Qij = yv[i] * yv[j] * Ki[j % n];
    // ---- analytic update of the pair, clipped to the box ----
    const double oldAi = av[i], oldAj = av[j];
    if (yv[i] != yv[j]) {
      double quad = QD[i] + QD[j] + 2.0 * Qij;
      if (quad <= 0) quad = kTau;
      const double delta = (-Gv[i] - Gv[j]) / quad;
      const double diff = av[i] - av[j];
      av[i] += delta;
      av[j] += delta;
      if (diff > 0) {
        if (av[j] < 0) { av[j] = 0; av[i] = diff; }
      } else if (av[i] < 0) {
        av[i] = 0; av[j] = -diff;
      }
      if (diff > 0) {
        if (av[i] > C) { av[i] = C; av[j] = C - diff; }
      } else if (av[j] > C) {
        av[j] = C; av[i] = C + diff;
      }
    } else {
      double quad = QD[i] + QD[j] - 2.0 * Qij;
      if (quad <= 0) quad = kTau;
      const double delta = (Gv[i] - Gv[j]) / quad;
      const double sum = av[i] + av[j];
      av[i] -= delta;
      av[j] += delta;
      if (sum > C) {
        if (av[i] > C) { av[i] = C; av[j] = sum - C; }
      } else if (av[j] < 0) {
        av[j] = 0; av[i] = sum;
      }
      if (sum > C) {
        if (av[j] > C) { av[j] = C; av[i] = sum - C; }
      } else if (av[i] < 0) {
        av[i] = 0; av[j] = sum;
      }
    }
    // G_t += Q_ti dA_i + Q_tj dA_j = y_t (y_i dA_i K_ti + y_j dA_j K_tj)
    const double ci = yv[i] * (av[i] - oldAi), cj = yv[j] * (av[j] - oldAj);
    for (Eigen::Index h = 0; h < halves; ++h) {
      const Eigen::Index base = h * n;
      for (Eigen::Index r = 0; r < n; ++r) Gv[base + r] += yv[base + r] * (ci * Ki[r] + cj * Kj[r]);
    }
  }
  res.iterations = iter;

  // ---- bias: average of y_i G_i over free vectors, else the middle of the feasible interval ----
  double ub = kInf, lb = -kInf, sumFree = 0;
  long nFree = 0;
  for (Eigen::Index t = 0; t < l; ++t) {
    const double yG = y[t] * G[t];
    if (isUpper(t)) {
      if (y[t] < 0) ub = std::min(ub, yG); else lb = std::max(lb, yG);
    } else if (isLower(t)) {
      if (y[t] > 0) ub = std::min(ub, yG); else lb = std::max(lb, yG);
    } else {
      ++nFree;
      sumFree += yG;
    }
  }
  res.rho = nFree > 0 ? sumFree / static_cast<double>(nFree) : (ub + lb) / 2;
  res.objective = 0.5 * (a.array() * (G + p).array()).sum();
  return res;
}

}  // namespace neuromkl::learners
