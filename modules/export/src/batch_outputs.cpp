#include "neuromkl/export/batch_outputs.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "json_format.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::exporting {

namespace {

std::string Html(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

/// A missing value is "n/a", as BIDS writes it in TSV files.
std::string Cell(double v, const char* fmtSpec = "{:.4g}") { return std::isfinite(v) ? fmt::format(fmt::runtime(fmtSpec), v) : "n/a"; }

using Rows = std::vector<std::vector<std::string>>;

/// A table's rows as JSON objects keyed by its header.
Json RowObjects(const Rows& rows) {
  Json out = Json::array();
  for (std::size_t r = 1; r < rows.size(); ++r) {
    Json row = Json::object();
    for (std::size_t c = 0; c < rows[0].size() && c < rows[r].size(); ++c) row[rows[0][c]] = rows[r][c];
    out.push_back(row);
  }
  return out;
}

std::string BatchSummaryJson(const config::BatchConfig& batch, const Rows& rows, const Rows& comparisons) {
  Json j = {{"format", "neuromkl-batch-summary"}, {"batch", batch.name}, {"batch_file", batch.path}, {"rows", RowObjects(rows)}};
  if (comparisons.size() > 1) j["comparisons"] = {{"table", "batch_comparisons.tsv"}, {"rows", RowObjects(comparisons)}};
  return j.dump(2) + "\n";
}

/// One row per paired test of two studies; a refused pair is one row with test "none" and the reason.
Rows ComparisonRows(const std::vector<StudyComparison>& comparisons) {
  const auto exact = [](double v) { return std::isfinite(v) ? FormatDouble(v) : std::string("n/a"); };
  Rows rows = {{"axis", "study_a", "study_b", "learner_a", "learner_b", "test", "metric", "value_a", "value_b", "statistic", "p_value", "n",
                "seed", "detail"}};
  for (const auto& c : comparisons) {
    const std::vector<std::string> head = {c.axis, c.studyA, c.studyB, c.learnerA, c.learnerB};
    if (!c.refused.empty()) {
      std::vector<std::string> row = head;
      row.insert(row.end(), {"none", "n/a", "n/a", "n/a", "n/a", "n/a", "0", "n/a", "not compared: " + c.refused});
      rows.push_back(row);
    }
    for (const auto& t : c.tests) {
      std::vector<std::string> row = head;
      row.insert(row.end(), {t.test, t.metric, exact(t.valueA), exact(t.valueB), exact(t.statistic), exact(t.p), std::to_string(t.n),
                             std::to_string(c.seed), t.detail});
      rows.push_back(row);
    }
  }
  return rows;
}

Rows SummaryRows(const config::BatchConfig& batch, const std::vector<StudyState>& states, BatchSummaryFiles& m) {
  Rows rows = {{"study", "cohort", "target", "atlas", "learner_axis", "learner", "learner_name", "task", "n", "status",
                "metric", "pooled", "fold_mean", "fold_sd", "p_value", "metric2", "pooled2", "fold_sd2",
                "top_regions", "fits", "seconds", "kernels", "report", "error"}};
  // A "sources" column only when the matrix has a sources axis: a batch without one keeps the columns its readers expect.
  const bool sourcesAxis = std::any_of(batch.studies.begin(), batch.studies.end(), [](const config::BatchStudy& s) { return s.axes.count("sources") > 0; });
  if (sourcesAxis) rows[0].insert(rows[0].begin() + 4, "sources");
  for (std::size_t i = 0; i < batch.studies.size(); ++i) {
    const auto& s = batch.studies[i];
    auto axis = [&](const char* k) { return s.axes.count(k) ? s.axes.at(k) : std::string(); };
    std::vector<std::string> head = {s.name, axis("cohort"), axis("target"), axis("atlas"), axis("learner")};
    if (sourcesAxis) head.insert(head.begin() + 4, axis("sources"));
    if (states[i].complete) {
      ++m.completed;
      const ResultsSummary r = ReadResultsSummary(batch.StudyDir(s.name) + "/results.json");
      const bool cls = r.task == "classification" || r.task == "multiclass";
      const char* main = cls ? "balanced_accuracy" : "pearson_r";
      const char* second = r.task == "multiclass" ? "macro_auc" : cls ? "auc" : "mse";
      for (const auto& l : r.learners) {
        auto get = [](const std::map<std::string, double>& mp, const char* k) { return mp.count(k) ? mp.at(k) : std::nan(""); };
        std::map<std::string, int> others;  // statuses other than converged: a capped or failed fit must be visible here too
        int converged = 0;
        for (const auto& st : l.statuses) (st == "converged" ? converged : others[st]) += 1;
        std::vector<std::string> notConverged;
        for (const auto& [st, count] : others) notConverged.push_back(fmt::format("{} {}", count, st));
        const std::string fits = fmt::format("{}/{} converged{}", converged, l.statuses.size(), others.empty() ? "" : " (" + Join(notConverged, ", ") + ")");
        std::vector<std::string> row = head;
        for (const std::string& v : {l.label, l.name, r.task, std::to_string(r.labelled), std::string("completed"), std::string(main),
                                     Cell(get(l.pooled, main)), Cell(get(l.foldMean, main)), Cell(get(l.foldSd, main)), Cell(get(l.pValues, main)),
                                     std::string(second), Cell(get(l.pooled, second)), Cell(get(l.foldSd, second)), Join(l.topRegions, "; "),
                                     fits, Cell(r.seconds, "{:.1f}"), r.kernelCache,
                                     "studies/" + s.name + "/report.html", std::string()})
          row.push_back(v);
        rows.push_back(row);
      }
      continue;
    }
    const std::string& error = states[i].error;
    ++(error.empty() ? m.missing : m.failed);
    std::vector<std::string> row = head;
    for (const std::string& v : {std::string(), std::string(), std::string(), std::string(), std::string(error.empty() ? "not run" : "failed")})
      row.push_back(v);
    while (row.size() + 1 < rows[0].size()) row.push_back("");
    row.push_back(error);
    rows.push_back(row);
  }
  return rows;
}

std::string SummaryTsv(const Rows& rows) {
  std::string tsv;
  for (const auto& r : rows) {
    std::vector<std::string> clean;
    for (auto c : r) {
      for (char& ch : c)
        if (ch == '\t' || ch == '\n') ch = ' ';
      clean.push_back(c.empty() ? "n/a" : c);  // a missing value is "n/a" (BIDS)
    }
    tsv += Join(clean, "\t") + "\n";
  }
  return tsv;
}

/// The comparisons of studies that differ in one axis, one row per pair and test (a refused pair says why).
std::string ComparisonsHtml(const Rows& rows) {
  if (rows.size() < 2) return "";
  std::string html =
      "<h2 id=\"comparisons\">Comparisons of studies that differ in one axis</h2>\n<p>Studies that differ only in their atlas, sources or "
      "learner, on the same subjects and outer folds, compared by paired tests: the corrected resampled t-test over the outer folds "
      "(Nadeau &amp; Bengio 2003), McNemar's exact test and DeLong's test of the AUCs on the out-of-fold predictions, and a paired "
      "permutation test. p-values are two-sided and not corrected for the number of pairs. A pair whose folds or subjects differ is "
      "not tested. Table also in <a href=\"batch_comparisons.tsv\">batch_comparisons.tsv</a>.</p>\n<table class=\"comparisons\">\n<tr>";
  const std::vector<std::string> shown = {"axis", "study_a", "learner_a", "study_b", "learner_b", "test", "metric", "value_a", "value_b", "statistic",
                                          "p_value", "n", "detail"};
  std::vector<std::size_t> columns;
  for (const auto& name : shown) columns.push_back(static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin()));
  for (const auto& name : shown) html += "<th>" + Html(name) + "</th>";
  html += "</tr>\n";
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const bool refused = rows[r][columns[5]] == "none";
    html += refused ? "<tr class=\"missing\">" : "<tr>";
    for (std::size_t c = 0; c < columns.size(); ++c) {
      std::string v = rows[r][columns[c]];
      const bool numeric = c >= 7 && c <= 10;
      if (numeric && v != "n/a") v = Cell(std::stod(v));  // the table keeps every digit; the page four
      html += std::string(numeric ? "<td class=\"num\">" : "<td>") + Html(v) + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

/// A plain page: one row per study and learner, linking each study's report, then the comparisons of studies.
std::string SummaryHtml(const config::BatchConfig& batch, const Rows& rows, const BatchSummaryFiles& m, const Rows& comparisons) {
  std::string html = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + Html(batch.name) +
                     " - neuromkl batch</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                     "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}tr.failed{background:#fdd}tr.missing{background:#eee}"
                     "td.num{text-align:right}</style></head><body>\n<h1>Batch " + Html(batch.name) + "</h1>\n<p>" + Html(batch.description) +
                     "</p>\n<p>" + fmt::format("{} studies: {} completed, {} failed, {} not run.", batch.studies.size(), m.completed, m.failed, m.missing) +
                     " Metrics pooled over out-of-fold predictions; SD over outer folds; p from the permutation test. Table also in "
                     "<a href=\"batch_summary.tsv\">batch_summary.tsv</a>.</p>\n<table>\n<tr>";
  // Columns by name (the summary gains a "sources" column with a sources axis).
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  std::vector<std::size_t> shown;
  for (const char* name : {"study", "sources", "learner", "task", "n", "status", "metric", "pooled", "fold_sd", "p_value", "metric2", "pooled2",
                           "top_regions", "fits", "seconds", "error"})
    if (column(name) < rows[0].size()) shown.push_back(column(name));
  const std::size_t statusCol = column("status"), reportCol = column("report");
  for (auto c : shown) html += "<th>" + Html(rows[0][c]) + "</th>";
  html += "</tr>\n";
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const std::string& status = rows[r][statusCol];
    html += "<tr class=\"" + std::string(status == "completed" ? "ok" : status == "failed" ? "failed" : "missing") + "\">";
    for (auto c : shown) {
      const std::string& v = rows[r][c];
      const bool numeric = c >= column("metric") && c <= column("pooled2");
      if (c == 0 && status == "completed") html += "<td><a href=\"" + Html(rows[r][reportCol]) + "\">" + Html(v) + "</a></td>";
      else html += std::string(numeric ? "<td class=\"num\">" : "<td>") + Html(v) + "</td>";
    }
    html += "</tr>\n";
  }
  html += "</table>\n" + ComparisonsHtml(comparisons) + "</body></html>\n";
  return html;
}

}  // namespace

std::string StudyStampJson(const config::BatchConfig& batch, const config::BatchStudy& study, const std::string& inputsKey) {
  Json j = {{"batch", batch.name}, {"batch_file", batch.path}, {"study", study.name},   {"origin", study.origin},
            {"axes", study.axes},  {"fingerprint", config::StudyFingerprint(study)}, {"inputs_key", inputsKey}};
  return j.dump(2) + "\n";
}

StudyStamp ReadStudyStamp(const std::string& path) {
  const std::optional<std::string> text = TryReadText(path);
  if (!text) return {};
  try {
    const Json j = Json::parse(*text);
    return {j.at("fingerprint").get<std::string>(), j.value("inputs_key", std::string())};
  } catch (const Json::exception&) {
    return {};
  }
}

ResultsSummary ReadResultsSummary(const std::string& path) {
  const std::optional<std::string> text = TryReadText(path);
  if (!text) throw InputError("batch:NoResults", path, "no results.json: the study has not completed");
  try {
    const Json j = Json::parse(*text);
    if (j.at("format") != "neuromkl-results") throw InputError("batch:NotResults", path, "not a neuromkl results file");
    ResultsSummary r;
    r.task = j.at("task").get<std::string>();
    if (const Json& t = j.at("target"); t.contains("positive_class")) r.positiveClass = t.at("positive_class").get<std::string>();
    if (const Json& t = j.at("target"); t.contains("classes")) r.classes = t.at("classes").get<std::vector<std::string>>();
    r.labelled = static_cast<int>(j.at("subjects").at("labelled").size());
    r.seconds = j.at("seconds").value("total", 0.0);
    r.kernelCache = j.at("kernels").value("cache", "");
    r.kernels = j.at("kernels").value("count", 0);
    for (const auto& [k, v] : j.at("seconds").items()) r.stageSeconds[k] = v.get<double>();
    auto numbers = [](const Json& m) {
      std::map<std::string, double> out;
      for (const auto& [k, v] : m.items()) out[k] = v.is_number() ? v.get<double>() : std::nan("");
      return out;
    };
    for (const auto& l : j.at("learners")) {
      ResultsSummary::Learner e;
      e.label = l.at("label");
      e.name = l.at("name");
      e.pooled = numbers(l.at("metrics").at("pooled"));
      e.foldMean = numbers(l.at("metrics").at("fold_mean"));
      e.foldSd = numbers(l.at("metrics").at("fold_sd"));
      if (l.contains("permutations")) e.pValues = numbers(l.at("permutations").at("p_values"));
      for (const auto& row : l.at("regions").at("table")) {
        if (e.topRegions.size() == 3) break;
        e.topRegions.push_back(row.at("name").get<std::string>());
      }
      for (const auto& f : l.at("folds")) {
        e.statuses.push_back(f.value("status", ""));
        if (f.contains("fit")) e.fitSeconds.push_back(f.at("fit").value("seconds", std::nan("")));
      }
      r.learners.push_back(std::move(e));
    }
    return r;
  } catch (const Json::exception& e) {
    throw InputError("batch:BadResults", path, std::string("unreadable results file: ") + e.what());
  }
}

BatchSummaryFiles WriteBatchSummary(const config::BatchConfig& batch, const std::vector<StudyState>& states,
                                    const std::vector<StudyComparison>& comparisons) {
  BatchSummaryFiles m;
  const Rows rows = SummaryRows(batch, states, m);
  const Rows comparisonRows = ComparisonRows(comparisons);
  m.tsv = batch.outputDir + "/batch_summary.tsv";
  m.json = batch.outputDir + "/batch_summary.json";
  m.html = batch.outputDir + "/index.html";
  const std::string comparisonsTsv = batch.outputDir + "/batch_comparisons.tsv";
  if (comparisonRows.size() > 1) {
    m.comparisons = comparisonsTsv;
    WriteFileAtomically(comparisonsTsv, SummaryTsv(comparisonRows), "batch");
  } else {
    std::error_code ec;
    std::filesystem::remove(comparisonsTsv, ec);  // a merge after studies were removed must not keep an old table
  }
  WriteFileAtomically(m.tsv, SummaryTsv(rows), "batch");
  WriteFileAtomically(m.json, BatchSummaryJson(batch, rows, comparisonRows), "batch");
  WriteFileAtomically(m.html, SummaryHtml(batch, rows, m, comparisonRows), "batch");
  return m;
}

}  // namespace neuromkl::exporting
