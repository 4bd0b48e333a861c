#pragma once
// What a batch writes besides its studies' folders: the stamp of each finished study, and the
// summary (batch_summary.tsv/.json, index.html) built from every study's results.json.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/export/comparison_record.hpp"

namespace neuromkl::exporting {

/// The stamp written into a finished study's folder (batch_study.json): the study's configuration fingerprint and
/// `inputsKey`, the hash of the input files it ran on (pipeline: StudyInputsKey).
std::string StudyStampJson(const config::BatchConfig& batch, const config::BatchStudy& study, const std::string& inputsKey);
struct StudyStamp {
  std::string fingerprint, inputsKey;  ///< empty when missing or unreadable
};
StudyStamp ReadStudyStamp(const std::string& path);

/// What a batch summary needs from one study's results.json.
struct ResultsSummary {
  std::string task;
  std::string positiveClass;         ///< binary classification
  std::vector<std::string> classes;  ///< multiclass: class k's name
  int labelled = 0;
  double seconds = 0;
  std::string kernelCache;
  int kernels = 0;
  std::map<std::string, double> stageSeconds;  ///< "kernels", "nested_cv", ...
  struct Learner {
    std::string label, name;
    std::map<std::string, double> pooled, foldMean, foldSd, pValues;
    std::vector<std::string> topRegions;  ///< by mean weight, at most 3
    std::vector<std::string> statuses;    ///< fit status per outer fold
    std::vector<double> fitSeconds;       ///< refit time per outer fold
  };
  std::vector<Learner> learners;
};
/// InputError if the file is missing or not a neuromkl results file.
ResultsSummary ReadResultsSummary(const std::string& resultsJson);

/// Where each study of a batch stands when the summary is written.
struct StudyState {
  bool complete = false;  ///< results.json present and stamped with the study's current fingerprint
  std::string error;      ///< the recorded failure when not complete (empty: not run yet)
};

struct BatchSummaryFiles {
  std::string tsv, json, html;
  std::string comparisons;  ///< batch_comparisons.tsv, empty when no two studies were compared
  int completed = 0, failed = 0, missing = 0;
};

/// Two studies of a batch that differ in one matrix axis (atlas, sources or learner), a learner of each compared by
/// the paired tests on the subjects and outer folds they share.
struct StudyComparison {
  std::string axis;                ///< "atlas", "sources" or "learner"
  std::string studyA, studyB;
  std::string learnerA, learnerB;  ///< labels in their studies
  std::uint64_t seed = 0;          ///< the paired permutation test's stream derives from it and the two outcomes' names
  std::string refused;             ///< why the paired tests were not run (the folds or the subjects differ); empty when run
  std::vector<ComparisonRecord> tests;
};

/// Writes batch_summary.tsv, batch_summary.json and index.html into the batch's output folder (each
/// atomically): one row per completed study x learner with its main metrics, one per failed or
/// missing study with its error. `states` is parallel to batch.studies. With `comparisons`, also
/// batch_comparisons.tsv (one row per test, one per refused pair), in the JSON and on the page.
BatchSummaryFiles WriteBatchSummary(const config::BatchConfig& batch, const std::vector<StudyState>& states,
                                    const std::vector<StudyComparison>& comparisons = {});

}  // namespace neuromkl::exporting
