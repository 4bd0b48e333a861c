#pragma once
// The command line's commands (`neuromkl run|batch|merge|validate|predict|simulate|--version`), each a function
// from its options to an exit code (0 success, 1 failure while running, 2 bad config or input) that prints what
// the user reads on standard output. apps/neuromkl_main.cpp only parses the arguments and calls one.
#include <string>

#include "neuromkl/pipeline/predict.hpp"
#include "neuromkl/simulate/simulate.hpp"

namespace neuromkl::pipeline {

struct RunCommandOptions {
  std::string study;     ///< the study file
  std::string outDir;    ///< --out (default: /output/dir of the study)
  std::string cacheDir;  ///< --cache-dir (default: /output/cache_dir of the study)
  int threads = -1;      ///< --threads (default: /threads of the study)
  bool force = false;
};
/// Under mpirun, ranks > 0 serve the kernel stage of rank 0 (argc/argv start the MPI session).
int RunCommand(const RunCommandOptions& options, int argc, char** argv);

struct BatchCommandOptions {
  std::string batchFile;
  std::string shard;  ///< "i/N" or empty
  int threads = -1;
  bool force = false;
};
int BatchCommand(const BatchCommandOptions& options, int argc, char** argv);
int MergeCommand(const std::string& batchFile);
/// A study or a batch file.
int ValidateCommand(const std::string& file, bool deep);
int PredictCommand(const PredictOptions& options, int threads);
int VersionCommand();

/// `simulate`'s options as the command line gives them: region and node lists as comma-separated text.
struct SimulateCommandOptions {
  simulate::SimulateOptions options;
  std::string task = "classification";
  std::string signal;  ///< regions, "none", or with --classes k > 2 k groups separated by ';'
  std::string ageRegions, signalB, connectivitySignal;
  bool uncompressed = false;
};
int SimulateCommand(SimulateCommandOptions command);

}  // namespace neuromkl::pipeline
