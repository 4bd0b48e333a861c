#include "neuromkl/export/study_outputs.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/citation.hpp"
#include "neuromkl/export/derivative.hpp"
#include "neuromkl/export/report.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/io/volume.hpp"

namespace neuromkl::exporting {

namespace {

using Rows = std::vector<std::vector<std::string>>;

/// Tab-separated rows; an empty cell (no value) is written "n/a", as BIDS requires.
std::string Tsv(const Rows& rows) {
  std::string out;
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) {
      if (c > 0) out += '\t';
      out += r[c].empty() ? "n/a" : r[c];
    }
    out += '\n';
  }
  return out;
}

/// A missing value is "n/a", as BIDS writes it in TSV files.
std::string Cell(double v) { return std::isfinite(v) ? FormatDouble(v) : "n/a"; }

/// The parameters the inner CV chose ("c=1;mu=0.5"), or "fixed" when nothing was searched.
std::string ChosenText(const learners::ParamMap& p, const std::vector<std::string>& searched) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : p)
    if (std::find(searched.begin(), searched.end(), k) != searched.end()) parts.push_back(k + "=" + FormatDouble(v));
  return parts.empty() ? "fixed" : Join(parts, ";");
}

std::string FoldSuffix(const cv::OuterFoldResult& f) { return fmt::format("fold{}{}", f.index, f.repeat > 0 ? "_r" + std::to_string(f.repeat) : ""); }

std::string SubjectsWithSignalCell(const RunRecord& r, std::size_t kernel) {
  return kernel < r.subjectsWithSignal.size() ? std::to_string(r.subjectsWithSignal[kernel]) : "n/a";
}

Rows SubjectRows(const RunRecord& r) {
  Rows rows = {{"subject", "used", "target", "reason"}};
  for (const auto& s : r.subjectTable) rows.push_back({s.id, s.used, s.target, s.reason});
  return rows;
}

/// With more than one kernel source: a `source` column after `name` (the prefix of "source:kernel").
void AddSourceColumn(const RunRecord& r, Rows& rows, std::size_t nameColumn) {
  if (r.sourceNames.size() < 2) return;
  rows[0].insert(rows[0].begin() + static_cast<std::ptrdiff_t>(nameColumn) + 1, "source");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const std::string& name = rows[i][nameColumn];
    rows[i].insert(rows[i].begin() + static_cast<std::ptrdiff_t>(nameColumn) + 1, name.substr(0, name.find(':')));
  }
}

/// Which kinds of kernel the study has (used or excluded): the tables have a size column per kind, named by
/// what its kernels are made of (FeatureName), and the image columns only with image kernels.
struct KernelKinds {
  bool images = false, connectivity = false, tabular = false, precomputed = false;
};
KernelKinds KindsOf(const RunRecord& r) {
  KernelKinds kinds;
  auto see = [&](const kernels::KernelInfo& k) {
    const std::string kind = KernelKind(r, k.name);
    kinds.images |= kind == "images";
    kinds.connectivity |= kind == "connectivity";
    kinds.tabular |= kind == "tabular";
    kinds.precomputed |= kind == "precomputed";
  };
  for (const auto& k : r.kernels) see(k);
  for (const auto& e : r.excludedKernels) see(e.info);
  return kinds;
}

/// The header cells of the per-kind columns: `imageColumns` (with image kernels), then "connections", "columns".
std::vector<std::string> KindHeader(const KernelKinds& kinds, const std::vector<std::string>& imageColumns) {
  std::vector<std::string> header = kinds.images ? imageColumns : std::vector<std::string>{};
  if (kinds.connectivity) header.push_back(FeatureName("connectivity"));
  if (kinds.tabular) header.push_back(FeatureName("tabular"));
  return header;
}
/// A kernel's cells of those columns: `imageValues` for an image kernel, its feature count in its own kind's
/// column, and no value (n/a) where a column is of another kind.
std::vector<std::string> KindCells(const KernelKinds& kinds, const std::string& kind, const kernels::KernelInfo& k, const std::vector<std::string>& imageValues) {
  std::vector<std::string> cells;
  if (kinds.images) cells = kind == "images" ? imageValues : std::vector<std::string>(imageValues.size());
  if (kinds.connectivity) cells.push_back(kind == "connectivity" ? std::to_string(k.features) : "");
  if (kinds.tabular) cells.push_back(kind == "tabular" ? std::to_string(k.features) : "");
  return cells;
}

/// An atlas label for image regions; none (n/a) for kernels that are not atlas regions.
std::string LabelCell(const std::string& kind, const kernels::KernelInfo& k) { return kind == "images" ? std::to_string(k.label) : ""; }

Rows KernelRows(const RunRecord& r) {
  const KernelKinds kinds = KindsOf(r);
  Rows rows = {{"label", "name", "status"}};
  for (auto& c : KindHeader(kinds, {"voxels_used", "atlas_voxels", "non_finite_voxels", "zeroed_values"})) rows[0].push_back(std::move(c));
  rows[0].insert(rows[0].end(), {"subjects_with_signal", "reason"});
  auto add = [&](const kernels::KernelInfo& k, const std::string& status, const std::string& withSignal, const std::string& reason) {
    const std::string kind = KernelKind(r, k.name);
    std::vector<std::string> row = {LabelCell(kind, k), k.name, status};
    for (auto& c : KindCells(kinds, kind, k, {std::to_string(k.features), std::to_string(k.atlasVoxels), std::to_string(k.nonFiniteVoxels),
                                                std::to_string(k.zeroedValues)}))
      row.push_back(std::move(c));
    row.insert(row.end(), {withSignal, reason});
    rows.push_back(std::move(row));
  };
  for (std::size_t i = 0; i < r.kernels.size(); ++i) add(r.kernels[i], "used", SubjectsWithSignalCell(r, i), "");
  for (const auto& k : r.excludedKernels) add(k.info, "excluded", "n/a", k.reason);
  AddSourceColumn(r, rows, 1);
  return rows;
}

Rows MetricRows(const RunRecord& r) {
  Rows rows = {{"learner", "metric", "pooled", "fold_mean", "fold_sd", "permutation_p", "pooled_ci95_low", "pooled_ci95_high"}};
  auto get = [](const std::map<std::string, double>& m, const std::string& k) { return m.count(k) ? m.at(k) : std::nan(""); };
  for (const auto& lr : r.learners)
    for (const auto& [metric, v] : lr.summary.pooled) {
      const auto it = lr.pooledInterval.find(metric);
      const bool interval = it != lr.pooledInterval.end();
      rows.push_back({lr.outcome.label, metric, Cell(v), Cell(get(lr.summary.foldMean, metric)), Cell(get(lr.summary.foldSd, metric)),
                      Cell(get(lr.permutations.pValues, metric)), Cell(interval ? it->second.first : std::nan("")),
                      Cell(interval ? it->second.second : std::nan(""))});
    }
  return rows;
}

Rows PredictionRows(const RunRecord& r) {
  if (r.task == "multiclass") {  // the predicted class (arg max) and every class's score
    std::vector<std::string> header = {"subject", "learner", "repeat", "fold", "target", "predicted"};
    for (const auto& c : r.classNames) header.push_back("score_" + c);
    Rows rows = {header};
    for (const auto& lr : r.learners)
      for (const auto& f : lr.outcome.folds)
        for (std::size_t i = 0; i < f.test.size(); ++i) {
          const auto s = static_cast<std::size_t>(f.test[i]);
          const double d = f.decision[static_cast<Eigen::Index>(i)];
          std::vector<std::string> cells = {r.labelledSubjects[s], lr.outcome.label, std::to_string(f.repeat), std::to_string(f.index), r.rawTargets[s],
                                            std::isfinite(d) ? r.classNames[static_cast<std::size_t>(d)] : "n/a"};
          for (Eigen::Index c = 0; c < f.scores.cols(); ++c) cells.push_back(Cell(f.scores(static_cast<Eigen::Index>(i), c)));
          rows.push_back(cells);
        }
    return rows;
  }
  Rows rows = {{"subject", "learner", "repeat", "fold", "target", "decision", "predicted"}};
  const bool classification = r.task == "classification";
  // Binary: P(positive class) from the fold's Platt scaling; regression with bias correction: the
  // corrected prediction and both gaps (prediction - target).
  // With target confounds: the target they leave, the value the decision predicts and the gaps are taken from.
  bool probability = false, corrected = false, adjusted = false;
  for (const auto& lr : r.learners)
    for (const auto& f : lr.outcome.folds) {
      probability |= f.probability.size() > 0;
      corrected |= f.corrected.size() > 0;
      adjusted |= f.target.size() > 0;
    }
  if (adjusted) rows[0].push_back("target_adjusted");
  if (probability) rows[0].push_back("probability");
  if (corrected) rows[0].insert(rows[0].end(), {"prediction_corrected", "gap", "gap_corrected"});
  for (const auto& lr : r.learners)
    for (const auto& f : lr.outcome.folds)
      for (std::size_t i = 0; i < f.test.size(); ++i) {
        const auto s = static_cast<std::size_t>(f.test[i]);
        const auto ii = static_cast<Eigen::Index>(i);
        const double d = f.decision[ii];
        const std::string predicted = !std::isfinite(d) ? "n/a" : classification ? (d >= 0 ? r.positiveClass : r.negativeClass) : FormatDouble(d);
        rows.push_back({r.labelledSubjects[s], lr.outcome.label, std::to_string(f.repeat), std::to_string(f.index), r.rawTargets[s], Cell(d),
                        predicted});
        if (adjusted) rows.back().push_back(Cell(ScoredTarget(r.targets, f, i)));
        if (probability) rows.back().push_back(Cell(f.probability.size() > 0 ? f.probability[ii] : std::nan("")));
        if (corrected) {
          const double c = f.corrected.size() > 0 ? f.corrected[ii] : std::nan(""), y = ScoredTarget(r.targets, f, i);
          rows.back().insert(rows.back().end(), {Cell(c), Cell(d - y), Cell(c - y)});
        }
      }
  return rows;
}

Rows FoldRows(const RunRecord& r) {
  Rows rows = {{"learner", "fold", "repeat", "n_train", "n_test", "chosen", "inner_score", "status", "iterations", "kernels_selected"}};
  for (const auto& lr : r.learners) {
    const auto& o = lr.outcome;
    for (const auto& f : o.folds) {
      const double inner = f.innerScores.empty() ? std::nan("") : f.innerScores[f.chosen];
      rows.push_back({o.label, std::to_string(f.index), std::to_string(f.repeat), std::to_string(f.train.size()), std::to_string(f.test.size()),
                      ChosenText(o.grid[f.chosen], lr.searched), Cell(inner),
                      cv::FoldStatus(f), std::to_string(f.model.info.iterations),
                      std::to_string((f.model.beta.array() > 0).count())});
    }
  }
  return rows;
}

/// `significance`: the permutation p-values of the table's regions (kernel order), or none.
/// `stability`: the learner's own table, which also gets its selection frequency and sign consistency.
Rows RegionRankingRows(const RunRecord& r, const LearnerRecord& lr, const std::vector<weights::RegionRow>& regions,
                       const metrics::FamilyPValues* significance = nullptr, bool stability = false) {
  const KernelKinds kinds = KindsOf(r);
  if (significance && significance->uncorrected.empty()) significance = nullptr;
  std::vector<std::string> header = {"rank", "label", "name"};
  for (auto& c : KindHeader(kinds, {"voxels", "non_finite_voxels"})) header.push_back(std::move(c));
  header.insert(header.end(), {"subjects_with_signal", "low_coverage", "mean_percent", "sd_percent", "folds_selected", "expected_ranking"});
  if (stability) header.insert(header.end(), {"selection_frequency", "sign_consistency"});
  if (significance) header.insert(header.end(), {"p_uncorrected", "p_fwe", "q_fdr"});
  for (const auto& f : lr.outcome.folds)
    if (f.error.empty()) header.push_back(FoldSuffix(f) + "_percent");
  Rows rows = {header};
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const auto& row = regions[i];
    const auto& k = r.kernels[row.kernel];
    const std::string kind = KernelKind(r, k.name);
    std::vector<std::string> cells = {std::to_string(i + 1), LabelCell(kind, k), k.name};
    for (auto& c : KindCells(kinds, kind, k, {std::to_string(k.features), std::to_string(k.nonFiniteVoxels)})) cells.push_back(std::move(c));
    cells.insert(cells.end(), {SubjectsWithSignalCell(r, row.kernel), LowCoverage(r, row.kernel) ? "yes" : "no", Cell(row.meanPercent), Cell(row.sdPercent),
                               std::to_string(row.foldsSelected), Cell(row.expectedRank)});
    if (stability) cells.insert(cells.end(), {Cell(weights::SelectionFrequency(row)), Cell(row.signConsistency)});
    if (significance)
      cells.insert(cells.end(), {Cell(significance->uncorrected[row.kernel]), Cell(significance->familyWise[row.kernel]), Cell(significance->q[row.kernel])});
    for (double p : row.foldPercent) cells.push_back(Cell(p));
    rows.push_back(cells);
  }
  AddSourceColumn(r, rows, 2);
  return rows;
}

/// What the region table's columns mean. Studies with kernels.sources or kernels that are not image regions also
/// get what each kernel is made of: its size column per kind, and the label and source columns.
std::string RegionRankingNotes(const RunRecord& r, const LearnerRecord& lr) {
  const KernelKinds kinds = KindsOf(r);
  std::string kernels;
  if (!r.sourceNames.empty() || kinds.connectivity || kinds.tabular || kinds.precomputed) {
    kernels += "  \"label\": \"the atlas label of an image region; n/a for kernels that are not atlas regions\",\n";
    if (r.sourceNames.size() > 1) kernels += "  \"source\": \"the source the kernel comes from (kernels.sources; the prefix of its name)\",\n";
    if (kinds.images) kernels += "  \"voxels\": \"image regions: the voxels that enter the kernel (after the mask and the NaN rule); n/a for other kernels\",\n";
    if (kinds.connectivity) kernels += "  \"connections\": \"connectivity kernels: the connections (node pairs) the kernel is built on; n/a for other kernels\",\n";
    if (kinds.tabular) kernels += "  \"columns\": \"tabular kernels: the table columns the kernel is built on; n/a for other kernels\",\n";
    if (kinds.precomputed) kernels += "  \"precomputed\": \"precomputed kernels come as matrices: no size column applies to them\",\n";
  }
  if (!lr.permutations.regions.uncorrected.empty())
    kernels += fmt::format("  \"p_uncorrected\": \"(1 + permutations whose mean_percent of this region is at least the observed) / (1 + {0})\",\n"
                           "  \"p_fwe\": \"family-wise corrected over the table's regions by the maximum statistic: (1 + permutations whose largest "
                           "mean_percent of any region is at least this region's observed) / (1 + {0})\",\n"
                           "  \"q_fdr\": \"Benjamini-Hochberg q of p_uncorrected over the table's regions\",\n",
                           lr.permutations.count);
  const int folds = lr.regions.empty() ? 0 : static_cast<int>(lr.regions[0].foldPercent.size());
  kernels += fmt::format("  \"selection_frequency\": \"folds_selected / the outer folds ({})\",\n", folds);
  if (std::any_of(lr.regions.begin(), lr.regions.end(), [](const weights::RegionRow& row) { return std::isfinite(row.signConsistency); })) {
    kernels += fmt::format("  \"sign_consistency\": \"mean over the region's voxels of |folds whose voxel weight is > 0 - folds whose voxel weight is "
                           "< 0| / folds, in the learner's fold weight maps (voxels that every fold leaves at 0 are skipped): 1 = every fold gives "
                           "each voxel the same sign; {1:.3f} is its expectation over {0} folds of independent random signs; n/a without voxel "
                           "maps\",\n",
                           folds, weights::ChanceSignConsistency(folds));
  }
  // The learner's label is a file name; what its weights are may quote settings ("equal"): escaped as JSON.
  return fmt::format("{{\n  \"learner\": {},\n  \"weights\": {},\n{}  \"percent\": \"each fold's weights as a percentage of that fold's total\",\n"
                     "  \"folds_selected\": \"outer folds in which the weight is > 0\",\n"
                     "  \"expected_ranking\": \"mean over outer folds of the region's rank; rank 1 = largest weight, ties share the average of their ranks\",\n"
                     "  \"subjects_with_signal\": \"used subjects whose data are not all zero in the region (e.g. lesioned there)\",\n"
                     "  \"low_coverage\": \"yes when subjects_with_signal is below output.min_subjects_with_signal: a weight resting on so few subjects is fragile\",\n"
                     "  \"order\": \"rows sorted by mean_percent, descending\"\n}}\n",
                     nlohmann::json(lr.outcome.label).dump(), nlohmann::json(lr.regionSource).dump(), kernels);
}

/// Per successful fold weights/sub-group[_space-<space>]_desc-<Learner>[Repeat<r>]Fold<k>_weights.nii.gz and
/// the mean ..._desc-<Learner>Mean_weights.nii.gz, each with its .json sidecar (scheme: derivative.hpp).
/// With `source` (kernels.sources) the same names under weights/<source>/, recorded in lr.sourceMaps.
/// With `pattern`, the activation patterns: the same names ending in _pattern instead of _weights.
void WriteLearnerMaps(const std::string& dir, const RunRecord& record, LearnerRecord& lr, const std::string& bidsLabel,
                      const std::vector<std::vector<float>>& folds, const std::vector<float>& mean, const io::Geometry& grid,
                      const std::string& source = "", bool pattern = false) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/weights" + (source.empty() ? "" : "/" + source), ec);
  const std::string space = MapSpace(record);
  LearnerRecord::SourceMaps paths{source, {}, {}, {}, {}, {}};
  const auto stemOf = [&](const std::string& desc) {
    std::string stem = MapStem(space, desc);
    if (!source.empty()) stem.insert(std::string("weights/").size(), source + "/");
    if (pattern) stem = stem.substr(0, stem.size() - std::string("_weights").size()) + "_pattern";
    return stem;
  };
  std::vector<std::string>& foldPaths = pattern ? (source.empty() ? lr.patternFolds : paths.patternFolds) : (source.empty() ? lr.foldMaps : paths.folds);
  std::string& meanPath = pattern ? (source.empty() ? lr.patternMean : paths.patternMean) : (source.empty() ? lr.meanMap : paths.mean);
  const bool repeated = std::any_of(lr.outcome.folds.begin(), lr.outcome.folds.end(), [](const cv::OuterFoldResult& f) { return f.repeat > 0; });
  io::Volume v;
  v.geometry = grid;
  std::size_t k = 0;
  for (const auto& f : lr.outcome.folds) {
    if (!f.error.empty()) continue;
    const std::string stem = stemOf(FoldDesc(bidsLabel, f, repeated));
    v.data = folds[k++];
    io::WriteVolume(dir + "/" + stem + ".nii.gz", v);
    WriteTextFile(dir + "/" + stem + ".json", WeightMapSidecarJson(record, lr, &f, 0, "", pattern));
    foldPaths.push_back(stem + ".nii.gz");
  }
  v.data = mean;
  const std::string stem = stemOf(bidsLabel + "Mean");
  meanPath = stem + ".nii.gz";
  io::WriteVolume(dir + "/" + meanPath, v);
  WriteTextFile(dir + "/" + stem + ".json", WeightMapSidecarJson(record, lr, nullptr, static_cast<int>(folds.size()), "", pattern));
  if (source.empty()) return;
  // A source's patterns join the entry its weight maps made.
  const auto it = std::find_if(lr.sourceMaps.begin(), lr.sourceMaps.end(), [&](const LearnerRecord::SourceMaps& m) { return m.source == source; });
  if (!pattern || it == lr.sourceMaps.end()) {
    lr.sourceMaps.push_back(std::move(paths));
  } else {
    it->patternFolds = std::move(paths.patternFolds);
    it->patternMean = std::move(paths.patternMean);
  }
}

/// One mean map per class: [weights/<source>/]..._desc-<Learner>Class<Class>Mean_weights.nii.gz.
void WriteClassMeanMaps(const std::string& dir, const RunRecord& record, const LearnerRecord& lr, const std::string& bidsLabel,
                        const std::vector<std::vector<float>>& classMeans, int classFolds, const io::Geometry& grid, const std::string& source = "") {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/weights" + (source.empty() ? "" : "/" + source), ec);
  const std::vector<std::string> classLabels = BidsClassLabels(record.classNames);
  for (std::size_t c = 0; c < classMeans.size() && c < record.classNames.size(); ++c) {
    io::Volume v;
    v.geometry = grid;
    v.data = classMeans[c];
    std::string stem = MapStem(MapSpace(record), bidsLabel + "Class" + classLabels[c] + "Mean");
    if (!source.empty()) stem.insert(std::string("weights/").size(), source + "/");
    io::WriteVolume(dir + "/" + stem + ".nii.gz", v);
    WriteTextFile(dir + "/" + stem + ".json", WeightMapSidecarJson(record, lr, nullptr, classFolds, record.classNames[c]));
  }
}

/// A connectivity source's edge weights: weights/<source>/edges_<learner>.tsv (every connection ranked by
/// the absolute mean weight, with its fold weights) and edges_<learner>_mean.tsv (the node x node matrix).
void WriteEdgeWeights(const std::string& dir, LearnerRecord& lr, const WeightMaps::Edges& e, std::size_t l) {
  std::error_code ec;
  const std::string folder = "weights/" + e.name;
  std::filesystem::create_directories(dir + "/" + folder, ec);
  const Eigen::MatrixXd& mean = e.mean[l];
  const auto N = static_cast<std::size_t>(mean.rows());
  const auto& folds = e.folds[l];
  struct Edge {
    std::size_t a, b;
    double w;
  };
  std::vector<Edge> edges;
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = a + 1; b < N; ++b) edges.push_back({a, b, mean(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b))});
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return std::abs(x.w) > std::abs(y.w); });
  Rows ranked = {{"rank", "node_a", "node_b"}};
  if (!e.networks.empty()) ranked[0].insert(ranked[0].end(), {"network_a", "network_b"});
  ranked[0].push_back("mean_weight");
  for (std::size_t k = 0; k < folds.size(); ++k) ranked[0].push_back("fold" + std::to_string(k) + "_weight");
  for (std::size_t r = 0; r < edges.size(); ++r) {
    const auto& ed = edges[r];
    std::vector<std::string> row = {std::to_string(r + 1), e.nodes[ed.a], e.nodes[ed.b]};
    if (!e.networks.empty()) row.insert(row.end(), {e.networks[ed.a], e.networks[ed.b]});
    row.push_back(Cell(ed.w));
    for (const auto& W : folds) row.push_back(Cell(W(static_cast<Eigen::Index>(ed.a), static_cast<Eigen::Index>(ed.b))));
    ranked.push_back(std::move(row));
  }
  Rows matrix = {{"node"}};
  matrix[0].insert(matrix[0].end(), e.nodes.begin(), e.nodes.end());
  for (std::size_t a = 0; a < N; ++a) {
    std::vector<std::string> row = {e.nodes[a]};
    for (std::size_t b = 0; b < N; ++b) row.push_back(Cell(mean(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b))));
    matrix.push_back(std::move(row));
  }
  const std::string table = folder + "/edges_" + lr.outcome.label + ".tsv", square = folder + "/edges_" + lr.outcome.label + "_mean.tsv";
  WriteTextFile(dir + "/" + table, Tsv(ranked));
  WriteTextFile(dir + "/" + square, Tsv(matrix));
  lr.edgeWeights.emplace_back(e.name, std::vector<std::string>{table, square});
}

Rows ComparisonRows(const RunRecord& r) {
  Rows rows = {{"learner_a", "learner_b", "test", "metric", "value_a", "value_b", "statistic", "p_value", "n", "detail"}};
  for (const auto& c : r.comparisons)
    rows.push_back({c.learnerA, c.learnerB, c.test, c.metric, Cell(c.valueA), Cell(c.valueB), Cell(c.statistic), Cell(c.p), std::to_string(c.n), c.detail});
  return rows;
}

/// Each out-of-fold decision value split over the kernels: one row per test subject, learner and repeat; with several
/// sources each source's sum, then every kernel's part (bias + the kernels' parts = decision).
Rows AttributionRows(const RunRecord& r) {
  std::vector<std::string> header = {"subject", "learner", "repeat", "fold", "decision", "bias"};
  const bool perSource = r.sourceNames.size() > 1;
  if (perSource)
    for (const auto& name : r.sourceNames) header.push_back("source:" + name);
  for (const auto& k : r.kernels) header.push_back(k.name);
  Rows rows = {header};
  for (const auto& lr : r.learners)
    for (std::size_t f = 0; f < lr.outcome.folds.size() && f < lr.attributions.size(); ++f) {
      const auto& fold = lr.outcome.folds[f];
      const Eigen::MatrixXd& parts = lr.attributions[f];
      if (parts.size() == 0) continue;
      for (Eigen::Index i = 0; i < parts.rows(); ++i) {
        std::vector<std::string> cells = {r.labelledSubjects[static_cast<std::size_t>(fold.test[static_cast<std::size_t>(i)])], lr.outcome.label,
                                          std::to_string(fold.repeat), std::to_string(fold.index), Cell(fold.decision[i]), Cell(fold.model.bias)};
        if (perSource) {
          Eigen::Index first = 0;
          for (const std::size_t count : r.sourceKernelCounts) {
            const auto n = static_cast<Eigen::Index>(count);
            cells.push_back(Cell(parts.row(i).segment(first, n).sum()));
            first += n;
          }
        }
        for (Eigen::Index j = 0; j < parts.cols(); ++j) cells.push_back(Cell(parts(i, j)));
        rows.push_back(std::move(cells));
      }
    }
  return rows;
}

/// The pooled metrics a region scan's table shows, the ranking metric first.
std::vector<std::string> ScanMetrics(const RunRecord& r) {
  if (r.task == "regression") return {"mse", "mae", "pearson_r", "r2"};
  if (r.task == "multiclass") return {"balanced_accuracy", "accuracy"};
  return {"balanced_accuracy", "auc", "accuracy"};
}

/// region_scan_<learner>.tsv: each kernel alone, ranked by the scan's metric (best first).
Rows RegionScanRows(const RunRecord& r) {
  const auto& scan = r.regionScan;
  const std::vector<std::string> metrics = ScanMetrics(r);
  Rows rows = {{"rank", "label", "name"}};
  rows[0].insert(rows[0].end(), metrics.begin(), metrics.end());
  rows[0].push_back(scan.metric + "_fold_sd");
  for (std::size_t i = 0; i < scan.rows.size(); ++i) {
    const auto& row = scan.rows[i];
    const auto& k = r.kernels[row.kernel];
    std::vector<std::string> cells = {std::to_string(i + 1), LabelCell(KernelKind(r, k.name), k), k.name};
    for (const auto& m : metrics) cells.push_back(Cell(MetricOrNaN(row.pooled, m)));
    cells.push_back(Cell(MetricOrNaN(row.foldSd, scan.metric)));
    rows.push_back(std::move(cells));
  }
  AddSourceColumn(r, rows, 2);
  return rows;
}

/// ablation_<learner>.tsv: per source or region left out, the refitted model's metric beside the full model's and the
/// paired tests' p-values (n/a where a test does not apply).
Rows AblationRows(const RunRecord& r) {
  const auto& a = r.ablation;
  Rows rows = {{"removed", "kind", "kernels_removed", "metric", "value_full", "value_without", "change_without", "p_corrected_t", "p_mcnemar", "p_delong",
                "p_permutation"}};
  const double full = MetricOrNaN(a.full, a.metric);
  for (const auto& row : a.rows) {
    const double without = MetricOrNaN(row.pooled, a.metric);
    std::vector<std::string> cells = {row.removed, row.kind, std::to_string(row.kernelsRemoved), a.metric, Cell(full), Cell(without), Cell(without - full)};
    for (const char* test : kPairedTests) {
      const ComparisonRecord* t = FindTest(row.tests, test);
      cells.push_back(t ? Cell(t->p) : "n/a");
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

Rows NullRows(const RunRecord& r) {
  Rows rows = {{"permutation", "learner", "metric", "value"}};
  for (const auto& lr : r.learners)
    for (const auto& [metric, values] : lr.permutations.null)
      for (std::size_t p = 0; p < values.size(); ++p) rows.push_back({std::to_string(p), lr.outcome.label, metric, Cell(values[p])});
  return rows;
}

/// weights/[<source>/]..._desc-<Learner><what>_statmap (no extension), its folder made.
std::string StatmapStem(const std::string& dir, const RunRecord& record, const std::string& bidsLabel, const std::string& what,
                        const std::string& source) {
  std::string stem = MapStem(MapSpace(record), bidsLabel + what);
  if (!source.empty()) stem.insert(std::string("weights/").size(), source + "/");
  stem = stem.substr(0, stem.size() - std::string("_weights").size()) + "_statmap";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir + "/" + stem).parent_path(), ec);
  return stem;
}

/// One statmap of a learner and its sidecar; returns the map's path relative to `dir`.
std::string WriteStatmap(const std::string& dir, const std::string& stem, const io::Geometry& grid, std::vector<float> data, const LearnerRecord& lr,
                         const std::string& description, const std::string& mapNote) {
  io::Volume v;
  v.geometry = grid;
  v.data = std::move(data);
  io::WriteVolume(dir + "/" + stem + ".nii.gz", v);
  const nlohmann::json sidecar = {{"Description", description}, {"Learner", lr.outcome.label}, {"LearnerName", lr.outcome.name}, {"Map", mapNote}};
  WriteTextFile(dir + "/" + stem + ".json", sidecar.dump(2) + "\n");
  return stem + ".nii.gz";
}

/// The atlas `regions` painted with one value per kernel of [first, first + count) (matched by label; a voxel in several
/// regions takes the largest value), written with a sidecar to weights/[<source>/]..._desc-<Learner><what>_statmap.nii.gz.
std::string WriteRegionValueMap(const std::string& dir, const RunRecord& record, const LearnerRecord& lr, const std::string& bidsLabel,
                                const atlas::RegionIndex& regions, std::size_t first, std::size_t count, const std::vector<double>& perKernel,
                                const std::string& source, const std::string& what, const std::string& description) {
  std::map<std::int64_t, const atlas::RegionVoxels*> byLabel;
  for (const auto& region : regions.regions) byLabel[region.label] = &region;
  std::vector<float> data(static_cast<std::size_t>(regions.grid.VoxelCount()), 0.0f);
  std::vector<char> painted(data.size(), 0);
  for (std::size_t j = first; j < first + count; ++j) {
    const auto it = byLabel.find(record.kernels[j].label);
    if (it == byLabel.end() || !std::isfinite(perKernel[j])) continue;
    const auto value = static_cast<float>(perKernel[j]);
    for (const auto voxel : it->second->voxels) {
      auto& cell = data[static_cast<std::size_t>(voxel)];
      cell = painted[static_cast<std::size_t>(voxel)] ? std::max(cell, value) : value;
      painted[static_cast<std::size_t>(voxel)] = 1;
    }
  }
  return WriteStatmap(dir, StatmapStem(dir, record, bidsLabel, what, source), regions.grid, std::move(data), lr, description,
                      "atlas regions painted with one value each; 0 outside the regions");
}

/// The stability of a learner's fold maps (weights::FoldMapStability) beside them: ..._desc-<Learner>Stability_statmap
/// (mean / SD per voxel) and ..._desc-<Learner>SignConsistency_statmap; voxels where a value is undefined are 0.
LearnerRecord::StabilityMaps WriteStabilityMaps(const std::string& dir, const RunRecord& record, const LearnerRecord& lr, const std::string& bidsLabel,
                                                const weights::MapStability& stability, const io::Geometry& grid, int folds,
                                                const std::string& source = "") {
  const auto definedOrZero = [](std::vector<float> values) {
    for (float& v : values)
      if (std::isnan(v)) v = 0.0f;
    return values;
  };
  LearnerRecord::StabilityMaps paths;
  paths.meanOverSd = WriteStatmap(
      dir, StatmapStem(dir, record, bidsLabel, "Stability", source), grid, definedOrZero(stability.meanOverSd), lr,
      fmt::format("Per voxel the mean of the {} outer folds' weight maps divided by their standard deviation (sample SD); 0 where the SD is 0", folds),
      "voxel-wise over the fold maps written beside this map");
  paths.signConsistency = WriteStatmap(
      dir, StatmapStem(dir, record, bidsLabel, "SignConsistency", source), grid, definedOrZero(stability.SignConsistency()), lr,
      fmt::format("Per voxel |folds with weight > 0 - folds with weight < 0| / {0} over the {0} outer folds' weight maps: 1 = every fold has the "
                  "same sign; {1:.3f} is its expectation for independent random signs; 0 where every fold is 0",
                  folds, weights::ChanceSignConsistency(folds)),
      "voxel-wise over the fold maps written beside this map");
  return paths;
}

/// The region maps of one learner: per atlas (the study's, or each image source's) its regions' mean shares and,
/// with permutations, -log10 p_FWE.
/// paint(atlas, first kernel, kernel count, source name) for each atlas the study's kernels lie on: the study's own
/// (every kernel, source ""), or each image source's (its block of kernels).
template <typename Paint>
void ForEachAtlas(const RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions, const Paint& paint) {
  if (regions) paint(*regions, std::size_t{0}, record.kernels.size(), std::string());
  for (const auto& s : maps.sources) {
    const auto it = std::find(record.sourceNames.begin(), record.sourceNames.end(), s.name);
    if (!s.regions || it == record.sourceNames.end()) continue;
    const auto index = static_cast<std::size_t>(it - record.sourceNames.begin());
    std::size_t first = 0;
    for (std::size_t k = 0; k < index; ++k) first += record.sourceKernelCounts[k];
    paint(*s.regions, first, record.sourceKernelCounts[index], s.name);
  }
}

void WriteRegionMaps(const std::string& dir, RunRecord& record, LearnerRecord& lr, const std::string& bidsLabel, const WeightMaps& maps,
                     const atlas::RegionIndex* regions) {
  if (lr.regions.empty()) return;
  std::vector<double> share(record.kernels.size(), std::nan("")), logP(record.kernels.size(), std::nan(""));
  for (const auto& row : lr.regions) share[row.kernel] = row.meanPercent;
  const auto& fwe = lr.permutations.regions.familyWise;
  for (std::size_t j = 0; j < fwe.size() && j < logP.size(); ++j) logP[j] = -std::log10(fwe[j]);
  const auto write = [&](const atlas::RegionIndex& atlas, std::size_t first, std::size_t count, const std::string& source) {
    LearnerRecord::RegionMaps paths{source, {}, {}};
    paths.share = WriteRegionValueMap(dir, record, lr, bidsLabel, atlas, first, count, share, source, "RegionShare",
                                      "Each atlas region painted with its mean share of the model over outer folds (percent; mean_percent of "
                                      "regions_" + lr.outcome.label + ".tsv)");
    if (!fwe.empty())
      paths.logPFwe = WriteRegionValueMap(dir, record, lr, bidsLabel, atlas, first, count, logP, source, "RegionLogPFwe",
                                          "Each atlas region painted with -log10 of its family-wise corrected permutation p-value (p_fwe of regions_" +
                                              lr.outcome.label + ".tsv; maximum statistic over the regions): 1.3 is p = 0.05");
    lr.regionMaps.push_back(std::move(paths));
  };
  ForEachAtlas(record, maps, regions, write);
}

/// The atlas painted with each kernel's region-scan metric, per atlas (the study's, or each image source's), when the
/// study wrote voxel maps (as the other region maps); their paths go to record.regionScan.maps.
void WriteRegionScanMaps(const std::string& dir, RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions,
                         const std::vector<std::string>& bidsLabels) {
  auto& scan = record.regionScan;
  const auto it = std::find_if(record.learners.begin(), record.learners.end(), [&](const LearnerRecord& lr) { return lr.outcome.label == scan.learner; });
  if (it == record.learners.end() || (it->meanMap.empty() && it->sourceMaps.empty())) return;
  const auto l = static_cast<std::size_t>(it - record.learners.begin());
  std::vector<double> perKernel(record.kernels.size(), std::nan(""));
  for (const auto& row : scan.rows) perKernel[row.kernel] = MetricOrNaN(row.pooled, scan.metric);
  const std::string description = "Each atlas region painted with the pooled " + scan.metric + " of learner " + scan.learner +
                                  " on that region's kernel alone, through the study's nested CV (region_scan_" + scan.learner + ".tsv)";
  ForEachAtlas(record, maps, regions, [&](const atlas::RegionIndex& atlas, std::size_t first, std::size_t count, const std::string& source) {
    scan.maps.push_back(WriteRegionValueMap(dir, record, *it, bidsLabels[l], atlas, first, count, perKernel, source, "RegionScan", description));
  });
}

}  // namespace

void WriteStudyTables(const std::string& dir, RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions) {
  const io::Geometry* grid = regions ? &regions->grid : nullptr;
  WriteTextFile(dir + "/dataset_description.json", DatasetDescriptionJson(record));
  WriteTextFile(dir + "/subjects.tsv", Tsv(SubjectRows(record)));
  WriteTextFile(dir + "/regions.tsv", Tsv(KernelRows(record)));
  WriteTextFile(dir + "/metrics.tsv", Tsv(MetricRows(record)));
  WriteTextFile(dir + "/predictions.tsv", Tsv(PredictionRows(record)));
  WriteTextFile(dir + "/folds.tsv", Tsv(FoldRows(record)));
  std::vector<std::string> labels;
  for (const auto& lr : record.learners) labels.push_back(lr.outcome.label);
  const std::vector<std::string> bidsLabels = BidsLearnerLabels(labels);
  const std::vector<std::string> classParts = ClassFileParts(record.classNames);
  for (std::size_t l = 0; l < record.learners.size(); ++l) {
    auto& lr = record.learners[l];
    WriteTextFile(dir + "/regions_" + lr.outcome.label + ".tsv", Tsv(RegionRankingRows(record, lr, lr.regions, &lr.permutations.regions, true)));
    for (std::size_t c = 0; c < lr.classRegions.size() && c < record.classNames.size(); ++c)
      WriteTextFile(dir + "/regions_" + lr.outcome.label + "_class-" + classParts[c] + ".tsv", Tsv(RegionRankingRows(record, lr, lr.classRegions[c])));
    WriteTextFile(dir + "/regions_" + lr.outcome.label + ".json", RegionRankingNotes(record, lr));
    if (!lr.patternRegions.empty())
      WriteTextFile(dir + "/regions_" + lr.outcome.label + "_pattern.tsv", Tsv(RegionRankingRows(record, lr, lr.patternRegions)));
    if (grid && l < maps.folds.size() && !maps.folds[l].empty()) {
      WriteLearnerMaps(dir, record, lr, bidsLabels[l], maps.folds[l], maps.mean[l], *grid);
      if (l < maps.stability.size() && !maps.stability[l].signBalance.empty())
        lr.stabilityMaps = WriteStabilityMaps(dir, record, lr, bidsLabels[l], maps.stability[l], *grid, static_cast<int>(maps.folds[l].size()));
    }
    if (grid && l < maps.patternFolds.size() && !maps.patternFolds[l].empty())
      WriteLearnerMaps(dir, record, lr, bidsLabels[l], maps.patternFolds[l], maps.patternMean[l], *grid, "", true);
    if (grid && l < maps.classMean.size()) WriteClassMeanMaps(dir, record, lr, bidsLabels[l], maps.classMean[l], maps.classFolds, *grid);
    for (const auto& s : maps.sources) {
      if (l < s.folds.size() && !s.folds[l].empty()) {
        WriteLearnerMaps(dir, record, lr, bidsLabels[l], s.folds[l], s.mean[l], s.regions->grid, s.name);
        if (l < s.stability.size() && !s.stability[l].signBalance.empty())
          lr.sourceMaps.back().stability =
              WriteStabilityMaps(dir, record, lr, bidsLabels[l], s.stability[l], s.regions->grid, static_cast<int>(s.folds[l].size()), s.name);
      }
      if (l < s.patternFolds.size() && !s.patternFolds[l].empty())
        WriteLearnerMaps(dir, record, lr, bidsLabels[l], s.patternFolds[l], s.patternMean[l], s.regions->grid, s.name, true);
      if (l < s.classMean.size()) WriteClassMeanMaps(dir, record, lr, bidsLabels[l], s.classMean[l], maps.classFolds, s.regions->grid, s.name);
    }
    for (const auto& e : maps.edges)
      if (l < e.mean.size() && e.mean[l].size() > 0) WriteEdgeWeights(dir, lr, e, l);
    // Beside the voxel maps (output.weight_maps), the atlas painted with the region table.
    if (!lr.meanMap.empty() || !lr.sourceMaps.empty()) WriteRegionMaps(dir, record, lr, bidsLabels[l], maps, regions);
  }
  if (record.permutations > 0) WriteTextFile(dir + "/null_distribution.tsv", Tsv(NullRows(record)));
  if (!record.comparisons.empty()) WriteTextFile(dir + "/comparisons.tsv", Tsv(ComparisonRows(record)));
  if (HasAttributions(record)) WriteTextFile(dir + "/attributions.tsv", Tsv(AttributionRows(record)));
  if (!record.regionScan.learner.empty()) {
    WriteTextFile(dir + "/region_scan_" + record.regionScan.learner + ".tsv", Tsv(RegionScanRows(record)));
    WriteRegionScanMaps(dir, record, maps, regions, bidsLabels);
  }
  if (!record.ablation.learner.empty()) WriteTextFile(dir + "/ablation_" + record.ablation.learner + ".tsv", Tsv(AblationRows(record)));
}

void WriteStudyRecord(const std::string& dir, const RunRecord& record, const WeightMaps& maps, const atlas::RegionIndex* regions) {
  WriteTextFile(dir + "/report.html", RenderReport(record, PrepareReportData(record), maps.mean, regions, &maps));
  WriteTextFile(dir + "/results.json", RunRecordJson(record));
  WriteTextFile(dir + "/CITATION.md", CitationMarkdown(record));
}

}  // namespace neuromkl::exporting
