#include "neuromkl/gram/combat.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <Eigen/QR>
#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl::gram {

namespace {

/// Features are widened to double and fitted this many columns at a time: a block of n x 512 doubles stays small
/// next to the features themselves.
constexpr Eigen::Index kColumnBlock = 512;

/// Relative convergence of one quantity of the iteration: a zero previous value counts as converged only when the
/// new one is zero too.
double RelativeChange(double now, double before) {
  const double change = std::abs(now - before);
  if (before == 0) return change == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return change / std::abs(before);
}

/// Site labels sorted, each row's position among them, and the fit rows of each site.
struct SiteRows {
  std::vector<int> labels;
  std::vector<int> of;  ///< per row
  std::vector<std::vector<Eigen::Index>> rows;
};

SiteRows GroupSites(const std::vector<int>& sites) {
  SiteRows out;
  out.labels = sites;
  std::sort(out.labels.begin(), out.labels.end());
  out.labels.erase(std::unique(out.labels.begin(), out.labels.end()), out.labels.end());
  out.rows.resize(out.labels.size());
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto s = static_cast<int>(std::lower_bound(out.labels.begin(), out.labels.end(), sites[i]) - out.labels.begin());
    out.of.push_back(s);
    out.rows[static_cast<std::size_t>(s)].push_back(static_cast<Eigen::Index>(i));
  }
  return out;
}

/// The empirical-Bayes estimates of one feature at one site (Johnson et al. 2007, parametric priors): the fixed point
/// of gamma* = (n tau2 gamma^ + delta*^2 gammaBar) / (n tau2 + delta*^2) and
/// delta*^2 = (b + S(gamma*) / 2) / (n / 2 + a - 1), S(g) = sum_i (z_i - g)^2 = SS + n (gamma^ - g)^2.
struct Prior {
  double gammaBar = 0, tau2 = 0, a = 0, b = 0, mean = 0;
  bool scaleDegenerate = false;  ///< every feature has the same delta^2: the inverse-gamma prior is a point mass at `mean`
};

int Shrink(const Prior& prior, double count, double gammaHat, double delta2Hat, double ss, const ComBatOptions& options, double& gammaStar,
           double& delta2Star) {
  double g = gammaHat, d = delta2Hat;
  int iteration = 0;
  while (iteration < options.maxIterations) {
    ++iteration;
    const double denominator = count * prior.tau2 + d;
    const double gNew = denominator > 0 ? (count * prior.tau2 * gammaHat + d * prior.gammaBar) / denominator : gammaHat;
    const double squares = ss + count * (gammaHat - gNew) * (gammaHat - gNew);  // sum_i (z_i - gNew)^2
    const double dNew = prior.scaleDegenerate ? prior.mean : (prior.b + 0.5 * squares) / (0.5 * count + prior.a - 1.0);
    const double change = std::max(RelativeChange(gNew, g), RelativeChange(dNew, d));
    g = gNew;
    d = dNew;
    if (change < options.tolerance) break;
  }
  gammaStar = g;
  delta2Star = d;
  return iteration;
}

/// The name of a site label in messages.
std::string SiteName(int label, const std::vector<std::string>& names) {
  return label >= 0 && static_cast<std::size_t>(label) < names.size() ? "\"" + names[static_cast<std::size_t>(label)] + "\"" : std::to_string(label);
}

/// Site s's priors from its unshrunk estimates over the `active` features: normal for gamma (mean and variance),
/// inverse gamma for delta^2 by the method of moments (Johnson et al. 2007).
Prior SitePrior(const ComBatModel& model, Eigen::Index s, const std::vector<Eigen::Index>& active) {
  Prior prior;
  const auto count = static_cast<double>(active.size());
  double gSum = 0, dSum = 0;
  for (const Eigen::Index v : active) {
    gSum += model.gammaHat(s, v);
    dSum += model.delta2Hat(s, v);
  }
  prior.gammaBar = gSum / count;
  const double m = dSum / count;
  double gVar = 0, dVar = 0;
  for (const Eigen::Index v : active) {
    gVar += (model.gammaHat(s, v) - prior.gammaBar) * (model.gammaHat(s, v) - prior.gammaBar);
    dVar += (model.delta2Hat(s, v) - m) * (model.delta2Hat(s, v) - m);
  }
  prior.tau2 = gVar / (count - 1);
  const double s2 = dVar / (count - 1);
  prior.mean = m;
  prior.scaleDegenerate = !(s2 > 0);
  if (!prior.scaleDegenerate) {
    prior.a = (2 * s2 + m * m) / s2;
    prior.b = (m * s2 + m * m * m) / s2;
  }
  return prior;
}

/// `Columns(c0, w)`: the fit rows' features [c0, c0 + w) as an n x w double matrix.
template <typename Columns>
ComBatModel Fit(Eigen::Index n, Eigen::Index V, const Columns& columns, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& C,
                const ComBatOptions& options, const std::string& where) {
  const Eigen::Index p = C.cols();
  if (static_cast<Eigen::Index>(sites.size()) != n || C.rows() != n)
    throw std::invalid_argument(fmt::format("FitComBat: {} rows, {} sites, {} covariate rows", n, sites.size(), C.rows()));
  const SiteRows groups = GroupSites(sites);
  const auto B = static_cast<Eigen::Index>(groups.labels.size());
  ComBatModel model;
  model.sites = groups.labels;
  model.siteNames = options.siteNames;
  for (std::size_t s = 0; s < groups.rows.size(); ++s) {
    model.fitCount.push_back(static_cast<Eigen::Index>(groups.rows[s].size()));
    if (groups.rows[s].size() < 2)
      throw InputError("combat:SiteTooSmall", where,
                       fmt::format("site {} has {} subject(s) among the {} that fit the harmonisation here; each site needs at least 2 (its "
                                   "variance is estimated from them): merge small sites, or use a split that keeps 2 or more of each site in "
                                   "every training set (group or stratify by the site column)",
                                   SiteName(groups.labels[s], options.siteNames), groups.rows[s].size(), n));
  }
  // Design [site indicators | covariates]: the indicators span the intercept.
  Eigen::MatrixXd D = Eigen::MatrixXd::Zero(n, B + p);
  for (Eigen::Index i = 0; i < n; ++i) D(i, groups.of[static_cast<std::size_t>(i)]) = 1.0;
  D.rightCols(p) = C;
  Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd> cod(D);
  cod.setThreshold(1e-10);
  if (cod.rank() < B + p)
    throw InputError("combat:CollinearCovariates", where,
                     fmt::format("the harmonisation design (one column per site and {} covariate column(s)) has rank {} of {} over these {} "
                                 "subjects: a covariate is constant within every site or is determined by the site, so the site effects "
                                 "cannot be told apart from it; remove that covariate from /harmonisation/covariates",
                                 p, cod.rank(), B + p, n));
  const Eigen::MatrixXd solve = cod.pseudoInverse();  // (B + p) x n
  Eigen::RowVectorXd siteWeight(B);
  for (Eigen::Index s = 0; s < B; ++s) siteWeight[s] = static_cast<double>(model.fitCount[static_cast<std::size_t>(s)]) / static_cast<double>(n);

  model.alpha.resize(V);
  model.sigma.resize(V);
  model.beta.resize(p, V);
  model.gammaHat.setZero(B, V);
  model.delta2Hat.setOnes(B, V);
  Eigen::MatrixXd ss = Eigen::MatrixXd::Zero(B, V);  // per site, sum of (z - gamma^)^2
  Eigen::VectorXd sigma2(V);
  for (Eigen::Index c0 = 0; c0 < V; c0 += kColumnBlock) {
    const Eigen::Index w = std::min(kColumnBlock, V - c0);
    const Eigen::MatrixXd block = columns(c0, w);
    const Eigen::MatrixXd coef = solve * block;
    sigma2.segment(c0, w) = (block - D * coef).colwise().squaredNorm().transpose() / static_cast<double>(n);
    model.alpha.segment(c0, w) = (siteWeight * coef.topRows(B)).transpose();
    model.beta.middleCols(c0, w) = coef.bottomRows(p);
    // The block's residuals from alpha + c beta (z before dividing by sigma).
    const Eigen::MatrixXd residual = (block - C * model.beta.middleCols(c0, w)).rowwise() - model.alpha.segment(c0, w).transpose();
    for (Eigen::Index j = 0; j < w; ++j) {
      const Eigen::Index v = c0 + j;
      if (!(sigma2[v] > 0)) continue;
      const double sd = std::sqrt(sigma2[v]);
      for (Eigen::Index s = 0; s < B; ++s) {
        const auto& rows = groups.rows[static_cast<std::size_t>(s)];
        double sum = 0;
        for (const Eigen::Index i : rows) sum += residual(i, j) / sd;
        const double mean = sum / static_cast<double>(rows.size());
        double squares = 0;
        for (const Eigen::Index i : rows) squares += (residual(i, j) / sd - mean) * (residual(i, j) / sd - mean);
        model.gammaHat(s, v) = mean;
        ss(s, v) = squares;
        model.delta2Hat(s, v) = squares / static_cast<double>(rows.size() - 1);
      }
    }
  }
  model.sigma = sigma2.cwiseSqrt();
  const double largest = V > 0 ? sigma2.maxCoeff() : 0.0;
  model.passThrough.assign(static_cast<std::size_t>(V), 0);
  std::vector<Eigen::Index> active;
  for (Eigen::Index v = 0; v < V; ++v) {
    if (largest > 0 && sigma2[v] > 1e-12 * largest) {
      active.push_back(v);
    } else {
      model.passThrough[static_cast<std::size_t>(v)] = 1;
      model.gammaHat.col(v).setZero();
      model.delta2Hat.col(v).setOnes();
    }
  }
  model.gammaStar = model.gammaHat;
  model.delta2Star = model.delta2Hat;
  // Priors need a spread over at least two features; with fewer the estimates stay unshrunk.
  if (!options.empiricalBayes || active.size() < 2) return model;
  for (Eigen::Index s = 0; s < B; ++s) {
    const Prior prior = SitePrior(model, s, active);
    const auto siteCount = static_cast<double>(model.fitCount[static_cast<std::size_t>(s)]);
    for (const Eigen::Index v : active)
      model.iterations = std::max(model.iterations, Shrink(prior, siteCount, model.gammaHat(s, v), model.delta2Hat(s, v), ss(s, v), options,
                                                           model.gammaStar(s, v), model.delta2Star(s, v)));
  }
  return model;
}

std::string Join(const std::vector<int>& labels, const std::vector<std::string>& names) {
  std::string out;
  for (const int label : labels) out += (out.empty() ? "" : ", ") + SiteName(label, names);
  return out;
}

}  // namespace

int ComBatModel::SiteIndex(int site) const {
  const auto it = std::lower_bound(sites.begin(), sites.end(), site);
  return it != sites.end() && *it == site ? static_cast<int>(it - sites.begin()) : -1;
}

void AddSite(ComBatModel& model, int site, const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
             const ComBatOptions& options) {
  const Eigen::Index m = X.rows(), V = X.cols();
  if (model.SiteIndex(site) >= 0) throw std::invalid_argument(fmt::format("AddSite: site {} is already in the fit", site));
  if (m < 2 || V != model.alpha.size() || covariates.rows() != m || covariates.cols() != model.beta.rows())
    throw std::invalid_argument(fmt::format("AddSite: {} x {} rows, {} x {} covariates for a fit of {} features and {} covariates", m, V, covariates.rows(),
                                            covariates.cols(), model.alpha.size(), model.beta.rows()));
  const auto s = static_cast<Eigen::Index>(std::lower_bound(model.sites.begin(), model.sites.end(), site) - model.sites.begin());
  auto insertRow = [&](Eigen::MatrixXd& A) {
    Eigen::MatrixXd out(A.rows() + 1, V);
    out << A.topRows(s), Eigen::RowVectorXd::Zero(V), A.bottomRows(A.rows() - s);
    A = std::move(out);
  };
  insertRow(model.gammaHat);
  insertRow(model.delta2Hat);
  insertRow(model.gammaStar);
  insertRow(model.delta2Star);
  model.sites.insert(model.sites.begin() + s, site);
  model.fitCount.insert(model.fitCount.begin() + s, m);
  Eigen::VectorXd ss = Eigen::VectorXd::Zero(V);
  std::vector<Eigen::Index> active;
  const Eigen::MatrixXd preserved = (covariates * model.beta).rowwise() + model.alpha.transpose();
  for (Eigen::Index v = 0; v < V; ++v) {
    if (model.passThrough[static_cast<std::size_t>(v)]) {
      model.delta2Hat(s, v) = 1.0;
      continue;
    }
    active.push_back(v);
    const Eigen::VectorXd z = (X.col(v) - preserved.col(v)) / model.sigma[v];
    const double mean = z.mean();
    model.gammaHat(s, v) = mean;
    ss[v] = (z.array() - mean).square().sum();
    model.delta2Hat(s, v) = ss[v] / static_cast<double>(m - 1);
  }
  model.gammaStar.row(s) = model.gammaHat.row(s);
  model.delta2Star.row(s) = model.delta2Hat.row(s);
  if (!options.empiricalBayes || active.size() < 2) return;
  const Prior prior = SitePrior(model, s, active);
  for (const Eigen::Index v : active)
    model.iterations = std::max(model.iterations, Shrink(prior, static_cast<double>(m), model.gammaHat(s, v), model.delta2Hat(s, v), ss[v], options,
                                                         model.gammaStar(s, v), model.delta2Star(s, v)));
}

ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXf>& X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                      const ComBatOptions& options, const std::string& where) {
  const auto columns = [&](Eigen::Index c0, Eigen::Index w) -> Eigen::MatrixXd { return X.middleCols(c0, w).cast<double>(); };
  return Fit(X.rows(), X.cols(), columns, sites, covariates, options, where);
}

ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXd>& X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                      const ComBatOptions& options, const std::string& where) {
  const auto columns = [&](Eigen::Index c0, Eigen::Index w) -> Eigen::MatrixXd { return X.middleCols(c0, w); };
  return Fit(X.rows(), X.cols(), columns, sites, covariates, options, where);
}

ComBatModel FitComBat(const Eigen::Ref<const Eigen::MatrixXf>& X, const std::vector<Eigen::Index>& rows, const std::vector<int>& sites,
                      const Eigen::Ref<const Eigen::MatrixXd>& covariates, const ComBatOptions& options, const std::string& where) {
  const auto columns = [&](Eigen::Index c0, Eigen::Index w) -> Eigen::MatrixXd { return X(rows, Eigen::seqN(c0, w)).cast<double>(); };
  return Fit(static_cast<Eigen::Index>(rows.size()), X.cols(), columns, sites, covariates, options, where);
}

void ApplyComBat(const ComBatModel& model, Eigen::Ref<Eigen::MatrixXd> X, const std::vector<int>& sites, const Eigen::Ref<const Eigen::MatrixXd>& covariates,
                 const std::string& where, Eigen::Index firstFeature) {
  const Eigen::Index n = X.rows(), V = X.cols();
  if (static_cast<Eigen::Index>(sites.size()) != n || covariates.rows() != n || covariates.cols() != model.beta.rows() || firstFeature < 0 ||
      firstFeature + V > model.alpha.size())
    throw std::invalid_argument(fmt::format("ApplyComBat: {} x {} rows, {} sites, {} x {} covariates for a fit of {} features and {} covariates", n, V,
                                            sites.size(), covariates.rows(), covariates.cols(), model.alpha.size(), model.beta.rows()));
  std::vector<int> siteRow(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i) {
    siteRow[static_cast<std::size_t>(i)] = model.SiteIndex(sites[static_cast<std::size_t>(i)]);
    if (siteRow[static_cast<std::size_t>(i)] < 0)
      throw InputError("combat:UnknownSite", where,
                       fmt::format("row {} is from site {}, which the harmonisation was not fitted on (its sites: {})", i + 1,
                                   SiteName(sites[static_cast<std::size_t>(i)], model.siteNames), Join(model.sites, model.siteNames)));
  }
  for (Eigen::Index c0 = 0; c0 < V; c0 += kColumnBlock) {
    const Eigen::Index w = std::min(kColumnBlock, V - c0);
    // alpha_v + c_i beta_v for the block: the part of each value ComBat preserves.
    const Eigen::Index f0 = firstFeature + c0;
    const Eigen::MatrixXd preserved = (covariates * model.beta.middleCols(f0, w)).rowwise() + model.alpha.segment(f0, w).transpose();
    for (Eigen::Index j = 0; j < w; ++j) {
      const Eigen::Index v = f0 + j;
      if (model.passThrough[static_cast<std::size_t>(v)]) continue;
      const double sd = model.sigma[v];
      for (Eigen::Index i = 0; i < n; ++i) {
        const int s = siteRow[static_cast<std::size_t>(i)];
        const double d2 = model.delta2Star(s, v);
        const double scale = d2 > 0 ? std::sqrt(d2) : 1.0;  // a site constant at this feature: its location only
        const double z = (X(i, c0 + j) - preserved(i, j)) / sd;
        X(i, c0 + j) = sd * (z - model.gammaStar(s, v)) / scale + preserved(i, j);
      }
    }
  }
}

}  // namespace neuromkl::gram
