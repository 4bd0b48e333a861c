#pragma once
// Outputs are never half-written: a run writes into a temporary sibling of the output folder and
// renames it into place only when everything succeeded. A failed run removes its temporary folder
// and leaves any previous results untouched.
#include <string>

namespace neuromkl::pipeline {

class AtomicOutputDir {
 public:
  /// InputError (exit 2) if `finalDir` exists and `force` is false, before any work is done.
  AtomicOutputDir(std::string finalDir, bool force);
  ~AtomicOutputDir();  ///< removes the temporary folder unless Commit() succeeded
  AtomicOutputDir(const AtomicOutputDir&) = delete;
  AtomicOutputDir& operator=(const AtomicOutputDir&) = delete;

  const std::string& Path() const { return temp_; }  ///< write here
  const std::string& FinalPath() const { return final_; }
  /// Moves the finished folder into place (replacing an old one when forced).
  void Commit();

 private:
  std::string final_, temp_;
  bool force_, committed_ = false;
};

}  // namespace neuromkl::pipeline
