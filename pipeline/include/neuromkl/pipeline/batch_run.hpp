#pragma once
// `neuromkl batch`: every study of a batch file, resumably. Each study lands atomically in
// <batch out>/studies/<name> with a stamp of its configuration; a rerun skips stamped studies,
// cleans up and redoes an interrupted one, and reuses its checkpointed permutation blocks.
// Studies with the same kernel inputs share one kernel computation through the batch's cache.
// With MPI (mpirun -np N neuromkl batch ...) kernel computations, permutation blocks and studies
// are handed out to ranks dynamically; see docs/batch.md.
#include <string>
#include <vector>

#include "neuromkl/config/batch_config.hpp"

namespace neuromkl::pipeline {

struct BatchOptions {
  int threads = -1;     ///< per process; -1 = the batch's / study's setting
  bool force = false;   ///< redo completed studies too
  int shard = 0;        ///< run the studies with index % shards == shard
  int shards = 1;
};

struct StudyOutcome {
  std::string name;
  std::string status;   ///< "completed", "skipped" (already complete), "failed", "other shard"
  std::string error;
  int exitCode = 0;
};

struct BatchOutcome {
  std::vector<StudyOutcome> studies;
  int completed = 0, skipped = 0, failed = 0;
  int exitCode = 0;           ///< 0, or the most severe failing study's exit code
  std::string summaryPath;    ///< the TSV, when this process wrote the summary
};

/// ConfigError batch:InvalidStudies listing every study of `studies` (indices) that `validate` refuses (an invalid
/// configuration or input, each with its error code), before anything runs.
void CheckBatchConfigs(const config::BatchConfig& batch, const std::vector<std::size_t>& studies);
/// InputError batch:OutputNotFolder when the batch output path exists and is not a folder (validate and run).
void CheckBatchOutputDir(const config::BatchConfig& batch);
/// Parses "i/N" (0 <= i < N); ConfigError otherwise.
void ParseShard(const std::string& text, int& shard, int& shards);

BatchOutcome RunBatch(const config::BatchConfig& batch, const BatchOptions& options);

/// Hash of the input files a study's results depend on: every file its kernels are formed from (images, atlas,
/// mask, kernel and feature files, as the kernel cache key hashes them) and the subjects table.
std::string StudyInputsKey(const config::StudyConfig& study);
/// Why a batch study must run (again): "not run yet", "its configuration changed", "an input file changed since it
/// ran", ...; empty when its folder holds results stamped with its current configuration and input files.
std::string StudyOutdated(const config::BatchConfig& batch, const config::BatchStudy& study);
/// StudyOutdated is empty.
bool StudyComplete(const config::BatchConfig& batch, const config::BatchStudy& study);

struct MergeOutcome {
  int completed = 0, failed = 0, missing = 0;
  std::string tsv, json, html;
};
/// Builds batch_summary.tsv, batch_summary.json and index.html from the studies' folders (the
/// `merge` step after sharded runs; `batch` calls it at the end of an unsharded run).
MergeOutcome MergeBatch(const config::BatchConfig& batch);

/// `neuromkl validate` on a batch: every study's config and inputs; `problems` counts the bad ones.
std::string ValidateBatch(const config::BatchConfig& batch, int& problems, bool deep = false);

}  // namespace neuromkl::pipeline
