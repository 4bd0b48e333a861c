#pragma once
// The single-kernel solvers of the feature learners (feature_learners.hpp): C-SVC and kernel ridge regression on
// K_beta = sum_r beta_r Z_r Z_r', read through the fold's products, each keeping its state from one solve to the next
// (ENMKL's warm starts).
#include <memory>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/gram/features.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::learners {

/// Limits of FeatureSolver::Curvature: 5-10 s of multiply-adds here, a Gram matrix of 1 GB (11,180 rows).
inline constexpr double kCurvatureMacs = 4e10;
inline constexpr double kCurvatureValues = 1.25e8;

class FeatureSolver {
 public:
  virtual ~FeatureSolver() = default;
  /// Solves on K_beta from the current state. False when it stopped at its iteration cap.
  virtual bool Solve(const Eigen::VectorXd& beta) = 0;
  /// Decision coefficients (SVM: y_i alpha_i; KRR: alpha_i) and bias of the last solve.
  virtual const Eigen::VectorXd& Coef() const = 0;
  virtual double Bias() const = 0;
  /// Solver variables of the last solve (SVM: 0 <= alpha <= C w; KRR: coef).
  virtual const Eigen::VectorXd& Alpha() const = 0;
  /// ||Z_r' coef||^2 for every region, exact after Solve (the regions with beta_r = 0 too: ENMKL's entering check).
  virtual const Eigen::VectorXd& RegionNorms2() const = 0;
  /// The data term of the primal objective at the last solve's training decisions (hinge x C, or squared / (2 lambda)).
  virtual double Loss() const = 0;
  /// Coordinate updates (SVM) or conjugate-gradient steps (KRR) of all solves so far.
  virtual long Iterations() const = 0;
  /// The largest violation of the optimality conditions at the last solve (LIBSVM's maximal violating pair for the
  /// SVM, the relative residual for KRR).
  virtual double Violation() const = 0;
  /// The solver's variables (SVM: alpha and the bias's multiplier; KRR: coef), to start another solver on the same rows
  /// from (Start): a grid's neighbouring parameters.
  virtual Eigen::VectorXd State() const = 0;
  /// The stopping tolerance of the next solves (ENMKL's inexact solves while its weights still move a lot).
  virtual void SetTolerance(double tolerance) = 0;
  virtual double Tolerance() const = 0;
  /// Starts from another solver's State on the same training rows (alpha clipped to this solver's box); false, and
  /// nothing changed, when the state does not fit.
  virtual bool Start(const Eigen::VectorXd& state) = 0;
  /// Whether no variable of the last solve is at the upper bound of its box (InnerSolver::BoxInactive): every larger C
  /// has the same solution. False for solvers without a box.
  virtual bool BoxInactive() const { return false; }
  /// The last solve's sensitivity to the weights of the regions `support` (beta: the weights it was solved with), as
  /// on the kernel path (InnerSolver::Curvature: d c_j / d beta_k = -H_jk / c_j, c_j = ||Z_j' coef||), from the Gram
  /// matrix of the rows it needs (the SVM's free rows, every row for KRR) over the support's voxels. False when that
  /// matrix would cost more than kCurvatureMacs multiply-adds to form or take more than kCurvatureValues values: the
  /// feature path's scale, where the weights' steps go on without Newton's.
  virtual bool Curvature(const Eigen::VectorXd& beta, const std::vector<Eigen::Index>& support, Eigen::MatrixXd& H) const = 0;
  /// Whether Curvature at the last solve's rows would be within its limits for `support` (checked before a Newton
  /// attempt, which then needs no solve to find out).
  virtual bool CurvatureWithinLimits(const std::vector<Eigen::Index>& support) const = 0;
  /// The multiply-adds Curvature may spend (kCurvatureMacs unless set; 0: none, no Newton steps).
  void LimitCurvature(double macs) { curvatureMacs_ = macs; }

 protected:
  double curvatureMacs_ = kCurvatureMacs;
};

/// FitFeatures with the feature solvers' curvature limited to `curvatureMacs` multiply-adds (0: ENMKL without Newton's
/// steps, as at the sizes beyond the limit).
Model FitFeaturesWithCurvature(std::string_view learner, const ParamMap& params, const gram::FoldFeatures& fold, const Targets& targets,
                               const Model* warmStart, double curvatureMacs);

/// C-SVC on +-1 labels `y` (one per training row of `fold`), box C w_i (`weights` empty: all 1); stops when the
/// projected gradients spread less than `tolerance` and the bias moved less than `tolerance` in its last update.
std::unique_ptr<FeatureSolver> MakeFeatureSvc(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double C, const Eigen::VectorXd& weights,
                                              double tolerance, long maxEpochs);

/// Kernel ridge regression with a bias: coef = (K_beta + lambda W^-1)^-1 (y - m_w), bias m_w (the weighted mean);
/// conjugate gradients to a residual of `tolerance` relative to ||y - m_w||.
std::unique_ptr<FeatureSolver> MakeFeatureKrr(const gram::FoldFeatures& fold, const Eigen::VectorXd& y, double lambda, const Eigen::VectorXd& weights,
                                              double tolerance);

}  // namespace neuromkl::learners
