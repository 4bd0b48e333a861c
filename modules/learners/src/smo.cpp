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
class SmoSolver {
 public:
  SmoSolver(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& upper, double tolerance)
      : K_(K), y_(y), p_(p), upper_(upper), n_(K.rows()), l_(y.size()), tolerance_(tolerance), Cv_(upper.data()), yv_(y.data()), pv_(p.data()) {}

  SmoResult Solve(const Eigen::VectorXd* warmStart, long maxIterations, bool shrinking) {
    Start(warmStart);
    InitialGradient();
    res_.iterations = Iterate(maxIterations, shrinking);
    // An iteration cap can stop with variables shrunk: their gradient is needed for the bias.
    ReconstructGradient();
    activeSize_ = l_;
    SelectWorkingSet();
    res_.violation = (iSel_ >= 0 && gMax2_ > -kInf) ? gMax_ + gMax2_ : 0.0;
    SetBiasAndObjective();
    return std::move(res_);
  }

 private:
  // Where each variable is in its box, kept in step with alpha: the loops below read one byte
  // instead of comparing alpha with its bound.
  // kUp / kLow: t is in LIBSVM's I_up / I_low (y_t a_t can grow / shrink).
  enum : unsigned char { kLower = 1, kUpper = 2, kUp = 4, kLow = 8 };

  Eigen::Index Row(Eigen::Index t) const { return kDoubled ? rows_[static_cast<std::size_t>(t)] : t; }
  const double* Column(Eigen::Index i) const { return K_.data() + Row(i) * n_; }  // K symmetric: column = row
  void UpdateBound(Eigen::Index t) {
    const bool lower = av_[t] <= 0, upperBound = av_[t] >= Cv_[t];
    const bool up = yv_[t] > 0 ? !upperBound : !lower, low = yv_[t] > 0 ? !lower : !upperBound;
    bound_[static_cast<std::size_t>(t)] =
        static_cast<unsigned char>((lower ? kLower : 0) | (upperBound ? kUpper : 0) | (up ? kUp : 0) | (low ? kLow : 0));
  }
  bool IsUpper(Eigen::Index t) const { return (bound_[static_cast<std::size_t>(t)] & kUpper) != 0; }
  bool IsLower(Eigen::Index t) const { return (bound_[static_cast<std::size_t>(t)] & kLower) != 0; }

  /// alpha = 0, or the warm start where it is feasible for these bounds; the rows and box flags of the variables.
  void Start(const Eigen::VectorXd* warmStart) {
    res_.alpha = Eigen::VectorXd::Zero(l_);
    if (warmStart && warmStart->size() == l_ && (warmStart->array() >= 0).all()) {
      // A start from another C may exceed the box: scaling keeps y'a = 0 and makes it feasible.
      Eigen::VectorXd start = *warmStart;
      double scale = 1.0;
      for (Eigen::Index t = 0; t < l_; ++t)
        if (start[t] > Cv_[t]) scale = std::min(scale, Cv_[t] / start[t]);
      start *= scale;
      const double balance = y_.dot(start);
      if (std::abs(balance) <= 1e-10 * (1.0 + upper_.sum())) res_.alpha = start.cwiseMin(upper_);
    }
    av_ = res_.alpha.data();
    // Row of K behind each variable (t mod n: l = 2n for epsilon-SVR).
    rows_.assign(kDoubled ? static_cast<std::size_t>(l_) : 0, 0);
    for (Eigen::Index t = 0; t < static_cast<Eigen::Index>(rows_.size()); ++t) rows_[static_cast<std::size_t>(t)] = t % n_;
    bound_.assign(static_cast<std::size_t>(l_), 0);
    for (Eigen::Index t = 0; t < l_; ++t) UpdateBound(t);
  }

  /// Gradient G = Q a + p and, for shrinking, Gbar = C * sum of Q's columns at the upper bound
  /// (LIBSVM's G_bar): a shrunk variable's gradient is rebuilt from Gbar and the free variables.
  /// Also Q's diagonal and the active set (every variable).
  void InitialGradient() {
    const Eigen::VectorXd& a = res_.alpha;
    G_ = p_;
    Gbar_ = Eigen::VectorXd::Zero(l_);
    {
      Eigen::VectorXd u = Eigen::VectorXd::Zero(n_), ub = Eigen::VectorXd::Zero(n_);
      for (Eigen::Index j = 0; j < l_; ++j) {
        u[j % n_] += y_[j] * a[j];
        if (IsUpper(j)) ub[j % n_] += y_[j] * Cv_[j];
      }
      if (u.any()) {
        const Eigen::VectorXd Ku = K_ * u;
        for (Eigen::Index i = 0; i < l_; ++i) G_[i] += y_[i] * Ku[i % n_];
      }
      if (ub.any()) {
        const Eigen::VectorXd Kb = K_ * ub;
        for (Eigen::Index i = 0; i < l_; ++i) Gbar_[i] = y_[i] * Kb[i % n_];
      }
    }
    Gv_ = G_.data();
    QD_.resize(l_);
    for (Eigen::Index i = 0; i < l_; ++i) QD_[i] = K_(i % n_, i % n_);
    // Active set (LIBSVM's shrinking): variables at a bound that cannot enter a violating pair soon
    // leave the loops below; the whole gradient is rebuilt and re-checked before the solver stops,
    // so shrinking changes the path's cost, never the stopping rule.
    active_.resize(static_cast<std::size_t>(l_));
    for (Eigen::Index t = 0; t < l_; ++t) active_[static_cast<std::size_t>(t)] = t;
    activeSize_ = l_;
  }

  /// The SMO iterations until the stopping rule holds on every variable (res_.converged) or the cap; their number.
  long Iterate(long maxIterations, bool shrinking) {
    const long shrinkEvery = static_cast<long>(std::min<Eigen::Index>(l_, 1000));
    long counter = shrinkEvery + 1;
    long iter = 0;
    while (true) {
      if (shrinking && --counter == 0) {
        counter = shrinkEvery;
        Shrink();
      }
      if (!SelectWorkingSet()) {
        if (activeSize_ == l_) {
          res_.converged = true;
          break;
        }
        // The active set is optimal: check the whole problem before stopping.
        ReconstructGradient();
        activeSize_ = l_;
        if (!SelectWorkingSet()) {
          res_.converged = true;
          break;
        }
        counter = 1;
      }
      if (iter >= maxIterations) break;
      ++iter;
      UpdatePair(iSel_, jSel_);
    }
    return iter;
  }

  void ReconstructGradient() {
    if (activeSize_ == l_) return;
    // Shrunk variables sit at a bound and did not move: G_t = Gbar_t + p_t + sum_{j free} a_j Q_tj.
    Eigen::VectorXd u = Eigen::VectorXd::Zero(n_);
    for (Eigen::Index j = 0; j < l_; ++j)
      if (!IsUpper(j) && !IsLower(j)) u[Row(j)] += yv_[j] * av_[j];
    const Eigen::VectorXd Ku = K_ * u;
    for (Eigen::Index k = activeSize_; k < l_; ++k) {
      const Eigen::Index t = active_[static_cast<std::size_t>(k)];
      Gv_[t] = Gbar_[t] + pv_[t] + yv_[t] * Ku[Row(t)];
    }
  }

  /// Working set selection (WSS 2 of Fan, Chen & Lin 2005) over the active set; false when the
  /// active set meets the stopping rule (or has no pair).
  bool SelectWorkingSet() {
    double gMax = -kInf, gMax2 = -kInf;
    double objDiffMin = kInf;
    Eigen::Index iSel = -1, jSel = -1;
    const Eigen::Index activeSize = activeSize_;
    const Eigen::Index* active = active_.data();
    const unsigned char* bound = bound_.data();
    const double* yv = yv_;
    const double* Gv = Gv_;
    // With y_t = +-1 the two label cases of WSS 2 are one: -y_t G_t over I_up for i; over I_low,
    // y_t G_t for the second maximum and Q's quadratic K_ii + K_tt - 2 K_it (y_i Q_it = y_t K_it).
    // The first scan has no branch on a variable's set, which is unpredictable (this scan and the
    // gradient update below are about half of an SVM solve at n = 200): a variable outside I_up takes NaN, which
    // compares false, so the branch left is taken only when the maximum so far changes; the selection is
    // that of the plain loop, ties included. (The second scan written the same way, or with its division
    // skipped where a product bound rules the gain out, is slower at n = 500, where most variables sit at a bound.)
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    for (Eigen::Index k = 0; k < activeSize; ++k) {
      const Eigen::Index t = active[k];
      const double g = (bound[t] & kUp) ? -yv[t] * Gv[t] : kNan;
      if (g >= gMax) { gMax = g; iSel = t; }
    }
    if (iSel >= 0) {
      const double* Ki = K_.data() + Row(iSel) * n_;
      const double qdi = QD_[iSel];
      for (Eigen::Index k = 0; k < activeSize; ++k) {
        const Eigen::Index t = active[k];
        if (!(bound[t] & kLow)) continue;
        const double g = yv[t] * Gv[t];
        if (g >= gMax2) gMax2 = g;
        const double gradDiff = gMax + g;
        if (gradDiff > 0) {
          const double quad = qdi + QD_[t] - 2.0 * Ki[Row(t)];
          const double objDiff = -(gradDiff * gradDiff) / (quad > 0 ? quad : kTau);
          if (objDiff <= objDiffMin) { jSel = t; objDiffMin = objDiff; }
        }
      }
    }
    gMax_ = gMax;
    gMax2_ = gMax2;
    iSel_ = iSel;
    jSel_ = jSel;
    return !(iSel < 0 || jSel < 0 || gMax + gMax2 < tolerance_);
  }

  void Shrink() {
    // m(a) over I_up and -M(a) over I_low, as in LIBSVM's do_shrinking.
    double up = -kInf, low = -kInf;
    for (Eigen::Index k = 0; k < activeSize_; ++k) {
      const Eigen::Index t = active_[static_cast<std::size_t>(k)];
      const unsigned char b = bound_[static_cast<std::size_t>(t)];
      if (b & kUp) up = std::max(up, -yv_[t] * Gv_[t]);  // the same sets and values as the working-set selection
      if (b & kLow) low = std::max(low, yv_[t] * Gv_[t]);
    }
    if (!unshrunk_ && up + low <= 10 * tolerance_) {
      // Close to the end: bring every variable back once, so the final phase sees them all.
      unshrunk_ = true;
      ReconstructGradient();
      activeSize_ = l_;
    }
    auto removable = [&](Eigen::Index t) {
      if (IsUpper(t)) return yv_[t] > 0 ? -Gv_[t] > up : -Gv_[t] > low;
      if (IsLower(t)) return yv_[t] > 0 ? Gv_[t] > low : Gv_[t] > up;
      return false;
    };
    for (Eigen::Index k = 0; k < activeSize_; ++k) {
      if (!removable(active_[static_cast<std::size_t>(k)])) continue;
      --activeSize_;
      while (activeSize_ > k) {
        if (!removable(active_[static_cast<std::size_t>(activeSize_)])) {
          std::swap(active_[static_cast<std::size_t>(k)], active_[static_cast<std::size_t>(activeSize_)]);
          break;
        }
        --activeSize_;
      }
    }
  }

  /// The analytic update of the pair (i, j), clipped to the box, and the gradients that follow it.
  void UpdatePair(Eigen::Index i, Eigen::Index j) {
    double* av = av_;
    const double* Cv = Cv_;
    const double* Ki = Column(i);
    const double* Kj = Column(j);
    const double Qij = yv_[i] * yv_[j] * Ki[Row(j)];
    const double oldAi = av[i], oldAj = av[j];
    const bool wasUpperI = IsUpper(i), wasUpperJ = IsUpper(j);
    if (yv_[i] != yv_[j]) {
      double quad = QD_[i] + QD_[j] + 2.0 * Qij;
      if (quad <= 0) quad = kTau;
      const double delta = (-Gv_[i] - Gv_[j]) / quad;
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
      double quad = QD_[i] + QD_[j] - 2.0 * Qij;
      if (quad <= 0) quad = kTau;
      const double delta = (Gv_[i] - Gv_[j]) / quad;
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
    UpdateBound(i);
    UpdateBound(j);
    UpdateGradient(Ki, Kj, yv_[i] * (av[i] - oldAi), yv_[j] * (av[j] - oldAj));
    // Gbar follows the variables that reach or leave the upper bound (over all variables).
    UpdateGbar(i, Ki, wasUpperI);
    UpdateGbar(j, Kj, wasUpperJ);
  }

  /// G_t += Q_ti dA_i + Q_tj dA_j = y_t (y_i dA_i K_ti + y_j dA_j K_tj) (ci = y_i dA_i, cj = y_j dA_j), over the
  /// active set. While at least half the variables are active, every gradient is updated in index order instead
  /// (vectorised; this update is ~15 % of an SVM solve at n = 200); a shrunk variable's gradient is rebuilt before it
  /// is read again (ReconstructGradient), so the extra updates change nothing.
  void UpdateGradient(const double* Ki, const double* Kj, double ci, double cj) {
    double* Gv = Gv_;
    const double* yv = yv_;
    const Eigen::Index n = n_, l = l_;
    if (2 * activeSize_ >= l) {
      for (Eigen::Index offset = 0; offset < l; offset += n)  // epsilon-SVR: variables t and t + n share kernel row t
        for (Eigen::Index r = 0; r < n; ++r) Gv[offset + r] += yv[offset + r] * (ci * Ki[r] + cj * Kj[r]);
    } else {
      for (Eigen::Index k = 0; k < activeSize_; ++k) {
        const Eigen::Index t = active_[static_cast<std::size_t>(k)];
        const Eigen::Index r = Row(t);
        Gv[t] += yv[t] * (ci * Ki[r] + cj * Kj[r]);
      }
    }
  }

  void UpdateGbar(Eigen::Index v, const double* Kv, bool wasUpper) {
    if (wasUpper == IsUpper(v)) return;
    const double s = (IsUpper(v) ? Cv_[v] : -Cv_[v]) * yv_[v];
    for (Eigen::Index t = 0; t < l_; ++t) Gbar_[t] += s * yv_[t] * Kv[Row(t)];
  }

  /// Bias: average of y_i G_i over free vectors, else the middle of the feasible interval; and the objective.
  void SetBiasAndObjective() {
    double ub = kInf, lb = -kInf, sumFree = 0;
    long nFree = 0;
    for (Eigen::Index t = 0; t < l_; ++t) {
      const double yG = y_[t] * G_[t];
      if (IsUpper(t)) {
        if (y_[t] < 0) ub = std::min(ub, yG); else lb = std::max(lb, yG);
      } else if (IsLower(t)) {
        if (y_[t] > 0) ub = std::min(ub, yG); else lb = std::max(lb, yG);
      } else {
        ++nFree;
        sumFree += yG;
      }
    }
    res_.rho = nFree > 0 ? sumFree / static_cast<double>(nFree) : (ub + lb) / 2;
    res_.objective = 0.5 * (res_.alpha.array() * (G_ + p_).array()).sum();
  }

  const Eigen::MatrixXd& K_;
  const Eigen::VectorXd& y_;
  const Eigen::VectorXd& p_;
  const Eigen::VectorXd& upper_;
  const Eigen::Index n_, l_;
  const double tolerance_;
  const double* Cv_;
  const double* yv_;
  const double* pv_;
  SmoResult res_;
  double* av_ = nullptr;             ///< res_.alpha's values
  std::vector<Eigen::Index> rows_;   ///< kDoubled: the kernel row of each variable
  std::vector<unsigned char> bound_;  ///< kLower | kUpper | kUp | kLow of each variable
  Eigen::VectorXd G_, Gbar_, QD_;
  double* Gv_ = nullptr;             ///< G_'s values
  std::vector<Eigen::Index> active_;  ///< the active variables first (activeSize_ of them), then the shrunk ones
  Eigen::Index activeSize_ = 0;
  bool unshrunk_ = false;
  double gMax_ = -kInf, gMax2_ = -kInf;  ///< the last working-set selection: its maxima ...
  Eigen::Index iSel_ = -1, jSel_ = -1;   ///< ... and pair
};

}  // namespace

SmoResult SolveSmo(const Eigen::MatrixXd& K, const Eigen::VectorXd& y, const Eigen::VectorXd& p, const Eigen::VectorXd& upper,
                   const Eigen::VectorXd* warmStart, double tolerance, long maxIterations, bool shrinking) {
  return y.size() == K.rows() ? SmoSolver<false>(K, y, p, upper, tolerance).Solve(warmStart, maxIterations, shrinking)
                              : SmoSolver<true>(K, y, p, upper, tolerance).Solve(warmStart, maxIterations, shrinking);
}

}  // namespace neuromkl::learners
