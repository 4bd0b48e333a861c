#pragma once
// Performance metrics (ALGORITHMS.md section 7), computed on pooled out-of-fold predictions and per
// fold. Names are honest: "r2" is the coefficient of determination, "r_squared" the squared Pearson r.
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::metrics {

struct Classification {
  double n = 0;         ///< subjects scored (finite decision values)
  double unscored = 0;  ///< subjects left out because their decision is NaN or infinite (a failed fit)
  double tp = 0, fn = 0, fp = 0, tn = 0;  ///< confusion matrix (positive = +1)
  double accuracy = 0, balancedAccuracy = 0;
  double recallPositive = 0, recallNegative = 0;        ///< sensitivity, specificity
  double precisionPositive = 0, precisionNegative = 0;  ///< NaN when nothing is predicted in the class
  double auc = 0;                                       ///< NaN when one class is absent
  double accuracyLow = 0, accuracyHigh = 0;             ///< Wilson 95 % interval of the accuracy
};

/// Multiclass metrics (labels 0..k-1, one score column per class, prediction = arg max of a row, ties to
/// the lower class index). Classes absent from the labels have NaN recall and AUC and are left out of
/// the macro means.
struct Multiclass {
  double n = 0, unscored = 0;  ///< as Classification (a row with a non-finite score is never scored)
  int classes = 0;
  Eigen::MatrixXd confusion;   ///< classes x classes: row = true class, column = predicted class
  Eigen::VectorXd recall, precision, auc;  ///< per class; auc one-vs-rest on the class's score column
  double accuracy = 0;
  double balancedAccuracy = 0;  ///< macro: the mean per-class recall over the classes present
  double macroAuc = 0;          ///< mean one-vs-rest AUC over the classes present
  double kappa = 0;             ///< Cohen's kappa (p_o - p_e) / (1 - p_e)
};

struct Regression {
  double n = 0;         ///< subjects scored (finite predictions)
  double unscored = 0;  ///< subjects left out because their prediction is NaN or infinite (a failed fit)
  double mse = 0, mae = 0;
  double pearsonR = 0;   ///< NaN when predictions or targets are constant
  double rSquared = 0;   ///< pearsonR^2 (PRoNTo's "r2")
  double r2 = 0;         ///< coefficient of determination 1 - SS_res / SS_tot
  double nmse = 0;       ///< MSE / variance of the targets (population variance)
};

/// labels +-1, decision values: predicted class = sign (0 counts as +1). A NaN or infinite decision
/// value (a failed fit) is never scored: the pair is left out of every metric and counted in `unscored`;
/// with no scored pair every rate is NaN.
Classification Classify(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& decision);
/// labels 0..classes-1 (size m), scores m x classes.
Multiclass MultiClassify(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::MatrixXd>& scores, int classes);
/// The predicted class of each row (arg max; ties to the lower index); NaN for a row that is not all finite.
Eigen::VectorXd PredictedClasses(const Eigen::Ref<const Eigen::MatrixXd>& scores);
Regression Regress(const Eigen::Ref<const Eigen::VectorXd>& targets, const Eigen::Ref<const Eigen::VectorXd>& predictions);

/// Area under the ROC curve = Mann-Whitney U / (n+ n-), ties counted 1/2 (average ranks); pairs with a
/// non-finite decision are left out.
double Auc(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& decision);

/// One point of a ROC curve: the false and true positive rates when every subject whose decision value is at
/// least a threshold is called positive.
struct RocPoint {
  double falsePositiveRate = 0, truePositiveRate = 0;
};
/// The empirical ROC curve (Fawcett 2006, "An introduction to ROC analysis", algorithm 1): labels > 0 positive;
/// pairs with a non-finite decision are left out, as in Auc. From (0, 0), one point per distinct decision value,
/// lowering the threshold through the sorted values, to (1, 1); tied values move the curve diagonally, so the
/// trapezoids under it sum to Auc. Empty when a class is missing.
std::vector<RocPoint> RocCurve(const Eigen::Ref<const Eigen::VectorXd>& labels, const Eigen::Ref<const Eigen::VectorXd>& decision);

/// Named values for tables and JSON ("balanced_accuracy", "auc", ...; "mse", "r2", ...).
std::map<std::string, double> AsMap(const Classification& m);
std::map<std::string, double> AsMap(const Regression& m);
/// "accuracy", "balanced_accuracy" (macro), "macro_auc", "kappa", "n", per class c (0-based index)
/// "recall_c", "precision_c", "auc_c", and "confusion_t_p" (true t, predicted p).
std::map<std::string, double> AsMap(const Multiclass& m);

}  // namespace neuromkl::metrics
