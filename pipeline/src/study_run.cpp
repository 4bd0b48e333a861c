#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "neuromkl/config/kernel_store.hpp"
#include "neuromkl/config/run_record.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/kernels/preprocess.hpp"
#include "neuromkl/pipeline/cohort.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/output_dir.hpp"
#include "neuromkl/pipeline/study_run.hpp"

namespace neuromkl::pipeline {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw IoError("output:Write", path, "cannot write the file (disk full?)");
}

/// Every kernel restricted to `rows`, centred and normalised with those subjects' statistics.
learners::KernelList TrainingKernels(const kernels::KernelSet& set, const std::vector<int>& rows, bool centre, bool normalise) {
  const Eigen::VectorXi train = Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size()));
  const Eigen::VectorXi none(0);
  learners::KernelList out;
  for (const auto& K : set.kernels) {
    kernels::FoldKernel fk = kernels::SliceFold(K, train, none);
    if (centre) kernels::CentreFold(fk);
    if (normalise) kernels::NormaliseFold(fk);
    out.push_back(std::move(fk.train));
  }
  return out;
}

std::string Tsv(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& r : rows) out += Join(r, "\t") + "\n";
  return out;
}

}  // namespace

RunOutcome RunStudy(config::StudyConfig study, const RunOptions& options) {
  const auto start = Clock::now();
  if (!options.outDir.empty()) study.output.dir = fs::absolute(options.outDir).lexically_normal().string();
  if (options.threads >= 0) study.threads = options.threads;
  config::RunRecord record;
  record.seconds["total"] = 0;

  auto t = Clock::now();
  const Cohort cohort = LoadCohort(study);
  record.seconds["subjects"] = Since(t);
  AtomicOutputDir out(study.output.dir, options.force);  // fails before any heavy work if it exists

  t = Clock::now();
  KernelStageResult ks = RunKernelStage(study, cohort, out.Path());
  record.seconds["kernels"] = Since(t);
  record.seconds["kernels_read_images"] = ks.report.readSeconds;
  record.seconds["kernels_products"] = ks.report.productSeconds;

  record.study = study.name;
  record.version = NeuromklVersion();
  record.versions = Versions();
  record.configPath = fs::absolute(study.path).string();
  record.seed = study.seed;
  record.task = config::ToString(study.target.task);
  record.targetColumn = study.target.column;
  record.positiveClass = cohort.positiveClass;
  record.negativeClass = cohort.negativeClass;
  record.excludedSubjects = cohort.excluded;
  for (auto r : cohort.labelledRows) record.labelledSubjects.push_back(cohort.ids[static_cast<std::size_t>(r)]);
  record.targets.assign(cohort.y.data(), cohort.y.data() + cohort.y.size());
  record.kernels = ks.set.info;
  record.excludedKernels = ks.set.excluded;
  record.kernelSource = config::ToString(study.kernels.source);
  record.kernelCache = ks.cacheHit ? "hit" : (study.kernels.cache ? "computed and stored" : "computed (cache off)");
  record.warnings = ks.warnings;
  record.centre = study.kernels.centre;
  record.normalise = study.kernels.normalise;
  Hasher inputHash;
  inputHash.Update(ks.key).Update(HashFile(study.subjects.table)).Update(config::ResolvedConfigJson(study));
  record.inputHash = inputHash.Hex();

  // ---- learners: fixed parameters, fitted on every labelled subject ----
  t = Clock::now();
  const learners::KernelList train = TrainingKernels(ks.set, cohort.labelledRows, study.kernels.centre, study.kernels.normalise);
  const learners::Targets targets{study.target.task, cohort.y};
  RunOutcome outcome;
  for (const auto& spec : study.learners) {
    config::LearnerRecord lr;
    lr.label = spec.label;
    lr.name = spec.name;
    lr.params = spec.params;
    try {
      const auto learner = learners::MakeLearner(spec.name, spec.params);
      lr.model = learner->Fit(train, targets);
      const Eigen::VectorXd f = lr.model.Decision(train);
      lr.decision.assign(f.data(), f.data() + f.size());
      for (Eigen::Index i = 0; i < f.size(); ++i)
        lr.predicted.push_back(study.target.task == learners::Task::Classification
                                   ? (f[i] >= 0 ? cohort.positiveClass : cohort.negativeClass)
                                   : FormatDouble(f[i]));
      Eigen::Index selected = 0;
      for (Eigen::Index j = 0; j < lr.model.beta.size(); ++j) selected += lr.model.beta[j] > 0;
      outcome.summary.push_back(fmt::format("{:<12} {:<22} {} kernels with weight > 0 of {}, {} iterations, {:.2f} s", spec.label,
                                            learners::ToString(lr.model.info.status), selected, lr.model.beta.size(),
                                            lr.model.info.iterations, lr.model.info.seconds));
    } catch (const Error& e) {
      // One learner's bad fit must not lose the others' results: record it and go on.
      lr.error = e.what();
      outcome.summary.push_back(fmt::format("{:<12} FAILED: {}", spec.label, e.what()));
      record.warnings.push_back("learner " + spec.label + " failed: " + e.what());
    }
    record.learners.push_back(std::move(lr));
  }
  record.seconds["learners"] = Since(t);

  // ---- outputs ----
  const std::string dir = out.Path();
  WriteText(dir + "/study.resolved.json", config::ResolvedConfigJson(study) + "\n");
  if (study.output.saveKernels) config::SaveKernelStore(dir + "/kernels", ks.set, ks.key, "raw region kernels of study " + study.name);
  {
    std::vector<std::vector<std::string>> rows = {{"subject", "used", "target", "reason"}};
    std::size_t e = 0;
    for (std::size_t r = 0; r < cohort.ids.size(); ++r) {
      const bool used = cohort.labelled[r];
      rows.push_back({cohort.ids[r], used ? "yes" : "no", cohort.rawTargets[r], used ? "" : cohort.excluded[e++].second});
    }
    WriteText(dir + "/subjects.tsv", Tsv(rows));
  }
  {
    std::vector<std::vector<std::string>> rows = {{"label", "name", "status", "voxels_used", "atlas_voxels", "non_finite_voxels", "zeroed_values", "reason"}};
    auto add = [&](const kernels::KernelInfo& k, const std::string& status, const std::string& reason) {
      rows.push_back({std::to_string(k.label), k.name, status, std::to_string(k.features), std::to_string(k.atlasVoxels),
                      std::to_string(k.nonFiniteVoxels), std::to_string(k.zeroedValues), reason});
    };
    for (const auto& k : ks.set.info) add(k, "used", "");
    for (const auto& k : ks.set.excluded) add(k.info, "excluded", k.reason);
    WriteText(dir + "/regions.tsv", Tsv(rows));
  }
  {
    std::vector<std::string> header = {"kernel"};
    for (const auto& l : record.learners) header.push_back(l.label);
    std::vector<std::vector<std::string>> rows = {header};
    for (std::size_t j = 0; j < ks.set.info.size(); ++j) {
      std::vector<std::string> row = {ks.set.info[j].name};
      for (const auto& l : record.learners)
        row.push_back(l.error.empty() ? FormatDouble(l.model.beta[static_cast<Eigen::Index>(j)]) : "NA");
      rows.push_back(row);
    }
    WriteText(dir + "/kernel_weights.tsv", Tsv(rows));
  }
  {
    std::vector<std::string> header = {"subject", "target"};
    for (const auto& l : record.learners) header.push_back(l.label + "_decision");
    std::vector<std::vector<std::string>> rows = {header};
    for (std::size_t i = 0; i < record.labelledSubjects.size(); ++i) {
      std::vector<std::string> row = {record.labelledSubjects[i],
                                      cohort.rawTargets[static_cast<std::size_t>(cohort.labelledRows[i])]};
      for (const auto& l : record.learners) row.push_back(l.error.empty() ? FormatDouble(l.decision[i]) : "NA");
      rows.push_back(row);
    }
    WriteText(dir + "/training_decisions.tsv", Tsv(rows));
  }
  record.seconds["total"] = Since(start);
  WriteText(dir + "/results.json", config::RunRecordJson(record));
  out.Commit();
  outcome.outputDir = out.FinalPath();
  return outcome;
}

}  // namespace neuromkl::pipeline
