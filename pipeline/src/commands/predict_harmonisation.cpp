// `neuromkl predict`: a harmonised source's ComBat for the new subjects (docs/predict.md): each subject's site among the
// model's training sites, and the effects of a site the model was not trained on estimated from its own subjects.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/table.hpp"
#include "predict_parts.hpp"

namespace neuromkl::pipeline::predicting {

namespace {

/// The training fit of a model's harmonised source, as gram's ComBat model (training sites labelled 0..B-1).
gram::ComBatModel TrainingFit(const exporting::ModelHarmonisation& h) {
  gram::ComBatModel fit;
  const auto B = static_cast<int>(h.sites.size());
  for (int s = 0; s < B; ++s) fit.sites.push_back(s);
  fit.fitCount.assign(h.siteCounts.begin(), h.siteCounts.end());
  fit.alpha = h.voxels.col(0);
  fit.sigma = h.voxels.col(1);
  for (Eigen::Index u = 0; u < h.voxels.rows(); ++u) fit.passThrough.push_back(h.voxels(u, 2) != 0.0 ? 1 : 0);
  fit.beta = h.voxels.rightCols(h.Columns()).transpose();
  fit.gammaStar = fit.gammaHat = h.gammaStar;
  fit.delta2Star = fit.delta2Hat = h.delta2Star;
  fit.siteNames = h.sites;
  return fit;
}

}  // namespace

double Harmonised(const SubjectHarmonisation& h, Eigen::Index u, Eigen::Index i, double x) {
  const gram::ComBatModel& fit = h.fit;
  if (fit.passThrough[static_cast<std::size_t>(u)]) return x;
  const int s = h.siteRow[static_cast<std::size_t>(i)];
  const double preserved = h.covariates.row(i).dot(fit.beta.col(u)) + fit.alpha[u];
  const double d2 = fit.delta2Star(s, u);
  const double scale = d2 > 0 ? std::sqrt(d2) : 1.0;
  return fit.sigma[u] * ((x - preserved) / fit.sigma[u] - fit.gammaStar(s, u)) / scale + preserved;
}

std::unique_ptr<SubjectHarmonisation> PrepareHarmonisation(const exporting::ModelHarmonisation& model, const std::string& source, const NewSubjects& s,
                                                           const NewSiteRows& newSiteRows, std::vector<std::string>& notes) {
  auto h = std::make_unique<SubjectHarmonisation>();
  h->fit = TrainingFit(model);
  h->covariates = NewCovariateRows({"harmonisation covariate", 0, model.covariateNumeric, model.covariateCategorical, model.covariateFill}, s, notes);
  const auto& cells = s.cells.at(model.siteColumn);
  std::vector<std::string> missing;
  std::map<std::string, std::vector<std::size_t>> newSites;  // site -> its subjects
  h->siteRow.assign(s.ids.size(), -1);
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    if (IsMissingCell(cells[i])) {
      missing.push_back(s.ids[i]);
      continue;
    }
    const auto it = std::find(model.sites.begin(), model.sites.end(), cells[i]);
    if (it != model.sites.end()) h->siteRow[i] = static_cast<int>(it - model.sites.begin());
    else newSites[cells[i]].push_back(i);
  }
  if (!missing.empty())
    throw InputError("predict:MissingSite", s.where,
                     fmt::format("{} subjects have no value in the site column \"{}\" that the model harmonises by: {}", missing.size(), model.siteColumn,
                                 Shown(missing)));
  std::vector<std::string> unseen;
  for (const auto& [site, rows] : newSites) unseen.push_back(fmt::format("\"{}\" ({} subjects)", site, rows.size()));
  if (!newSites.empty() && s.newSites == NewSubjects::NewSites::Refuse)
    throw InputError("predict:UnknownSite", s.where,
                     fmt::format("source {}: subjects of site(s) {} that the model was not trained on (its sites: {}); without --new-sites refuse "
                                 "each such site's effects are estimated from its own subjects (at least --new-site-min of them)",
                                 source, Join(unseen, ", "), Join(model.sites, ", ")));
  const auto& [refColumn, refValue] = s.newSiteReference;
  if (!newSites.empty() && !refColumn.empty() && !s.cells.count(refColumn))
    throw InputError("predict:NoSuchColumn", s.where, fmt::format("--new-site-reference names column \"{}\", which the table does not have", refColumn));
  int label = static_cast<int>(model.sites.size());
  for (const auto& [site, rows] : newSites) {
    std::vector<std::size_t> fitting;
    for (const std::size_t i : rows)
      if (refColumn.empty() || s.cells.at(refColumn)[i] == refValue) fitting.push_back(i);
    const std::string group = refColumn.empty() ? "" : fmt::format(" with {} = {}", refColumn, refValue);
    if (static_cast<int>(fitting.size()) < std::max(2, s.newSiteMinimum))
      throw InputError("predict:NewSiteTooSmall", s.where,
                       fmt::format("source {}: site \"{}\" is not among the model's training sites ({}), and its effects are estimated from its own "
                                   "subjects{}: {} found, at least {} needed (--new-site-min); predict more of its subjects at once, or lower "
                                   "the minimum knowing that the estimates are then less stable",
                                   source, site, Join(model.sites, ", "), group, fitting.size(), std::max(2, s.newSiteMinimum)));
    // The site's effects from its own rows, standardised with the fit's alpha, beta and sigma (gram::AddSite).
    Eigen::MatrixXd C(static_cast<Eigen::Index>(fitting.size()), h->covariates.cols());
    for (std::size_t j = 0; j < fitting.size(); ++j) C.row(static_cast<Eigen::Index>(j)) = h->covariates.row(static_cast<Eigen::Index>(fitting[j]));
    gram::ComBatOptions options;
    options.empiricalBayes = model.empiricalBayes;
    gram::AddSite(h->fit, label, newSiteRows(fitting, *h), C, options);
    const int row = h->fit.SiteIndex(label++);
    for (const std::size_t i : rows) h->siteRow[i] = row;
    notes.push_back(fmt::format("source {}: site \"{}\" is not among the model's training sites ({}); its ComBat effects were estimated from its "
                                "{} subjects{} (its {} subjects harmonised with them)",
                                source, site, Join(model.sites, ", "), fitting.size(), group, rows.size()));
  }
  return h;
}

}  // namespace neuromkl::pipeline::predicting
