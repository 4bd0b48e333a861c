#pragma once
// The batch file: many studies in one command. A list of study files (with per-study overrides)
// and/or a matrix that expands cohorts x targets x atlases x learners over a base study into
// studies with readable names. Every study becomes an ordinary StudyConfig whose output folder is
// <batch output>/studies/<name> and whose kernel cache is the batch's shared cache.
#include <map>
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"

namespace neuromkl::config {

struct BatchStudy {
  std::string name;                          ///< unique in the batch; names the output folder
  std::string origin;                        ///< where it comes from ("studies/2: a.json", "matrix cohorts[0] x learners[1]")
  std::map<std::string, std::string> axes;   ///< matrix axis -> value name (cohort, target, atlas, learner)
  std::string studyJson;                     ///< the merged study file (absolute paths)
  StudyConfig config;                        ///< parsed, when `error` is empty
  std::string error;                         ///< the study's configuration error, if any (every study is checked)
  std::string errorCode;                     ///< its error code, e.g. "config:UnknownKey"
};

struct BatchConfig {
  std::string path, baseDir, name, description;
  std::string outputDir;                     ///< default "<batch folder>/results/<name>"
  int threads = 0;
  std::vector<BatchStudy> studies;           ///< in expansion order: the list first, then the matrix

  std::string StudyDir(const std::string& study) const { return outputDir + "/studies/" + study; }
  std::string CacheDir() const { return outputDir + "/kernel_cache"; }
  std::string CheckpointDir(const std::string& study) const { return outputDir + "/checkpoints/" + study; }
};

/// True when the file's top-level object has "studies" or "matrix" (a batch, not a study).
bool IsBatchFile(const std::string& path);
/// Reads a batch file and expands it. ConfigError (file + JSON pointer) for a malformed batch file,
/// duplicate study names or an empty batch; a study whose own configuration is invalid is kept with
/// its `error` set, so `validate` can report every problem at once.
BatchConfig LoadBatchConfig(const std::string& path);

/// Fingerprint of a batch study's configuration: a completed study is skipped on a rerun only if
/// its stamp still carries this fingerprint.
std::string StudyFingerprint(const BatchStudy& study);

}  // namespace neuromkl::config
