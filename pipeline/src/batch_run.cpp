#include "neuromkl/pipeline/batch_run.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <tbb/global_control.h>

#include "batch_units.hpp"
#include "neuromkl/config/checkpoint.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/files.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {

std::string FailedMarker(const config::BatchConfig& b, const std::string& study) { return b.outputDir + "/status/" + study + ".failed"; }

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

std::string Cell(double v, const char* fmtSpec = "{:.4g}") { return std::isfinite(v) ? fmt::format(fmt::runtime(fmtSpec), v) : "NA"; }

}  // namespace

void CheckBatchConfigs(const config::BatchConfig& batch) {
  std::vector<std::string> bad;
  for (const auto& s : batch.studies)
    if (!s.error.empty()) bad.push_back(s.name + ": " + s.error);
  if (!bad.empty())
    throw ConfigError("batch:InvalidStudies", batch.path,
                      fmt::format("{} of {} studies have an invalid configuration; nothing was run:\n  {}", bad.size(), batch.studies.size(), Join(bad, "\n  ")));
}

void ParseShard(const std::string& text, int& shard, int& shards) {
  const auto slash = text.find('/');
  char* end = nullptr;
  bool ok = slash != std::string::npos;
  if (ok) {
    shard = static_cast<int>(std::strtol(text.c_str(), &end, 10));
    ok = end == text.c_str() + slash;
    shards = static_cast<int>(std::strtol(text.c_str() + slash + 1, &end, 10));
    ok = ok && *end == '\0' && shards >= 1 && shard >= 0 && shard < shards;
  }
  if (!ok) throw ConfigError("batch:Shard", "--shard", "expected i/N with 0 <= i < N (e.g. 0/4 for the first of four parts), found \"" + text + "\"");
}

std::vector<std::size_t> ShardStudies(const config::BatchConfig& batch, const BatchOptions& options) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < batch.studies.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(options.shards)) == options.shard) out.push_back(i);
  return out;
}

std::string StudyFailure(const config::BatchConfig& batch, const std::string& study) {
  std::ifstream in(FailedMarker(batch, study));
  std::string line;
  std::getline(in, line);
  return line;
}

bool StudyComplete(const config::BatchConfig& batch, const config::BatchStudy& study) {
  const std::string dir = batch.StudyDir(study.name);
  std::error_code ec;
  return fs::exists(dir + "/results.json", ec) && config::ReadStampFingerprint(dir + "/batch_study.json") == config::StudyFingerprint(study);
}

config::StudyConfig EffectiveStudy(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  config::StudyConfig s = batch.studies[index].config;
  if (options.threads >= 0) s.threads = options.threads;
  return s;
}

StudyOutcome RunStudyUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  const auto& s = batch.studies[index];
  StudyOutcome o{s.name, "completed", "", 0};
  try {
    spdlog::info("batch: study {} ({} of {}): {}", s.name, index + 1, batch.studies.size(), s.origin);
    RunOptions ro;
    ro.threads = options.threads;
    ro.force = true;  // an outdated or forced study is replaced only once the new run succeeded
    ro.checkpointDir = batch.CheckpointDir(s.name);
    ro.extraFiles["batch_study.json"] = config::StudyStampJson(batch, s);
    const RunOutcome r = RunStudy(s.config, ro);
    for (const auto& line : r.summary) spdlog::info("  {}", line);
    std::error_code ec;
    fs::remove(FailedMarker(batch, s.name), ec);
  } catch (const Error& e) {
    o.status = "failed";
    o.error = e.what();
    o.exitCode = e.ExitCode();
  } catch (const std::exception& e) {
    o.status = "failed";
    o.error = e.what();
    o.exitCode = 1;
  }
  if (o.status == "failed") {
    spdlog::error("batch: study {} failed: {}", s.name, o.error);
    try {
      std::error_code ec;
      fs::create_directories(batch.outputDir + "/status", ec);
      WriteFileAtomically(FailedMarker(batch, s.name), o.error + "\n", "batch");
    } catch (const Error&) {
    }
  }
  return o;
}

void RunKernelUnit(const config::BatchConfig& batch, std::size_t index, const BatchOptions& options) {
  const config::StudyConfig study = EffectiveStudy(batch, index, options);
  std::unique_ptr<tbb::global_control> limit;
  if (study.threads > 0) limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, study.threads);
  const Cohort cohort = LoadCohort(study);
  const std::string scratch = batch.outputDir + "/scratch";
  std::error_code ec;
  fs::create_directories(scratch, ec);
  RunKernelStage(study, cohort, scratch);  // stores the kernels in the shared cache
}

void RunPermutationUnit(const config::BatchConfig& batch, std::size_t index, int block, const BatchOptions& options,
                        std::unique_ptr<StudyContext>& ctx) {
  const config::StudyConfig study = EffectiveStudy(batch, index, options);
  std::unique_ptr<tbb::global_control> limit;
  if (study.threads > 0) limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, study.threads);
  if (!ctx || ctx->study.name != study.name) {
    ctx = std::make_unique<StudyContext>(LoadStudyInputs(study));
    const std::string scratch = batch.outputDir + "/scratch";
    std::error_code ec;
    fs::create_directories(scratch, ec);
    AttachKernels(*ctx, scratch);
  }
  const std::string path = PermutationBlockPath(batch.CheckpointDir(study.name), block);
  const std::string key = ctx->PermutationKey();
  if (config::LoadPermutationBlock(path, key)) return;  // done by an earlier run
  const int first = block * kPermutationBlock;
  const int count = std::min(kPermutationBlock, study.permutations.count - first);
  config::SavePermutationBlock(path, {key, first, ctx->LearnerLabels(), ComputePermutationBlock(*ctx, first, count)});
}

std::vector<std::vector<Unit>> PlanUnits(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo) {
  std::vector<std::vector<Unit>> phases(3);
  std::set<std::string> kernelKeys;
  for (std::size_t i : todo) {
    const config::StudyConfig study = EffectiveStudy(batch, i, options);
    try {
      const Cohort cohort = LoadCohort(study);
      if (kernelKeys.insert(KernelCacheKey(study, cohort)).second) phases[0].push_back({UnitKind::Kernels, static_cast<int>(i), 0});
    } catch (const Error&) {
      // the study unit will fail with this error and record it
    }
    const int blocks = (study.permutations.count + kPermutationBlock - 1) / kPermutationBlock;
    for (int b = 0; b < blocks; ++b) phases[1].push_back({UnitKind::PermutationBlock, static_cast<int>(i), b});
    phases[2].push_back({UnitKind::Study, static_cast<int>(i), 0});
  }
  return phases;
}

#ifndef NEUROMKL_HAVE_MPI
bool MpiActive() { return false; }
int MpiRank() { return 0; }
#endif

BatchOutcome RunBatchMpi(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo);

BatchOutcome RunBatch(const config::BatchConfig& batch, const BatchOptions& options) {
  CheckBatchConfigs(batch);
  std::error_code ec;
  fs::create_directories(batch.outputDir, ec);
  if (ec) throw IoError("batch:Mkdir", batch.outputDir, "cannot create the batch output folder: " + ec.message());
  // The studies of a cohort run one after the other (matrix order: cohorts outermost), so with
  // decoded images kept in memory a cohort's images are decoded once for the kernels and every
  // study's voxel weight maps (up to a quarter of the memory; beyond that they are decoded again).
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  io::VolumeCacheScope imageCache(static_cast<std::size_t>(0.25 * memory));
  BatchOutcome out;
  std::vector<std::size_t> todo;
  const auto mine = ShardStudies(batch, options);
  for (std::size_t i : mine) {
    const auto& s = batch.studies[i];
    if (!options.force && StudyComplete(batch, s)) {
      out.studies.push_back({s.name, "skipped", "", 0});
      ++out.skipped;
      spdlog::info("batch: study {} is complete; skipped", s.name);
    } else {
      todo.push_back(i);
    }
  }
  if (MpiActive()) {
    const BatchOutcome mpi = RunBatchMpi(batch, options, todo);
    for (const auto& s : mpi.studies) out.studies.push_back(s);
  } else {
    for (std::size_t i : todo) out.studies.push_back(RunStudyUnit(batch, i, options));
  }
  for (const auto& s : out.studies) {
    if (s.status == "completed") ++out.completed;
    if (s.status == "failed") {
      ++out.failed;
      out.exitCode = std::max(out.exitCode, s.exitCode);
    }
  }
  if (MpiRank() == 0) {
    fs::remove(batch.outputDir + "/checkpoints", ec);  // only if empty: a failed study keeps its blocks
    fs::remove_all(batch.outputDir + "/scratch", ec);
    if (options.shards == 1) out.summaryPath = MergeBatch(batch).tsv;
  }
  return out;
}

MergeOutcome MergeBatch(const config::BatchConfig& batch) {
  MergeOutcome m;
  std::vector<std::vector<std::string>> rows = {{"study", "cohort", "target", "atlas", "learner_axis", "learner", "learner_name", "task", "n", "status",
                                                 "metric", "pooled", "fold_mean", "fold_sd", "p_value", "metric2", "pooled2", "fold_sd2",
                                                 "top_regions", "fits", "seconds", "kernels", "report", "error"}};
  std::string table;
  for (const auto& s : batch.studies) {
    const std::string dir = batch.StudyDir(s.name);
    auto axis = [&](const char* k) { return s.axes.count(k) ? s.axes.at(k) : std::string(); };
    std::vector<std::string> head = {s.name, axis("cohort"), axis("target"), axis("atlas"), axis("learner")};
    if (StudyComplete(batch, s)) {
      ++m.completed;
      const config::ResultsSummary r = config::ReadResultsSummary(dir + "/results.json");
      const bool cls = r.task == "classification";
      const char* main = cls ? "balanced_accuracy" : "pearson_r";
      const char* second = cls ? "auc" : "mse";
      for (const auto& l : r.learners) {
        auto get = [](const std::map<std::string, double>& mp, const char* k) { return mp.count(k) ? mp.at(k) : std::nan(""); };
        int converged = 0;
        for (const auto& st : l.statuses) converged += st == "converged";
        std::vector<std::string> row = head;
        for (const std::string& v : {l.label, l.name, r.task, std::to_string(r.labelled), std::string("completed"), std::string(main),
                                     Cell(get(l.pooled, main)), Cell(get(l.foldMean, main)), Cell(get(l.foldSd, main)), Cell(get(l.pValues, main)),
                                     std::string(second), Cell(get(l.pooled, second)), Cell(get(l.foldSd, second)), Join(l.topRegions, "; "),
                                     fmt::format("{}/{} converged", converged, l.statuses.size()), Cell(r.seconds, "{:.1f}"), r.kernelCache,
                                     "studies/" + s.name + "/report.html", std::string()})
          row.push_back(v);
        rows.push_back(row);
      }
      continue;
    }
    const std::string error = StudyFailure(batch, s.name);
    ++(error.empty() ? m.missing : m.failed);
    std::vector<std::string> row = head;
    for (const std::string& v : {std::string(), std::string(), std::string(), std::string(), std::string(error.empty() ? "not run" : "failed")})
      row.push_back(v);
    while (row.size() + 1 < rows[0].size()) row.push_back("");
    row.push_back(error);
    rows.push_back(row);
  }
  std::string tsv;
  for (const auto& r : rows) {
    std::vector<std::string> clean;
    for (auto c : r) {
      for (char& ch : c)
        if (ch == '\t' || ch == '\n') ch = ' ';
      clean.push_back(c);
    }
    tsv += Join(clean, "\t") + "\n";
  }
  m.tsv = batch.outputDir + "/batch_summary.tsv";
  m.json = batch.outputDir + "/batch_summary.json";
  m.html = batch.outputDir + "/index.html";
  std::error_code ec;
  fs::create_directories(batch.outputDir, ec);
  WriteFileAtomically(m.tsv, tsv, "batch");
  WriteFileAtomically(m.json, config::BatchSummaryJson(batch, rows), "batch");
  // A plain page: one row per study and learner, linking each study's report.
  std::string html = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + Html(batch.name) +
                     " - neuromkl batch</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                     "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}tr.failed{background:#fdd}tr.missing{background:#eee}"
                     "td.num{text-align:right}</style></head><body>\n<h1>Batch " + Html(batch.name) + "</h1>\n<p>" + Html(batch.description) +
                     "</p>\n<p>" + fmt::format("{} studies: {} completed, {} failed, {} not run.", batch.studies.size(), m.completed, m.failed, m.missing) +
                     " Metrics pooled over out-of-fold predictions; SD over outer folds; p from the permutation test. Table also in "
                     "<a href=\"batch_summary.tsv\">batch_summary.tsv</a>.</p>\n<table>\n<tr>";
  const std::vector<std::size_t> shown = {0, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 18, 19, 20, 23};
  for (auto c : shown) html += "<th>" + Html(rows[0][c]) + "</th>";
  html += "</tr>\n";
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const std::string& status = rows[r][9];
    html += "<tr class=\"" + std::string(status == "completed" ? "ok" : status == "failed" ? "failed" : "missing") + "\">";
    for (auto c : shown) {
      const std::string& v = rows[r][c];
      if (c == 0 && status == "completed") html += "<td><a href=\"" + Html(rows[r][22]) + "\">" + Html(v) + "</a></td>";
      else html += std::string(c >= 10 && c <= 16 ? "<td class=\"num\">" : "<td>") + Html(v) + "</td>";
    }
    html += "</tr>\n";
  }
  html += "</table>\n</body></html>\n";
  WriteFileAtomically(m.html, html, "batch");
  return m;
}

std::string ValidateBatch(const config::BatchConfig& batch, int& problems) {
  problems = 0;
  std::string out = fmt::format("Batch \"{}\" ({}): {} studies, results in {}\n", batch.name, batch.path, batch.studies.size(), batch.outputDir);
  std::set<std::string> tables;
  for (const auto& s : batch.studies) {
    if (!s.error.empty()) {
      ++problems;
      out += fmt::format("  [invalid] {} ({}): {}\n", s.name, s.origin, s.error);
      continue;
    }
    try {
      const std::string summary = ValidateStudy(s.config);
      tables.insert(s.config.subjects.table);
      const bool done = StudyComplete(batch, s);
      out += fmt::format("  [ok] {} ({}){}\n", s.name, s.origin, done ? " - already complete, a rerun skips it" : "");
      for (const auto& line : Split(summary, '\n'))
        if (!line.empty()) out += "      " + line + "\n";
    } catch (const Error& e) {
      ++problems;
      out += fmt::format("  [invalid] {} ({}): {}\n", s.name, s.origin, e.what());
    }
  }
  out += fmt::format("{} of {} studies valid; {} subjects tables.\n", batch.studies.size() - static_cast<std::size_t>(problems), batch.studies.size(),
                     tables.size());
  return out;
}

#ifndef NEUROMKL_HAVE_MPI
BatchOutcome RunBatchMpi(const config::BatchConfig&, const BatchOptions&, const std::vector<std::size_t>&) { return {}; }
#endif

}  // namespace neuromkl::pipeline
