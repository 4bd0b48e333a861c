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
#include <string>
#include <vector>

namespace neuromkl::pipeline {

inline constexpr const char* kOutputMarker = ".neuromkl_output";

/// Throws InputError (exit 2) unless `path` (which exists) may be replaced by a forced run: see above.
void CheckReplaceable(const std::string& path, const std::vector<std::string>& inputs);

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
  std::string final_, temp_;
  std::vector<std::string> createdParents_;  ///< folders this run created for the output (deepest first): removed again if it fails
  bool force_, committed_ = false;
};

}  // namespace neuromkl::pipeline
