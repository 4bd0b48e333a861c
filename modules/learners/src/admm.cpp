// BSADMM-KELM (Su, Xu & Qin 2021): the hinge-loss kernel ELM dual
//     min 1/2 v'Pv + q'v,  0 <= v <= C,   P = (t t') o K,  q = -1,   f(x) = sum_i v_i t_i K(x, x_i),
// solved by ADMM with two splitting operators (the paper's Table 1, which is OSQP's iteration,
// Stellato et al. 2020). With bias = 1 the constraint t'v = 0 is added as one more row of A
// (a bias b enters f); the problem is then exactly the C-SVC dual, which is how the tests compare
// it with SMO.
//
// Per iteration the paper solves the quasi-definite KKT system (its eq. 17)
//     [P + sigma I   A'       ] [v~]   [sigma v - q    ]
//     [A            -diag(1/rho)] [u ] = [z - y / rho   ];
// eliminating u gives (P + sigma I + A' diag(rho) A) v~ = sigma v - q + A'(rho o z - y), whose
// matrix is positive definite: we factorise it once by Cholesky (the same solution as the paper's
// LDL' of the full system) and refactorise only when rho is adapted. Then relaxation, projection
// onto the box, dual update, and the residual-based stopping rule of the paper. Polishing (OSQP)
// solves the KKT system on the active set the ADMM iterate identifies, which turns a 1e-6 ADMM
// solution into an exact one when the guess checks out.
#include <algorithm>
#include <cmath>

#include <Eigen/Cholesky>
#include <Eigen/LU>

#include "inner.hpp"
#include "neuromkl/core/errors.hpp"
#include "single_kernel.hpp"
#include "timer.hpp"

namespace neuromkl::learners {

namespace {

constexpr double kEqualityRhoScale = 1e3;  ///< OSQP: equality rows get a 1000 x larger rho
constexpr int kCheckEvery = 5;             ///< residuals are checked every few iterations
constexpr int kAdaptEvery = 50;            ///< rho adaptation interval
constexpr double kAdaptFactor = 5;         ///< refactorise only if rho changes by more than this

struct AdmmSettings {
  double C, rho, sigma, relaxation, epsAbs, epsRel;
  long maxIterations;
  bool bias, polish;
};

struct AdmmOutcome {
  Eigen::VectorXd v, z, y;  ///< z, y: n box rows (+1 equality row with a bias)
  double bias = 0;
  long iterations = 0;
  int factorisations = 0;
  bool converged = false, polished = false;
  double objective = 0;     ///< 1/2 v'Pv + q'v
  double residual = 0;      ///< max of the scaled primal and dual residuals at the end
};

class HingeQp {
 public:
  /// `weights`: class weights per subject (empty = all 1): the box is 0 <= v_i <= C w_i.
  HingeQp(const Eigen::MatrixXd& K, const Eigen::VectorXd& t, const AdmmSettings& s, const Eigen::VectorXd& weights)
      : t_(t), s_(s), n_(t.size()), upper_(EffectiveWeights(weights).size() > 0 ? Eigen::VectorXd(s.C * weights) : Eigen::VectorXd::Constant(t.size(), s.C)) {
    P_ = K.cwiseProduct(t * t.transpose());
  }

  AdmmOutcome Solve(const Eigen::VectorXd* warm) {
    const Eigen::Index m = n_ + (s_.bias ? 1 : 0);
    AdmmOutcome o;
    o.v = Eigen::VectorXd::Zero(n_);
    o.z = Eigen::VectorXd::Zero(m);
    o.y = Eigen::VectorXd::Zero(m);
    if (warm && warm->size() == n_ + 2 * m) {  // (v, z, y) of a neighbouring C: clip into this box
      o.v = warm->head(n_).cwiseMax(0.0).cwiseMin(upper_);
      o.z = warm->segment(n_, m);
      o.z.head(n_) = o.z.head(n_).cwiseMax(0.0).cwiseMin(upper_);
      if (s_.bias) o.z[n_] = 0;
      o.y = warm->tail(m);
    }
    double rho = s_.rho;
    Factorise(rho);
    ++o.factorisations;
    const double a = s_.relaxation;
    Eigen::VectorXd rhoRow = RhoRows(rho);
    for (long it = 1; it <= s_.maxIterations; ++it) {
      o.iterations = it;
      // v~ from the reduced KKT system; z~ = A v~.
      Eigen::VectorXd rhs = s_.sigma * o.v + Eigen::VectorXd::Ones(n_) + ATimes(rhoRow.cwiseProduct(o.z) - o.y);
      const Eigen::VectorXd vt = llt_.solve(rhs);
      const Eigen::VectorXd zt = ATimes(vt, true);
      o.v = a * vt + (1.0 - a) * o.v;
      const Eigen::VectorXd zr = a * zt + (1.0 - a) * o.z;
      Eigen::VectorXd zNew = zr + o.y.cwiseQuotient(rhoRow);
      zNew.head(n_) = zNew.head(n_).cwiseMax(0.0).cwiseMin(upper_);  // projection onto the box
      if (s_.bias) zNew[n_] = 0;
      o.y += rhoRow.cwiseProduct(zr - zNew);
      o.z = zNew;
      if (it % kCheckEvery != 0 && it != s_.maxIterations) continue;
      const Residuals r = Measure(o);
      o.residual = std::max(r.prim / r.epsPrim, r.dual / r.epsDual);
      if (r.prim <= r.epsPrim && r.dual <= r.epsDual) {
        o.converged = true;
        break;
      }
      if (it % kAdaptEvery == 0) {  // OSQP's rule: balance the scaled residuals
        const double ratio = std::sqrt((r.prim / std::max(r.scalePrim, 1e-300)) / std::max(r.dual / std::max(r.scaleDual, 1e-300), 1e-300));
        const double next = std::clamp(rho * ratio, 1e-6, 1e6);
        if (next > kAdaptFactor * rho || next < rho / kAdaptFactor) {
          rho = next;
          rhoRow = RhoRows(rho);
          Factorise(rho);
          ++o.factorisations;
        }
      }
    }
    o.bias = s_.bias ? o.y[n_] : 0.0;  // the multiplier of t'v = 0 is the SVM bias (KKT: Pv + q + A'y = 0)
    if (s_.polish) Polish(o);
    o.objective = 0.5 * o.v.dot(P_ * o.v) - o.v.sum();
    return o;
  }

 private:
  struct Residuals {
    double prim, dual, epsPrim, epsDual, scalePrim, scaleDual;
  };

  Eigen::VectorXd RhoRows(double rho) const {
    Eigen::VectorXd r = Eigen::VectorXd::Constant(n_ + (s_.bias ? 1 : 0), rho);
    if (s_.bias) r[n_] = kEqualityRhoScale * rho;
    return r;
  }
  /// A'w (n) when !forward, A v (n [+1]) when forward; A = [I; t'].
  Eigen::VectorXd ATimes(const Eigen::VectorXd& w, bool forward = false) const {
    if (forward) {
      Eigen::VectorXd out(n_ + (s_.bias ? 1 : 0));
      out.head(n_) = w;
      if (s_.bias) out[n_] = t_.dot(w);
      return out;
    }
    Eigen::VectorXd out = w.head(n_);
    if (s_.bias) out += w[n_] * t_;
    return out;
  }
  void Factorise(double rho) {
    Eigen::MatrixXd M = P_;
    M.diagonal().array() += s_.sigma + rho;
    if (s_.bias) M.noalias() += kEqualityRhoScale * rho * t_ * t_.transpose();
    llt_.compute(M);
    if (llt_.info() != Eigen::Success)
      throw NumericalError("learners:AdmmFactorisation", "learner bsadmm_kelm", "the ADMM KKT matrix is not positive definite (kernel not PSD?)");
  }
  Residuals Measure(const AdmmOutcome& o) const {
    const Eigen::VectorXd Av = ATimes(o.v, true);
    const Eigen::VectorXd Pv = P_ * o.v;
    const Eigen::VectorXd ATy = ATimes(o.y);
    Residuals r;
    r.prim = (Av - o.z).cwiseAbs().maxCoeff();
    r.dual = (Pv - Eigen::VectorXd::Ones(n_) + ATy).cwiseAbs().maxCoeff();
    r.scalePrim = std::max(Av.cwiseAbs().maxCoeff(), o.z.cwiseAbs().maxCoeff());
    r.scaleDual = std::max({Pv.cwiseAbs().maxCoeff(), ATy.cwiseAbs().maxCoeff(), 1.0});
    r.epsPrim = s_.epsAbs + s_.epsRel * r.scalePrim;
    r.epsDual = s_.epsAbs + s_.epsRel * r.scaleDual;
    return r;
  }
  /// Guess the active set from v, solve the equality-constrained KKT system on the free variables,
  /// keep the result only if it is feasible and its gradient has the right sign on both bounds.
  void Polish(AdmmOutcome& o) const {
    const Eigen::VectorXd tolV = 1e-5 * upper_;
    std::vector<Eigen::Index> free;
    Eigen::VectorXd v = o.v;
    for (Eigen::Index i = 0; i < n_; ++i) {
      if (v[i] <= tolV[i]) v[i] = 0;
      else if (v[i] >= upper_[i] - tolV[i]) v[i] = upper_[i];
      else free.push_back(i);
    }
    const auto f = static_cast<Eigen::Index>(free.size());
    const Eigen::Index e = s_.bias ? 1 : 0;
    double nu = 0;
    if (f > 0) {
      Eigen::MatrixXd KKT = Eigen::MatrixXd::Zero(f + e, f + e);
      Eigen::VectorXd rhs(f + e);
      Eigen::VectorXd bound = v;
      for (auto i : free) bound[i] = 0;
      const Eigen::VectorXd Pb = P_ * bound;
      for (Eigen::Index a = 0; a < f; ++a) {
        for (Eigen::Index b = 0; b < f; ++b) KKT(a, b) = P_(free[static_cast<std::size_t>(a)], free[static_cast<std::size_t>(b)]);
        rhs[a] = 1.0 - Pb[free[static_cast<std::size_t>(a)]];
        if (e) KKT(a, f) = KKT(f, a) = t_[free[static_cast<std::size_t>(a)]];
      }
      if (e) rhs[f] = -t_.dot(bound);
      const Eigen::VectorXd sol = KKT.partialPivLu().solve(rhs);
      if (!sol.allFinite()) return;
      for (Eigen::Index a = 0; a < f; ++a) v[free[static_cast<std::size_t>(a)]] = sol[a];
      if (e) nu = sol[f];
    } else if (e) {
      return;  // every variable at a bound: the bias is not determined by an equation; keep ADMM's
    }
    // Check: feasibility and the sign of the gradient g = Pv + q + nu t on the bounds.
    // g_i = t_i f(x_i) - 1 is a margin (dimensionless): 1e-7 is far above the LU solve's rounding.
    const double tolG = 1e-7;
    const Eigen::VectorXd g = P_ * v - Eigen::VectorXd::Ones(n_) + nu * t_;
    for (Eigen::Index i = 0; i < n_; ++i) {
      if (v[i] < -tolV[i] || v[i] > upper_[i] + tolV[i]) return;
      const bool atLower = v[i] == 0, atUpper = v[i] == upper_[i];
      if (atLower && g[i] < -tolG) return;
      if (atUpper && g[i] > tolG) return;
      if (!atLower && !atUpper && std::abs(g[i]) > tolG) return;
    }
    o.v = v.cwiseMax(0.0).cwiseMin(upper_);
    if (e) o.bias = nu;
    o.polished = true;
  }

  Eigen::VectorXd t_;
  AdmmSettings s_;
  Eigen::Index n_;
  Eigen::VectorXd upper_;  ///< per-variable box bound C w_i
  Eigen::MatrixXd P_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
};

class BsadmmKelm final : public Learner {
 public:
  explicit BsadmmKelm(const ParamMap& p) {
    s_.C = p.at("c");
    s_.bias = p.at("bias") != 0;
    s_.rho = p.at("rho");
    s_.sigma = p.at("sigma");
    s_.relaxation = p.at("relaxation");
    s_.epsAbs = p.at("eps_abs");
    s_.epsRel = p.at("eps_rel");
    s_.maxIterations = static_cast<long>(p.at("max_iterations"));
    s_.polish = p.at("polish") != 0;
  }
  Model Fit(const KernelList& train, const Targets& t, const FitOptions& options) const override {
    ValidateFitInput(Name(), train, t, options);
    if (t.task != Task::Classification)
      throw InputError("learners:TaskUnsupported", "learner bsadmm_kelm", "bsadmm_kelm is a classifier (hinge loss); for regression use kelm or krr");
    Stopwatch clock;
    const auto m = static_cast<Eigen::Index>(train.size());
    Eigen::MatrixXd summed;
    HingeQp qp(SharedSum(options.cache, train, summed), t.y, s_, t.sampleWeights);
    const Model* w = options.warmStart;
    const AdmmOutcome o = qp.Solve(w && w->solverState.size() > 0 ? &w->solverState : nullptr);
    Model model;
    model.beta = Eigen::VectorXd::Constant(m, 1.0 / static_cast<double>(m));
    model.alpha = o.v;
    model.coef = t.y.cwiseProduct(o.v) * static_cast<double>(m);
    model.bias = o.bias;
    model.solverState.resize(o.v.size() + o.z.size() + o.y.size());
    model.solverState << o.v, o.z, o.y;
    model.info.status = o.converged || o.polished ? FitStatus::Converged : FitStatus::MaxIterReached;
    model.info.iterations = static_cast<int>(o.iterations);
    model.info.innerSolves = o.factorisations;
    model.info.innerIterations = o.iterations;
    model.info.objective = -o.objective;  // the SVM dual value, as svm reports it
    model.info.gap = o.residual;
    model.info.seconds = clock.Seconds();
    return model;
  }
  std::string_view Name() const override { return "bsadmm_kelm"; }

 private:
  AdmmSettings s_{};
};

}  // namespace

std::unique_ptr<Learner> MakeBsadmmKelm(const ParamMap& p) { return std::make_unique<BsadmmKelm>(p); }

}  // namespace neuromkl::learners
