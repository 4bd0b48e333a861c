#pragma once
// Outputs are never half-written: a run writes into a temporary sibling of the output folder and
// renames it into place only when everything succeeded. A failed run removes its temporary folder
// and leaves any previous results untouched.
//
// `--force` replaces only a folder that neuromkl itself wrote: every committed folder holds the marker
// file `.neuromkl_output` (kOutputMarker); a folder without it is accepted as neuromkl's own only when it
// holds a neuromkl results.json (results written before the marker existed). It never replaces a
// regular file, the working directory or one of its parents, or a folder that holds any of the study's
// inputs: each is an InputError (exit 2) saying what the path is and why it is refused.
//
// While a run works, it holds `<output>.claim` (a symbolic link naming its host and process): a second run
// to the same output folder fails at once (output:Busy) instead of both finishing and one silently losing its
// results. A claim left by a process of this host that no longer runs (kill -9) is taken over.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace neuromkl::pipeline {

inline constexpr const char* kOutputMarker = ".neuromkl_output";

/// Throws InputError (exit 2) unless `path` (which exists) may be replaced by a forced run: see above.
void CheckReplaceable(const std::string& path, const std::vector<std::string>& inputs);

/// InputError output:NotWritable (exit 2) when `finalDir` cannot be created where it is to go: the nearest existing
/// folder on its path is a file, or no folder can be made in it (tried by making and removing a probe folder, which
/// also catches read-only file systems, where even root cannot write). `validate` and `run` both call it.
void CheckOutputWritable(const std::string& finalDir);
/// `path` or the nearest of its parents that exists ("." when none does; it may be a file): where a folder at `path`
/// would be made, and whose file system would hold it.
std::filesystem::path NearestExistingFolder(const std::string& path);

/// Is `name` (a file name) "<prefix><host>-<pid>" of a process of this host that no longer runs? Temporary files
/// and folders carry that suffix (TemporarySuffix) so that a later run can remove what a killed one left.
bool LeftByDeadProcess(const std::string& name, const std::string& prefix);
/// "<host>-<pid>" of this process.
std::string TemporarySuffix();
/// Removes the entries "<name>.tmp-<host>-<pid>" of `dir` that processes of this host that no longer run were writing
/// (killed mid-write); `what` names them in the log.
void RemoveDeadTemporaries(const std::string& dir, const std::string& what);
/// A cache entry landed atomically: `write` fills the folder "<entry>.tmp-<host>-<pid>", which then replaces `entry`,
/// so that a crash leaves a stray temporary folder (RemoveDeadTemporaries), never a half entry. An Error from `write`
/// or from the rename (IoError cache:Rename) propagates with the temporary folder removed.
void LandCacheEntry(const std::string& entry, const std::function<void(const std::string& folder)>& write);
/// The two halves of LandCacheEntry, for a writer that fills the folder across other work: the temporary folder's name
/// for `entry`, and its landing in place of `entry` (IoError cache:Rename; the temporary folder is then left to the
/// caller).
std::string CacheStagingFolder(const std::string& entry);
void LandStagedCacheEntry(const std::string& folder, const std::string& entry);

/// The exclusive claim of an output path, held for a run's lifetime (see above); released at destruction.
class OutputClaim {
 public:
  explicit OutputClaim(const std::string& finalDir);
  ~OutputClaim();
  OutputClaim(const OutputClaim&) = delete;
  OutputClaim& operator=(const OutputClaim&) = delete;

 private:
  std::string path_;
};

class AtomicOutputDir {
 public:
  /// InputError (exit 2) if `finalDir` exists and `force` is false, or if it may not be replaced
  /// (see above; `inputs` are the study's input files), before any work is done.
  AtomicOutputDir(std::string finalDir, bool force, const std::vector<std::string>& inputs = {});
  ~AtomicOutputDir();  ///< removes the temporary folder unless Commit() succeeded
  AtomicOutputDir(const AtomicOutputDir&) = delete;
  AtomicOutputDir& operator=(const AtomicOutputDir&) = delete;

  const std::string& Path() const { return temp_; }  ///< write here
  const std::string& FinalPath() const { return final_; }
  /// Moves the finished folder into place (replacing an old one when forced).
  void Commit();

 private:
  void Prepare(const std::vector<std::string>& inputs);  ///< the constructor's checks and the temporary folder

  std::string final_, temp_;
  std::unique_ptr<OutputClaim> claim_;
  std::vector<std::string> createdParents_;  ///< folders this run created for the output (deepest first): removed again if it fails
  bool force_, committed_ = false;
};

}  // namespace neuromkl::pipeline
