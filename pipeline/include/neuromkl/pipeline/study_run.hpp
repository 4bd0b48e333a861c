#pragma once
#include <map>
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"

namespace neuromkl::pipeline {

struct RunOptions {
  std::string outDir;   ///< overrides /output/dir
  int threads = -1;     ///< overrides /threads when >= 0
  bool force = false;   ///< replace an existing output folder (only once the new run succeeded)
  std::string checkpointDir;  ///< permutation blocks; default "<output dir>.checkpoint" (removed after success)
  std::map<std::string, std::string> extraFiles;  ///< name -> content, written into the output folder before it is committed
};

struct RunOutcome {
  std::string outputDir;
  int permutationBlocksReused = 0;   ///< blocks taken from a checkpoint instead of computed
  std::vector<std::string> summary;  ///< one line per learner, for the terminal
};

/// Runs a study end to end into an atomically committed output folder.
RunOutcome RunStudy(config::StudyConfig study, const RunOptions& options);

/// Checks the config and every input without heavy computation, and returns a readable summary.
/// Default: every header, grids, atlas/mask overlap, CV feasibility, precomputed kernels (see
/// docs/inputs.md). `deep` also decodes every subject image (truncated or corrupt data, subjects
/// with no finite voxel inside the atlas regions), as the kernel stage would.
std::string ValidateStudy(const config::StudyConfig& study, bool deep = false);

/// Versions of neuromkl and the libraries it was built with.
std::map<std::string, std::string> Versions();
std::string NeuromklVersion();

}  // namespace neuromkl::pipeline
