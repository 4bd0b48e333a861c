#include "smo.hpp"

#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

namespace neuromkl::learners {

namespace {
constexpr double kTau = 1e-12;  // curvature floor for non-positive-definite pairs
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, double C,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking) {
  return SolveSmo(K, y, p, Eigen::VectorXd::Constant(y.size(), C), warmStart, tolerance, maxIterations, shrinking);
}

namespace {

/// The solver; `kDoubled` is true when l = 2n (epsilon-SVR: variable t uses kernel row t mod n) and
/// false for l = n (C-SVC: row t), which saves an index load in the inner loops.
template <bool kDoubled>
SmoResult Solve(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& upper,
                const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking) {
  const Eigen::Index n = K.rows();
  const Eigen::Index l = y.size();
  const double* Cv = upper.data();
  SmoResult res;
  res.alpha = Eigen::VectorXd::Zero(l);
  if (warmStart && warmStart->size() == l && (warmStart->array() >= 0).all()) {
    // A start from another C may exceed the box: scaling keeps y'a = 0 and makes it feasible.
    Eigen::VectorXd start = *warmStart;
    double scale = 1.0;
    for (Eigen::Index t = 0; t < l; ++t)
      if (start[t] > Cv[t]) scale = std::min(scale, Cv[t] / start[t]);
    start *= scale;
    const double balance = y.dot(start);
    if (std::abs(balance) <= 1e-10 * (1.0 + upper.sum())) res.alpha = start.cwiseMin(upper);
  }
  Eigen::VectorXd& a = res.alpha;

  // Row of K behind each variable (t mod n: l = 2n for epsilon-SVR).
  std::vector<Eigen::Index> rows(kDoubled ? static_cast<std::size_t>(l) : 0);
  for (Eigen::Index t = 0; t < static_cast<Eigen::Index>(rows.size()); ++t) rows[static_cast<std::size_t>(t)] = t % n;
  const auto row = [&](Eigen::Index t) { return kDoubled ? rows[static_cast<std::size_t>(t)] : t; };
  const double* yv = y.data();
  const double* pv = p.data();
  double* av = a.data();
  auto kcol = [&](Eigen::Index i) { return K.data() + row(i) * n; };  // K symmetric: column = row
  // Where each variable is in its box, kept in step with alpha: the loops below read one byte
  // instead of comparing alpha with its bound.
  // kUp / kLow: t is in LIBSVM's I_up / I_low (y_t a_t can grow / shrink).
  enum : unsigned char { kLower = 1, kUpper = 2, kUp = 4, kLow = 8 };
  std::vector<unsigned char> bound(static_cast<std::size_t>(l));
  auto updateBound = [&](Eigen::Index t) {
    const bool lower = av[t] <= 0, upperBound = av[t] >= Cv[t];
    const bool up = yv[t] > 0 ? !upperBound : !lower, low = yv[t] > 0 ? !lower : !upperBound;
    bound[static_cast<std::size_t>(t)] =
        static_cast<unsigned char>((lower ? kLower : 0) | (upperBound ? kUpper : 0) | (up ? kUp : 0) | (low ? kLow : 0));
  };
  for (Eigen::Index t = 0; t < l; ++t) updateBound(t);
  auto isUpper = [&](Eigen::Index t) { return (bound[static_cast<std::size_t>(t)] & kUpper) != 0; };
  auto isLower = [&](Eigen::Index t) { return (bound[static_cast<std::size_t>(t)] & kLower) != 0; };

  // Gradient G = Q a + p and, for shrinking, Gbar = C * sum of Q's columns at the upper bound
  // (LIBSVM's G_bar): a shrunk variable's gradient is rebuilt from Gbar and the free variables.
  Eigen::VectorXd G = p;
  Eigen::VectorXd Gbar = Eigen::VectorXd::Zero(l);
  {
    Eigen::VectorXd u = Eigen::VectorXd::Zero(n), ub = Eigen::VectorXd::Zero(n);
    for (Eigen::Index j = 0; j < l; ++j) {
      u[j % n] += y[j] * a[j];
      if (isUpper(j)) ub[j % n] += y[j] * Cv[j];
    }
    if (u.any()) {
      const Eigen::VectorXd Ku = K * u;
      for (Eigen::Index i = 0; i < l; ++i) G[i] += y[i] * Ku[i % n];
    }
    if (ub.any()) {
      const Eigen::VectorXd Kb = K * ub;
      for (Eigen::Index i = 0; i < l; ++i) Gbar[i] = y[i] * Kb[i % n];
    }
  }
  double* Gv = G.data();
  Eigen::VectorXd QD(l);
  for (Eigen::Index i = 0; i < l; ++i) QD[i] = K(i % n, i % n);

  // Active set (LIBSVM's shrinking): variables at a bound that cannot enter a violating pair soon
  // leave the loops below; the whole gradient is rebuilt and re-checked before the solver stops,
  // so shrinking changes the path's cost, never the stopping rule.
  std::vector<Eigen::Index> active(static_cast<std::size_t>(l));
  for (Eigen::Index t = 0; t < l; ++t) active[static_cast<std::size_t>(t)] = t;
  Eigen::Index activeSize = l;
  bool unshrunk = false;

  auto reconstructGradient = [&] {
    if (activeSize == l) return;
    // Shrunk variables sit at a bound and did not move: G_t = Gbar_t + p_t + sum_{j free} a_j Q_tj.
    Eigen::VectorXd u = Eigen::VectorXd::Zero(n);
    for (Eigen::Index j = 0; j < l; ++j)
      if (!isUpper(j) && !isLower(j)) u[row(j)] += yv[j] * av[j];
    const Eigen::VectorXd Ku = K * u;
    for (Eigen::Index k = activeSize; k < l; ++k) {
      const Eigen::Index t = active[static_cast<std::size_t>(k)];
      Gv[t] = Gbar[t] + pv[t] + yv[t] * Ku[row(t)];
    }
  };

  // Working set selection (WSS 2 of Fan, Chen & Lin 2005) over the active set; false when the
  // active set meets the stopping rule (or has no pair).
  double gMax = -kInf, gMax2 = -kInf;
  Eigen::Index iSel = -1, jSel = -1;
  auto selectWorkingSet = [&]() -> bool {
    gMax = -kInf;
    gMax2 = -kInf;
    double objDiffMin = kInf;
    iSel = -1;
    jSel = -1;
    // With y_t = +-1 the two label cases of WSS 2 are one: -y_t G_t over I_up for i; over I_low,
    // y_t G_t for the second maximum and Q's quadratic K_ii + K_tt - 2 K_it (y_i Q_it = y_t K_it).
    // The first scan has no branch on a variable's set, which is unpredictable (this scan and the
    // gradient update below are about half of an SVM solve at n = 200): a variable outside I_up takes NaN, which
    // compares false, so the branch left is taken only when the maximum so far changes; the selection is
    // that of the plain loop, ties included. (The second scan written the same way, or with its division
    // skipped where a product bound rules the gain out, is slower at n = 500, where most variables sit at a bound.)
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    for (Eigen::Index k = 0; k < activeSize; ++k) {
      const Eigen::Index t = active[static_cast<std::size_t>(k)];
      const double g = (bound[static_cast<std::size_t>(t)] & kUp) ? -yv[t] * Gv[t] : kNan;
      if (g >= gMax) { gMax = g; iSel = t; }
    }
    if (iSel >= 0) {
      const double* Ki = K.data() + row(iSel) * n;
      const double qdi = QD[iSel];
      for (Eigen::Index k = 0; k < activeSize; ++k) {
        const Eigen::Index t = active[static_cast<std::size_t>(k)];
        if (!(bound[static_cast<std::size_t>(t)] & kLow)) continue;
        const double g = yv[t] * Gv[t];
        if (g >= gMax2) gMax2 = g;
        const double gradDiff = gMax + g;
        if (gradDiff > 0) {
          const double quad = qdi + QD[t] - 2.0 * Ki[row(t)];
          const double objDiff = -(gradDiff * gradDiff) / (quad > 0 ? quad : kTau);
          if (objDiff <= objDiffMin) { jSel = t; objDiffMin = objDiff; }
        }
      }
    }
    return !(iSel < 0 || jSel < 0 || gMax + gMax2 < tolerance);
  };

  auto shrink = [&] {
    // m(a) over I_up and -M(a) over I_low, as in LIBSVM's do_shrinking.
    double up = -kInf, low = -kInf;
    for (Eigen::Index k = 0; k < activeSize; ++k) {
      const Eigen::Index t = active[static_cast<std::size_t>(k)];
      const unsigned char b = bound[static_cast<std::size_t>(t)];
      if (b & kUp) up = std::max(up, -yv[t] * Gv[t]);  // the same sets and values as the working-set selection
      if (b & kLow) low = std::max(low, yv[t] * Gv[t]);
    }
    if (!unshrunk && up + low <= 10 * tolerance) {
      // Close to the end: bring every variable back once, so the final phase sees them all.
      unshrunk = true;
      reconstructGradient();
      activeSize = l;
    }
    auto removable = [&](Eigen::Index t) {
      if (isUpper(t)) return yv[t] > 0 ? -Gv[t] > up : -Gv[t] > low;
      if (isLower(t)) return yv[t] > 0 ? Gv[t] > low : Gv[t] > up;
      return false;
    };
    for (Eigen::Index k = 0; k < activeSize; ++k) {
      if (!removable(active[static_cast<std::size_t>(k)])) continue;
      --activeSize;
      while (activeSize > k) {
        if (!removable(active[static_cast<std::size_t>(activeSize)])) {
          std::swap(active[static_cast<std::size_t>(k)], active[static_cast<std::size_t>(activeSize)]);
          break;
        }
        --activeSize;
      }
    }
  };

  const long shrinkEvery = static_cast<long>(std::min<Eigen::Index>(l, 1000));
  long counter = shrinkEvery + 1;
  long iter = 0;
  while (true) {
    if (shrinking && --counter == 0) {
      counter = shrinkEvery;
      shrink();
    }
    if (!selectWorkingSet()) {
      if (activeSize == l) {
        res.converged = true;
        break;
      }
      // The active set is optimal: check the whole problem before stopping.
      reconstructGradient();
      activeSize = l;
      if (!selectWorkingSet()) {
        res.converged = true;
        break;
      }
      counter = 1;
    }
    if (iter >= maxIterations) break;
    ++iter;
    const Eigen::Index i = iSel, j = jSel;
    const double* Ki = kcol(i);
    const double* Kj = kcol(j);
    const double Qij = yv[i] * yv[j] * Ki[row(j)];
    // ---- analytic update of the pair, clipped to the box ----
    const double oldAi = av[i], oldAj = av[j];
    const bool wasUpperI = isUpper(i), wasUpperJ = isUpper(j);
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
      if (diff > Cv[i] - Cv[j]) {
        if (av[i] > Cv[i]) { av[i] = Cv[i]; av[j] = Cv[i] - diff; }
      } else if (av[j] > Cv[j]) {
        av[j] = Cv[j]; av[i] = Cv[j] + diff;
      }
    } else {
      double quad = QD[i] + QD[j] - 2.0 * Qij;
      if (quad <= 0) quad = kTau;
      const double delta = (Gv[i] - Gv[j]) / quad;
      const double sum = av[i] + av[j];
      av[i] -= delta;
      av[j] += delta;
      if (sum > Cv[i]) {
        if (av[i] > Cv[i]) { av[i] = Cv[i]; av[j] = sum - Cv[i]; }
      } else if (av[j] < 0) {
        av[j] = 0; av[i] = sum;
      }
      if (sum > Cv[j]) {
        if (av[j] > Cv[j]) { av[j] = Cv[j]; av[i] = sum - Cv[j]; }
      } else if (av[i] < 0) {
        av[i] = 0; av[j] = sum;
      }
    }
    updateBound(i);
    updateBound(j);
    // G_t += Q_ti dA_i + Q_tj dA_j = y_t (y_i dA_i K_ti + y_j dA_j K_tj), over the active set. While at least
    // half the variables are active, every gradient is updated in index order instead (vectorised; this update is ~15 %
    // of an SVM solve at n = 200); a shrunk variable's gradient is rebuilt before it is read again
    // (reconstructGradient), so the extra updates change nothing.
    const double ci = yv[i] * (av[i] - oldAi), cj = yv[j] * (av[j] - oldAj);
    if (2 * activeSize >= l) {
      for (Eigen::Index offset = 0; offset < l; offset += n)  // epsilon-SVR: variables t and t + n share kernel row t
        for (Eigen::Index r = 0; r < n; ++r) Gv[offset + r] += yv[offset + r] * (ci * Ki[r] + cj * Kj[r]);
    } else {
      for (Eigen::Index k = 0; k < activeSize; ++k) {
        const Eigen::Index t = active[static_cast<std::size_t>(k)];
        const Eigen::Index r = row(t);
        Gv[t] += yv[t] * (ci * Ki[r] + cj * Kj[r]);
      }
    }
    // Gbar follows the variables that reach or leave the upper bound (over all variables).
    auto updateGbar = [&](Eigen::Index v, const double* Kv, bool wasUpper) {
      if (wasUpper == isUpper(v)) return;
      const double s = (isUpper(v) ? Cv[v] : -Cv[v]) * yv[v];
      for (Eigen::Index t = 0; t < l; ++t) Gbar[t] += s * yv[t] * Kv[row(t)];
    };
    updateGbar(i, Ki, wasUpperI);
    updateGbar(j, Kj, wasUpperJ);
  }
  res.iterations = iter;
  // An iteration cap can stop with variables shrunk: their gradient is needed for the bias.
  reconstructGradient();
  activeSize = l;
  selectWorkingSet();
  res.violation = (iSel >= 0 && gMax2 > -kInf) ? gMax + gMax2 : 0.0;

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

}  // namespace

SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& upper,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking) {
  return y.size() == K.rows() ? Solve<false>(K, y, p, upper, warmStart, tolerance, maxIterations, shrinking)
                              : Solve<true>(K, y, p, upper, warmStart, tolerance, maxIterations, shrinking);
}

}  // namespace neuromkl::learners
