#pragma once
// CITATION.md of a study's output folder: a methods paragraph built from the run record (versions,
// cross-validation scheme, subjects, regions and voxels, learners with their grids, permutations,
// intensity scaling) and the references for what the run used (each learner's paper, LIBSVM for SMO,
// PRoNTo, the AAL atlas).
#include <string>

#include "neuromkl/export/run_record.hpp"

namespace neuromkl::exporting {

/// The Markdown text of CITATION.md for `record`.
std::string CitationMarkdown(const RunRecord& record);

}  // namespace neuromkl::exporting
