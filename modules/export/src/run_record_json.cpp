#include "neuromkl/export/run_record.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "json_format.hpp"

namespace neuromkl::exporting {

namespace {
Json Vec(const Eigen::VectorXd& v) {
  Json a = Json::array();
  for (Eigen::Index i = 0; i < v.size(); ++i) a.push_back(Num(v[i]));
  return a;
}
Json Map(const std::map<std::string, double>& m) {
  Json o = Json::object();
  for (const auto& [k, v] : m) o[k] = Num(v);
  return o;
}
}  // namespace

bool LowCoverage(const RunRecord& r, std::size_t kernel) {
  return kernel < r.subjectsWithSignal.size() && r.subjectsWithSignal[kernel] < r.minSubjectsWithSignal;
}

std::string KernelKind(const RunRecord& r, const std::string& kernelName) {
  if (r.sourceNames.empty()) return r.kernelSource;
  const std::string source = kernelName.substr(0, kernelName.find(':'));
  for (std::size_t s = 0; s < r.sourceNames.size() && s < r.sourceKinds.size(); ++s)
    if (r.sourceNames[s] == source) return r.sourceKinds[s];
  return r.kernelSource;
}

std::string FeatureName(const std::string& kind) {
  if (kind == "images") return "voxels";
  if (kind == "connectivity") return "connections";
  if (kind == "tabular") return "columns";
  return "";
}

namespace {

/// The kernels: their source, cache use, regions, exclusions, preprocessing, precision and distribution over ranks.
Json KernelsJson(const RunRecord& r) {
  Json k = {{"source", r.kernelSource}, {"cache", r.kernelCache}, {"count", r.kernels.size()}, {"regions", Json::array()},
            {"excluded", Json::array()}, {"preprocessing", {{"centre", r.centre}, {"normalise", r.normalise}, {"fitted_on", "training subjects of each fold"}}}};
  for (std::size_t i = 0; i < r.kernels.size(); ++i) {
    const auto& info = r.kernels[i];
    Json e = {{"name", info.name}, {"label", info.label}, {"features", info.features}, {"atlas_voxels", info.atlasVoxels},
              {"non_finite_voxels", info.nonFiniteVoxels}, {"zeroed_values", info.zeroedValues}, {"low_coverage", LowCoverage(r, i)}};
    if (i < r.subjectsWithSignal.size()) e["subjects_with_signal"] = r.subjectsWithSignal[i];
    k["regions"].push_back(e);
  }
  k["min_subjects_with_signal"] = r.minSubjectsWithSignal;
  k["representation"] = {{"form", r.representation}, {"why", r.representationNote}};
  if (r.featureBytes > 0) k["representation"]["features_mib"] = static_cast<double>(r.featureBytes) / 1048576.0;
  if (!r.featureStorage.empty()) k["representation"]["storage"] = {{"values", r.featureStorage}, {"why", r.featureStorageNote}, {"held", r.featureHeld}};
  if (r.compactBytes > 0)  // absent for float64 kernels, so those results.json are unchanged
    k["precision"] = {{"values", "float32"},
                      {"store_mib", static_cast<double>(r.compactBytes) / 1048576.0},
                      {"centred_with_cohort_mean", r.compactCentred},
                      {"note", std::string(r.compactCentred ? "each kernel was centred with the whole cohort's mean, then rounded to float32 (fold "
                                                              "centring with training statistics cancels that mean exactly)"
                                                            : "each kernel was rounded to float32") +
                                   (r.kernelsHeldByRanks
                                        ? "; every fold computation is in double (kernels held by the ranks: no float32 copies of prepared fold kernels)"
                                        : "; every fold computation is in double, except that where the MKL learners copy their training kernels (from "
                                          "1,024 training subjects, when the copies fit the memory) the copies are rounded to float32 once prepared")}};
  if (r.kernelRanks > 1)  // absent for a single process, so its results.json is unchanged
    k["distributed"] = {
        {"ranks", r.kernelRanks},
        {"rank_memory_budget_mb", r.kernelRankBudgetMb},
        {"kernels_held_by_ranks", r.kernelsHeldByRanks},
        {"note", r.kernelsHeldByRanks ? std::string(!r.kernelsHeldNote.empty() ? r.kernelsHeldNote
                                                    : r.kernelCache == "hit" ? "kernel k was loaded from the kernel cache by rank k mod ranks"
                                                                             : "each rank decoded its own block of subjects; kernel blocks by a ring exchange; "
                                                                               "kernel k stayed on rank k mod ranks") +
                                            ", which ran every computation that reads it (fold preparation, combination, quadratics, products, test "
                                            "blocks, maps); rank 0 ran the study on the results"
                                      : "each rank decoded its own block of subjects; kernel blocks by a ring exchange, gathered on rank 0"}};
  if (r.outsideAtlasShare >= 0) k["non_zero_outside_atlas_share"] = r.outsideAtlasShare;
  if (!r.intensityScaling.empty())
    k["intensity"] = {{"scaling", r.intensityScaling}, {"scale", r.intensityScale},
                      {"note", "each image was divided by this value (its own mean) before the kernels; subjects in labelled-then-unlabelled order"}};
  for (const auto& excluded : r.excludedKernels)
    k["excluded"].push_back({{"name", excluded.info.name}, {"label", excluded.info.label}, {"reason", excluded.reason}});
  return k;
}

/// One outer fold of a learner: its subjects, chosen parameters, decision values, fit and calibration.
Json FoldJson(const RunRecord& r, const cv::LearnerOutcome& o, const cv::OuterFoldResult& f) {
  Json fj = {{"index", f.index}, {"repeat", f.repeat}, {"n_train", f.train.size()}, {"n_test", f.test.size()},
             {"chosen_params", o.grid[f.chosen]}, {"test_subjects", Json::array()}, {"decision_values", Vec(f.decision)}};
  for (int t : f.test) fj["test_subjects"].push_back(r.labelledSubjects[static_cast<std::size_t>(t)]);
  if (!f.innerScores.empty()) {
    fj["inner_scores"] = Json::array();
    for (double v : f.innerScores) fj["inner_scores"].push_back(Num(v));
  }
  fj["status"] = cv::FoldStatus(f);
  if (!f.error.empty()) {
    fj["error"] = f.error;
  } else {
    const auto& m = f.model;
    fj["fit"] = {{"iterations", m.info.iterations}, {"inner_solves", m.info.innerSolves}, {"inner_iterations", m.info.innerIterations},
                 {"objective", Num(m.info.objective)}, {"gap", Num(m.info.gap)}, {"seconds", m.info.seconds}};
    fj["kernel_weights"] = Vec(m.beta);
    fj["bias"] = Num(m.bias);
    fj["dual_coefficients"] = Vec(m.coef);
  }
  if (f.probability.size() > 0) {  // binary: Platt scaling of this fold (null when it could not be fitted)
    fj["probabilities"] = Vec(f.probability);
    fj["platt"] = f.platt.Valid() ? Json{{"a", Num(f.platt.a)}, {"b", Num(f.platt.b)}, {"samples", f.platt.samples},
                                         {"iterations", f.platt.iterations}, {"converged", f.platt.converged}}
                                  : Json(nullptr);
  }
  if (f.corrected.size() > 0) {  // regression with bias correction
    fj["corrected_predictions"] = Vec(f.corrected);
    fj["bias_correction"] = f.bias.Valid() ? Json{{"slope", Num(f.bias.slope)}, {"offset", Num(f.bias.offset)}, {"samples", f.bias.samples}} : Json(nullptr);
  }
  return fj;
}

/// One learner: its grid, metrics, permutations, region table, maps, folds and final model.
Json LearnerJson(const RunRecord& r, const LearnerRecord& lr) {
  const auto& o = lr.outcome;
  Json e = {{"label", o.label}, {"name", o.name}, {"fits", o.fits}, {"inner_fits", o.innerFits}, {"inner_fits_not_converged", o.innerNotConverged},
            {"inner_fits_capped", o.innerCapped}, {"inner_fits_reused", o.innerReused},
            {"grid", Json::array()}};
  for (const auto& p : o.grid) e["grid"].push_back(p);
  e["metrics"] = {{"pooled", Map(lr.summary.pooled)}, {"fold_mean", Map(lr.summary.foldMean)}, {"fold_sd", Map(lr.summary.foldSd)}};
  if (!lr.pooledInterval.empty()) {
    Json intervals = Json::object();
    for (const auto& [metric, range] : lr.pooledInterval) intervals[metric] = {Num(range.first), Num(range.second)};
    e["metrics"]["pooled_ci95"] = intervals;
    e["metrics"]["pooled_ci95_method"] = fmt::format("percentile interval of {} subject bootstrap resamples of the out-of-fold predictions, stratified by "
                                                     "class, seed {} (per learner a stream derived from it)", r.bootstrapResamples, r.bootstrapSeed);
  }
  if (std::isfinite(lr.aucDeLongInterval.first))
    e["metrics"]["auc_delong_ci95"] = {Num(lr.aucDeLongInterval.first), Num(lr.aucDeLongInterval.second)};
  if (lr.permutations.count > 0) {
    Json nulls = Json::object();
    for (const auto& [k, v] : lr.permutations.null) {
      nulls[k] = Json::array();
      for (double x : v) nulls[k].push_back(Num(x));
    }
    e["permutations"] = {{"count", lr.permutations.count}, {"seed", lr.permutations.seed},
                         {"exchangeability", lr.permutations.exchangeability}, {"p_values", Map(lr.permutations.pValues)},
                         {"null_distribution", nulls},
                         {"p_value_rule", "(number of permutations scoring at least as well + 1) / (count + 1); a permutation with a failed outer fold counts as scoring at least as well (conservative)"}};
  }
  e["regions"] = {{"source", lr.regionSource},
                  {"ranking", "rank 1 = largest weight in a fold, ties share the average rank; expected_ranking = mean rank over outer folds"},
                  {"table", Json::array()}};
  const auto& significance = lr.permutations.regions;
  if (!significance.uncorrected.empty())
    e["regions"]["significance"] = {
        {"statistic", "mean_percent, the region's mean share over outer folds, recomputed on every permutation of the permutation test"},
        {"permutations", lr.permutations.count},
        {"p_uncorrected", "(1 + permutations whose share of the region is at least the observed) / (1 + permutations)"},
        {"p_fwe", "family-wise corrected over the regions by the maximum statistic (Westfall & Young 1993): (1 + permutations whose "
                  "largest share of any region is at least the region's observed share) / (1 + permutations)"},
        {"q_fdr", "Benjamini & Hochberg (1995) q of p_uncorrected over the regions"}};
  for (const auto& row : lr.regions) {
    const auto& k = r.kernels[row.kernel];
    Json entry = {{"name", k.name}, {"label", k.label}, {"voxels", k.features}, {"non_finite_voxels", k.nonFiniteVoxels},
                  {"mean_percent", Num(row.meanPercent)}, {"sd_percent", Num(row.sdPercent)},
                  {"folds_selected", row.foldsSelected}, {"expected_ranking", Num(row.expectedRank)},
                  {"selection_frequency", Num(weights::SelectionFrequency(row))}, {"sign_consistency", Num(row.signConsistency)},
                  {"fold_percent", row.foldPercent}};
    if (!significance.uncorrected.empty()) {
      entry["p_uncorrected"] = Num(significance.uncorrected[row.kernel]);
      entry["p_fwe"] = Num(significance.familyWise[row.kernel]);
      entry["q_fdr"] = Num(significance.q[row.kernel]);
    }
    e["regions"]["table"].push_back(std::move(entry));
  }
  const auto stabilityJson = [](const LearnerRecord::StabilityMaps& m) { return Json{{"mean_over_sd", m.meanOverSd}, {"sign_consistency", m.signConsistency}}; };
  if (!lr.meanMap.empty()) e["weight_maps"] = {{"mean", lr.meanMap}, {"folds", lr.foldMaps}};
  if (!lr.stabilityMaps.meanOverSd.empty()) e["weight_maps"]["stability"] = stabilityJson(lr.stabilityMaps);
  if (!lr.patternMean.empty()) e["weight_maps"]["pattern"] = {{"mean", lr.patternMean}, {"folds", lr.patternFolds}};
  if (!lr.sourceMaps.empty()) {
    Json sources = Json::object();
    for (const auto& m : lr.sourceMaps) {
      sources[m.source] = {{"mean", m.mean}, {"folds", m.folds}};
      if (!m.stability.meanOverSd.empty()) sources[m.source]["stability"] = stabilityJson(m.stability);
      if (!m.patternMean.empty()) sources[m.source]["pattern"] = {{"mean", m.patternMean}, {"folds", m.patternFolds}};
    }
    e["weight_maps"] = {{"sources", sources}};
  }
  if (!lr.regionMaps.empty()) {
    e["region_maps"] = Json::array();
    for (const auto& m : lr.regionMaps) {
      Json entry = {{"share", m.share}};
      if (!m.source.empty()) entry["source"] = m.source;
      if (!m.logPFwe.empty()) entry["log10_p_fwe"] = m.logPFwe;
      e["region_maps"].push_back(std::move(entry));
    }
  }
  if (!lr.patternRegions.empty()) {
    // Regions by their share of the activation pattern (Haufe et al. 2014): ||a_r|| per fold as a percentage of the fold's sum.
    e["pattern_regions"] = {{"table", "regions_" + lr.outcome.label + "_pattern.tsv"}, {"top", Json::array()}};
    for (std::size_t i = 0; i < lr.patternRegions.size() && i < 10; ++i) {
      const auto& row = lr.patternRegions[i];
      e["pattern_regions"]["top"].push_back({{"name", r.kernels[row.kernel].name}, {"mean_percent", Num(row.meanPercent)}});
    }
  }
  if (!lr.edgeWeights.empty()) {
    if (!e.contains("weight_maps")) e["weight_maps"] = Json::object();
    for (const auto& [source, files] : lr.edgeWeights) e["weight_maps"]["edges"][source] = {{"ranked", files.at(0)}, {"mean_matrix", files.at(1)}};
  }
  e["folds"] = Json::array();
  for (const auto& f : o.folds) e["folds"].push_back(FoldJson(r, o, f));
  if (!lr.finalModel.folder.empty()) {
    Json scores = Json::array();
    for (double v : lr.finalModel.innerScores) scores.push_back(Num(v));
    e["final_model"] = {{"folder", lr.finalModel.folder}, {"chosen_params", lr.finalModel.params}, {"status", lr.finalModel.status}, {"inner_scores", scores}};
  }
  return e;
}

/// The covariates regressed out: design, fit rows, the target's R^2 on them, and what was imputed.
Json CovariatesJson(const RunRecord& r) {
  Json c = {{"design_columns", r.covariateColumns},
            {"fit_on", r.covariateFitOn},
            {"target_r2", r.covariateTargetR2},
            {"impute", r.covariateImpute ? "median" : "none"},
            {"note", "every kernel residualised on intercept + these columns inside every outer and inner fold, coefficients fitted on "
                     "the fold's training subjects (fit_on) and applied to its test subjects, before centring and normalisation; "
                     "target_r2: in-sample R^2 of the target (classification: +-1) on the covariates over the labelled subjects"}};
  if (r.covariateImpute) {
    Json missing = Json::object(), folds = Json::array();
    for (const auto& [column, count] : r.covariateMissing) missing[column] = count;
    for (const auto& [training, test] : r.covariateImputedPerFold) folds.push_back({{"training", training}, {"test", test}});
    c["imputed"] = {{"missing_per_column", missing},
                    {"subjects_per_outer_fold", folds},
                    {"note", "every fold imputes a missing numeric value with its training subjects' median and a missing category with their "
                             "most frequent level, for its training and test subjects alike, before fitting the covariate coefficients; "
                             "target_r2 uses values imputed from all subjects"}};
  }
  return c;
}

/// results.json's "target_confounds": the confounds regressed out of the target and each outer fold's coefficients.
Json TargetConfoundsJson(const RunRecord::TargetConfounds& t) {
  Json missing = Json::object();
  for (const auto& [column, count] : t.missing) missing[column] = count;
  return {{"design_columns", t.columns},
          {"fit_on", t.fitOn},
          {"target_r2", t.r2},
          {"impute", t.impute ? "median" : "none"},
          {"missing_per_column", missing},
          {"coefficients_per_outer_fold", t.foldCoefficients},
          {"note", "the target regressed on intercept + these columns inside every outer and inner fold by least squares on the fold's training "
                   "subjects (fit_on); the learners are fitted to, and the metrics score, the target minus the fitted confound effect, with "
                   "the training coefficients for the test subjects (predictions.tsv: target_adjusted). Coefficients: intercept first. "
                   "target_r2: in-sample R^2 of the target on the confounds over the labelled subjects. Permutation tests permute the "
                   "target's residuals on the confounds (Freedman & Lane 1983)"}};
}

/// results.json's "tabular_in_folds": the tabular sources whose columns every fold imputes or standardises.
Json TabularFoldsJson(const std::vector<RunRecord::TabularFolds>& sources) {
  Json out = Json::array();
  for (const auto& t : sources) {
    Json missing = Json::object(), folds = Json::array();
    for (const auto& [column, count] : t.missing) missing[column] = count;
    for (const auto& [training, test] : t.imputedPerFold) folds.push_back({{"training", training}, {"test", test}});
    out.push_back({{"source", t.source},
                   {"standardise", t.standardise},
                   {"impute", t.impute ? "median" : "none"},
                   {"harmonise", t.harmonise},
                   {"missing_per_column", missing},
                   {"imputed_subjects_per_outer_fold", folds},
                   {"note", "every outer and inner fold fills a missing value with its training subjects' median, harmonises the columns with "
                            "ComBat fitted on them (harmonise: see harmonisation) and standardises each column with their mean and SD (as "
                            "asked), for its training and test subjects alike, then forms the source's kernels; "
                            "the kernels written with the results and kept in the kernel cache use every subject's statistics"}});
  }
  return out;
}

/// results.json's "harmonisation": the sites, the design and the sources harmonised inside the folds.
Json HarmonisationJson(const RunRecord::Harmonisation& h) {
  Json counts = Json::object();
  for (std::size_t s = 0; s < h.sites.size(); ++s) counts[h.sites[s]] = h.siteCounts[s];
  Json sources = Json::array();
  for (std::size_t s = 0; s < h.sources.size(); ++s)
    sources.push_back({{"name", h.sources[s]}, {"kind", h.sourceKinds[s]}, {h.sourceKinds[s] == "tabular" ? "columns" : "voxels", h.sourceVoxels[s]}});
  Json missing = Json::object();
  for (const auto& [column, count] : h.missing) missing[column] = count;
  return {{"method", "ComBat (Johnson, Li & Rabinovic 2007; Fortin et al. 2017, 2018)"},
          {"site_column", h.siteColumn},
          {"subjects_per_site", counts},
          {"preserved_covariates", h.designColumns},
          {"imputed_covariates", missing},
          {"fit_on", h.fitOn},
          {"empirical_bayes", h.empiricalBayes},
          {"sources", sources},
          {"voxel_bytes", h.bytes},
          {"note", "every outer and inner fold fits ComBat on its training subjects (fit_on: those of the reference group) and harmonises its "
                   "training and test subjects with those estimates; the harmonised sources' region kernels are formed in each fold from the "
                   "harmonised voxels, before covariates, centring and normalisation; voxel maps are maps of each fold's harmonised images "
                   "(docs/harmonisation.md)"}};
}

}  // namespace

const ComparisonRecord* FindTest(const std::vector<ComparisonRecord>& tests, const std::string& test) {
  const auto it = std::find_if(tests.begin(), tests.end(), [&](const ComparisonRecord& c) { return c.test == test; });
  return it == tests.end() ? nullptr : &*it;
}

double MetricOrNaN(const std::map<std::string, double>& metrics, const std::string& key) {
  const auto it = metrics.find(key);
  return it == metrics.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

bool HasAttributions(const RunRecord& record) {
  return std::any_of(record.learners.begin(), record.learners.end(), [](const LearnerRecord& lr) {
    return std::any_of(lr.attributions.begin(), lr.attributions.end(), [](const Eigen::MatrixXd& parts) { return parts.size() > 0; });
  });
}

std::string RunRecordJson(const RunRecord& r) {
  Json j;
  j["format"] = "neuromkl-results";
  j["format_version"] = 2;
  j["study"] = r.study;
  j["description"] = r.description;
  j["date"] = r.date;
  j["atlas"] = r.atlas;
  if (!r.atlasSpace.empty()) j["atlas_space"] = r.atlasSpace;
  j["mask"] = r.mask;
  j["neuromkl_version"] = r.version;
  j["versions"] = r.versions;
  j["config"] = r.configPath;
  j["input_hash"] = r.inputHash;
  j["seed"] = r.seed;
  j["task"] = r.task;
  j["target"] = {{"column", r.targetColumn}};
  if (r.task == "classification") {
    j["target"]["positive_class"] = r.positiveClass;
    j["target"]["negative_class"] = r.negativeClass;
  }
  if (r.task == "multiclass") {
    j["target"]["classes"] = r.classNames;  // label k = classes[k]
    j["target"]["multiclass_weights"] = r.multiclassWeights;
  }
  j["subjects"] = {{"labelled", r.labelledSubjects}, {"targets", r.targets}, {"excluded", Json::array()}};
  for (const auto& [id, why] : r.excludedSubjects) j["subjects"]["excluded"].push_back({{"id", id}, {"reason", why}});
  for (const auto& [source, lacking] : r.imputedSources)  // kernels.missing_source "impute": in the study, a source imputed
    for (const auto& [id, why] : lacking) j["subjects"]["imputed_sources"][source].push_back({{"id", id}, {"reason", why}});
  if (!r.droppedSubjects.empty()) {  // kernels.missing_source "drop": not in the study at all
    j["subjects"]["dropped"] = Json::array();
    for (const auto& [id, why] : r.droppedSubjects) j["subjects"]["dropped"].push_back({{"id", id}, {"reason", why}});
  }
  j["kernels"] = KernelsJson(r);
  if (!r.sourceNames.empty()) {
    // Per source: its kernels and, per learner, the source's total weight per outer fold and the mean over folds.
    j["sources"] = Json::array();
    j["kernels"]["source_weighting"] = r.sourceWeighting;
    std::vector<std::vector<weights::SourceShare>> shares;
    for (const auto& lr : r.learners) shares.push_back(weights::SourceShares(lr.regions, r.sourceKernelCounts));
    for (std::size_t s = 0; s < r.sourceNames.size(); ++s) {
      Json e = {{"name", r.sourceNames[s]}, {"kind", r.sourceKinds[s]}, {"kernels", r.sourceKernelCounts[s]}, {"cache", r.sourceCache[s]},
                {"weight_percent", Json::object()}};
      for (std::size_t l = 0; l < r.learners.size(); ++l) {
        Json share = {{"mean", shares[l][s].meanPercent}, {"folds", shares[l][s].foldPercent}};
        // Permutation p-values of the source's share; family-wise by Holm over the sources (docs/statistics.md).
        if (const auto& p = r.learners[l].permutations.sources; s < p.uncorrected.size())
          share.update({{"p_uncorrected", Num(p.uncorrected[s])}, {"p_fwe", Num(p.familyWise[s])}, {"q_fdr", Num(p.q[s])}});
        e["weight_percent"][r.learners[l].outcome.label] = std::move(share);
      }
      j["sources"].push_back(e);
    }
  }
  if (!r.comparisons.empty()) {
    // Every pair of learners, on the same outer folds and subjects (docs/statistics.md); p-values uncorrected for the number of pairs.
    j["comparisons"] = {{"seed", r.comparisonSeed}, {"paired_permutation_swaps", r.comparisonSwaps}, {"table", "comparisons.tsv"}, {"tests", Json::array()}};
    for (const auto& c : r.comparisons)
      j["comparisons"]["tests"].push_back({{"learner_a", c.learnerA}, {"learner_b", c.learnerB}, {"test", c.test}, {"metric", c.metric},
                                           {"value_a", Num(c.valueA)}, {"value_b", Num(c.valueB)}, {"statistic", Num(c.statistic)},
                                           {"p_value", Num(c.p)}, {"n", c.n}, {"detail", c.detail}});
  }
  if (!r.regionScan.learner.empty()) {
    const auto& scan = r.regionScan;
    j["region_scan"] = {{"learner", scan.learner}, {"metric", scan.metric}, {"higher_is_better", scan.higherIsBetter},
                        {"table", "region_scan_" + scan.learner + ".tsv"}, {"maps", scan.maps},
                        {"note", "each kernel alone through the study's nested CV (same outer and inner folds, seeds and preprocessing) with this learner; "
                                 "rows ranked by the pooled metric, best first"},
                        {"rows", Json::array()}};
    for (const auto& row : scan.rows)
      j["region_scan"]["rows"].push_back({{"name", r.kernels[row.kernel].name}, {"pooled", Map(row.pooled)}, {"fold_sd", Map(row.foldSd)}});
  }
  if (!r.ablation.learner.empty()) {
    const auto& a = r.ablation;
    j["ablation"] = {{"learner", a.learner}, {"metric", a.metric}, {"table", "ablation_" + a.learner + ".tsv"}, {"full", Map(a.full)},
                     {"note", "the learner refitted without each source and each of its top regions on the study's folds, each compared with the full "
                              "model (A) by the paired tests of comparisons (B = the refit); p-values two-sided, not corrected for the number of rows"},
                     {"rows", Json::array()}};
    for (const auto& row : a.rows) {
      Json tests = Json::array();
      for (const auto& c : row.tests)
        tests.push_back({{"test", c.test}, {"metric", c.metric}, {"value_a", Num(c.valueA)}, {"value_b", Num(c.valueB)}, {"statistic", Num(c.statistic)},
                         {"p_value", Num(c.p)}, {"n", c.n}, {"detail", c.detail}});
      j["ablation"]["rows"].push_back({{"removed", row.removed}, {"kind", row.kind}, {"kernels_removed", row.kernelsRemoved}, {"pooled", Map(row.pooled)},
                                       {"tests", tests}});
    }
  }
  if (HasAttributions(r))
    j["attributions"] = {{"table", "attributions.tsv"},
                         {"note", "every out-of-fold decision value split over the kernels: kernel j's part is beta_j K~_j(subject, training) coef with "
                                  "the fold's prepared kernels, so bias + the parts = the decision value; with several sources also each source's sum. "
                                  "For linear kernels a region's part is <w_r, x~_r>, the region's part of the weight map applied to the subject's "
                                  "prepared data (docs/statistics.md)"}};
  if (!r.covariateColumns.empty()) j["covariates"] = CovariatesJson(r);
  if (!r.targetConfounds.columns.empty()) j["target_confounds"] = TargetConfoundsJson(r.targetConfounds);
  if (!r.harmonisation.siteColumn.empty()) j["harmonisation"] = HarmonisationJson(r.harmonisation);
  if (!r.tabularFolds.empty()) j["tabular_in_folds"] = TabularFoldsJson(r.tabularFolds);
  j["cv"] = {{"outer", r.outerScheme}, {"inner", r.innerScheme}, {"seed", r.cvSeed},
             {"inner_criterion", !r.innerCriterion.empty() ? r.innerCriterion + " (mean over inner folds, higher is better)"
                                 : r.task == "classification" ? "balanced_accuracy (mean over inner folds, higher is better)"
                                 : r.task == "multiclass"     ? "balanced_accuracy, macro: mean per-class recall (mean over inner folds, higher is better)"
                                                              : "mse (mean over inner folds, lower is better)"},
             {"tie_rule", "first best grid point, grid ordered from the most regularised (c ascending, lambda and mu descending)"}};
  j["learners"] = Json::array();
  for (const auto& lr : r.learners) j["learners"].push_back(LearnerJson(r, lr));
  j["threads"] = r.threads;
  j["seconds"] = r.seconds;
  j["warnings"] = r.warnings;
  return j.dump(2) + "\n";
}

}  // namespace neuromkl::exporting
