#pragma once
// ENMKL's map on the kernel weights (Mourao-Miranda et al.) over an active set, and Newton's method on its
// fixed-point equations: the machinery FitEnmkl (enmkl.cpp) drives.
#include <memory>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "inner.hpp"

namespace neuromkl::learners {

inline constexpr double kLooseFactor = 1e-2;  ///< inner tolerance of a water-filling step: this x the previous step ...
inline constexpr double kLoosest = 1e-3;      ///< ... at most this (and never below the learner's svm_tolerance)

/// The exact minimiser of the weight step with the inner solution frozen (mu < 1): with
/// c_j = sqrt(a'K_j a), the fixed-point equations beta_j (mu S + (1 - mu) c_j beta_j) = c_j beta_j,
/// S = sum_k c_k beta_k, have the water-filling solution beta_j = (c_j - mu S) / ((1 - mu) c_j) on
/// the support A = {j : c_j > mu S}, S = sum_A c_j / (1 - mu + mu |A|), and 0 elsewhere.
/// (ENMKL's published update is one multiplicative step towards it.) `level` receives S.
Eigen::VectorXd WaterFill(const Eigen::VectorXd& c, double mu, double* level = nullptr);

/// The kernels (or regions) with weight: the j with beta_j > 0, in order.
std::vector<Eigen::Index> Support(const Eigen::VectorXd& beta);

/// Newton's step on ENMKL's fixed-point equations restricted to a support: R_j = (1 - mu) b_j c_j + mu S - c_j = 0
/// (S = sum b_k c_k), with c_j = sqrt(a'K_j a) and b_j the support's weights, and H the inner solution's sensitivity
/// (InnerSolver::Curvature: d c_j / d beta_k = -H_jk / c_j).
struct EnmklNewton {
  Eigen::VectorXd delta;  ///< the step on b (not finite: J could not be solved)
  double S = 0;           ///< sum b_j c_j
  double residual = 0;    ///< max |R_j|
  double leftover = 0;    ///< max |J delta + R|: what the linear model leaves of R
  /// Whether the step (of size `step` = max |delta| / sum b) may be taken: within the trust bound, and not the
  /// least-squares answer of a singular J that misses R.
  bool Usable(double tolerance, double step) const;
};
EnmklNewton EnmklNewtonStep(const Eigen::VectorXd& c, const Eigen::VectorXd& b, const Eigen::MatrixXd& H, double mu);

/// One ENMKL update (Mourao-Miranda et al.): solve the single-kernel problem on sum_j beta_j K_j (warm-started),
/// then beta_j <- 1 / (sqrt(mu)/lambda_j + 1 - mu), lambda_j = ||w_j|| / (sqrt(mu) sum_k ||w_k||),
/// ||w_j|| = beta_j sqrt(a'K_j a); written as ||w_j|| / (mu sum||w|| + (1 - mu)||w_j||), finite at
/// mu = 0 and for ||w_j|| = 0.
/// Active set (the optimum usually keeps few kernels): only the kernels with beta_j > 0 are combined and have
/// their quadratics formed; the others are screened (ScreenedNorms) and evaluated only where they might enter.
class EnmklMap {
 public:
  EnmklMap(std::string_view learner, const KernelList& train, const FitOptions& options, const InnerSolver& solver, double mu, FitInfo& info);
  /// Solves on sum_j beta_j K_j (`sol` is the warm start in and the solution out) and forms c_j =
  /// sqrt(a'K_j a) on the support of beta; `objective` receives the primal objective of ENMKL's
  /// Definition 4 (Mourao-Miranda et al.) at the w this solution gives for `beta`:
  /// mu/2 (sum_j ||w_j||)^2 + (1 - mu)/2 sum_j ||w_j||^2 + loss, ||w_j|| = beta_j sqrt(a'K_j a).
  /// Returns false when the solution uses no kernel at all (e.g. constant targets).
  /// With `products` (a Newton step, which needs the columns K_j a of the support), the support's
  /// quadratics are read off those columns (ScreenedNorms::EvaluateWithProducts) where the solution
  /// allows it; `products` is left empty where it does not.
  bool Solve(const Eigen::VectorXd& beta, InnerSolution& sol, bool warm, double& objective, double looseTolerance = 0,
             Eigen::MatrixXd* products = nullptr);
  /// ENMKL's update F(beta) (support of beta only) after Solve.
  Eigen::VectorXd Update(const Eigen::VectorXd& beta);
  /// WaterFill of the exact c after Solve, evaluating a kernel outside the support of beta only when
  /// its bound exceeds the level mu S of the support found without it. Equal to the water-filling of
  /// all exact c: a kernel with c_j <= mu S_A is excluded, and S only grows as kernels enter.
  /// With `outside` false the kernels outside the support are not looked at (they stay out this step;
  /// the periodic checks and the final full check bring them in when they must enter).
  Eigen::VectorXd ScreenedWaterFill(const Eigen::VectorXd& beta, bool outside);
  /// Newton's method on the fixed-point equations restricted to the support A of `beta`:
  /// R_j = (1 - mu) beta_j c_j + mu S - c_j = 0 for j in A (S = sum_A beta_k c_k: beta_j equals its
  /// ENMKL update), with the Jacobian from the inner solution's sensitivity (InnerSolver::Curvature).
  /// Converged: the last Newton step (the distance to the fixed point on A, to second order) is below
  /// `tolerance` relative to sum(beta), it was computed at a fully solved inner problem, its linear model left
  /// no residual (|J delta + R| <= tolerance S), and the full optimality check over all kernels passed: no kernel
  /// outside A may enter (mu < 1: the water-filling of all exact c has support A; mu = 1: c_j <= S / sum beta
  /// (1 + tolerance), the l1-MKL optimality condition). `beta` and `sol` are left at the last iterate.
  enum class Newton { Converged, SupportChanged, Failed };
  Newton SolveOnSupport(Eigen::VectorXd& beta, InnerSolution& sol, bool& haveSol, double& objective, double tolerance, int maxIterations,
                        int steps);
  const gram::KernelStack& Stack() const { return stack_; }
  ScreenedNorms& Norms() { return screen_; }
  bool NoCurvature() const { return noCurvature_; }

 private:
  /// The support A of beta, with the exact c_j and the weights b_j there (after Solve).
  struct OnSupport {
    std::vector<Eigen::Index> A;
    Eigen::VectorXd c, b;
  };
  /// A Newton step on the support: delta, and what the step's acceptance, shortening and prediction read.
  struct NewtonStep {
    Eigen::VectorXd delta;  ///< the step on the weights of A
    Eigen::MatrixXd dcoef;  ///< d coef / d beta_k of the support's kernels (empty: the solver has none)
    double S = 0;           ///< sum_A beta_j c_j
    double sum = 0;         ///< sum_A beta_j
    double step = 0;        ///< max |delta| / sum
  };
  enum class Jump { NotNeeded, Jumped, Failed };

  OnSupport SupportOf(const Eigen::VectorXd& beta);
  /// mu = 1 with a solution that has no free variable: the jump to the frozen solution's optimum (all weight on the
  /// largest c_j over every kernel), taken once per Newton attempt; NotNeeded when beta is already there.
  Jump JumpToFrozenOptimum(Eigen::VectorXd& beta, const OnSupport& s, bool& jumped, double& lastStep);
  /// The Newton step from the solution's curvature (`products`: the columns K_j a of the support, when Solve formed
  /// them); false when there is none or it is not usable (singular without reducing R, or beyond the trust bound).
  bool ComputeNewtonStep(const InnerSolution& sol, const Eigen::MatrixXd& products, const OnSupport& s, double tolerance, NewtonStep& out);
  /// beta moved by the step (shortened so that a kernel a check brought in keeps part of its weight); `fraction`
  /// receives the step's share taken, `leaves` whether a kernel of A left the support.
  Eigen::VectorXd Moved(const Eigen::VectorXd& beta, const OnSupport& s, const NewtonStep& n, double& fraction, bool& leaves) const;
  /// The full optimality check over every kernel at the solution of a certifying step: Converged with `beta` =
  /// `moved`, or SupportChanged with the entering kernels in `beta` (at a small weight, beside Newton's weights).
  Newton Certify(Eigen::VectorXd& beta, const Eigen::VectorXd& moved, const OnSupport& s, const NewtonStep& n, double tolerance);
  /// The next solve's warm start: `sol` moved along d coef / d beta by the step from the weights of A to `moved`.
  void PredictNextSolution(InnerSolution& sol, const OnSupport& s, const NewtonStep& n, const Eigen::VectorXd& moved) const;
  /// Kernel j enters `beta` (of sum `sum`) at the entering weight, marked as brought in by a check (the leaving guard).
  void Enter(Eigen::VectorXd& beta, Eigen::Index j, double sum);
  /// Kernels outside the support of `beta` that the certifying check would bring in at the current solution
  /// (S = sum_A beta_j c_j, sum = sum beta; the same conditions, slack included), found through the screening
  /// bounds: an exact quadratic only where a bound passes the level.
  std::vector<Eigen::Index> Entering(const Eigen::VectorXd& beta, double S, double sum, double tolerance);

  std::unique_ptr<gram::KernelStack> ownStack_;  ///< without a cache: this fit's own stack
  const gram::KernelStack& stack_;
  ScreenedNorms screen_;
  Eigen::MatrixXd K_;
  bool noCurvature_ = false;
  std::vector<char> broughtIn_;  ///< kernels a full optimality check brought into the support (this fit)
  const InnerSolver& solver_;
  double mu_;
  FitInfo& info_;
};

}  // namespace neuromkl::learners
