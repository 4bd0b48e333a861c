#include "neuromkl/pipeline/batch_run.hpp"
#include "neuromkl/ranks/ranks.hpp"

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "batch_units.hpp"
#include "neuromkl/config/participants_sidecar.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/export/batch_outputs.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {
/// Why `validate` refuses a batch study ("message [code]"), or empty when it accepts it.
std::string StudyRefusal(const config::BatchStudy& s, bool deep) {
  if (!s.error.empty()) return s.error + " [" + s.errorCode + "]";
  try {
    ValidateStudy(s.config, deep);
  } catch (const Error& e) {
    return std::string(e.what()) + " [" + e.code() + "]";
  }
  return "";
}
}  // namespace

void CheckBatchConfigs(const config::BatchConfig& batch, const std::vector<std::size_t>& studies) {
  std::vector<std::string> bad;
  for (const std::size_t i : studies)
    if (const std::string why = StudyRefusal(batch.studies[i], false); !why.empty()) bad.push_back(batch.studies[i].name + ": " + why);
  if (!bad.empty())
    throw ConfigError("batch:InvalidStudies", batch.path,
                      fmt::format("{} of {} studies are invalid (as `neuromkl validate` says); nothing was run:\n  {}", bad.size(), studies.size(),
                                  Join(bad, "\n  ")));
}

/// A batch's output folder must be a folder (or not exist yet): checked alike by batch validate and batch run.
void CheckBatchOutputDir(const config::BatchConfig& batch) {
  std::error_code ec;
  if (fs::exists(batch.outputDir, ec) && !fs::is_directory(batch.outputDir, ec))
    throw InputError("batch:OutputNotFolder", batch.outputDir,
                     "the batch output path exists and is not a folder (expected a folder, or a path that does not exist yet)");
  CheckOutputWritable(batch.outputDir + "/status");  // the studies' folders go inside it
}

void ParseShard(const std::string& text, int& shard, int& shards) {
  const auto slash = text.find('/');
  char* end = nullptr;
  bool ok = slash != std::string::npos;
  if (ok) {
    // In long first: 4294967298 must not wrap to 2 in an int (it was run as shard 1 of 2).
    const long i = std::strtol(text.c_str(), &end, 10);
    ok = end == text.c_str() + slash && end != text.c_str();
    const long n = std::strtol(text.c_str() + slash + 1, &end, 10);
    ok = ok && *end == '\0' && end != text.c_str() + slash + 1 && n >= 1 && n <= 1000000 && i >= 0 && i < n;
    shard = static_cast<int>(i);
    shards = static_cast<int>(n);
  }
  if (!ok) throw ConfigError("batch:Shard", "--shard", "expected i/N with 0 <= i < N <= 1000000 (e.g. 0/4 for the first of four parts), found \"" + text + "\"");
}

BatchOutcome RunBatchMpi(const config::BatchConfig& batch, const BatchOptions& options, const std::vector<std::size_t>& todo);

BatchOutcome RunBatch(const config::BatchConfig& batch, const BatchOptions& options) {
  CheckBatchOutputDir(batch);
  CheckBatchConfigs(batch, ShardStudies(batch, options));
  std::error_code ec;
  fs::create_directories(batch.outputDir, ec);
  if (ec) throw IoError("batch:Mkdir", batch.outputDir, "cannot create the batch output folder: " + ec.message());
  // The studies of a cohort run one after the other (matrix order: cohorts outermost), so with
  // decoded images kept in memory a cohort's images are decoded once for the kernels and every
  // study's voxel weight maps (up to a quarter of the memory; beyond that they are decoded again).
  const auto memory = static_cast<double>(PhysicalMemoryBytes());
  io::VolumeCacheScope imageCache(static_cast<std::size_t>(0.25 * memory));
  BatchOutcome out;
  std::vector<std::size_t> todo;
  const auto mine = ShardStudies(batch, options);
  for (std::size_t i : mine) {
    const auto& s = batch.studies[i];
    const std::string outdated = options.force ? "" : StudyOutdated(batch, s);
    if (!options.force && outdated.empty()) {
      out.studies.push_back({s.name, "skipped", "", 0});
      ++out.skipped;
      spdlog::info("batch: study {} is complete; skipped", s.name);
    } else {
      if (outdated != "not run yet" && !options.force) spdlog::warn("batch: study {} has results, but {}: it runs again", s.name, outdated);
      todo.push_back(i);
    }
  }
  if (ranks::Active()) {
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
  if (ranks::Rank() == 0) {
    fs::remove(batch.outputDir + "/checkpoints", ec);  // only if empty: a failed study keeps its blocks
    fs::remove_all(batch.outputDir + "/scratch", ec);
    if (options.shards == 1) out.summaryPath = MergeBatch(batch).tsv;
  }
  return out;
}

MergeOutcome MergeBatch(const config::BatchConfig& batch) {
  std::vector<exporting::StudyState> states;
  for (const auto& s : batch.studies) states.push_back({StudyComplete(batch, s), StudyFailure(batch, s.name)});
  const exporting::BatchSummaryFiles files = exporting::WriteBatchSummary(batch, states, CompareStudies(batch, states));
  return {files.completed, files.failed, files.missing, files.tsv, files.json, files.html};
}

std::string ValidateBatch(const config::BatchConfig& batch, int& problems, bool deep) {
  problems = 0;
  CheckBatchOutputDir(batch);
  std::string out = fmt::format("Batch \"{}\" ({}): {} studies, results in {}\n", batch.name, batch.path, batch.studies.size(), batch.outputDir);
  std::set<std::string> tables;
  for (const auto& s : batch.studies) {
    if (!s.error.empty()) {
      ++problems;
      out += fmt::format("  [invalid] {} ({}): {}\n", s.name, s.origin, StudyRefusal(s, deep));
      continue;
    }
    try {
      const std::string summary = ValidateStudy(s.config, deep);
      tables.insert(s.config.subjects.table);
      const std::string outdated = StudyOutdated(batch, s);
      out += fmt::format("  [ok] {} ({}){}\n", s.name, s.origin,
                         outdated.empty()                ? " - already complete, a rerun skips it"
                         : outdated == "not run yet"     ? ""
                                                         : " - has results, but " + outdated + ": a rerun runs it again");
      for (const auto& line : Split(summary, '\n'))
        if (!line.empty()) out += "      " + line + "\n";
    } catch (const Error& e) {
      ++problems;
      out += fmt::format("  [invalid] {} ({}): {} [{}]\n", s.name, s.origin, e.what(), e.code());
    }
  }
  out += fmt::format("{} of {} studies valid; {} subjects tables.\n", batch.studies.size() - static_cast<std::size_t>(problems), batch.studies.size(),
                     tables.size());
  if (const auto pairs = ComparedStudyPairs(batch); !pairs.empty()) {
    std::map<std::string, int> perAxis;
    for (const auto& p : pairs) ++perAxis[p.axis];
    std::vector<std::string> counts;
    for (const auto& [axis, count] : perAxis) counts.push_back(fmt::format("{} along {}", count, axis));
    out += fmt::format("{} pairs of studies that differ in one axis ({}) will be compared by paired tests (batch_comparisons.tsv), "
                       "each if its two studies score the same subjects in the same outer folds.\n",
                       pairs.size(), Join(counts, ", "));
  }
  return out;
}

}  // namespace neuromkl::pipeline
