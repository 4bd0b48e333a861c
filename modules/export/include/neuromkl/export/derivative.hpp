#pragma once
// The study output folder as a BIDS derivative (BIDS 1.8): dataset_description.json, voxel maps
// named with BIDS entities and a JSON sidecar per map. The naming scheme is documented in
// docs/outputs.md:
//   weights/sub-group[_space-<space>]_desc-<Learner>Fold<k>_weights.nii.gz       one per outer fold
//   weights/sub-group[_space-<space>]_desc-<Learner>Repeat<r>Fold<k>_weights.nii.gz  (repeated outer CV)
//   weights/sub-group[_space-<space>]_desc-<Learner>Mean_weights.nii.gz          mean over the folds
// each with a .json sidecar of the same name.
#include <string>
#include <string_view>
#include <vector>

#include "neuromkl/export/run_record.hpp"

namespace neuromkl::exporting {

/// A BIDS label (letters and digits only) from a free-form name: the name is split at every
/// character that is not an ASCII letter or digit and the parts are joined with their first letter
/// upper-cased ("enmkl_svm" -> "EnmklSvm", "svm" -> "Svm", "krr-2" -> "Krr2"). Empty when the name
/// holds no letter or digit.
std::string BidsLabel(std::string_view name);

/// One BIDS label per learner label, unique within the study: BidsLabel of each, "Learner<i>" (1-based
/// position) when that is empty, and a number appended (2, 3, ...) to a label already taken by an
/// earlier learner, ignoring case ("svm" and "SVM" give "Svm" and "SVM2").
std::vector<std::string> BidsLearnerLabels(const std::vector<std::string>& labels);
/// The same for class names in map names ("Class<i>" when a name holds no letter or digit): "MCI-a" and
/// "MCI_a" give "MCIA" and "MCIA2", told apart by each map's sidecar ("Class").
std::vector<std::string> BidsClassLabels(const std::vector<std::string>& classNames);

/// File-name parts for class names (a column of the subject table, so anything): ASCII letters, digits, '_',
/// '-' and '.' are kept, every other byte becomes %XX (hex), so "AD/MCI" gives "AD%2FMCI" and "../x" gives
/// "..%2Fx": never a path, and two names never share a part. A part equal to an earlier one ignoring case (a
/// case-insensitive file system would merge the files) gets "-2", "-3", ... appended.
std::vector<std::string> ClassFileParts(const std::vector<std::string>& classNames);

/// The space entity of the maps: the atlas's space (atlas.space) made a BIDS label, else "MNI152" for
/// the built-in AAL atlas, else empty (no space entity).
std::string MapSpace(const RunRecord& record);

/// "weights/sub-group[_space-<space>]_desc-<desc>_weights" (no extension).
std::string MapStem(const std::string& space, const std::string& desc);

/// The "desc" of a fold map: "<learner>Fold<k>", or "<learner>Repeat<r>Fold<k>" when `repeated`.
std::string FoldDesc(const std::string& learner, const cv::OuterFoldResult& fold, bool repeated);

/// dataset_description.json of the output folder (BIDS 1.8 derivative; SourceDatasets when the
/// images came from a BIDS dataset).
std::string DatasetDescriptionJson(const RunRecord& record);

/// The JSON sidecar of a voxel weight map: of one outer fold (`fold` non-null) or the mean over
/// `foldsInMean` folds (`fold` null).
std::string WeightMapSidecarJson(const RunRecord& record, const LearnerRecord& learner, const cv::OuterFoldResult* fold, int foldsInMean,
                                 const std::string& className = "", bool pattern = false);

}  // namespace neuromkl::exporting
