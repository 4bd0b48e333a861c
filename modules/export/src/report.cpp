// report.html section by section: the study, performance, calibration, bias correction, permutation
// test, fits, regions (charts, maps, connections) and warnings. The figures are drawn by
// report_charts.cpp and report_regions.cpp; the style sheet and script are resource files.
#include "neuromkl/export/report.hpp"

#include <algorithm>
#include <cmath>

#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/derivative.hpp"
#include "report_parts.hpp"
#include "report_resources.hpp"

namespace neuromkl::exporting {

namespace report {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v, int digits) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "&ndash;"; }

const char* Colour(std::size_t i) {
  static const char* const kColours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  return kColours[i % 8];
}

double Pooled(const LearnerRecord& lr, const std::string& key) { return lr.summary.pooled.count(key) ? lr.summary.pooled.at(key) : NAN; }

std::vector<double> Ticks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / count, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude < 1.5 ? 1 : raw / magnitude < 3.5 ? 2 : raw / magnitude < 7.5 ? 5 : 10);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + 1e-9 * step; t += step) ticks.push_back(std::abs(t) < 1e-12 * step ? 0.0 : t);
  return ticks;
}

std::string TickLabel(double v) { return fmt::format("{:.3g}", v); }

double TextWidth(const std::string& text, double fontSize) {
  double characters = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '&')
      if (const auto end = text.find(';', i); end != std::string::npos && end - i <= 8) i = end;
    characters += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 ? 1 : 0;  // a UTF-8 character counts once
  }
  return 0.62 * fontSize * characters;
}

int WidthFor(const std::vector<std::string>& texts, double fontSize, double start) {
  double widest = 0;
  for (const auto& t : texts) widest = std::max(widest, TextWidth(t, fontSize));
  return static_cast<int>(std::ceil(start + widest + 6));
}

}  // namespace report

namespace {

using namespace report;

/// What the study's kernels are called: "regions" when every one is an atlas region, else "kernels".
std::string KernelUnit(const RunRecord& r) {
  const bool regions = std::all_of(r.kernels.begin(), r.kernels.end(), [&](const kernels::KernelInfo& k) { return KernelKind(r, k.name) == "images"; });
  return regions ? "regions" : "kernels";
}

/// What kernels of a source kind are made of, with their sizes: " of 12 to 4000 voxels", " of 1 column";
/// nothing for precomputed kernels (matrices of unknown features).
std::string MadeOf(const std::string& kind, const ReportData::FeatureRange& range) {
  std::string unit = FeatureName(kind);
  if (unit.empty()) return "";
  if (range.most == 1) unit.pop_back();  // "1 column", "1 connection"
  return range.fewest == range.most ? fmt::format(" of {} {}", range.most, unit) : fmt::format(" of {} to {} {}", range.fewest, range.most, unit);
}

/// Study: what was analysed and how (task, subjects, kernels, sources, covariates, cross-validation, run).
std::string StudySection(const RunRecord& r, const ReportData& data) {
  const bool classification = r.task == "classification", multiclass = r.task == "multiclass";
  std::string h = "<h2>Study</h2>\n<table>\n";
  auto row = [&](const std::string& k, const std::string& v) { h += "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n"; };
  row("task", Escape(r.task) + " of <code>" + Escape(r.targetColumn) + "</code>" +
                  (classification ? " (positive class <code>" + Escape(r.positiveClass) + "</code>, negative <code>" + Escape(r.negativeClass) + "</code>)" : "") +
                  (multiclass ? " (classes <code>" + Escape(Join(r.classNames, ", ")) + "</code>; kernel weights " + Escape(r.multiclassWeights) + ")" : ""));
  row("subjects", fmt::format("{} used, {} excluded (no target)", r.labelledSubjects.size(), r.excludedSubjects.size()));
  const std::string madeOf = r.sourceNames.empty() ? MadeOf(r.kernelSource, data.features) : "";
  row("kernels", fmt::format("{} ({}{}), {} excluded; {}centred, {}normalised per fold on training subjects", r.kernels.size(), Escape(r.kernelSource),
                             madeOf.empty() ? "" : ", each" + madeOf, r.excludedKernels.size(), r.centre ? "" : "not ", r.normalise ? "" : "not "));
  if (!r.atlas.empty()) row("atlas", Escape(r.atlas) + (r.mask.empty() ? "" : ", mask " + Escape(r.mask)));
  if (r.outsideAtlasShare >= 0)
    row("coverage", fmt::format("{:.1f} % of the images' non-zero voxel values lie outside the atlas regions (for lesion or other sparse maps: "
                                "signal that no region sees)",
                                100 * r.outsideAtlasShare));
  if (!r.intensityScaling.empty()) {
    const auto [lo, hi] = std::minmax_element(r.intensityScale.begin(), r.intensityScale.end());
    row("intensity scaling", fmt::format("each image divided by its own {} (divisors {:.4g} to {:.4g})", Escape(r.intensityScaling), *lo, *hi));
  }
  if (!r.sourceNames.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < r.sourceNames.size(); ++s) {
      std::string part = fmt::format("<code>{}</code> ({}, {} kernel{}{}", Escape(r.sourceNames[s]), Escape(r.sourceKinds[s]), r.sourceKernelCounts[s],
                                     r.sourceKernelCounts[s] == 1 ? "" : "s", MadeOf(r.sourceKinds[s], data.sourceFeatures[s]));
      for (std::size_t l = 0; l < r.learners.size(); ++l)
        part += fmt::format("; {} {:.1f} %", Escape(r.learners[l].outcome.label), data.learners[l].sources[s].meanPercent);
      parts.push_back(part + ")");
    }
    row("sources", Join(parts, ", ") + " &mdash; total kernel weight per source, mean over outer folds; a source with more kernels tends to collect more weight");
  }
  if (const auto& t = r.targetConfounds; !t.columns.empty())
    row("target confounds", fmt::format("regressed out of the target inside every fold (training subjects: {}): {}; their in-sample R<sup>2</sup> on "
                                        "the target is {:.3f}. The metrics score what they leave of the target (predictions.tsv: target_adjusted)",
                                        Escape(t.fitOn), Escape(Join(t.columns, ", ")), t.r2));
  if (!r.covariateColumns.empty())
    row("covariates", fmt::format("regressed out of every kernel inside every fold (training subjects: {}): {}; the target's R<sup>2</sup> on them is "
                                  "{:.3f}{}",
                                  Escape(r.covariateFitOn), Escape(Join(r.covariateColumns, ", ")), r.covariateTargetR2,
                                  r.covariateTargetR2 > 0.1 ? " (the design is confounded: regions that track the covariates would otherwise carry weight)" : ""));
  if (!r.covariateMissing.empty()) {
    std::vector<std::string> parts;
    for (const auto& [column, count] : r.covariateMissing) parts.push_back(fmt::format("{}: {} missing", Escape(column), count));
    row("imputed covariates", fmt::format("missing values imputed inside every fold from its training subjects (median; most frequent level for a "
                                          "category): {}",
                                          Join(parts, ", ")));
  }
  for (const auto& t : r.tabularFolds) {
    std::vector<std::string> parts;
    for (const auto& [column, count] : t.missing) parts.push_back(fmt::format("{}: {} missing", Escape(column), count));
    std::vector<std::string> done;
    if (t.impute) done.push_back("missing values imputed (median)");
    if (t.harmonise) done.push_back("columns harmonised (ComBat)");
    if (t.standardise) done.push_back("columns standardised (mean, SD)");
    const std::string steps = Join(done, ", ");
    row(t.source.empty() ? std::string("tabular columns") : "tabular source " + Escape(t.source),
        fmt::format("{} inside every fold with its training subjects' statistics, then the kernels formed{}", steps,
                    parts.empty() ? std::string() : ": " + Join(parts, ", ")));
  }
  if (const auto& hm = r.harmonisation; !hm.siteColumn.empty()) {
    std::vector<std::string> sites;
    for (std::size_t s = 0; s < hm.sites.size(); ++s) sites.push_back(fmt::format("{} (n = {})", Escape(hm.sites[s]), hm.siteCounts[s]));
    row("harmonisation", fmt::format("ComBat{} of {} inside every fold, fitted on its training subjects ({}) and applied to its test subjects; "
                                     "sites in <code>{}</code>: {}; preserved: {}; voxel maps are maps of each fold's harmonised images",
                                     hm.empiricalBayes ? " with empirical Bayes" : "", Escape(Join(hm.sources, ", ")), Escape(hm.fitOn),
                                     Escape(hm.siteColumn), Join(sites, ", "), hm.designColumns.empty() ? "nothing" : Escape(Join(hm.designColumns, ", "))));
  }
  row("cross-validation", "outer " + Escape(r.outerScheme) + "; inner " + Escape(r.innerScheme) + fmt::format("; seed {}", r.cvSeed));
  row("run", fmt::format("neuromkl {}, {}, seed {}, input hash <code>{}</code>, {:.1f} s", Escape(r.version), Escape(r.date), r.seed, r.inputHash,
                         r.seconds.count("total") ? r.seconds.at("total") : 0.0));
  return h + "</table>\n";
}

/// The metrics of the performance table for the study's task: (key, column title).
std::vector<std::pair<std::string, std::string>> PerformanceMetrics(const RunRecord& r) {
  std::vector<std::pair<std::string, std::string>> metrics;
  if (r.task == "multiclass") {
    metrics = {{"balanced_accuracy", "macro balanced accuracy"}, {"macro_auc", "macro AUC"}, {"kappa", "Cohen's kappa"}, {"accuracy", "accuracy"}};
    for (const auto& c : r.classNames) metrics.emplace_back("recall_" + c, "recall " + Escape(c));
  } else if (r.task == "classification") {
    metrics = {{"balanced_accuracy", "balanced accuracy"}, {"auc", "AUC"}, {"accuracy", "accuracy"}, {"recall_positive", "sensitivity"}, {"recall_negative", "specificity"}};
  } else {
    metrics = {{"pearson_r", "Pearson r"}, {"r2", "R&#178; (coef. of determination)"}, {"mse", "MSE"}, {"mae", "MAE"}, {"nmse", "normalised MSE"}};
  }
  if (!r.learners.empty() && r.learners[0].summary.pooled.count("brier")) metrics.insert(metrics.end(), {{"brier", "Brier score"}, {"log_loss", "log-loss"}});
  if (!r.learners.empty() && r.learners[0].summary.pooled.count("corrected_mae"))
    metrics.insert(metrics.end(), {{"corrected_mae", "MAE corrected"}, {"gap_slope", "gap slope"}, {"corrected_gap_slope", "gap slope corrected"}});
  return metrics;
}

/// Performance: the metrics table (pooled, fold mean and SD, permutation p) and the task's figures.
std::string PerformanceSection(const RunRecord& r, const ReportData& data) {
  std::string h = "<h2>Performance</h2>\n<p class=\"note\">Pooled over all out-of-fold predictions; fold mean &plusmn; SD over outer folds";
  if (!r.learners.empty() && r.learners[0].permutations.count > 0)
    h += fmt::format("; p from {} permutations of the targets (whole nested CV rerun each time), (count + 1) / (N + 1)", r.learners[0].permutations.count);
  if (r.bootstrapResamples > 0)
    h += fmt::format("; [95 % interval] from {} class-stratified subject bootstrap resamples of the out-of-fold predictions", r.bootstrapResamples);
  h += ".</p>\n<table><tr><th>learner</th>";
  const auto metrics = PerformanceMetrics(r);
  for (const auto& [_, label] : metrics) h += "<th>" + label + "</th>";
  h += "</tr>\n";
  for (const auto& lr : r.learners) {
    h += "<tr><td>" + Escape(lr.outcome.label) + "</td>";
    for (const auto& [key, _] : metrics) {
      const auto& s = lr.summary;
      std::string cell = Num(Pooled(lr, key));
      if (const auto it = lr.pooledInterval.find(key); it != lr.pooledInterval.end())
        cell += fmt::format(" <span class=\"note\">[{}, {}]</span>", Num(it->second.first), Num(it->second.second));
      if (s.foldMean.count(key)) cell += fmt::format(" <span class=\"note\">({} &plusmn; {})</span>", Num(s.foldMean.at(key)), Num(s.foldSd.count(key) ? s.foldSd.at(key) : NAN));
      if (lr.permutations.pValues.count(key)) cell += fmt::format(" <b>p = {:.3g}</b>", lr.permutations.pValues.at(key));
      h += "<td class=\"num\">" + cell + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n<div class=\"figs\">";
  if (r.task == "multiclass") {
    for (std::size_t l = 0; l < r.learners.size(); ++l) h += MulticlassConfusion(r.learners[l], r) + PerClassRoc(r.learners[l], data.learners[l], r);
  } else if (r.task == "classification") {
    h += RocChart(r, data);
    for (const auto& lr : r.learners) h += ConfusionMatrix(lr, r);
  } else {
    for (std::size_t l = 0; l < r.learners.size(); ++l) h += ScatterChart(r.learners[l], data.learners[l], Colour(l));
  }
  return h + "</div>\n";
}

/// Calibration (binary with probabilities), bias correction (regression with it) and the permutation test.
std::string ProbabilitySections(const RunRecord& r, const ReportData& data) {
  std::string h;
  if (!r.learners.empty() && r.learners[0].summary.pooled.count("brier")) {
    // The reference a probability must beat: always predicting the prevalence p gives Brier p (1 - p).
    h += fmt::format("<h2>Calibration</h2>\n<p class=\"note\">Probabilities of <code>{}</code> by Platt scaling, fitted in each outer fold on the "
                     "inner-CV out-of-fold decision values of its training subjects (coefficients per fold in results.json). Predicting the "
                     "prevalence ({}) for everyone scores Brier {}; lower is better.</p>\n<div class=\"figs\">",
                     Escape(r.positiveClass), Num(data.prevalence), Num(data.prevalence * (1 - data.prevalence)));
    h += ReliabilityChart(r, data) + "</div>\n";
  }
  if (!r.learners.empty() && r.learners[0].summary.pooled.count("corrected_mae")) {
    h += "<h2>Bias correction</h2>\n<p class=\"note\">Predictions corrected per outer fold with prediction = a target + b fitted on the "
         "inner-CV out-of-fold predictions of its training subjects, corrected = (prediction - b) / a (coefficients per fold in results.json); "
         "without it, the gap (prediction - target) falls with the target (regression to the mean).</p>\n<div class=\"figs\">";
    for (std::size_t l = 0; l < r.learners.size(); ++l) h += GapChart(r.learners[l], data.learners[l], Colour(l));
    h += "</div>\n";
  }
  if (r.permutations > 0) {
    const std::string metric = r.task == "classification" || r.task == "multiclass" ? "balanced_accuracy" : "pearson_r";
    h += "<h2>Permutation test</h2>\n<p class=\"note\">The whole nested cross-validation rerun on permuted targets; the red line is the "
         "value on the real targets. Every metric's null distribution: <code>null_distribution.tsv</code>.</p>\n<div class=\"figs\">";
    for (const auto& lr : r.learners) h += NullHistogram(lr, metric);
    h += "</div>\n";
  }
  return h;
}

/// Every pair of learners compared (docs/statistics.md): one row per test.
std::string ComparisonsSection(const RunRecord& r) {
  if (r.comparisons.empty()) return "";
  std::string h = fmt::format("<h2 id=\"comparisons\">Comparing learners</h2>\n<p class=\"note\">Each pair on the same outer folds and subjects: the corrected resampled "
                              "t-test over folds (Nadeau &amp; Bengio 2003), and on the out-of-fold predictions McNemar's exact test, DeLong's test of "
                              "the AUCs (binary) and a paired permutation test ({} swaps, seed {}). Two-sided p, not corrected for the {} pair{}; "
                              "<code>comparisons.tsv</code>.</p>\n<table><tr><th>A</th><th>B</th><th>test</th><th>metric</th><th>A</th><th>B</th>"
                              "<th>statistic</th><th>p</th><th>n</th></tr>\n",
                              r.comparisonSwaps, r.comparisonSeed, r.learners.size() * (r.learners.size() - 1) / 2, r.learners.size() > 2 ? "s" : "");
  for (const auto& c : r.comparisons)
    h += fmt::format("<tr><td>{}</td><td>{}</td><td title=\"{}\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                     "<td class=\"num\"{}>{}</td><td class=\"num\">{}</td></tr>\n",
                     Escape(c.learnerA), Escape(c.learnerB), Escape(c.detail), c.test, c.metric, Num(c.valueA), Num(c.valueB), Num(c.statistic),
                     c.p <= 0.05 ? " style=\"font-weight:bold\"" : "", fmt::format("{:.3g}", c.p), c.n);
  return h + "</table>\n";
}

/// The opt-in analyses on the study's kernels (docs/statistics.md): the region scan's top ten and every ablation row.
std::string KernelSubsetSections(const RunRecord& r) {
  std::string h;
  if (const auto& scan = r.regionScan; !scan.learner.empty()) {
    h += fmt::format("<h2>Each region alone</h2>\n<p class=\"note\">Learner {} on each kernel alone through the same nested CV, ranked by pooled {} ({} "
                     "first). The best of many regions is optimistic by chance; all {} rows: <code>region_scan_{}.tsv</code>.</p>\n"
                     "<table><tr><th>rank</th><th>kernel</th><th>{}</th><th>SD over folds</th></tr>\n",
                     Escape(scan.learner), scan.metric, scan.higherIsBetter ? "highest" : "lowest", scan.rows.size(), Escape(scan.learner), scan.metric);
    for (std::size_t i = 0; i < scan.rows.size() && i < 10; ++i) {
      const auto& row = scan.rows[i];
      h += fmt::format("<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n", i + 1,
                       Escape(r.kernels[row.kernel].name), Num(MetricOrNaN(row.pooled, scan.metric)), Num(MetricOrNaN(row.foldSd, scan.metric)));
    }
    h += "</table>\n";
  }
  if (const auto& a = r.ablation; !a.learner.empty()) {
    h += fmt::format("<h2>What is lost without a source or region</h2>\n<p class=\"note\">Learner {} refitted without each source and each of its top "
                     "regions on the same folds, against the full model ({} {}): the paired tests of the comparisons above, two-sided p, not "
                     "corrected for the {} rows; <code>ablation_{}.tsv</code>.</p>\n<table><tr><th>without</th><th>kind</th><th>{}</th>"
                     "<th>change</th><th>p (t)</th><th>p (McNemar)</th><th>p (DeLong)</th><th>p (permutation)</th></tr>\n",
                     Escape(a.learner), a.metric, Num(MetricOrNaN(a.full, a.metric)), a.rows.size(), Escape(a.learner), a.metric);
    for (const auto& row : a.rows) {
      const double full = MetricOrNaN(a.full, a.metric), without = MetricOrNaN(row.pooled, a.metric);
      h += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>", Escape(row.removed), row.kind, Num(without), Num(without - full));
      for (const char* test : kPairedTests) {
        const ComparisonRecord* t = FindTest(row.tests, test);
        h += t ? fmt::format("<td class=\"num\"{}>{:.3g}</td>", t->p <= 0.05 ? " style=\"font-weight:bold\"" : "", t->p) : std::string("<td class=\"num\">n/a</td>");
      }
      h += "</tr>\n";
    }
    h += "</table>\n";
  }
  return h;
}

/// Fits and chosen parameters: one table per learner.
std::string FitsSection(const RunRecord& r) {
  const std::string criterion = !r.innerCriterion.empty()          ? r.innerCriterion
                                : r.task == "classification" ? "balanced accuracy"
                                : r.task == "multiclass"     ? "macro balanced accuracy"
                                                             : "MSE";
  std::string h = "<h2>Fits and chosen parameters</h2>\n<p class=\"note\">Parameters chosen by the inner cross-validation on each outer training set "
                  "(score: mean over inner folds of " + criterion + "), and how each outer refit ended.</p>\n";
  for (const auto& lr : r.learners) h += FitTable(lr, KernelUnit(r));
  return h;
}

/// How many regions (and sources) carry more weight than the permutations give them, and how that is tested.
std::string SignificanceNote(const RunRecord& r, const LearnerRecord& lr) {
  const auto count = [](const std::vector<double>& p) { return std::count_if(p.begin(), p.end(), [](double v) { return v <= 0.05; }); };
  const auto& regions = lr.permutations.regions;
  std::string h = fmt::format("<p class=\"note\">Permutation test of the weights ({} permutations, the whole nested CV on permuted targets): "
                              "<b>{} of {} {}</b> at p<sub>FWE</sub> &le; 0.05 (maximum statistic over the {}: each {}'s mean share against the "
                              "largest share any {} reaches in each permutation), {} at q<sub>FDR</sub> &le; 0.05 (Benjamini-Hochberg), {} at "
                              "uncorrected p &le; 0.05. Columns p_uncorrected, p_fwe, q_fdr of the table; map <code>{}</code>.",
                              lr.permutations.count, count(regions.familyWise), regions.familyWise.size(), KernelUnit(r), KernelUnit(r), "region", "region",
                              count(regions.q), count(regions.uncorrected),
                              lr.regionMaps.empty() || lr.regionMaps[0].logPFwe.empty() ? std::string("none") : Escape(lr.regionMaps[0].logPFwe));
  const auto& sources = lr.permutations.sources;
  if (!sources.familyWise.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < sources.familyWise.size() && s < r.sourceNames.size(); ++s)
      parts.push_back(fmt::format("<code>{}</code> p<sub>FWE</sub> {:.3g}", Escape(r.sourceNames[s]), sources.familyWise[s]));
    h += " Sources (their summed shares against their own permutation shares, Holm-corrected over the sources): " + Join(parts, ", ") + ".";
  }
  // BH's q of the k smallest p-values is at least m p_min / k: with few permutations it cannot reach 0.05 for a few regions.
  const double smallest = 1.0 / (lr.permutations.count + 1.0);
  const auto m = static_cast<double>(regions.familyWise.size());
  if (smallest * m > 0.05)
    h += fmt::format(" With {} permutations the smallest p is {:.3g}, so q<sub>FDR</sub> &le; 0.05 needs at least {} regions at that p; "
                     "at least {} permutations lift that limit.",
                     lr.permutations.count, smallest, static_cast<int>(std::ceil(smallest * m / 0.05 - 1e-9)), static_cast<int>(std::ceil(m / 0.05)) - 1);
  return h + "</p>\n";
}

/// Regions of learner l: the top regions and selected counts, the mean weight map and activation pattern,
/// per-class charts, each image source's map and each connectivity source's strongest connections.
std::string RegionsSection(const RunRecord& r, std::size_t l, const std::vector<std::vector<float>>& meanMaps, const atlas::RegionIndex* regions,
                           const std::vector<float>& background, const WeightMaps* maps) {
  const auto& lr = r.learners[l];
  std::string h = "<h2>Regions: " + Escape(lr.outcome.label) + "</h2>\n<p class=\"note\">" + Escape(lr.regionSource) + ". Table: <code>regions_" +
                  Escape(lr.outcome.label) + ".tsv</code>" + (lr.meanMap.empty() ? "" : "; map: <code>" + Escape(lr.meanMap) + "</code>") + ".</p>\n";
  h += "<div class=\"figs\">" + TopRegionsChart(lr.regions, r, 15, &lr.permutations.regions) + SelectedCountsChart(lr, r.kernels.size(), KernelUnit(r)) + "</div>\n";
  if (!lr.permutations.regions.familyWise.empty()) h += SignificanceNote(r, lr);
  if (regions && l < meanMaps.size() && !meanMaps[l].empty()) h += Montage(meanMaps[l], background, regions->grid);
  if (regions && maps && l < maps->patternMean.size() && !maps->patternMean[l].empty()) {
    h += "<p class=\"note\">Activation pattern (Haufe et al. 2014): how the images covary with the decision value, "
         "<code>" + Escape(lr.patternMean) + "</code>; regions ranked by it in <code>regions_" + Escape(lr.outcome.label) +
         "_pattern.tsv</code>. A region with large weights but no pattern suppresses noise rather than carrying the effect.</p>\n";
    h += Montage(maps->patternMean[l], background, regions->grid, MapKind::Pattern);
  }
  const std::vector<std::string> classParts = ClassFileParts(r.classNames);
  for (std::size_t c = 0; c < lr.classRegions.size() && c < r.classNames.size(); ++c)
    h += "<h3>" + Escape(lr.outcome.label) + ", class " + Escape(r.classNames[c]) + " vs rest</h3>\n<p class=\"note\">Table: <code>regions_" +
         Escape(lr.outcome.label) + "_class-" + Escape(classParts[c]) + ".tsv</code>.</p>\n<div class=\"figs\">" + TopRegionsChart(lr.classRegions[c], r, 15) + "</div>\n";
  if (!maps) return h;
  for (const auto& src : maps->sources) {
    const auto it = std::find_if(lr.sourceMaps.begin(), lr.sourceMaps.end(), [&](const auto& m) { return m.source == src.name; });
    if (it == lr.sourceMaps.end() || l >= src.mean.size() || src.mean[l].empty()) continue;
    h += "<p class=\"note\">Source <b>" + Escape(src.name) + "</b>: map <code>" + Escape(it->mean) + "</code>.</p>\n";
    h += Montage(src.mean[l], Background(*src.regions), src.regions->grid);
  }
  for (const auto& e : maps->edges)
    if (l < e.mean.size() && e.mean[l].size() > 0) h += EdgeTable(e, e.mean[l], lr.outcome.label, 10);
  return h;
}

}  // namespace

std::string RenderReport(const RunRecord& r, const ReportData& data, const std::vector<std::vector<float>>& meanMaps, const atlas::RegionIndex* regions,
                         const WeightMaps* maps) {
  std::string h = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>neuromkl: " + Escape(r.study) + "</title>\n";
  h += "<style>" + std::string(resources::ReportCss()) + "</style></head>\n<body>\n";
  h += "<h1>" + Escape(r.study) + "</h1>\n";
  if (!r.description.empty()) h += "<p>" + Escape(r.description) + "</p>\n";
  h += StudySection(r, data);
  h += PerformanceSection(r, data);
  h += ComparisonsSection(r);
  h += KernelSubsetSections(r);
  h += ProbabilitySections(r, data);
  h += FitsSection(r);
  std::vector<float> background;
  if (regions) background = Background(*regions);
  for (std::size_t l = 0; l < r.learners.size(); ++l) h += RegionsSection(r, l, meanMaps, regions, background, maps);
  if (!r.warnings.empty()) {
    h += "<h2>Warnings</h2><ul>";
    for (const auto& w : r.warnings) h += "<li>" + Escape(w) + "</li>";
    h += "</ul>\n";
  }
  // The script: checks the browser tests read (figures rendered, texts cut off at a figure's edge).
  h += "<script>" + std::string(resources::ReportJs()) + "</script>\n</body></html>\n";
  return h;
}

}  // namespace neuromkl::exporting
