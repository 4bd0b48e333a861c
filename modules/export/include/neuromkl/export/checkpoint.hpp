#pragma once
// Checkpoints of long studies: each completed block of permutations is stored as a small JSON
// file, so an interrupted run (or another MPI rank) loses at most one block. A block is used only
// if its key (a hash of everything the permutations depend on) matches.
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace neuromkl::exporting {

struct PermutationBlock {
  std::string key;
  int first = 0;                    ///< index of the first permutation in the block
  std::vector<std::string> learners;
  /// pooled[p][l]: the pooled metrics of learner l on permutation first + p (NaN allowed)
  std::vector<std::vector<std::map<std::string, double>>> pooled;
  /// shares[p][l][j]: learner l's mean weight share (percent) of kernel j on permutation first + p (empty: none)
  std::vector<std::vector<std::vector<double>>> shares;
};

/// Written atomically (temporary file + rename).
void SavePermutationBlock(const std::string& path, const PermutationBlock& block);
/// nullopt when the file is missing, unreadable, or its key differs from `key`.
std::optional<PermutationBlock> LoadPermutationBlock(const std::string& path, const std::string& key);

}  // namespace neuromkl::exporting
