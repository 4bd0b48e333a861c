#pragma once
// ComBat harmonisation (Johnson, Li & Rabinovic 2007, parametric empirical Bayes; Fortin et al. 2017, 2018, biological
// covariates preserved), fitted on some rows and applied to others: inside the folds it is fitted on a training set
// (or on its reference group) and applied to that fold's training and test subjects with the training estimates.
// Per feature v, with site s(i) and covariates c_i (no intercept, never the target):
//   x_iv = alpha_v + c_i beta_v + gamma_{s(i)v} + delta_{s(i)v} eps_iv.
// Least squares on [site indicators | c] gives beta_v and the site means; alpha_v is their fit-count-weighted mean and
// sigma_v^2 the mean squared residual (divided by n). Standardised data z = (x - alpha - c beta) / sigma give per site
// gamma^_sv (mean) and delta^2_sv (variance, n_s - 1); empirical Bayes shrinks them with priors across the features
// (normal on gamma, inverse gamma on delta^2, moments as in Johnson 2007) by the fixed-point iteration of the paper.
// The harmonised value is sigma_v (z_iv - gamma*_sv) / delta*_sv + alpha_v + c_i beta_v.
#include <string>
#include <vector>

#include <Eigen/Core>

namespace neuromkl::gram {

struct ComBatOptions {
  bool empiricalBayes = true;
  /// The iteration stops when the relative change of gamma* and delta*^2 is below this for the feature: the fixed
  /// point is then within about this relative distance (the map is a contraction), far below the data's precision.
  double tolerance = 1e-10;
  int maxIterations = 1000;
  /// For messages: the name of each site label (label i = siteNames[i]); empty: the labels themselves.
  std::vector<std::string> siteNames;
};

/// The estimates of one fit. Features whose pooled variance is 0 (relative to the largest, below 1e-12) are passed
/// through unchanged and left out of the priors (their gamma is reported as 0 and delta^2 as 1).
struct ComBatModel {
  std::vector<int> sites;          ///< site labels, sorted: row s of the B x V matrices
  std::vector<Eigen::Index> fitCount;  ///< fit rows per site
  Eigen::VectorXd alpha, sigma;    ///< V
  Eigen::MatrixXd beta;            ///< p x V
  Eigen::MatrixXd gammaHat, delta2Hat, gammaStar, delta2Star;  ///< B x V
  std::vector<char> passThrough;   ///< V: 1 = constant over the fit rows, left unchanged
  int iterations = 0;              ///< the most empirical-Bayes iterations any feature took
  std::vector<std::string> siteNames;  ///< ComBatOptions::siteNames of the fit, for messages
  /// Row of `site` in the B x V matrices, or -1 for a site the fit did not see.
  int SiteIndex(int site) const;
};

/// Fits on the rows of X (rows x V, float32 or float64; read in blocks of columns and widened to double), their sites
/// and covariates (rows x p, p may be 0). InputError (naming `where`) combat:SiteTooSmall when a site has fewer than 2
/// rows (its variance is undefined), combat:CollinearCovariates when a covariate cannot be told apart from the sites.
ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXf>& X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                      const ComBatOptions& options, const std::string& where);
ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXd>& X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                      const ComBatOptions& options, const std::string& where);
/// The same on rows `rows` of X (no copy of them): sites and covariates are those rows'.
ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXf>& X, const std::vector<Eigen::Index>& rows, const std::vector<int>& sites,
                      const Eigen::Ref<const Eigen::MatrixXd>& covariates, const ComBatOptions& options, const std::string& where);

/// Adds a site the fit did not see (label `site`), its effects estimated from its own rows X (rows x V, every feature of the
/// fit) and their covariates: standardised with the fit's alpha, beta and sigma, they give the site's gamma^ and delta^2,
/// shrunk (with empirical Bayes) towards priors over the site's own features, as Johnson et al. (2007) estimate every
/// site; the other sites' estimates are unchanged. Applied to the fit's own rows of one of its sites, it reproduces that
/// site's estimates. std::invalid_argument for a site already in the fit or fewer than 2 rows (callers check counts).
void AddSite(ComBatModel& model, int site, const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
             const ComBatOptions& options);

/// Harmonises rows with a fit's estimates, in place (each row's own site and covariates). X holds the features
/// [firstFeature, firstFeature + X.cols()) of the fit (a region's columns). InputError combat:UnknownSite (naming `where`)
/// for a site the fit did not see.
void ApplyComBat(const ComBatModel& model, Eigen::Ref<Eigen::MatrixXd> X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                 const std::string& where, Eigen::Index firstFeature = 0);

}  // namespace neuromkl::gram
