#pragma once
// The keys of the study and batch files, once. The readers refuse any other key, the resolved-study
// writer writes no other key, and a test compares these tables with configs/study.schema.json and
// configs/batch.schema.json in both directions.
#include <string>
#include <vector>

namespace neuromkl::config {

/// The keys of one object of a file, at its JSON pointer ("" = the top-level object; "*" stands for any
/// array index, e.g. "/kernels/sources/*/atlas"). Objects whose keys are names chosen by the user
/// (learner params and grid, BIDS entities, tabular groups, class weights, batch overrides) are not listed.
struct ObjectKeys {
  std::string pointer;
  std::vector<std::string> keys;  ///< in the order the error messages list them
};

const std::vector<ObjectKeys>& StudyFileKeys();
const std::vector<ObjectKeys>& BatchFileKeys();

}  // namespace neuromkl::config
