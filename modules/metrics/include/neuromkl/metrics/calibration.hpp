#pragma once
// Probabilities for binary classifiers and bias correction for regression (brain age): the fits
// neuromkl makes on a training set's inner-CV out-of-fold predictions and applies to its test set,
// and the metrics that judge them.
#include <vector>

#include <Eigen/Core>

namespace neuromkl::metrics {

/// Platt scaling P(y = +1 | f) = 1 / (1 + exp(A f + B)).
struct PlattScaling {
  double a = 0, b = 0;     ///< A (negative when larger decision values mean the positive class) and B
  int samples = 0;         ///< decision values it was fitted on
  int iterations = 0;      ///< Newton iterations
  bool converged = false;  ///< gradient below LIBSVM's 1e-5 (otherwise the last accepted step)
  bool Valid() const { return samples > 0; }
};
/// Platt's fit by the Newton method with backtracking of Lin, Lin & Weng (2007), as LIBSVM's
/// sigmoid_train: targets (N+ + 1) / (N+ + 2) and 1 / (N- + 2) (Platt's prior correction), A = 0 and
/// B = log((N- + 1) / (N+ + 1)) to start, an overflow-free objective. labels +-1; pairs with a non-finite
/// decision value are left out. Not Valid() (samples 0) when either class has no finite pair.
PlattScaling FitPlatt(const Eigen::Ref<const Eigen::VectorXd>& decision, const Eigen::Ref<const Eigen::VectorXd>& labels);
/// P(y = +1 | f), computed without overflow; NaN for a non-finite f or an invalid scaling.
double PlattProbability(const PlattScaling& platt, double decision);
Eigen::VectorXd PlattProbabilities(const PlattScaling& platt, const Eigen::Ref<const Eigen::VectorXd>& decision);

/// Brier score mean (p - [y = +1])^2 and log-loss -mean log p(true class) (p clipped to [1e-15, 1 - 1e-15]),
/// over the pairs with a finite probability; NaN when there is none.
double BrierScore(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability);
double LogLoss(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability);
/// Calibration slope (Cox 1958): b of the logistic regression logit P(y = +1) = a + b logit(p) (1 = calibrated,
/// < 1 = over-confident); NaN with fewer than 2 pairs of each class.
double CalibrationSlope(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability);

/// One bin of a reliability diagram: subjects whose probability falls in [lo, hi).
struct ReliabilityBin {
  double lo = 0, hi = 0;
  int count = 0;
  double meanProbability = 0;  ///< NaN when empty
  double observed = 0;         ///< fraction of positives; NaN when empty
};
/// `bins` equal-width bins over [0, 1] (1 falls in the last).
std::vector<ReliabilityBin> Reliability(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& probability, int bins = 10);

/// Linear bias correction of a regression (brain age; Beheshti et al. 2019, de Lange & Cole 2020):
/// prediction = slope x target + offset by least squares; corrected = (prediction - offset) / slope.
struct BiasCorrection {
  double slope = 0, offset = 0;
  int samples = 0;
  bool Valid() const { return samples > 0; }  ///< fitted, with a positive slope
};
/// Least squares over the finite pairs; not Valid() when fewer than 3 pairs, constant targets, or a slope <= 0
/// (a model that does not increase with the target cannot be inverted meaningfully).
BiasCorrection FitBiasCorrection(const Eigen::Ref<const Eigen::VectorXd>& targets, const Eigen::Ref<const Eigen::VectorXd>& predictions);
/// (prediction - offset) / slope; NaN when not Valid().
Eigen::VectorXd ApplyBiasCorrection(const BiasCorrection& correction, const Eigen::Ref<const Eigen::VectorXd>& predictions);
/// Least-squares slope of the gap (prediction - target) on the target over the finite pairs (NaN with fewer than 3):
/// regression dilution makes it negative; a bias-corrected prediction brings it to about 0.
double GapSlope(const Eigen::Ref<const Eigen::VectorXd>& targets, const Eigen::Ref<const Eigen::VectorXd>& predictions);

}  // namespace neuromkl::metrics
