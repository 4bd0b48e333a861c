// A site the ComBat fit did not see, its effects estimated from its own rows (gram::AddSite): checked against the fit's
// own estimates of a site, against the posterior equations of Johnson et al. (2007) transcribed here, and for what it
// does to the new site's rows.
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/gram/combat.hpp"

using namespace neuromkl;

namespace {

/// Four sites of 9 rows, a shift and a scale per site and feature, one covariate.
struct Data {
  Eigen::MatrixXd X;
  std::vector<int> sites;
  Eigen::MatrixXd covariates;
};

Data MakeData(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const int n = 36, V = 25, B = 4;
  Data d;
  d.X.resize(n, V);
  d.covariates.resize(n, 1);
  Eigen::MatrixXd shift(B, V), scale(B, V);
  for (int s = 0; s < B; ++s)
    for (int v = 0; v < V; ++v) shift(s, v) = 1.5 * normal(rng), scale(s, v) = std::exp(0.4 * normal(rng));
  for (int i = 0; i < n; ++i) {
    d.sites.push_back(i % B);
    d.covariates(i, 0) = 50.0 + 8.0 * normal(rng);
    for (int v = 0; v < V; ++v) d.X(i, v) = 3.0 + 0.05 * d.covariates(i, 0) + shift(i % B, v) + scale(i % B, v) * normal(rng);
  }
  return d;
}

std::vector<Eigen::Index> RowsOfSite(const Data& d, int site) {
  std::vector<Eigen::Index> rows;
  for (std::size_t i = 0; i < d.sites.size(); ++i)
    if (d.sites[i] == site) rows.push_back(static_cast<Eigen::Index>(i));
  return rows;
}

/// The fit without site `site`'s estimates (its rows still shaped alpha, beta and sigma).
gram::ComBatModel WithoutSite(gram::ComBatModel model, int site) {
  const int s = model.SiteIndex(site);
  auto drop = [&](Eigen::MatrixXd& A) {
    Eigen::MatrixXd out(A.rows() - 1, A.cols());
    out << A.topRows(s), A.bottomRows(A.rows() - s - 1);
    A = out;
  };
  drop(model.gammaHat), drop(model.delta2Hat), drop(model.gammaStar), drop(model.delta2Star);
  model.sites.erase(model.sites.begin() + s);
  model.fitCount.erase(model.fitCount.begin() + s);
  return model;
}

}  // namespace

TEST(ComBatNewSite, AFittedSitesRowsGiveBackItsEstimates) {
  // Johnson et al. estimate each site's priors from that site's own features, so a site added from the fit's own rows
  // (standardised with the fit's alpha, beta and sigma) must land on the fit's estimates, with and without shrinkage.
  const Data d = MakeData(3);
  for (const bool eb : {true, false}) {
    gram::ComBatOptions options;
    options.empiricalBayes = eb;
    const gram::ComBatModel fit = gram::FitComBat(d.X, d.sites, d.covariates, options, "test");
    for (int site = 0; site < 4; ++site) {
      gram::ComBatModel added = WithoutSite(fit, site);
      const auto rows = RowsOfSite(d, site);
      gram::AddSite(added, site, d.X(rows, Eigen::all), d.covariates(rows, Eigen::all), options);
      ASSERT_EQ(added.sites, fit.sites);
      ASSERT_EQ(added.fitCount, fit.fitCount);
      // The same sums in the same order, up to the iteration's stopping point (relative change 1e-10).
      EXPECT_LT((added.gammaHat - fit.gammaHat).cwiseAbs().maxCoeff(), 1e-12) << "eb " << eb << " site " << site;
      EXPECT_LT((added.delta2Hat - fit.delta2Hat).cwiseAbs().maxCoeff(), 1e-12);
      EXPECT_LT((added.gammaStar - fit.gammaStar).cwiseAbs().maxCoeff(), 1e-9);
      EXPECT_LT(((added.delta2Star - fit.delta2Star).array() / fit.delta2Star.array()).abs().maxCoeff(), 1e-9);
    }
  }
}

TEST(ComBatNewSite, TheShrunkEstimatesSolveThePosteriorEquationsWithTheNewSitesPriors) {
  const Data d = MakeData(5);
  gram::ComBatOptions options;
  std::vector<Eigen::Index> fitRows, newRows;
  for (Eigen::Index i = 0; i < 36; ++i) (d.sites[static_cast<std::size_t>(i)] == 3 ? newRows : fitRows).push_back(i);
  std::vector<int> fitSites;
  for (const Eigen::Index i : fitRows) fitSites.push_back(d.sites[static_cast<std::size_t>(i)]);
  gram::ComBatModel model = gram::FitComBat(d.X(fitRows, Eigen::all), fitSites, d.covariates(fitRows, Eigen::all), options, "test");
  const Eigen::MatrixXd before = model.gammaStar;
  gram::AddSite(model, 3, d.X(newRows, Eigen::all), d.covariates(newRows, Eigen::all), options);
  ASSERT_EQ(model.sites, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(model.gammaStar.topRows(3), before) << "the training sites' estimates are untouched";

  // Transcribed from Johnson, Li & Rabinovic (2007): z = (x - alpha - c beta) / sigma; gamma^ its mean, delta^2 its
  // variance (m - 1); priors over the features: gamma ~ N(gbar, tau2), delta^2 ~ InvGamma(a, b) by moments.
  const auto m = static_cast<double>(newRows.size());
  const Eigen::Index V = d.X.cols();
  Eigen::MatrixXd z(newRows.size(), V);
  for (std::size_t r = 0; r < newRows.size(); ++r)
    for (Eigen::Index v = 0; v < V; ++v)
      z(static_cast<Eigen::Index>(r), v) = (d.X(newRows[r], v) - model.alpha[v] - d.covariates(newRows[r], 0) * model.beta(0, v)) / model.sigma[v];
  const Eigen::RowVectorXd gh = z.colwise().mean();
  const Eigen::RowVectorXd dh = (z.rowwise() - gh).colwise().squaredNorm() / (m - 1);
  const double gbar = gh.mean(), tau2 = (gh.array() - gbar).square().sum() / static_cast<double>(V - 1);
  const double dm = dh.mean(), s2 = (dh.array() - dm).square().sum() / static_cast<double>(V - 1);
  const double a = (2 * s2 + dm * dm) / s2, b = (dm * s2 + dm * dm * dm) / s2;
  for (Eigen::Index v = 0; v < V; ++v) {
    EXPECT_NEAR(model.gammaHat(3, v), gh[v], 1e-12);
    EXPECT_NEAR(model.delta2Hat(3, v), dh[v], 1e-12);
    const double g = model.gammaStar(3, v), d2 = model.delta2Star(3, v);
    // At the fixed point both equations hold; the iteration stops at a relative change of 1e-10.
    EXPECT_NEAR(g, (m * tau2 * gh[v] + d2 * gbar) / (m * tau2 + d2), 1e-8);
    EXPECT_NEAR(d2, (b + 0.5 * (z.col(v).array() - g).square().sum()) / (m / 2 + a - 1), 1e-8 * d2);
  }
}

TEST(ComBatNewSite, WithoutShrinkageTheNewSitesHarmonisedRowsHaveNoSiteLocationOrScaleLeft) {
  const Data d = MakeData(7);
  gram::ComBatOptions options;
  options.empiricalBayes = false;
  std::vector<Eigen::Index> fitRows, newRows;
  for (Eigen::Index i = 0; i < 36; ++i) (d.sites[static_cast<std::size_t>(i)] == 1 ? newRows : fitRows).push_back(i);
  std::vector<int> fitSites;
  for (const Eigen::Index i : fitRows) fitSites.push_back(d.sites[static_cast<std::size_t>(i)]);
  gram::ComBatModel model = gram::FitComBat(d.X(fitRows, Eigen::all), fitSites, d.covariates(fitRows, Eigen::all), options, "test");
  const Eigen::MatrixXd C = d.covariates(newRows, Eigen::all);
  gram::AddSite(model, 1, d.X(newRows, Eigen::all), C, options);
  Eigen::MatrixXd X = d.X(newRows, Eigen::all);
  gram::ApplyComBat(model, X, std::vector<int>(newRows.size(), 1), C, "test");
  // Standardised with the training fit, the new site's harmonised rows have mean 0 and variance 1 per feature.
  const auto m = static_cast<double>(newRows.size());
  for (Eigen::Index v = 0; v < X.cols(); ++v) {
    const Eigen::ArrayXd z = (X.col(v).array() - model.alpha[v] - C.col(0).array() * model.beta(0, v)) / model.sigma[v];
    EXPECT_NEAR(z.mean(), 0.0, 1e-12);
    EXPECT_NEAR((z - z.mean()).square().sum() / (m - 1), 1.0, 1e-12);
  }
}

TEST(ComBatNewSite, AKnownSiteOrFewerThanTwoRowsAreRefused) {
  const Data d = MakeData(9);
  const gram::ComBatModel fit = gram::FitComBat(d.X, d.sites, d.covariates, {}, "test");
  gram::ComBatModel model = fit;
  EXPECT_THROW(gram::AddSite(model, 2, d.X.topRows(4), d.covariates.topRows(4), {}), std::invalid_argument);
  EXPECT_THROW(gram::AddSite(model, 7, d.X.topRows(1), d.covariates.topRows(1), {}), std::invalid_argument);
  EXPECT_EQ(model.sites, fit.sites);
}
